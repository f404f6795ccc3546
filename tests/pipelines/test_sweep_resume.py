"""The Optuna sweeper across sessions, without Ray: a resumed study proposes new points, its MLflow
sweep run is re-owned (driver, no stale error, the current n_trials), trials are numbered on from the
study, a trial lost to the infrastructure is re-queued once, and the sweep ends with a summary."""
import warnings
from types import SimpleNamespace

import optuna
import pytest
from hydra.core.utils import JobReturn, JobStatus
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from components.core.provenance import DRIVER_TAG, driver_id
from hydra_plugins.dtlab_optuna_sweeper.sweeper import (INFRA, DtlabOptunaSweeper, counts, infra_cause,
                                                        make_sampler)

TPE = {"_target_": "optuna.samplers.TPESampler", "seed": 0, "n_startup_trials": 4}
KEY = "experiment.variants.a.params.value"


class FakeLauncher:
    """Stands in for the Ray launcher: each job's value is the sampled point, or what ``outcome``
    says for that call (an exception: the job failed with it)."""

    def __init__(self, outcomes=()):
        self.outcomes = list(outcomes)
        self.calls: list[tuple[list, int]] = []

    def launch(self, job_overrides, initial_job_idx):
        self.calls.append(([list(o) for o in job_overrides], initial_job_idx))
        out = []
        for ov in job_overrides:
            value = float(next(o for o in ov if o.startswith(KEY)).split("=")[1])
            result = self.outcomes.pop(0) if self.outcomes else value
            if isinstance(result, BaseException):
                out.append(JobReturn(overrides=list(ov), status=JobStatus.FAILED, _return_value=result))
            else:
                out.append(JobReturn(overrides=list(ov), status=JobStatus.COMPLETED, _return_value=result))
        return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One MLflow store for the module (creating its tables takes seconds); each test its own experiment."""
    from components.core.tracker import Tracker

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    Tracker(uri).check_reachable()
    return uri


@pytest.fixture
def ws(tmp_path, store, request, monkeypatch):
    """A test's workspace: its own directory (Optuna's storage, sweep output), the module's MLflow
    store, an experiment named after the test. MLFLOW_TRACKING_URI wins over the default URI, and
    the session's ``tracking_uri`` fixture sets it for every test after its first user: point it here."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    return SimpleNamespace(dir=tmp_path, uri=store, exp=request.node.name[:60],
                           storage=f"sqlite:///{tmp_path}/optuna.db")


def load(ws) -> optuna.Study:
    (name,) = optuna.get_all_study_names(ws.storage)
    return optuna.load_study(study_name=name, storage=ws.storage)


def sweeper(ws, n_trials, launcher=None, sampler=TPE):
    s = DtlabOptunaSweeper(sampler=dict(sampler), direction="minimize", study_name="resume",
                           storage=ws.storage, n_trials=n_trials, n_jobs=1,
                           max_failure_rate=1.0, params={KEY: "interval(0.0, 10.0)"})
    s.config = OmegaConf.create({
        "runs_dir": str(ws.dir), "objective": "a.value", "tracking": {"uri": ws.uri},
        "experiment": {"name": ws.exp, "summary": "the platform itself"},
        "hydra": {"sweep": {"dir": str(ws.dir / "sweep")}, "sweeper": {"sampler": dict(sampler)}}})
    s.launcher = launcher or FakeLauncher()
    return s


def test_a_resumed_seeded_study_does_not_repeat_its_first_proposals(ws):
    # Prepare: a seeded TPE sweep of 2 trials (inside TPE's random start-up phase)
    first = sweeper(ws, 2)
    first.sweep([])
    study = load(ws)
    before = [t.params[KEY] for t in study.trials]
    # Execute: the same command with n_trials=3 (a new process: a new sampler from the same config)
    sweeper(ws, 3).sweep([])
    # Assert: trial 2 is a new point, not trial 0's again
    study = load(ws)
    assert len(study.trials) == 3
    assert study.trials[2].params[KEY] not in before


def test_the_resume_seed_is_derived_from_the_seed_and_the_trials_so_far():
    # Prepare / Execute: the sampler a fresh study gets, and the one a study with 2 trials gets
    fresh, again = make_sampler(TPE, 0), make_sampler(TPE, 0)
    resumed, resumed_again = make_sampler(TPE, 2), make_sampler(TPE, 2)
    space = optuna.distributions.FloatDistribution(0.0, 10.0)

    def first_point(sampler):
        s = optuna.create_study(sampler=sampler)
        return s.ask({"x": space}).params["x"]

    # Assert: a fresh study keeps the configured seed (old sweeps replay as before); a resumed one is
    # seeded from (seed, trials so far): deterministic, and not the fresh sequence
    assert first_point(fresh) == first_point(again)
    assert first_point(resumed) == first_point(resumed_again)
    assert first_point(make_sampler(TPE, 0)) != first_point(make_sampler(TPE, 2))


def test_a_resumed_sweep_run_is_reowned_and_ends_clean(ws):
    # Prepare: a finished sweep whose run was then marked "driver gone" by a later run's stale check
    sweeper(ws, 2).sweep([])
    client = MlflowClient(tracking_uri=ws.uri)
    exp = client.get_experiment_by_name(ws.exp)
    (run,) = client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'sweep'")
    client.set_tag(run.info.run_id, DRIVER_TAG, "gone-host:1:1")
    client.set_tag(run.info.run_id, "error", "driver gone: process 1 on gone-host ended without ending this run")
    # Execute: resume with a larger n_trials
    launcher = FakeLauncher()
    sweeper(ws, 3, launcher).sweep([])
    # Assert: this driver owns it, no stale error, FINISHED, the current n_trials as a tag, trial numbered on
    run = client.get_run(run.info.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[DRIVER_TAG] == driver_id()
    assert "error" not in run.data.tags
    assert run.data.tags["sweep.n_trials"] == "3"
    assert run.data.tags["sweep.sessions"] == "2"
    assert launcher.calls[-1][1] == 2          # the first new trial is job #2, not #0
    assert any(o == "sweep_trial=2" for o in launcher.calls[-1][0][0])


def test_a_trial_lost_to_the_infrastructure_is_requeued_once(ws, capsys):
    from ray.exceptions import ActorDiedError

    # Prepare: trial 0's job dies with its actor, and so does its re-run; then a technique error
    launcher = FakeLauncher([ActorDiedError(), ActorDiedError(), ValueError("bad step"), 1.0])
    s = sweeper(ws, 3, launcher)
    # Execute
    s.sweep([])
    # Assert: trial 0 was re-queued with its params (as trial 1); trial 1 failing the same way is not
    # re-queued again; the technique error counts as a failure; n_trials real trials were run
    study = load(ws)
    t = study.trials
    assert INFRA in t[0].user_attrs and t[1].params == t[0].params
    assert t[1].user_attrs["dtlab.requeued_from"] == 0 and INFRA not in t[1].user_attrs
    assert [x.state.name for x in t] == ["FAIL", "FAIL", "FAIL", "COMPLETE"]
    assert counts(study) == (3, 2)
    err = capsys.readouterr()
    assert "re-queued" in err.out + err.err


def test_infrastructure_causes_are_told_from_technique_errors():
    assert infra_cause(["ActorDiedError: The actor died unexpectedly before finishing this task."])
    assert infra_cause(["DataParallelFailed: Destroying worker since its placement group was removed."])
    assert infra_cause(["RuntimeError: NodeDiedError: node 3 is dead", "seed 0: WorkerCrashedError: crashed; "
                        "seed 1: OwnerDiedError: owner died"])
    assert infra_cause(["ValueError: step must be > 0"]) is None
    assert infra_cause(["ActorDiedError: died", "ValueError: step must be > 0"]) is None
    assert infra_cause(["seed 0: ActorDiedError: died; seed 1: ValueError: bad"]) is None
    assert infra_cause(["ConfigError: experiment.x=1: ActorDiedError is not allowed"]) is None
    assert infra_cause([]) is None


def test_the_sweep_ends_with_one_summary_line_per_trial(ws, capsys):
    # Prepare / Execute: three trials, the second one crashes
    s = sweeper(ws, 3, FakeLauncher([2.0, ValueError("bad step"), 3.0]))
    s.sweep([])
    # Assert: a line per trial with its number, params, state and value
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.lstrip().startswith("#")]
    assert len(lines) == 3, out
    assert "COMPLETE" in lines[0] and "objective 2" in lines[0] and lines[0].lstrip().startswith("#0")
    assert "FAIL" in lines[1] and "bad step" in lines[1]


def test_sampler_creation_does_not_print_optunas_experimental_warning():
    # BruteForceSampler (the DUO grid's base) is an experimental class: it warns when instantiated
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_sampler({"_target_": "optuna.samplers.BruteForceSampler", "seed": 0}, 0)
    assert not [w for w in caught if issubclass(w.category, optuna.exceptions.ExperimentalWarning)]


@pytest.mark.parametrize("n", [0, 5])
def test_an_unseeded_sampler_is_left_as_configured(n):
    sampler = make_sampler({"_target_": "optuna.samplers.RandomSampler"}, n)
    assert isinstance(sampler, optuna.samplers.RandomSampler)


def test_a_variant_whose_placement_group_was_removed_requeues_its_trial(ws):
    from components.core.tracker import Tracker

    tracker = Tracker(ws.uri, background=False)
    lost = ["DataParallelFailed: Destroying worker since its placement group was removed.",
            "ValueError: lr must be > 0"]

    class RecordingLauncher(FakeLauncher):
        """Each job records a parent and a failed variant run in MLflow, as a trial's job does."""

        def launch(self, job_overrides, initial_job_idx):
            out = []
            for ov in job_overrides:
                kv = dict(o.split("=", 1) for o in ov)
                exp = tracker.experiment_id(ws.exp)
                parent = tracker.start_run(exp, "p", tags={"dtlab.kind": "parent", "dtlab.sweep_run_id": kv["sweep_run_id"],
                                                           "optuna.trial": kv["sweep_trial"]})
                child = tracker.start_run(exp, "a", tags={"dtlab.kind": "variant", "variant": "a"}, parent_id=parent)
                tracker.end(child, "FAILED", error=lost.pop(0) if lost else "ValueError: again")
                tracker.end(parent, "FAILED", error="variants failed: a")
                out.append(JobReturn(overrides=list(ov), status=JobStatus.FAILED,
                                     _return_value=RuntimeError(f"RuntimeError: job {kv['sweep_trial']}: variants failed: a")))
            return out

    # Prepare / Execute: trial 0 loses its placement group, its re-run fails in the technique
    sweeper(ws, 1, RecordingLauncher()).sweep([])
    # Assert: trial 0 re-queued (the variant's error, not the job's "variants failed", was read); the
    # re-run's technique error is a real failure and is what the sweep run records for it
    t = load(ws).trials
    assert len(t) == 2 and INFRA in t[0].user_attrs and t[1].params == t[0].params and INFRA not in t[1].user_attrs
    run = MlflowClient(tracking_uri=ws.uri).search_runs(
        [MlflowClient(tracking_uri=ws.uri).get_experiment_by_name(ws.exp).experiment_id], "tags.`dtlab.kind` = 'sweep'")[0]
    assert "placement group was removed" in run.data.tags["trial.0.error"]
    assert "lr must be > 0" in run.data.tags["trial.1.error"]
