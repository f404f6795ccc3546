"""Every experiment config composes and validates, in full and in its debug flavour."""
import pytest

from pipelines import config, dag

# Experiments whose baselines run inside the technique's variant, timed in the same process on the
# same instances (a per-instance table is fairer than separate Ray tasks for sub-second timings).
IN_VARIANT_BASELINES = {"hybrid_einsum"}


@pytest.mark.parametrize("name", config.experiment_names())
@pytest.mark.parametrize("debug", [False, True])
def test_experiment_composes_and_validates(name, debug, tmp_path):
    cfg = config.compose([f"experiment={name}", f"debug={str(debug).lower()}", f"runs_dir={tmp_path}"])
    spec = dag.validate(cfg)
    assert spec.name == name
    assert spec.variants, "an experiment needs variants"
    assert cfg["experiment"].get("debug"), f"{name} needs a debug flavour"
    roles = {v.role for v in spec.variants}
    if name != "platform_probe":
        assert "technique" in roles, f"{name}: no technique variant"
        assert "baseline" in roles or name in IN_VARIANT_BASELINES, f"{name}: a technique against at least one baseline"
        assert spec.claims, f"{name} states no claims"


def test_cluster_and_tracking_groups_compose(tmp_path, monkeypatch):
    # MLFLOW_TRACKING_URI would win over the group's default; the session fixture sets it once an e2e test has run
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DTLAB_MLFLOW_SERVER", raising=False)
    cfg = config.compose(["cluster=remote", "tracking=server", f"runs_dir={tmp_path}"])
    assert cfg["cluster"]["address"] == "127.0.0.1:6379"
    assert cfg["tracking"]["uri"].startswith("http://127.0.0.1")


@pytest.mark.parametrize("group", ["local", "server"])
def test_tracking_env_wins_over_the_default_and_loses_to_an_explicit_uri(monkeypatch, tmp_path, group):
    from components.core.tracker import resolve_tracking_uri

    # Prepare: the variable set, as the suite's session fixture and MLflow users set it
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/env.db")
    monkeypatch.delenv("DTLAB_MLFLOW_SERVER", raising=False)
    base = [f"tracking={group}", f"runs_dir={tmp_path}"]

    # Execute: the group's default, an explicit override, then the variable empty and unset
    by_default = resolve_tracking_uri(config.compose(base)["tracking"]["uri"])
    explicit = resolve_tracking_uri(config.compose([*base, f"tracking.uri=sqlite:///{tmp_path}/x.db"])["tracking"]["uri"])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    emptied = resolve_tracking_uri(config.compose(base)["tracking"]["uri"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    unset = resolve_tracking_uri(config.compose(base)["tracking"]["uri"])

    # Assert
    default = {"local": f"sqlite:///{tmp_path}/mlflow.db", "server": "http://127.0.0.1:5055"}[group]
    assert by_default == f"sqlite:///{tmp_path}/env.db"
    assert explicit == f"sqlite:///{tmp_path}/x.db"
    assert emptied == unset == default


def test_sweep_expansion():
    jobs = config.expand_sweep(["experiment=error_feedback", "experiment.seeds=[0],[1],[2]", "debug=true"])
    assert len(jobs) == 3 and all("debug=true" in j for j in jobs)
