"""SpaceServe benchmark (run by `make bench`): (1) the full `spaceserve` experiment through the DAG
(wall time, peak memory; every system's figures at the headline rate as ratios to time
multiplexing on the same workload from the same run (``tm``, or ``tm_hires`` for the _hires rows); the TPOT load curve; the claims); (2) simulator speed: simulated
requests and decoder steps per wall second per system, peak memory (tracemalloc) beside time.

Run: .venv/bin/python benchmarks/bench_spaceserve.py [--skip-full]
"""
from __future__ import annotations

import os
import sys
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import claims_table, headline, run_isolated, skip_full_main  # noqa: E402

COLS = ("mean_tpot_s", "p99_tpot_s", "mean_ttft_s", "encoder_completion_s", "enc_sm_share")
RATES = (1, 2, 5, 10, 15, 20)


def full_experiment() -> None:
    out, peak, wall = run_isolated("spaceserve")
    headline("spaceserve", out, peak, wall)
    print("| variant | role | " + " | ".join(COLS) + " | TPOT / tm | p99 / tm | TTFT / tm | wall_s |")
    print("|" + "---|" * (len(COLS) + 6))
    for name, o in out.variants.items():
        m = o.result.metrics if o.result else {}
        if "mean_tpot_s" not in m:
            continue
        tm = out.variants["tm_hires" if name.endswith("_hires") else "tm"].result.metrics   # its sub-study's TM
        print(f"| {name} | {o.role} | " + " | ".join(f"{m[c]:.4f}" for c in COLS)
              + f" | {m['mean_tpot_s'] / tm['mean_tpot_s']:.3f} | {m['p99_tpot_s'] / tm['p99_tpot_s']:.3f}"
              f" | {m['mean_ttft_s'] / tm['mean_ttft_s']:.3f} | {o.wall_s:.1f} |")
    print("\nmean TPOT (ms) vs arrival rate (mean over seeds)\n")
    print("| variant | " + " | ".join(f"{r} req/s" for r in RATES) + " |")
    print("|" + "---|" * (len(RATES) + 1))
    for name, o in out.variants.items():
        m = o.result.metrics if o.result else {}
        print(f"| {name} | " + " | ".join(f"{1e3 * m.get(f'mean_tpot_s_r{r}', float('nan')):.1f}" for r in RATES) + " |")
    claims_table(out)


def simulator_speed() -> None:
    from components.serving.spaceserve.calibration import GPU
    from components.serving.spaceserve.sim import SimConfig, simulate
    from components.serving.spaceserve.workload import stream

    gpu = GPU()
    print("\n## simulator speed: 1000 requests at 10 req/s, seed 0\n")
    print("| system | wall s | requests / s | tokens / s simulated | sim s | peak MiB | wall / tm |")
    print("|---|---|---|---|---|---|---|")
    reqs = stream(0, 10.0, 1000)
    base = None
    for system, order in [("tm", "fcfs"), ("static", "fcfs"), ("sis", "fcfs"), ("sis", "twsrft")]:
        tracemalloc.start()
        t0 = time.perf_counter()
        res = simulate(reqs, gpu, SimConfig(system=system, encoder_order=order))
        dt = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        base = base or dt
        print(f"| {system}+{order} | {dt:.2f} | {len(reqs) / dt:.0f} | {res.tokens / dt:.0f} | {res.makespan:.1f} "
              f"| {peak:.1f} | {dt / base:.2f} |")


def main() -> None:
    skip_full_main(full_experiment, simulator_speed)


if __name__ == "__main__":
    main()
