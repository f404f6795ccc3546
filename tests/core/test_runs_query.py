"""The latest-runs query: the newest ended parent, never one still RUNNING."""
import time

import pytest

from components.core.runs_query import latest_parents
from components.core.tracker import tracking_client


def test_running_parent_is_skipped_and_named(tmp_path):
    # Prepare: a finished parent, then a newer one left RUNNING, and a child run (not a parent)
    client = tracking_client(f"sqlite:///{tmp_path}/m.db")
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


def test_history_is_every_ended_parent_newest_first_with_its_robustness_label(tmp_path):
    from components.core.runs_query import parent_history, robustness_label

    # Prepare: three ended parents (one a perturbation named by tag, one by its override only), one RUNNING
    client = tracking_client(f"sqlite:///{tmp_path}/m.db")
    exp = client.create_experiment("x")
    t0 = int(time.time() * 1000)
    for i, tags in enumerate(({}, {"robustness": "slow_link"}, {"dtlab.overrides": "experiment=x robustness=seeds"})):
        r = client.create_run(exp, start_time=t0 + i, tags={"dtlab.kind": "parent", **tags}, run_name=f"r{i}")
        client.set_terminated(r.info.run_id, "FAILED" if i == 1 else "FINISHED")
    client.create_run(exp, start_time=t0 + 10, tags={"dtlab.kind": "parent"}, run_name="running")
    # Execute
    (h,) = parent_history(client, ["x"])
    # Assert
    assert [r.info.run_name for r in h.runs] == ["r2", "r1", "r0"]
    assert [r.info.run_name for r in h.skipped] == ["running"]
    assert [robustness_label(r) for r in h.runs] == ["seeds", "slow_link", ""]
