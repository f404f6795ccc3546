"""PHP-FL benchmark: (1) the full `php_fl` experiment's table and claims, with wall time and peak
memory; (2) how the Ray path scales on this machine: rounds per second of one PHP-FL federation
(20 clients, linear participation) with the clients in-process, on 1 host actor and on 4.

Run: .venv/bin/python benchmarks/bench_php_fl.py [--skip-full]
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import PeakMemory, claims_table, headline, run_isolated  # noqa: E402

COLS = ("mean_acc", "acc_std", "worst20_acc", "low_high_p_gap", "mean_acc_se", "rounds_per_s")


def full_experiment() -> None:
    out, peak, wall = run_isolated("php_fl")
    headline("php_fl", out, peak, wall)
    print("| variant | role | " + " | ".join(COLS) + " | mean_acc / fml (same pattern) | wall_s |")
    print("|" + "---|" * (len(COLS) + 4))
    for name, o in out.variants.items():
        m = o.result.metrics if o.result else {}
        pattern = name.rsplit("_", 2)[-2:] if name.endswith("long_tail") else [name.rsplit("_", 1)[-1]]
        fml = out.variants.get("fml_" + "_".join(pattern))
        ratio = (m.get("mean_acc", float("nan")) / fml.result.metrics["mean_acc"]) if fml and fml.result else float("nan")
        print(f"| {name} | {o.role} | " + " | ".join(f"{m.get(c, float('nan')):.3f}" for c in COLS)
              + f" | {ratio:.3f} | {o.wall_s:.1f} |")
    claims_table(out)


def scaling(rounds: int = 15) -> None:
    import ray

    from components.core.context import RunContext
    from components.core.params import parse_params
    from components.core.raytools import start_nodes
    from components.data.digits import DigitsParams, prepare_digits
    from components.federated.technique import FederatedParams, run_federated

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    rows = []
    digits = {"digits": prepare_digits(DigitsParams(), RunContext())}
    for hosts in (0, 1, 4):
        nodes = start_nodes(hosts, 0.0, "bench-fl") if hosts else None
        if nodes:
            ray.get([n.keys.remote() for n in nodes])            # actors up before timing
        p = parse_params(FederatedParams, {"strategy": "php_fl", "rounds": rounds, "hosts": hosts,
                                           "eval_window": 1})
        run_federated(parse_params(FederatedParams, {**p.__dict__, "rounds": 1}), RunContext(inputs=digits, nodes=nodes))  # warm up
        with PeakMemory() as mem:
            t0 = time.perf_counter()
            res = run_federated(p, RunContext(inputs=digits, nodes=nodes, experiment="bench", variant=f"h{hosts}"))
            wall = time.perf_counter() - t0
        rows.append((hosts, res.metrics["rounds_per_s"], wall, mem.peak_mb))
        for n in nodes or []:
            ray.kill(n)
    ray.shutdown()
    base = rows[1][1]
    print(f"\n## Ray scaling: one PHP-FL federation, 20 clients, {rounds} rounds, {os.cpu_count()} CPUs\n")
    print("| hosts | where | rounds/s | ratio vs 1 actor | wall_s | peak_MB |\n|---|---|---|---|---|---|")
    for hosts, rps, wall, peak in rows:
        where = "in-process" if hosts == 0 else f"{hosts} actor(s)"
        print(f"| {hosts} | {where} | {rps:.2f} | {rps / base:.2f} | {wall:.1f} | {peak:.0f} |")


if __name__ == "__main__":
    if "--skip-full" not in sys.argv:
        full_experiment()
    scaling()
