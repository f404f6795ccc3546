"""`dtlab run experiment=error_feedback debug=true` through the DAG, read back from MLflow."""
import json

import pytest

from pipelines.dag import PARENT_TAG

CHILD_TAGS = ("technique", "variant", "role", "family")


@pytest.fixture(scope="module")
def ef_outcome(run_experiment):
    return run_experiment("error_feedback")


def test_parent_and_children_in_mlflow(ef_outcome, mlflow_client):
    o = ef_outcome
    parent = mlflow_client.get_run(o.parent_run_id)
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[PARENT_TAG] == "parent"
    children = mlflow_client.search_runs([o.experiment_id], f"tags.mlflow.parentRunId = '{o.parent_run_id}'")
    assert {c.data.tags["variant"] for c in children} == set(o.variants)
    for c in children:
        assert c.info.status == "FINISHED"
        for t in CHILD_TAGS:
            assert c.data.tags.get(t), f"{c.info.run_name} lacks tag {t}"
        assert c.data.params, "flattened params logged"
        arts = {a.path for a in mlflow_client.list_artifacts(c.info.run_id)}
        assert {"summary.json", "config.yaml"} <= arts
        if c.data.tags["technique"] == "error_feedback":
            hist = mlflow_client.get_metric_history(c.info.run_id, "grad_norm_sq")
            assert len(hist) > 10 and [m.step for m in hist][:3] == [0, 1, 2]
            for m in ("final_grad_norm_sq", "bits_sent", "sim_comm_s"):
                assert m in c.data.metrics
            assert "plots" in arts


def test_claims_logged_on_parent_and_key_ones_hold(ef_outcome, mlflow_client):
    o = ef_outcome
    metrics = mlflow_client.get_run(o.parent_run_id).data.metrics
    for c in o.claims:
        assert metrics[f"claim.{c.name}"] == float(c.holds)
    held = {c.name: c.holds for c in o.claims}
    # the theorem-level claims hold at any size; they are computed from this run's metrics
    for name in ("ef_lyapunov_within_rho_star", "ef21_lyapunov_within_rho_star", "cgd_within_its_tight_rate",
                 "cgd_rate_beats_ef_rate", "ef21_converges_distributed", "cgd_stalls_distributed"):
        assert held[name], name
    arts = {a.path for a in mlflow_client.list_artifacts(o.parent_run_id)}
    assert {"comparison.json", "claims.json", "summary.json", "config.yaml"} <= arts
    plots = {a.path for a in mlflow_client.list_artifacts(o.parent_run_id, "plots")}
    assert "plots/distributed_grad_norm.png" in plots
    with open(mlflow_client.download_artifacts(o.parent_run_id, "comparison.json")) as f:
        rows = json.load(f)
    assert {r["variant"] for r in rows} == set(o.variants)


def test_claim_values_follow_the_metrics(ef_outcome):
    """Recompute one claim from the raw metrics: the scoreboard is not decoupled from the runs."""
    v = ef_outcome.variants
    m = {n: x.result.metrics for n, x in v.items()}
    expect = m["dist_ef_s002"]["tail_grad_norm"] < m["dist_ef_s01"]["tail_grad_norm"] < m["dist_ef_s05"]["tail_grad_norm"]
    got = next(c for c in ef_outcome.claims if c.name == "ef_error_shrinks_with_step").holds
    assert got == expect


def test_second_run_skips_prepare(ef_outcome, run_experiment):
    assert ef_outcome.prepare_cache["problems@0"] in ("miss", "hit")   # a seeded step: one problem set per seed
    again = run_experiment("error_feedback", "only=[theory,ef]")
    assert again.prepare_cache == {"problems@0": "hit"}
    assert set(again.variants) == {"theory", "ef"}


def test_other_seed_draws_another_problem_and_the_bound_still_holds(ef_outcome, run_experiment):
    other = run_experiment("error_feedback", "only=[ef]", "experiment.seeds=[1]")
    assert other.prepare_cache == {"problems@1": "miss"}
    m0, m1 = ef_outcome.variants["ef"].result.metrics, other.variants["ef"].result.metrics
    assert m1["final_grad_norm_sq"] != m0["final_grad_norm_sq"]          # another random quadratic
    assert m1["max_lyapunov_ratio"] <= m1["rho_star"] + 1e-9


def test_crash_ends_failed_with_error_tag_and_nothing_running(run_experiment, mlflow_client):
    o = run_experiment("platform_probe", "++experiment.variants.c.params.fail_at_step=1")
    assert o.failed == ["c"]
    child = mlflow_client.get_run(o.variants["c"].run_id)
    assert child.info.status == "FAILED"
    assert "InjectedFailure" in child.data.tags["error"]
    assert mlflow_client.get_run(o.variants["a"].run_id).info.status == "FINISHED"
    parent = mlflow_client.get_run(o.parent_run_id)
    assert parent.info.status == "FAILED" and "c" in parent.data.tags["error"]
    # the claim that needs the crashed variant fails instead of passing
    assert not next(c for c in o.claims if c.name == "values_ordered").holds
    running = mlflow_client.search_runs([o.experiment_id], "attributes.status = 'RUNNING'")
    assert running == []
