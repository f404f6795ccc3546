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
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def claim_table(outcome) -> None:
    print(f"\n{'claim':<34} {'holds':>6}  measured  |  paper")
    for c in outcome.claims:
        tag = "" if c.gate else " (control)"
        print(f"{c.name + tag:<34} {str(c.holds):>6}  {c.measured}  |  {c.paper}")
    print(f"\nclaims held: {outcome.claims_held}/{outcome.claims_judged}")


def variant_table(outcome) -> None:
    m = {n: v.result.metrics for n, v in outcome.variants.items() if v.result is not None}
    base = m.get("base_only", {})
    cols = ["accuracy", "sim_latency_s", "wall_per_problem_s", "base_tokens", "small_tokens", "acceptance_rate",
            "judge_auroc"]
    print(f"\n{'variant':<14} " + " ".join(f"{c:>15}" for c in cols) + f" {'sim vs base':>12} {'wall vs base':>13}")
    for n, x in m.items():
        ratio = x["sim_latency_s"] / base["sim_latency_s"] if base else float("nan")
        wratio = x["wall_per_problem_s"] / base["wall_per_problem_s"] if base else float("nan")
        print(f"{n:<14} " + " ".join(f"{_fmt(x.get(c, float('nan'))):>15}" for c in cols) + f" {ratio:>12.3f} {wratio:>13.3f}")


def cached_lms(runs_dir: str, debug: bool) -> dict:
    """The reasoning LMs from the experiment's prepare cache (trains and caches them if absent)."""
    from pathlib import Path

    from pipelines import config, dag

    cfg = config.compose(["experiment=specreason", f"debug={str(debug).lower()}", f"runs_dir={runs_dir}"])
    return dag.prepare_local(dag.validate(cfg), "lms", Path(runs_dir).resolve())[0]


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

    from benchmarks._util import run_experiment

    t0 = time.perf_counter()
    outcome, peak = run_experiment("specreason", f"debug={str(a.debug).lower()}", "cluster.include_dashboard=false",
                                   runs_dir=a.runs_dir)
    print(f"SpecReason experiment ({'debug' if a.debug else 'full'}): {time.perf_counter() - t0:.0f} s wall, "
          f"peak RSS {peak:.0f} MB, prepare cache {outcome.prepare_cache}")
    variant_table(outcome)
    claim_table(outcome)
    load_test(cached_lms(a.runs_dir, a.debug), a.requests, a.concurrency, a.max_seconds)


if __name__ == "__main__":
    main()
