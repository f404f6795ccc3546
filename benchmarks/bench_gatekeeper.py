"""Gatekeeper benchmark: (1) the full `gatekeeper` experiment's table and claims (wall time, peak
memory); (2) load tests from a second process on loopback, cascade vs large-only on Ray Serve, at
two concurrency levels: throughput and p50/p99 latency, as ratios to large-only measured in the
same run, beside the simulated cost per image (c_S + r c_L vs c_L).

Run: .venv/bin/python benchmarks/bench_gatekeeper.py [--skip-full] [--requests 400]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import PeakMemory, claims_table, headline, run_isolated  # noqa: E402

COLS = ("small_acc", "s_d", "s_d_se", "s_o", "auroc", "ece", "overconf", "joint_acc_r20", "deferral_r20", "cost_rel_r20")


def baseline_of(name: str) -> str:
    """The sub-study's baseline (as the experiment's report.baseline): digits or LM, today's or *_overconf."""
    base = "lm_ce_continued" if name.startswith("lm_") else "ce_continued"
    return base + "_overconf" if name.endswith("_overconf") else base


def full_experiment() -> None:
    out, peak, wall = run_isolated("gatekeeper")
    headline("gatekeeper", out, peak, wall)
    print("| variant | role | " + " | ".join(COLS) + " | s_d / its baseline | wall_s |")
    print("|" + "---|" * (len(COLS) + 4))
    for name, o in out.variants.items():
        m = o.result.metrics if o.result else {}
        b = out.variants.get(baseline_of(name))
        if "s_d" not in m or b is None or b.result is None:
            continue
        print(f"| {name} | {o.role} | " + " | ".join(f"{m.get(c, float('nan')):.3f}" for c in COLS)
              + f" | {m['s_d'] / b.result.metrics['s_d']:.3f} | {o.wall_s:.1f} |")
    for sweep in ("alpha_sweep", "alpha_sweep_overconf"):
        sw = out.variants[sweep].result.metrics if sweep in out.variants and out.variants[sweep].result else {}
        if sw:
            print(f"\n{sweep}\n| alpha | s_d | s_d_se | small_acc |\n|---|---|---|---|")
            for a in (10, 30, 50, 70, 90):
                print(f"| 0.{a // 10} | {sw[f's_d_a{a}']:.3f} | {sw[f's_d_a{a}_se']:.3f} | {sw[f'small_acc_a{a}']:.3f} |")
    sv = out.variants["served"].result.metrics if out.variants["served"].result else {}
    if sv:
        print(f"\nserved (in-experiment): agreement {sv['agreement']:.3f}, deferral {sv['served_deferral']:.3f}, "
              f"cascade {sv['cascade_rps']:.0f} req/s vs large-only {sv['large_rps']:.0f} req/s, "
              f"sim cost ratio {sv['sim_cost_ratio']:.3f}")
    claims_table(out)


def load_tests(n_requests: int) -> None:
    import ray
    import torch

    from components.core.context import RunContext
    from components.serving.app import deploy, serve_session, undeploy
    from components.serving.gatekeeper.cascade import Stage2, model_costs, run_arm
    from components.serving.gatekeeper.metrics import threshold_for_ratio
    from components.serving.gatekeeper.prepare import DigitsCascadeParams, prepare_digits_cascade
    from components.serving.gatekeeper.serving import cascade_app, large_app
    from components.serving.loadtest import run_load_test

    torch.set_num_threads(1)
    prep = prepare_digits_cascade(DigitsCascadeParams(), RunContext(seed=0))
    model, _, pv, pt = run_arm(prep, "gatekeeper", Stage2(), 0.5)
    tau = threshold_for_ratio(pv.max(1), 0.2)
    r = float((pt.max(1) < tau).mean())
    c = model_costs(prep)
    cost_ratio = (c["small"].seconds(decode=1) + r * c["large"].seconds(decode=1)) / c["large"].seconds(decode=1)
    x = prep["split"].x_test.astype(float)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    print(f"\n## load test: cascade (small MLP -> large CNN handle, tau for r=0.2, test deferral {r:.3f}) vs large-only; "
          f"{n_requests} requests per cell, client in a second process on 127.0.0.1\n")
    print("| images/request | concurrency | service | req/s | p50 ms | p99 ms | errors | req/s ratio | p50 ratio | sim cost ratio | peak MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with serve_session() as info:
        deploy(cascade_app(model.state_dict(), prep["large_state"], tau, prep["small_hidden"]), "bench_cascade", "/bc")
        deploy(large_app(prep["large_state"]), "bench_large", "/bl")
        for batch in (1, 8):
            bodies = [{"images": x[i:i + batch].tolist()} for i in range(0, len(x), batch)]
            for conc in (1, 4):
                res = {}
                for name, route in (("large-only", "/bl/classify"), ("cascade", "/bc/classify")):
                    with PeakMemory() as mem:
                        res[name] = (run_load_test(info.url(route), bodies, n_requests, conc, max_seconds=60), mem.peak_mb)
                base = res["large-only"][0]
                for name, (lt, peak) in res.items():
                    print(f"| {batch} | {conc} | {name} | {lt.throughput_rps:.0f} | {lt.p50_ms:.1f} | {lt.p99_ms:.1f} | {lt.n_err} "
                          f"| {lt.throughput_rps / base.throughput_rps:.2f} | {lt.p50_ms / base.p50_ms:.2f} "
                          f"| {cost_ratio if name == 'cascade' else 1.0:.3f} | {peak:.0f} |")
        undeploy("bench_cascade")
        undeploy("bench_large")
    ray.shutdown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-full", action="store_true")
    ap.add_argument("--requests", type=int, default=400)
    a = ap.parse_args()
    if not a.skip_full:
        full_experiment()
    load_tests(a.requests)
