"""`dtlab run experiment=arnold|mozart debug=true` through the DAG: every variant finishes, children
are logged in MLflow, every claim is computed (no missing metric), and the platform checks hold."""


def _check(outcome, mlflow_client, must_hold):
    assert not outcome.failed, {n: v.error[-500:] for n, v in outcome.variants.items() if v.status != "FINISHED"}
    children = mlflow_client.search_runs([outcome.experiment_id], f"tags.mlflow.parentRunId = '{outcome.parent_run_id}'")
    assert {c.data.tags["variant"] for c in children} == set(outcome.variants)
    for c in outcome.claims:
        assert not c.error, (c.name, c.error)
    held = {c.name: c.holds for c in outcome.claims}
    for name in must_hold:
        assert held[name], name
    return {n: v.result.metrics for n, v in outcome.variants.items()}


def test_arnold_debug_flavour(run_experiment, mlflow_client):
    o = run_experiment("arnold")
    m = _check(o, mlflow_client, ["actors_agree_with_vectorised", "solver_time_limit_honoured", "never_worse_than_single_alignment"])
    for k in ("max_spread_dp", "max_spread_pp", "objective", "iter_time_s", "solver_s"):
        assert k in m["arnold"]
    assert m["bestfit_dp"]["objective"] > m["arnold"]["objective"]
    plots = {a.path for a in mlflow_client.list_artifacts(o.variants["arnold"].run_id, "plots")}
    assert {"plots/placement_map.png", "plots/spread_per_group.png"} <= plots


def test_mozart_debug_flavour(run_experiment, mlflow_client):
    o = run_experiment("mozart")
    m = _check(o, mlflow_client, ["actors_agree_with_vectorised", "uniform_control_barely_moves"])
    for k in ("inter_package_bytes", "load_imbalance", "moe_layer_time_s", "comm_compute_ratio"):
        assert k in m["full"]
    assert m["clustering"]["inter_package_bytes"] < m["baseline"]["inter_package_bytes"]
    assert m["tiny_moe"]["experts"] == 16                  # the LM variant read the prepared routing
    plots = {a.path for a in mlflow_client.list_artifacts(o.variants["full"].run_id, "plots")}
    assert "plots/streaming_timeline.png" in plots
