"""Reproducibility tags and the stale-run check: a run whose driver is gone ends FAILED."""
import socket
import subprocess
import sys

from mlflow.tracking import MlflowClient

from components.core.provenance import DRIVER_TAG, driver_id, git_state, mark_stale, reproducibility_tags
from components.core.tracker import Tracker


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_run_of_a_dead_driver_is_marked_failed_and_others_are_left(tmp_path):
    # Prepare: three RUNNING runs: this driver's, a dead driver's, one from another host
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri, background=False)
    exp = tracker.experiment_id("stale")
    mine = tracker.start_run(exp, "mine")
    dead = tracker.start_run(exp, "dead", tags={DRIVER_TAG: f"{socket.gethostname()}:{_dead_pid()}:1"})
    elsewhere = tracker.start_run(exp, "elsewhere", tags={DRIVER_TAG: "some-other-host:1:1"})
    recycled = tracker.start_run(exp, "recycled", tags={DRIVER_TAG: driver_id().rsplit(":", 1)[0] + ":0"})
    # Execute
    ended = mark_stale(MlflowClient(tracking_uri=uri))
    # Assert
    client = MlflowClient(tracking_uri=uri)
    assert sorted(ended) == sorted([dead, recycled])
    assert client.get_run(dead).info.status == "FAILED"
    assert "driver gone" in client.get_run(dead).data.tags["error"]
    assert client.get_run(mine).info.status == "RUNNING"
    assert client.get_run(elsewhere).info.status == "RUNNING"
    assert client.get_run(mine).data.tags[DRIVER_TAG] == driver_id()


def test_reproducibility_tags_name_the_commit_and_command():
    # Prepare / Execute
    tags = reproducibility_tags(["experiment=duo", "debug=true"])
    # Assert
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert tags["git.commit"] == head.stdout.strip()
        assert tags["git.dirty"] in ("true", "false")
    else:
        assert git_state()["git.commit"] == "unknown"
    assert tags["dtlab.overrides"] == "experiment=duo debug=true"
    assert tags["dtlab.command"]
