"""The MLflow tracker writes off the caller's path, in order, merged into few calls, and loses nothing."""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from components.core.tracker import Tracker


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('tracker')}/mlflow.db"
    t = Tracker(uri)
    return t, t.experiment_id("tracker-test")


def _hold_writer(t: Tracker) -> threading.Event:
    """Park the writer thread until the returned event is set (everything after it queues up)."""
    go, parked = threading.Event(), threading.Event()
    t.submit(lambda: (parked.set(), go.wait(30)))
    assert parked.wait(30)
    return go


def test_writes_return_before_they_land_and_land_in_few_batches(store):
    t, exp = store
    parent = t.start_run(exp, "parent")
    child = t.start_run(exp, "child", parent_id=parent)
    calls = []
    real = t.client.log_batch
    t.client.log_batch = lambda *a, **k: (calls.append(a[0]), real(*a, **k))[1]
    try:
        go = _hold_writer(t)
        for step in range(200):
            t.log_metrics(child, {"loss": 1.0 / (step + 1)}, step=step)
        t.log_params(child, {"opt": {"lr": 0.1}})
        t.set_tags(child, {"variant": "a"})
        assert t.client.get_run(child).data.metrics == {}, "a queued write is not on the caller's path"
        t.end(child)
        go.set()
        t.end(parent)  # the last open run: returns once everything is written
    finally:
        t.client.log_batch = real
    run = t.client.get_run(child)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["loss"] == pytest.approx(1.0 / 200), "the final live value is written"
    assert len(t.client.get_metric_history(child, "loss")) == 200
    assert run.data.params == {"opt.lr": "0.1"} and run.data.tags["variant"] == "a"
    assert calls.count(child) == 1, f"200 metric calls + params + tags in one log_batch, got {len(calls)}"
    assert t.client.get_run(parent).info.status == "FINISHED"


def test_failed_end_flushes_the_runs_writes_first(store):
    t, exp = store
    rid = t.start_run(exp, "crashes")
    go = _hold_writer(t)
    t.log_metrics(rid, {"step_done": 3.0})
    threading.Timer(0.5, go.set).start()
    t.end(rid, "FAILED", error="RuntimeError: boom")  # the last open run: waits for the writer
    run = t.client.get_run(rid)
    assert run.info.status == "FAILED" and "boom" in run.data.tags["error"]
    assert run.data.metrics["step_done"] == 3.0


def test_a_write_that_fails_ends_its_run_failed_with_the_reason(store):
    t, exp = store
    rid = t.start_run(exp, "bad-write")
    t.log_params(rid, {"lr": 0.1})
    t.flush()
    t.log_params(rid, {"lr": 0.2})  # MLflow refuses to change a logged param
    t.end(rid, "FINISHED")
    run = t.client.get_run(rid)
    assert run.info.status == "FAILED"
    assert "tracking write failed" in run.data.tags["error"] and "lr" in run.data.tags["error"]


def test_figure_closed_right_after_logging_lands(store, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t, exp = store
    rid = t.start_run(exp, "figure")
    go = _hold_writer(t)
    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [3, 1, 2])
    t.log_figure(rid, fig, "plots/curve.png")
    plt.close(fig)
    go.set()
    t.end(rid)
    path = t.client.download_artifacts(rid, "plots/curve.png", str(tmp_path))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_work_submitted_for_a_run_that_fails_ends_that_run_failed_with_the_reason(store):
    # Prepare: a run whose plot drawing (queued work done on the writer) raises
    t, exp = store
    rid = t.start_run(exp, "bad-drawing")
    t.log_metrics(rid, {"loss": 1.0})

    def draw():
        raise ValueError("no finite point to plot")

    # Execute
    t.submit_for(rid, draw)
    t.end(rid, "FINISHED")
    # Assert: the metric landed, the run did not end FINISHED, and says why
    run = t.client.get_run(rid)
    assert run.info.status == "FAILED" and run.data.metrics["loss"] == 1.0
    assert "no finite point to plot" in run.data.tags["error"]


def test_queued_writes_survive_interpreter_exit(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    code = (
        "import sys; from components.core.tracker import Tracker\n"
        "t = Tracker(sys.argv[1]); rid = t.start_run(t.experiment_id('exit'), 'r')\n"
        "t.log_metrics(rid, {'last': 7.0}); t.log_text(rid, 'hi', 'note.txt'); print(rid)\n")
    rid = subprocess.run([sys.executable, "-c", code, uri], capture_output=True, text=True, check=True,
                         timeout=120).stdout.strip()
    c = Tracker(uri, background=False).client
    assert c.get_run(rid).data.metrics["last"] == 7.0
    assert [a.path for a in c.list_artifacts(rid)] == ["note.txt"]


def test_signal_is_held_while_a_run_is_created_and_registered():
    # Prepare: SIGTERM raises, as in a driver
    import os
    import signal

    from components.core.tracker import _signals_held

    class Stop(Exception):
        pass

    def raise_stop(*_):
        raise Stop

    old = signal.signal(signal.SIGTERM, raise_stop)
    reached_end_of_block = False
    other = threading.Event()  # another thread alive: the kernel may hand it the signal
    threading.Thread(target=other.wait, daemon=True).start()
    try:
        # Execute: the signal lands inside the held block
        with pytest.raises(Stop):
            with _signals_held():
                os.kill(os.getpid(), signal.SIGTERM)
                reached_end_of_block = True
    finally:
        other.set()
        signal.signal(signal.SIGTERM, old)
    # Assert: the block finished before the handler ran
    assert reached_end_of_block


_OPEN_AT_ONCE = """
import os, sys, time
go = sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.01)
from components.core.tracker import Tracker
t = Tracker(sys.argv[1], background=False)
t.experiment_id("race")
"""


def test_processes_opening_one_fresh_store_at_once_all_get_it(tmp_path):
    """MLflow migrates a fresh SQLite store on first contact; two processes doing it at once
    (a run, a UI, a sweep's jobs) must all succeed, not lose with 'table ... already exists'."""
    # Prepare: two processes, imports done, waiting for one go file
    uri, go = f"sqlite:///{tmp_path}/fresh/mlflow.db", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN_AT_ONCE, uri, str(go)], stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    # Execute
    go.touch()
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    # Assert
    assert all(rc == 0 for rc, _ in results), [err.strip().splitlines()[-1:] for _, err in results]


def _schema(db) -> tuple[list, list]:
    """Every table's and index's definition (its lines sorted: MLflow's batch migrations rebuild tables
    with their constraints in an order that varies from process to process) and the alembic revision."""
    import sqlite3

    with sqlite3.connect(db) as con:
        rows = con.execute("select name, sql from sqlite_master where type in ('table', 'index') order by name").fetchall()
        tables = [(name, sorted(line.strip().rstrip(",") for line in (sql or "").splitlines())) for name, sql in rows]
        return tables, con.execute("select version_num from alembic_version").fetchall()


def test_a_fresh_store_is_the_migrated_template_and_gets_its_own_default_experiment(tmp_path, monkeypatch):
    # Prepare: a template cache of this test's own; a store MLflow builds the slow way, to compare with
    from mlflow.tracking import MlflowClient

    from components.core import tracker

    monkeypatch.setenv("DTLAB_CACHE_HOME", str(tmp_path / "cache"))
    slow = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/slow/mlflow.db")
    slow.search_experiments()
    # Execute
    client = tracker.tracking_client(f"sqlite:///{tmp_path}/fast/mlflow.db")
    run = client.create_run(client.create_experiment("x"))
    client.log_metric(run.info.run_id, "m", 1.0)
    # Assert: copied from the template (built once), the same schema and revision as MLflow's, and MLflow's
    # Default experiment made for this store, as in the slow one
    assert list((tmp_path / "cache").glob("mlflow-*-empty.db"))
    assert _schema(tmp_path / "fast" / "mlflow.db") == _schema(tmp_path / "slow" / "mlflow.db")
    assert [(e.experiment_id, e.name) for e in client.search_experiments(filter_string="name = 'Default'")] == [("0", "Default")]
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.0}


def test_a_broken_template_cache_falls_back_to_mlflows_own_migration(tmp_path, monkeypatch):
    # Prepare: the cache directory is a file, so no template can be made there
    from components.core import tracker

    (tmp_path / "cache").write_text("not a directory")
    monkeypatch.setenv("DTLAB_CACHE_HOME", str(tmp_path / "cache"))
    # Execute
    client = tracker.tracking_client(f"sqlite:///{tmp_path}/s/mlflow.db")
    # Assert: the store works all the same
    assert client.get_experiment(client.create_experiment("y")).name == "y"
