"""SpecReason benchmark (run by `make bench`): the experiment's claim table and variant table, then
a load test of the Ray Serve service (base-only vs SpecReason vs SpecReason+SD) from a second
process on loopback, with ratios against base-only measured in the same run and peak memory.

    .venv/bin/python benchmarks/bench_specreason.py [--debug] [--runs-dir DIR] [--requests N]

The trained LMs come from the experiment's cached prepare step (same runs dir: trained once).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import claims_table, fig, fig_ratio, prepared, run_in_store, variant_metrics, variant_table  # noqa: E402

COLS = ("accuracy", "sim_latency_s", "wall_per_problem_s", "base_tokens", "small_tokens", "acceptance_rate", "judge_auroc")


def tables(out) -> None:
    base = variant_metrics(out).get("base_only", {})
    variant_table(out, [*[(c, fig(c, ".4g")) for c in COLS], ("sim vs base", fig_ratio(base, "sim_latency_s")),
                        ("wall vs base", fig_ratio(base, "wall_per_problem_s"))])
    claims_table(out)


def load_test(lms: dict, n_requests: int, concurrency: int, max_seconds: float) -> None:
    import ray

    from components.data import reasoning as R
    from components.serving.app import deploy, serve_session, undeploy
    from components.serving.lm_deployments import build_app
    from components.serving.loadtest import run_load_test

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    problems = R.held_out_problems(50, lms["level"], lms["heldout_seed"])
    rows = []
    with serve_session() as s:
        deploy(build_app(lms), name="specreason_bench", route_prefix="/specreason")
        url = s.url("/specreason/solve")
        for label, extra in [("base-only", {"method": "base"}), ("SpecReason tau=7", {"method": "specreason"}),
                             ("SpecReason+SD tau=7", {"method": "specreason", "stack_sd": True}),
                             ("speculative decoding", {"method": "sd"})]:
            bodies = [{"problem": p.text, **extra} for p in problems]
            r = run_load_test(url, bodies, n_requests=n_requests, concurrency=concurrency, max_seconds=max_seconds)
            rows.append((label, r))
        undeploy("specreason_bench")
    base = rows[0][1]
    print(f"\nLoad test: {n_requests} requests max, concurrency {concurrency}, <= {max_seconds:.0f} s each, loopback HTTP")
    print(f"{'service':<22} {'ok':>5} {'err':>4} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'thr vs base':>12} {'p50 vs base':>12}")
    for label, r in rows:
        print(f"{label:<22} {r.n_ok:>5} {r.n_err:>4} {r.throughput_rps:>8.1f} {r.p50_ms:>8.1f} {r.p99_ms:>8.1f} "
              f"{r.throughput_rps / base.throughput_rps:>12.2f} {r.p50_ms / base.p50_ms:>12.2f}")
    print("(wall-clock on CPU: each SpecReason step is several deployment calls of a tiny model, so Python/RPC "
          "overhead dominates; the simulated latency above is the headline figure)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--debug", action="store_true", help="the experiment's debug flavour (minutes -> seconds)")
    ap.add_argument("--runs-dir", default=os.environ.get("DTLAB_RUNS_DIR", "runs"))
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-seconds", type=float, default=40.0)
    a = ap.parse_args()

    out, _, _ = run_in_store("specreason", a.debug, a.runs_dir)
    tables(out)
    load_test(prepared("specreason", "lms", a.runs_dir, a.debug)[0], a.requests, a.concurrency, a.max_seconds)


if __name__ == "__main__":
    main()
