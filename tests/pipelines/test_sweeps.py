"""Sweeps: the Optuna sweeper (current Optuna, persistent study, failed trials, MLflow linkage),
the Ray launcher for grid multiruns, and the fail-fast check of a tracking server that is down."""
import os
import socket
import subprocess
import sys

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from hydra_plugins.dtlab_optuna_sweeper.search_space import parse_space

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dtlab(runs_dir, *args, env=None, timeout=600):
    e = {**os.environ, "DTLAB_RUNS_DIR": str(runs_dir), "RAY_ADDRESS": "", **(env or {})}
    e.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "run", *args, "cluster.include_dashboard=false"],
                          capture_output=True, text=True, timeout=timeout, env=e, cwd=ROOT)


def _study(runs):
    """The sweep's study: named platform_probe_value-<hash of objective and space>."""
    storage = f"sqlite:///{runs}/optuna.db"
    (name,) = optuna.get_all_study_names(storage)
    assert name.startswith("platform_probe_value-")
    return optuna.load_study(study_name=name, storage=storage)


def test_search_space_mapping():
    space, fixed = parse_space({"lr": "tag(log, interval(1e-4, 1e-1))", "x": "interval(0, 1.5)", "k": "range(1, 9, step=2)",
                                "opt": "choice(sgd, adam)"}, ["seed=3"])
    assert space["lr"] == FloatDistribution(1e-4, 1e-1, log=True)
    assert space["x"] == FloatDistribution(0.0, 1.5)
    assert space["k"] == IntDistribution(1, 7, step=2)
    assert isinstance(space["opt"], CategoricalDistribution) and set(space["opt"].choices) == {"sgd", "adam"}
    assert fixed == ["seed=3"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    runs = tmp_path_factory.mktemp("sweep")
    r = dtlab(runs, "-m", "experiment=platform_probe", "hparams_search=platform_probe_optuna", "debug=true",
              "hydra/launcher=basic", "hydra.sweeper.n_trials=3")
    return runs, r


def test_optuna_sweep_records_failures_and_continues(sweep):
    runs, r = sweep
    assert r.returncode == 0, r.stderr[-3000:]
    study = _study(runs)
    states = [t.state for t in study.trials]
    assert len(states) == 3
    assert optuna.trial.TrialState.FAIL in states and optuna.trial.TrialState.COMPLETE in states
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    # the objective is the probe's reported metric, i.e. the sampled value itself
    for t in complete:
        assert t.value == pytest.approx(t.params["experiment.variants.a.params.value"])
    assert study.best_value == min(t.value for t in complete)


def test_sweep_run_links_trials_and_logs_best(sweep):
    runs, _ = sweep
    client = MlflowClient(tracking_uri=f"sqlite:///{runs}/mlflow.db")
    exp = client.get_experiment_by_name("platform_probe")
    sweeps = client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'sweep'")
    assert len(sweeps) == 1
    s = sweeps[0]
    assert s.info.status == "FINISHED"
    study = _study(runs)
    assert s.data.metrics["best_value"] == pytest.approx(study.best_value)
    arts = {a.path for a in client.list_artifacts(s.info.run_id)} | {a.path for a in client.list_artifacts(s.info.run_id, "plots")}
    assert "best_config.yaml" in arts and "plots/optimization_history.png" in arts
    trials = client.search_runs([exp.experiment_id], f"tags.`dtlab.sweep_run_id` = '{s.info.run_id}'")
    assert len(trials) == 3
    assert all(t.data.tags["mlflow.parentRunId"] == s.info.run_id for t in trials)
    assert {t.info.status for t in trials} == {"FINISHED", "FAILED"}


@pytest.mark.slow   # ~21 s; resuming an interrupted study is also checked, after a real signal, by
                    # tests/reliability/test_interrupts.py (kept trials, re-queued params, n_trials in total)
def test_interrupted_sweep_resumes(sweep):
    runs, _ = sweep
    r = dtlab(runs, "-m", "experiment=platform_probe", "hparams_search=platform_probe_optuna", "debug=true",
              "hydra/launcher=basic", "hydra.sweeper.n_trials=7")
    assert r.returncode == 0, r.stderr[-3000:]
    study = _study(runs)
    assert len(study.trials) == 7  # 3 from before + 4 new, not 7 new


@pytest.mark.slow   # a Ray-launched multirun, ~30 s: runs in `make bench` (keeps `make test` in its 15 minutes)
def test_ray_launcher_grid_and_failed_job(tmp_path):
    r = dtlab(tmp_path, "-m", "experiment=platform_probe", "debug=true", "++experiment.variants.d.params.fail_at_step=0,-1")
    assert r.returncode != 0  # one job had a failed variant: the multirun reports it
    assert "Launching 2 jobs as Ray tasks" in r.stdout + r.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("platform_probe")
    parents = client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'parent'")
    assert len(parents) == 2
    assert sorted(p.data.tags["hydra.job"] for p in parents) == ["0", "1"]
    assert sorted(p.info.status for p in parents) == ["FAILED", "FINISHED"]
    assert client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'") == []


def test_tracking_server_down_fails_fast(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free, nothing listens after close
    r = dtlab(tmp_path, "experiment=platform_probe", "debug=true", "tracking=server",
              env={"DTLAB_MLFLOW_SERVER": f"http://127.0.0.1:{port}"}, timeout=60)
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "unreachable" in lines[0] and f"127.0.0.1:{port}" in lines[0]


@pytest.mark.slow   # a real sweep, ~25 s: runs in `make bench` (keeps `make test` in its 15 minutes)
def test_objective_naming_a_metric_no_variant_reports_stops_at_the_first_trial(tmp_path):
    # Execute: `value` is reported by the probe, `zz_nometric` is not (a typo in the objective)
    r = dtlab(tmp_path, "-m", "experiment=platform_probe", "hparams_search=platform_probe_optuna", "debug=true",
              "hydra/launcher=basic", "hydra.sweeper.n_trials=5", "objective=a.zz_nometric",
              "hydra.sweeper.params=null", "experiment.variants.a.params.value=interval(0.0,10.0)")
    # Assert: one trial ran, the sweep run FAILED naming the metric and what the variant reports
    assert r.returncode != 0
    assert "reports no metric 'zz_nometric'" in r.stderr, r.stderr[-3000:]
    assert len(_study(tmp_path).trials) == 1
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("platform_probe")
    (sweep,) = client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'sweep'")
    assert sweep.info.status == "FAILED" and "zz_nometric" in sweep.data.tags.get("error", "")


def test_multi_objective_values_are_checked_and_the_pareto_front_is_logged(tmp_path):
    from omegaconf import OmegaConf

    from components.core.errors import ConfigError
    from hydra_plugins.dtlab_optuna_sweeper.config import check_conf
    from hydra_plugins.dtlab_optuna_sweeper.sweeper import DtlabOptunaSweeper

    # Prepare: a two-direction study with three told trials, one dominated
    base = {"n_trials": 3, "n_jobs": 1, "max_failure_rate": 1.0, "study_name": None, "storage": None, "sampler": None}
    study = optuna.create_study(directions=["maximize", "maximize"])
    for values in ([0.1, 50.0], [0.5, 40.0], [0.05, 30.0]):   # the last is dominated by the first
        t = study.ask({"lam": FloatDistribution(0.1, 10.0)})
        study.tell(t, values)
    logged = {}

    class Tracker:
        def log_metrics(self, rid, m, step=None):
            logged.update(m)

        def log_text(self, rid, text, name):
            logged[name] = text

        def end(self, rid, status, error=None):
            logged["status"] = status

    sweeper = object.__new__(DtlabOptunaSweeper)
    sweeper.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}})
    # Execute / Assert: a value count that does not match the directions is refused, before and during the sweep
    with pytest.raises(ConfigError, match="one per hydra.sweeper.direction"):
        check_conf({**base, "direction": ["maximize", "maximize"], "objective": "a.x"})
    check_conf({**base, "direction": ["maximize", "maximize"], "objective": "[a.x, a.y]"})
    assert "2 value(s) for 1 direction" in DtlabOptunaSweeper._bad_value([1.0, 2.0], 1)
    assert "not finite" in DtlabOptunaSweeper._bad_value([1.0, float("nan")], 2)
    assert DtlabOptunaSweeper._bad_value([1.0, 2.0], 2) == "" and DtlabOptunaSweeper._bad_value(3.0, 1) == ""
    sweeper._report(Tracker(), "rid", study, "FINISHED")
    assert logged["pareto_trials"] == 2 and logged["status"] == "FINISHED"
    front = OmegaConf.create(logged["pareto_front.yaml"])
    assert sorted(tuple(t["values"]) for t in front.pareto_front) == [(0.1, 50.0), (0.5, 40.0)]
    assert (tmp_path / "optimization_results.yaml").exists()


def test_objective_of_a_list_expression_is_one_value_per_objective():
    from pipelines.dag import objective

    class Outcome:
        claims_held = 0

        def metrics(self):
            return {"a": {"x": 2.0, "y": 3.0}}

        def seed_metrics(self):
            return {"a": {0: {"x": 2.0, "y": 3.0}}}

    assert objective(Outcome(), "[a.x, a.y / 2]") == [2.0, 1.5]
    assert objective(Outcome(), "a.x") == 2.0
