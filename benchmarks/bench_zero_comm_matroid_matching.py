"""Zero-communication benchmark: centre time and end-to-end time against send-all as the instance grows.

For k-capped matching (random graphs, k = 5, m = 32 servers) and the graphic matroid (k = 10, m = 32),
per size: the servers' kernels (sum, and the largest one = the parallel makespan), the centre's exact
solve on the union, end-to-end (makespan + centre) and send-all (the exact solve on everything), each
with its peak traced memory (tracemalloc: numpy buffers included); then the log-log slope of centre,
end-to-end and send-all time against the number of elements, and a log-log plot.

Run: .venv/bin/python benchmarks/bench_zero_comm_matroid_matching.py [--quick] [--plot PATH]
"""
from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from components.algorithms.zero_comm_matroid_matching import instances as gen  # noqa: E402
from components.algorithms.zero_comm_matroid_matching import servers as sv  # noqa: E402
from components.core.plotting import fig_png, figure  # noqa: E402


def measured(fn, *args):
    """(result, seconds, peak traced MB) of one call."""
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn(*args)
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, dt, peak


def one(problem: str, n: int, k: int, m: int, rng) -> dict:
    if problem == "mwm":
        inst = gen.random_graph(rng, max(20, n // 10), n, k, m, tied=False)
        kind, meta = "matching", {}
    else:
        inst = gen.matroid_instance(rng, "graphic", n, k, m, tied=False)
        kind, meta = inst.kind, inst.meta
    inst.owner = gen.split(rng, inst.n, m, "random", inst.w)
    shard_list = sv.shards(inst, problem)
    whole = {"ids": np.arange(inst.n), "w": inst.w, "data": inst.edges if problem == "mwm" else inst.data}
    times = []
    msgs = []
    for s in shard_list:
        msg, dt, _ = measured(sv.reduce, problem, kind, meta, s, k)
        msgs.append(msg)
        times.append(dt)
    (ans, _), centre_s, centre_mb = measured(sv.solve, problem, kind, meta, sv.union(msgs), k)
    (ref, _), send_all_s, send_all_mb = measured(sv.solve, problem, kind, meta, whole, k)
    assert abs(ans - ref) <= 1e-9 * max(1.0, ref), (problem, n, ans, ref)
    return {"n": n, "servers_sum_s": sum(times), "servers_max_s": max(times), "centre_s": centre_s,
            "end_to_end_s": max(times) + centre_s, "send_all_s": send_all_s, "centre_mb": centre_mb,
            "send_all_mb": send_all_mb, "union": sum(len(x["ids"]) for x in msgs)}


def slope(xs, ys) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a minute)")
    ap.add_argument("--plot", default="/tmp/bench_zero_comm.png")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    one("mwm", 200, 2, 4, np.random.default_rng(1))        # warm-up: scipy's MILP import is not the centre's time
    sizes = {"mwm": [1000, 3000, 10000, 30000] + ([] if a.quick else [100000]),
             "mwis": [10000, 30000, 100000, 300000] + ([] if a.quick else [1000000])}
    ks = {"mwm": 5, "mwis": 10}
    fig, axes = figure(10, 4, ncols=2)
    for col, problem in enumerate(("mwm", "mwis")):
        rows = [one(problem, n, ks[problem], 32, rng) for n in sizes[problem]]
        print(f"\n{problem}: k = {ks[problem]}, m = 32 servers (times in s, memory = peak traced MB)")
        print(f"{'n':>8s} {'union':>7s} {'srv max':>8s} {'srv sum':>8s} {'centre':>8s} {'end2end':>8s} "
              f"{'send-all':>8s} {'e2e/sa':>7s} {'ctr MB':>7s} {'sa MB':>7s}")
        for r in rows:
            print(f"{r['n']:8d} {r['union']:7d} {r['servers_max_s']:8.4f} {r['servers_sum_s']:8.4f} {r['centre_s']:8.4f} "
                  f"{r['end_to_end_s']:8.4f} {r['send_all_s']:8.4f} {r['end_to_end_s'] / r['send_all_s']:7.3f} "
                  f"{r['centre_mb']:7.1f} {r['send_all_mb']:7.1f}")
        ns = [r["n"] for r in rows]
        for key in ("centre_s", "end_to_end_s", "send_all_s"):
            print(f"  log-log slope of {key:13s} vs n: {slope(ns, [max(r[key], 1e-6) for r in rows]):.2f}")
        ax = axes[0, col]
        for key, mk in (("centre_s", "o-"), ("end_to_end_s", "s-"), ("send_all_s", "^-")):
            ax.plot(ns, [r[key] for r in rows], mk, label=key)
        ax.set(xscale="log", yscale="log", xlabel="elements n", ylabel="seconds", title=f"{problem}: vs send-all")
        ax.legend()
    Path(a.plot).write_bytes(fig_png(fig))
    print(f"\nplot: {a.plot}")


if __name__ == "__main__":
    main()
