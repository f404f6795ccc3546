"""Agentic Plan Caching benchmark: (1) the `plan_cache` experiment's table and claims (wall time,
peak memory; ratios to always-large from the same run); (2) a load test from a second process on
loopback, APC service vs the no-cache (always-large) service on Ray Serve, both built from the
experiment's cached LMs: req/s, p50, p99 and their ratios, beside the simulated cost per request.

Run: .venv/bin/python benchmarks/bench_plan_cache.py [--debug] [--runs-dir R] [--requests 300]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import PeakMemory, claims_table, prepared, run_in_store  # noqa: E402

COLS = ("accuracy", "cost_s", "cost_ratio_vs_large", "cache_hit_ratio", "hit_ratio_after_200", "false_hit_ratio",
        "overhead_share", "large_calls", "small_calls", "wall_per_request_ms")


def tables(out) -> None:
    base = out.variants["always_large"].result.metrics
    print("| variant | role | " + " | ".join(COLS) + " | cost / always_large | accuracy - always_large |")
    print("|" + "---|" * (len(COLS) + 4))
    for name, o in out.variants.items():
        m = o.result.metrics if o.result else {}
        if "accuracy" not in m:
            continue
        print(f"| {name} | {o.role} | " + " | ".join(f"{m.get(c, float('nan')):.3f}" for c in COLS)
              + f" | {m['cost_s'] / base['cost_s']:.3f} | {m['accuracy'] - base['accuracy']:+.3f} |")
    claims_table(out)


def load_test(lms: dict, n_requests: int, concurrency: int) -> None:
    import ray

    from components.data import agent_tasks as A
    from components.serving.app import deploy, post_json, serve_session, undeploy
    from components.serving.loadtest import run_load_test
    from components.serving.plan_cache.serving import build_app, build_large_app

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    work = A.make_workload(A.AgentTaskParams(n_requests=max(n_requests, 200)), seed=0)
    bodies = [{"question": q} for q in work["questions"]]
    rows = []
    with serve_session() as s:
        deploy(build_large_app(lms), name="bench_pc_large", route_prefix="/bench_pc_large")
        deploy(build_app(lms), name="bench_pc_apc", route_prefix="/bench_pc_apc")
        for label, route in (("always-large (no cache)", "/bench_pc_large/run"), ("APC", "/bench_pc_apc/run")):
            url = s.url(route)
            costs = [post_json(url, b)[1]["cost_s"] for b in bodies[:50]]      # also warms the APC cache
            with PeakMemory() as mem:
                r = run_load_test(url, bodies, n_requests=n_requests, concurrency=concurrency, max_seconds=90)
            rows.append((label, r, sum(costs) / len(costs), mem.peak_mb))
        undeploy("bench_pc_apc")
        undeploy("bench_pc_large")
    base = rows[0][1]
    print(f"\n## load test: {n_requests} requests per service, concurrency {concurrency}, client in a second process "
          f"on 127.0.0.1 (APC cache warmed by the 50 requests before)\n")
    print("| service | ok | errors | req/s | p50 ms | p99 ms | req/s ratio | p50 ratio | p99 ratio | sim cost/request (first 50) | peak MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, r, cost, peak in rows:
        print(f"| {label} | {r.n_ok} | {r.n_err} | {r.throughput_rps:.1f} | {r.p50_ms:.1f} | {r.p99_ms:.1f} "
              f"| {r.throughput_rps / base.throughput_rps:.2f} | {r.p50_ms / base.p50_ms:.2f} | {r.p99_ms / base.p99_ms:.2f} "
              f"| {cost:.5f} | {peak:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--debug", action="store_true")
    ap.add_argument("--runs-dir", default=os.environ.get("DTLAB_RUNS_DIR", "runs"))
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--skip-full", action="store_true", help="load test only (LMs from the prepare cache)")
    a = ap.parse_args()
    if not a.skip_full:
        tables(run_in_store("plan_cache", a.debug, a.runs_dir)[0])
    load_test(prepared("plan_cache", "lms", a.runs_dir, a.debug)[0], a.requests, a.concurrency)


if __name__ == "__main__":
    main()
