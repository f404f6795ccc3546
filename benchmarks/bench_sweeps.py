"""Sweep throughput: the same 4-job grid multirun with Hydra's basic launcher (jobs one after
another, in-process) and with our Ray launcher (jobs as Ray tasks sharing the cluster), on the
platform_probe experiment whose variants spin for a fixed time. Prints jobs per minute and the
ratio. Each launcher gets a fresh runs folder and a fresh process (so Ray start counts for both).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRID = ["experiment.seeds=[0],[1],[2],[3]"]
PROBE = ["experiment=platform_probe", "experiment.common.probe.seconds=3.0", "experiment.common.probe.steps=6",
         "cluster.include_dashboard=false"]


def run(launcher: str) -> float:
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "DTLAB_RUNS_DIR": d, "RAY_AUTH_MODE": "disabled"}
        env.pop("MLFLOW_TRACKING_URI", None)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "-m", *PROBE, *GRID, f"hydra/launcher={launcher}"],
                           cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"{launcher} sweep failed:\n{r.stderr[-2000:]}")
        return wall


def main() -> None:
    jobs = 4
    rows = [(name, run(name)) for name in ("basic", "dtlab_ray")]
    base = rows[0][1]
    print("| launcher | jobs | wall_s | jobs_per_min | speedup_vs_basic |")
    print("|---|---|---|---|---|")
    for name, wall in rows:
        print(f"| {name} | {jobs} | {wall:.1f} | {60 * jobs / wall:.2f} | {base / wall:.2f}x |")
    print(f"\n{os.cpu_count()} CPUs; each job: 4 probe variants x 3 s of spinning, 1 CPU each.")


if __name__ == "__main__":
    main()
