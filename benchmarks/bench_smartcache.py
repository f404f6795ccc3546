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

from benchmarks.bench_specreason import _fmt, claim_table  # noqa: E402  (one claim-table printer for benchmarks)


def variant_table(outcome) -> None:
    m = {n: v.result.metrics for n, v in outcome.variants.items() if v.result is not None}
    pre = m.get("prefix", {})
    print(f"\n{'variant':<16} " + " ".join(f"{c:>14}" for c in COLS) + f" {'blocks/prefix':>14} {'ttft/prefix':>12}")
    for n, x in m.items():
        rb = x["kv_blocks_peak"] / pre["kv_blocks_peak"] if pre else float("nan")
        rt = x["sim_ttft_s"] / pre["sim_ttft_s"] if pre else float("nan")
        print(f"{n:<16} " + " ".join(f"{_fmt(x.get(c, float('nan'))):>14}" for c in COLS) + f" {rb:>14.3f} {rt:>12.3f}")


def bundle(runs_dir: str, debug: bool) -> tuple[dict, dict]:
    from pathlib import Path

    from pipelines import config, dag

    cfg = config.compose(["experiment=smartcache", f"debug={str(debug).lower()}", f"runs_dir={runs_dir}"])
    spec = dag.validate(cfg)
    wl = next(v for v in spec.variants if v.name == "smart").params.workload
    return dag.prepare_local(spec, "served", Path(runs_dir).resolve())[0], wl


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

    from benchmarks._util import PeakMemory, run_experiment

    if not a.skip_experiment:
        t0 = time.perf_counter()
        outcome, peak = run_experiment("smartcache", f"debug={str(a.debug).lower()}", "cluster.include_dashboard=false",
                                       runs_dir=a.runs_dir)
        print(f"SmartCache experiment ({'debug' if a.debug else 'full'}): {time.perf_counter() - t0:.0f} s wall, "
              f"peak RSS {peak:.0f} MB, prepare cache {outcome.prepare_cache}")
        variant_table(outcome)
        claim_table(outcome)
    t0 = time.perf_counter()
    b, wl = bundle(a.runs_dir, a.debug)
    with PeakMemory() as mem:
        load_test(b, wl, a.requests, a.concurrency, a.max_seconds)
    print(f"load test: {time.perf_counter() - t0:.0f} s wall, peak RSS {mem.peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
