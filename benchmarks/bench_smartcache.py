"""SmartCache benchmark (run by `make bench`): the experiment's variant table (ratios against prefix
caching and no cache from the same run) and claim table, then a loopback load test of the Ray Serve
service, SmartCache vs no cache, from a second process: req/s, p50, p99; peak memory beside time.

    .venv/bin/python benchmarks/bench_smartcache.py [--debug] [--runs-dir DIR] [--requests N]

The LM and embeddings come from the experiment's cached prepare steps (same runs dir: built once).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

COLS = ["hit_ratio", "false_hit_ratio", "answer_accuracy", "kv_blocks_peak", "prefill_tokens_saved", "sim_ttft_s",
        "shift_f1", "wall_per_turn_s"]

from benchmarks._util import (PeakMemory, claims_table, fig, fig_ratio, prepared, run_in_store,  # noqa: E402
                              variant_metrics, variant_table)


def tables(out) -> None:
    pre = variant_metrics(out).get("prefix", {})
    variant_table(out, [*[(c, fig(c, ".4g")) for c in COLS], ("blocks/prefix", fig_ratio(pre, "kv_blocks_peak")),
                        ("ttft/prefix", fig_ratio(pre, "sim_ttft_s"))])
    claims_table(out)


def load_test(b: dict, workload: dict, n_requests: int, concurrency: int, max_seconds: float) -> None:
    import ray

    from components.data.conversations import KBParams, WorkloadParams, make_kb, make_workload
    from components.serving.app import deploy, serve_session, undeploy
    from components.serving.loadtest import run_load_test
    from components.serving.smartcache.service import build_app

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    kb = make_kb(KBParams(**b["lm"]["kb"]))
    turns = make_workload(kb, WorkloadParams(**workload), seed=99)       # a draw no experiment seed uses
    bodies = [{"session": f"s{t.session}", "query": t.query} for t in turns]
    rows = []
    with serve_session() as s:
        for system in ("none", "smartcache"):
            name = f"smartcache_bench_{system}"
            handle = deploy(build_app(b, system), name=name, route_prefix=f"/scb_{system}")
            r = run_load_test(s.url(f"/scb_{system}/chat"), bodies, n_requests=n_requests, concurrency=concurrency,
                              max_seconds=max_seconds)
            rows.append((system, r, handle.stats.remote().result(timeout_s=60)))
            undeploy(name)
    base = rows[0][1]
    print(f"\nLoad test: {n_requests} turns max, concurrency {concurrency}, <= {max_seconds:.0f} s each, loopback HTTP")
    print(f"{'service':<12} {'ok':>5} {'err':>4} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'thr vs none':>12} "
          f"{'p50 vs none':>12} {'kv peak':>8} {'prefill tok':>12}")
    for system, r, st in rows:
        print(f"{system:<12} {r.n_ok:>5} {r.n_err:>4} {r.throughput_rps:>8.1f} {r.p50_ms:>8.1f} {r.p99_ms:>8.1f} "
              f"{r.throughput_rps / base.throughput_rps:>12.2f} {r.p50_ms / base.p50_ms:>12.2f} "
              f"{st['kv_blocks_peak']:>8} {sum(st['usage']['prefill'].values()):>12}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--debug", action="store_true", help="the experiment's debug flavour")
    ap.add_argument("--runs-dir", default=os.environ.get("DTLAB_RUNS_DIR", "runs"))
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-seconds", type=float, default=40.0)
    ap.add_argument("--skip-experiment", action="store_true", help="only the load test")
    a = ap.parse_args()

    if not a.skip_experiment:
        tables(run_in_store("smartcache", a.debug, a.runs_dir)[0])
    t0 = time.perf_counter()
    b, spec = prepared("smartcache", "served", a.runs_dir, a.debug)
    wl = next(v for v in spec.variants if v.name == "smart").params.workload
    with PeakMemory() as mem:
        load_test(b, wl, a.requests, a.concurrency, a.max_seconds)
    print(f"load test: {time.perf_counter() - t0:.0f} s wall, peak RSS {mem.peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
