"""`dtlab prepare`: an experiment's prepare entries built into the shared cache through the run's own
Ray tasks, and nothing else (no MLflow run); what `dtlab reproduce` runs before each configuration."""
from __future__ import annotations

import subprocess
import sys

from pipelines import config, dag
from tests.infra.svc import ROOT, dtlab_env


def test_prepare_builds_what_is_missing_once_and_opens_no_mlflow_run(ray_session, tmp_path):
    # Prepare: an empty cache, and a tracking store that must stay untouched
    cfg = config.compose(["experiment=error_feedback", "debug=true", f"runs_dir={tmp_path}",
                          f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"])
    # Execute
    first = dag.prepare_only(cfg)
    again = dag.prepare_only(cfg)
    # Assert: built once, found the second time (without Ray work); no store was created
    assert first["experiment"] == "error_feedback" and first["built"] == ["problems@0"] and first["needed"] == 1
    assert again["built"] == [] and again["needed"] == 1
    assert any((tmp_path / "cache").iterdir()) and not (tmp_path / "mlflow.db").exists()


def test_prepare_without_an_experiment_is_one_line_and_exit_2():
    # Execute
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "prepare", "debug=true"], cwd=ROOT, env=dtlab_env(),
                       capture_output=True, text=True, timeout=120)
    # Assert
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "prepare: name an experiment (experiment=NAME); usage: dtlab prepare" in r.stderr
