"""A run ended by SIGTERM or SIGHUP (a `timeout`, a closed terminal, a scheduler) leaves no MLflow
run RUNNING: its runs end KILLED with the signal named, as with Ctrl-C."""
import os
import signal
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from pipelines.config import ROOT


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_ends_every_run_killed(sig, tmp_path):
    # Prepare: a debug probe run whose variants take a minute (the command line wins over debug)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "experiment=platform_probe", "debug=true",
           "experiment.common.probe.seconds=60", "cluster.include_dashboard=false", f"runs_dir={tmp_path}"]
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    client = MlflowClient(tracking_uri=uri)
    try:
        deadline, running = time.time() + 150, []
        while time.time() < deadline and not running and p.poll() is None:
            time.sleep(1)
            try:
                exp = client.get_experiment_by_name("platform_probe")
                running = exp and client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'variant'")
            except Exception:  # noqa: BLE001 - the store is being created
                running = []
        assert running, f"no variant run started; stderr: {p.stderr.read() if p.poll() is not None else ''}"
        # Execute
        p.send_signal(sig)
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    # Assert
    runs = client.search_runs([exp.experiment_id])
    assert rc != 0
    assert [r.info.status for r in runs if r.info.status == "RUNNING"] == []
    parent = next(r for r in runs if r.data.tags.get("dtlab.kind") == "parent")
    assert parent.info.status == "KILLED" and signal.Signals(sig).name in parent.data.tags.get("error", "")
    assert float(client.get_run(running[0].info.run_id).data.params["seconds"]) == 60.0  # the override won
