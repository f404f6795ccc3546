"""A real `dtlab run` of the platform probe in a subprocess, for tests that signal or kill it."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from pipelines.config import ROOT


def ready_store(uri: str) -> str:
    """Create the MLflow store at ``uri`` (its tables) before a `dtlab` process starts on it.

    A test that polls a fresh SQLite store while the process creates it runs MLflow's migrations
    from two processes at once, and the loser fails (``table ... already exists``): the process
    under test dies of the test's own polling."""
    from components.core.tracker import Tracker

    Tracker(uri, background=False).check_reachable()
    return uri


def start_probe_run(tmp_path: Path, *extra: str, seconds: int = 60) -> tuple[subprocess.Popen, MlflowClient]:
    """``dtlab run experiment=platform_probe debug=true`` whose variants take ``seconds``, tracked
    in a store of its own under ``tmp_path``, created before the run starts; (the process, a client
    of its store)."""
    uri = ready_store(f"sqlite:///{tmp_path}/mlflow.db")
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "experiment=platform_probe", "debug=true",
           f"experiment.common.probe.seconds={seconds}", "cluster.include_dashboard=false", *extra,
           f"runs_dir={tmp_path}"]
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return p, MlflowClient(tracking_uri=uri)


def wait_for_variant_runs(p: subprocess.Popen, client: MlflowClient, timeout_s: float = 150,
                          experiment: str = "platform_probe") -> tuple[object, list]:
    """Wait until the run has created its variant runs; (the MLflow experiment, those runs)."""
    deadline, running, exp = time.time() + timeout_s, [], None
    while time.time() < deadline and not running and p.poll() is None:
        time.sleep(1)
        try:
            exp = client.get_experiment_by_name(experiment)
            running = exp and client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'variant'")
        except Exception:  # noqa: BLE001 - the store is being created
            running = []
    assert running, f"no variant run started; stderr: {p.stderr.read() if p.poll() is not None else ''}"
    return exp, running
