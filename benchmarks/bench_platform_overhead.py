"""Platform overhead of the quickstart (`dtlab run experiment=error_feedback`), cold and warm.

cold: embedded Ray started by the run (today's default without a head); warm: the run attaches
to a local head started once by `dtlab up` (here on private ports and a private Ray temp dir, so
no other session on the machine attaches to it). Runs alternate cold, warm, cold, warm, ... in
one process, each through the real DAG with a fresh MLflow store and a warm prepare cache (a
researcher's second run). Aim: overhead <= 5% warm, <= 12% cold.

overhead = 1 - technique_s / total_s, where technique_s is the span during which at least one
(variant, seed) task (or prepare step) was computing and total_s is dag.run from entry to return.
Where the rest goes: ``before`` (run start -> first task computing: Ray start or attach, the
MLflow parent run, prepare, worker start-up and imports), ``gaps`` (idle time between tasks while
the run is under way), ``after`` (last task done -> return: logging, report, the final flush).
``tracking`` is the seconds the driver spent inside tracker calls (its critical path; the final
flush included), ``writer`` the seconds MLflow writes took on the tracker's background thread,
``flush_wait`` the seconds the driver waited for that thread (ending the last open run). Peak memory is this process
and all its children (the driver, Ray's processes and workers; the warm head's too).

    python benchmarks/bench_platform_overhead.py [--repeats 2] [overrides ...]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._util import run_experiment  # noqa: E402

AIM = {"cold": 0.12, "warm": 0.05}
EXPERIMENT = "error_feedback"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _writers() -> list:
    """Record every Tracker the DAG makes (for its background writer's seconds)."""
    import pipelines.dag as dag
    from components.core.tracker import Tracker

    made: list = []

    class Recorded(Tracker):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    dag.Tracker = Recorded
    return made


def _timed_run(mode: str, overrides: list[str], cache_dir: str, made: list) -> dict:
    import ray

    with tempfile.TemporaryDirectory() as d:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{d}/mlflow.db"
        extra = ["cluster.attach=false"] if mode == "cold" else []
        out, peak = run_experiment(EXPERIMENT, *extra, *overrides, runs_dir=cache_dir)
        t_end = time.time()
        ray.shutdown()
    t = out.timings
    t0 = t_end - t["total_s"]  # dag.run's entry
    spans = sorted((s.started, s.ended) for o in out.variants.values() for s in o.seeds.values() if s.ended)
    busy_end, gaps = spans[0][1], 0.0
    for s, e in spans[1:]:
        gaps += max(0.0, s - busy_end)
        busy_end = max(busy_end, e)
    return {"mode": mode, "total_s": t["total_s"], "ray_init_s": t["ray_init_s"], "prepare_s": t["prepare_s"],
            "before_s": spans[0][0] - t0, "gaps_s": gaps, "after_s": t_end - busy_end,
            "tracking_s": t["tracking_s"], "writer_s": made[-1].writer_s, "flush_wait_s": made[-1].wait_s,
            "report_s": t["report_s"],
            "technique_s": t["technique_s"], "overhead": t["overhead_share"], "peak_MB": peak,
            "claims": f"{out.claims_held}/{out.claims_judged}", "failed": out.failed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="cold/warm pairs (default 2)")
    ap.add_argument("overrides", nargs="*", help="extra overrides for every run, e.g. debug=true")
    args = ap.parse_args()

    import ray

    from pipelines.cluster import cluster_config, down, up

    ray_tmp = tempfile.mkdtemp(prefix="dtlab-bench-", dir="/tmp")  # short: Ray's socket paths
    os.environ["RAY_TMPDIR"] = ray_tmp
    cache_dir = tempfile.mkdtemp(prefix="dtlab-bench-runs-")
    made = _writers()
    rows: list[dict] = []
    try:
        # the prepare cache once, so every timed run measures a warm cache
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{cache_dir}/warmup.db"
        run_experiment(EXPERIMENT, "only=[gd]", "cluster.attach=false", "cluster.include_dashboard=false",
                       *args.overrides, runs_dir=cache_dir)
        ray.shutdown()
        head = up(cluster_config([f"cluster.head.port={_free_port()}", f"cluster.head.dashboard_port={_free_port()}",
                                  f"cluster.head.metrics_export_port={_free_port()}"]))
        print(f"warm head: {head['address']}, started in {head['startup_s']:.1f} s (once, by `dtlab up`)", flush=True)
        for i in range(args.repeats):
            for mode in ("cold", "warm"):
                rows.append(_timed_run(mode, args.overrides, cache_dir, made))
                r = rows[-1]
                print(f"  {mode} #{i + 1}: {r['total_s']:.1f} s, overhead {100 * r['overhead']:.1f}%", flush=True)
    finally:
        down()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        shutil.rmtree(cache_dir, ignore_errors=True)

    cols = ("mode", "total_s", "ray_init_s", "prepare_s", "before_s", "gaps_s", "after_s", "tracking_s", "writer_s",
            "flush_wait_s", "report_s", "technique_s", "overhead", "peak_MB", "claims")
    flavour = " " + " ".join(args.overrides) if args.overrides else ""
    print(f"\n## {EXPERIMENT}{flavour}: platform overhead, cold vs warm\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{100 * r[c]:.1f}%" if c == "overhead" else f"{r[c]:.0f}" if c == "peak_MB"
                                else f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    print()
    mean = {m: {c: sum(r[c] for r in rows if r["mode"] == m) / max(1, sum(r["mode"] == m for r in rows))
                for c in ("total_s", "overhead", "peak_MB", "technique_s")} for m in ("cold", "warm")}
    for m in ("cold", "warm"):
        print(f"{m}: mean overhead {100 * mean[m]['overhead']:.1f}% (aim <= {100 * AIM[m]:.0f}%: "
              f"{'met' if mean[m]['overhead'] <= AIM[m] else 'MISSED'}), mean total {mean[m]['total_s']:.1f} s, "
              f"mean peak {mean[m]['peak_MB']:.0f} MB")
    print(f"warm / cold: total {mean['warm']['total_s'] / mean['cold']['total_s']:.3f}, "
          f"peak memory {mean['warm']['peak_MB'] / mean['cold']['peak_MB']:.3f}, "
          f"technique time {mean['warm']['technique_s'] / mean['cold']['technique_s']:.3f}")
    bad = [r for r in rows if r["failed"]]
    if bad:
        raise SystemExit(f"failed variants: {[r['failed'] for r in bad]}")


if __name__ == "__main__":
    main()
