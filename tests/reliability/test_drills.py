"""Fault drills the other suites do not cover: two runs into one store at once."""
import os
import sqlite3
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from components.core.tracker import Tracker

from pipelines.config import ROOT


@pytest.mark.slow
def test_concurrent_runs_into_one_store(tmp_path):
    # Prepare: two debug probe runs sharing runs_dir (one SQLite MLflow store, one cache)
    env = {**os.environ, "DTLAB_RUNS_DIR": str(tmp_path), "RAY_ADDRESS": ""}
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "experiment=platform_probe", "debug=true",
           "cluster.include_dashboard=false", "cluster.num_cpus=2"]
    # the store exists first: two processes creating a fresh SQLite store at once race in MLflow's
    # schema migration (one exits 1), a separate finding left to the tracker's owner
    Tracker(f"sqlite:///{tmp_path}/mlflow.db").check_reachable()
    # Execute
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    # Assert
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    db = tmp_path / "mlflow.db"
    assert sqlite3.connect(db).execute("pragma integrity_check").fetchone()[0] == "ok"
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    exp = client.get_experiment_by_name("platform_probe")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("dtlab.kind") == "parent"]
    assert len(parents) == 2 and {r.info.status for r in parents} == {"FINISHED"}
    assert [r for r in runs if r.info.status == "RUNNING"] == []
    a, b = (sorted((k, v) for k, v in client.get_run(p.info.run_id).data.metrics.items()
                   if not k.startswith("platform.")) for p in parents)
    assert [k for k, _ in a] == [k for k, _ in b]  # the same metrics logged by both
