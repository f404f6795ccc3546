"""PHP-FL benchmark: (1) the full `php_fl` experiment's table and claims, with wall time and peak
memory, and ISPU's premise per setting (today's three patterns and the paper's regime, *_rare):
the lowest-p quarter's accuracy with and without ISPU, paired over seeds, beside what a full
overwrite costs those clients; (2) how the Ray path scales on this machine: rounds per second of
one PHP-FL federation (20 clients, linear participation) in-process, on 1 host actor and on 4.

Run: .venv/bin/python benchmarks/bench_php_fl.py [--skip-full] [--skip-scaling] [--store DIR] [overrides...]
(--store DIR keeps the run's MLflow store in DIR, for `DTLAB_RUNS_DIR=DIR dtlab scoreboard`)
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import PeakMemory, claims_table, headline, run_experiment, run_isolated  # noqa: E402

COLS = ("mean_acc", "acc_std", "worst20_acc", "low_high_p_gap", "mean_acc_se", "low_part_acc",
        "low_part_overwrite_loss", "low_part_merge_gain", "rounds_per_s")
SETTINGS = ("linear", "bimodal", "long_tail", "rare")       # today's three patterns, then the paper's regime


def _paired(out, a: str, b: str, metric: str) -> tuple[float, float]:
    """Mean and SE over shared seeds of a.metric - b.metric."""
    import math

    va, vb = out.variants[a], out.variants[b]
    d = [va.seeds[s].result.metrics[metric] - vb.seeds[s].result.metrics[metric]
         for s in sorted(set(va.seeds) & set(vb.seeds)) if va.seeds[s].result and vb.seeds[s].result]
    if len(d) < 2:
        return (d[0] if d else float("nan")), float("nan")
    m = sum(d) / len(d)
    return m, math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d))


def ispu_premise_table(out) -> None:
    """ISPU per setting: rare clients' accuracy with and without it, and what an overwrite costs them."""
    print("\n## ISPU's premise per setting (lowest-p quarter of clients; mean over seeds, paired diff +- SE)\n")
    print("| setting | low_part_rate | overwrite_loss (no ISPU) | php low_part_acc | no-ISPU low_part_acc "
          "| diff (paired) | merge_gain (php) | mean_acc diff (paired) |\n|---|---|---|---|---|---|---|---|")
    for cell in SETTINGS:
        php, abl = f"php_{cell}", f"php_no_ispu_{cell}"
        if not all(n in out.variants and out.variants[n].result for n in (php, abl)):
            continue
        mp, ma = out.variants[php].result.metrics, out.variants[abl].result.metrics
        d, se = _paired(out, php, abl, "low_part_acc")
        dm, sem = _paired(out, php, abl, "mean_acc")
        print(f"| {cell} | {ma['low_part_rate']:.3f} | {ma['low_part_overwrite_loss']:+.4f} | {mp['low_part_acc']:.4f} "
              f"| {ma['low_part_acc']:.4f} | {d:+.4f} +- {se:.4f} | {mp['low_part_merge_gain']:+.4f} | {dm:+.4f} +- {sem:.4f} |")


def full_experiment(overrides: list[str], store: str | None) -> None:
    if store:       # a kept store: its parent run is what `dtlab scoreboard` reads
        import ray

        t0 = time.perf_counter()
        out, peak = run_experiment("php_fl", "cluster.include_dashboard=false", *overrides, runs_dir=store)
        wall = time.perf_counter() - t0
        ray.shutdown()
    else:
        out, peak, wall = run_isolated("php_fl", *overrides)
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
    ispu_premise_table(out)
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
    args = sys.argv[1:]
    store = args[args.index("--store") + 1] if "--store" in args else None
    overrides = [a for i, a in enumerate(args) if not a.startswith("--") and (i == 0 or args[i - 1] != "--store")]
    if "--skip-full" not in args:
        full_experiment(overrides, store)
    if "--skip-scaling" not in args:
        scaling()
