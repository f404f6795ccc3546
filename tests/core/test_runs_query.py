"""The latest-runs query: the newest ended parent, never one still RUNNING."""
import time

import pytest
from mlflow.tracking import MlflowClient

from components.core.runs_query import latest_parents


def test_running_parent_is_skipped_and_named(tmp_path):
    # Prepare: a finished parent, then a newer one left RUNNING, and a child run (not a parent)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/m.db")
    exp = client.create_experiment("x")
    done = client.create_run(exp, tags={"dtlab.kind": "parent"}, run_name="done")
    client.set_terminated(done.info.run_id, "FINISHED")
    time.sleep(0.01)
    client.create_run(exp, tags={"dtlab.kind": "variant"}, run_name="child")
    client.create_run(exp, tags={"dtlab.kind": "parent"}, run_name="stuck")
    # Execute
    (latest,) = latest_parents(client, ["x"])
    # Assert
    assert latest.run.info.run_name == "done"
    assert [r.info.run_name for r in latest.skipped] == ["stuck"]
    with pytest.raises(ValueError, match="no runs of experiment"):
        latest_parents(client, ["nope"])
