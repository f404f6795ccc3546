"""Interrupted sweeps and multiruns lose nothing: every open run ends KILLED with the reason, the
sweep run too; Optuna trials in flight are re-queued with the same params (not failures); a
resumed sweep keeps the completed trials and stops at n_trials. A SIGKILLed driver's runs end
FAILED ("driver gone") at the next `dtlab gc`."""
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.distributions import FloatDistribution

from hydra_plugins.dtlab_optuna_sweeper.sweeper import INTERRUPTED, _requeue, counts, study_name
from hydra_plugins.dtlab_ray_launcher.open_runs import end_open_runs, wait_gone
from pipelines.config import ROOT
from tests.probe_runs import ready_store

S = optuna.trial.TrialState


# ------------------------------------------------------------------------------------- units
def test_study_name_hashes_objective_and_space():
    # Prepare
    space = {"x": FloatDistribution(0.0, 1.0)}
    # Execute
    a = study_name("probe", "a.value", "minimize", space)
    # Assert
    assert a.startswith("probe-") and a == study_name("probe", "a.value", "minimize", dict(space))
    assert a != study_name("probe", "b.value", "minimize", space)
    assert a != study_name("probe", "a.value", "minimize", {"x": FloatDistribution(0.0, 2.0)})
    assert a != study_name("probe", "a.value", "maximize", space)


def test_interrupted_trial_is_requeued_and_not_counted():
    # Prepare: one completed trial, one in flight
    study = optuna.create_study()
    space = {"x": FloatDistribution(0.0, 1.0)}
    done = study.ask(space)
    study.tell(done, 0.5)
    flying = study.ask(space)
    # Execute
    _requeue(study, flying, "stopped by SIGTERM")
    again = study.ask(space)
    # Assert
    assert counts(study) == (1, 0)  # the interrupted trial is neither done nor a failure
    assert study.trials[flying.number].state == S.FAIL and study.trials[flying.number].user_attrs[INTERRUPTED]
    assert again.params == flying.params


def test_end_open_runs_ends_the_tree_under_its_roots(tmp_path):
    # Prepare: root -> child -> grandchild RUNNING, and an unrelated RUNNING run
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/m.db")
    exp = client.create_experiment("e")
    root = client.create_run(exp, tags={"hydra.job": "3"}).info.run_id
    child = client.create_run(exp, tags={"mlflow.parentRunId": root}).info.run_id
    grand = client.create_run(exp, tags={"mlflow.parentRunId": child}).info.run_id
    other = client.create_run(exp, tags={"hydra.job": "9"}).info.run_id
    # Execute
    ended = end_open_runs(client, [exp], lambda r: r.data.tags.get("hydra.job") == "3", "stopped by SIGHUP")
    # Assert
    assert set(ended) == {root, child, grand}
    assert {client.get_run(r).info.status for r in (root, child, grand)} == {"KILLED"}
    assert client.get_run(grand).data.tags["error"] == "stopped by SIGHUP"
    assert client.get_run(other).info.status == "RUNNING"
    client.set_terminated(other)  # leave no RUNNING run behind for `make reliability`'s count


def test_wait_gone_waits_for_exits_and_counts_a_zombie_gone():
    # Prepare: a process that exits in 0.3 s, one left a zombie (never reaped), one that keeps running
    import socket

    def tag(p):
        start = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[19]
        return f"{socket.gethostname()}:{p.pid}:{start}"

    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    zombie = subprocess.Popen(["true"])
    stays = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    tags = [tag(quick), tag(stays), tag(zombie)]   # `true` exits at once and is not reaped: a zombie
    try:
        # Execute
        t0 = time.monotonic()
        left = wait_gone(tags, timeout=2.0)
        waited = time.monotonic() - t0
    finally:
        stays.kill()
        for p in (quick, zombie, stays):
            p.wait()
    # Assert: the running one is named after the timeout; the exited one and the zombie count as gone
    assert left == [tags[1]] and waited >= 2.0
    assert wait_gone(["elsewhere:1:1", ""], timeout=5.0) == []   # another host's process cannot be waited for


# --------------------------------------------------------------------------- real processes
def _dtlab(runs, *args):
    """The command and environment of a `dtlab run` into ``runs``, its store created first (the
    test polls it: see tests/probe_runs.ready_store)."""
    env = {**os.environ, "DTLAB_RUNS_DIR": str(runs), "RAY_ADDRESS": ""}
    env.pop("MLFLOW_TRACKING_URI", None)
    ready_store(f"sqlite:///{runs}/mlflow.db")
    return [sys.executable, "-m", "pipelines.cli", "run", *args, "cluster.include_dashboard=false"], env


def _interruptible():
    """In the child before exec: Ctrl-C acts even when this suite runs as a background job, whose
    children inherit SIGINT ignored (Python then installs no KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(pred, p, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline and p.poll() is None:
        try:
            if pred():
                return True
        except Exception:  # noqa: BLE001 - stores being created
            pass
        time.sleep(0.5)
    return False


def _study(runs):
    storage = f"sqlite:///{runs}/optuna.db"
    names = optuna.get_all_study_names(storage)
    return optuna.load_study(study_name=names[0], storage=storage) if names else None


SWEEP = ["-m", "experiment=platform_probe", "hparams_search=platform_probe_optuna", "debug=true",
         "hydra/launcher=basic", "hydra.sweeper.n_trials=4"]


@pytest.mark.slow   # a real interrupted Optuna sweep and its resume, ~55 s: runs in `make bench`
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signalled_sweep_kills_its_runs_and_resumes_to_n_trials(sig, tmp_path):
    # Prepare: a sweep whose trials take seconds; signal it once a trial completed and another runs
    cmd, env = _dtlab(tmp_path, *SWEEP, "experiment.common.probe.seconds=4")
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_interruptible)
    try:
        ok = _wait_for(lambda: (s := _study(tmp_path)) is not None and len(s.trials) >= 2
                       and any(t.state == S.COMPLETE or t.state == S.FAIL for t in s.trials), p)
        assert ok, f"sweep did not reach a second trial: {p.stderr.read()[-3000:] if p.poll() is not None else ''}"
        time.sleep(1.5)
        # Execute
        p.send_signal(sig)
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    # Assert: nothing RUNNING, the sweep run KILLED with the signal, the trial in flight re-queued
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("platform_probe")
    runs = client.search_runs([exp.experiment_id])
    assert rc != 0
    assert [r.info.run_id for r in runs if r.info.status == "RUNNING"] == []
    sweep = next(r for r in runs if r.data.tags.get("dtlab.kind") == "sweep")
    name = signal.Signals(sig).name
    assert sweep.info.status == "KILLED" and name in sweep.data.tags.get("error", "")
    killed = [r for r in runs if r.data.tags.get("dtlab.kind") == "parent" and r.info.status == "KILLED"]
    assert killed and all(name in r.data.tags.get("error", "") for r in killed)
    study = _study(tmp_path)
    before = {t.number: t.params for t in study.trials if t.state == S.COMPLETE}
    interrupted = [t for t in study.trials if INTERRUPTED in t.user_attrs]
    assert len(interrupted) == 1 and any(t.state == S.WAITING and t.system_attrs.get("fixed_params") == interrupted[0].params
                                         for t in study.trials)  # queued with the same params
    # Execute: resume (quick trials now)
    cmd, env = _dtlab(tmp_path, *SWEEP, "experiment.common.probe.seconds=0.2")
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    # Assert: completed trials kept, the re-queued params ran, the total is n_trials
    assert r.returncode == 0, r.stderr[-3000:]
    study = _study(tmp_path)
    assert {t.number: t.params for t in study.trials if t.state == S.COMPLETE and t.number in before} == before
    assert counts(study)[0] == 4
    rerun = [t for t in study.trials if t.user_attrs.get("dtlab.requeued_from") == interrupted[0].number]
    assert rerun and rerun[0].state in (S.COMPLETE, S.FAIL) and rerun[0].params == interrupted[0].params
    runs = client.search_runs([exp.experiment_id])
    assert [r.info.run_id for r in runs if r.info.status == "RUNNING"] == []
    assert next(r for r in runs if r.data.tags.get("dtlab.kind") == "sweep").info.status == "FINISHED"


@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow),
                                 pytest.param(signal.SIGHUP, marks=pytest.mark.slow)])
def test_signalled_ray_multirun_kills_every_open_run(sig, tmp_path):
    # Prepare: two jobs as Ray tasks whose variants take a minute
    cmd, env = _dtlab(tmp_path, "-m", "experiment=platform_probe", "debug=true", "experiment.seeds=[0],[1]",
                      "experiment.common.probe.seconds=60")
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_interruptible)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")

    def variants_running():  # both jobs' parent runs open, and a variant running
        exp = client.get_experiment_by_name("platform_probe")
        return (len(client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'parent'")) >= 2
                and client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'variant'"))

    try:
        assert _wait_for(variants_running, p), p.stderr.read()[-3000:] if p.poll() is not None else "timeout"
        # Execute
        p.send_signal(sig)
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    # Assert
    exp = client.get_experiment_by_name("platform_probe")
    runs = client.search_runs([exp.experiment_id])
    assert rc != 0
    assert [r.info.run_id for r in runs if r.info.status == "RUNNING"] == []
    parents = [r for r in runs if r.data.tags.get("dtlab.kind") == "parent"]
    assert len(parents) == 2 and {r.info.status for r in parents} == {"KILLED"}
    name = "SIGINT" if sig == signal.SIGINT else signal.Signals(sig).name
    assert all(name in r.data.tags.get("error", "") for r in parents)


@pytest.mark.slow   # ~20 s; test_ray_watchdog covers SIGKILL cleanup: runs in `make bench` (keeps `make test` in its 15 minutes)
def test_sigkilled_driver_runs_end_failed_at_gc(tmp_path):
    # Prepare: a run whose variants take a minute, SIGKILLed once they run
    cmd, env = _dtlab(tmp_path, "experiment=platform_probe", "debug=true", "experiment.common.probe.seconds=60")
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")

    def variant_running():
        exp = client.get_experiment_by_name("platform_probe")
        return client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'variant'")

    try:
        assert _wait_for(variant_running, p)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        exp = client.get_experiment_by_name("platform_probe")
        left = [r for r in client.search_runs([exp.experiment_id]) if r.info.status == "RUNNING"]
        # Execute
        gc = subprocess.run([sys.executable, "-m", "pipelines.cli", "gc"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    # Assert
    assert left, "SIGKILL left nothing RUNNING: the drill did not test anything"
    assert gc.returncode == 0, gc.stderr[-2000:]
    runs = client.search_runs([exp.experiment_id])
    assert [r.info.run_id for r in runs if r.info.status == "RUNNING"] == []
    assert all(client.get_run(r.info.run_id).info.status == "FAILED"
               and "driver gone" in client.get_run(r.info.run_id).data.tags.get("error", "") for r in left)
