"""The Ray path: hosts on actors give the same results as in-process hosts; an actor killed
mid-round is a dropped participant and the run ends cleanly; the debug experiment end to end."""
import math

import numpy as np
import pytest

from components.core.context import RunContext
from components.core.params import parse_params
from components.data.digits import DigitsParams, prepare_digits
from components.federated.technique import FederatedParams, run_federated

BASE = {"strategy": "php_fl", "n_clients": 4, "rounds": 3, "eval_window": 1, "local_epochs": 1}


@pytest.fixture(scope="module")
def digits():
    return {"digits": prepare_digits(DigitsParams(), RunContext())}


@pytest.fixture(scope="module")
def two_nodes(ray_session):
    from components.core.raytools import start_nodes

    nodes = start_nodes(2, 0.0, "test-fl-node")
    yield nodes
    for n in nodes:
        ray_session.kill(n)


def test_ray_hosts_match_in_process(two_nodes, digits):
    # Prepare
    p_local = parse_params(FederatedParams, {**BASE, "hosts": 0})
    p_ray = parse_params(FederatedParams, {**BASE, "hosts": 2})
    # Execute
    local = run_federated(p_local, RunContext(seed=0, inputs=digits))
    remote = run_federated(p_ray, RunContext(seed=0, inputs=digits, nodes=two_nodes, experiment="t", variant="match"))
    # Assert: same seed, same clients, same numbers, wherever the clients live
    a = [r["acc"] for r in local.tables["per_client"]]
    b = [r["acc"] for r in remote.tables["per_client"]]
    assert np.allclose(a, b) and local.series["round_mean_acc"] == pytest.approx(remote.series["round_mean_acc"])
    # the pool's objects were dropped from the shared nodes at the end
    assert all(not k.startswith("t/match") for n in two_nodes for k in __import__("ray").get(n.keys.remote()))


def test_actor_killed_mid_round_is_a_dropped_participant(ray_session, digits):
    # Prepare: everyone participates every round; host 1 (clients 1 and 3) dies during round 1
    p = parse_params(FederatedParams, {**BASE, "hosts": 2, "participation": {"pattern": "custom", "probs": [1.0] * 4},
                                       "fault": {"host": 1, "round": 1}})
    # Execute
    res = run_federated(p, RunContext(seed=0, inputs=digits, experiment="t", variant="fault"))
    # Assert
    m = res.metrics
    assert m["host_failures"] == 1 and m["dropped_participants"] == 2
    (ev,) = res.tables["faults"]
    assert ev["round"] == 1 and ev["event"] == "host_died" and sorted(ev["dropped_participants"]) == [1, 3]
    assert "Actor" in ev["error"] and res.info["events"][0]["round"] == 1
    parts = {r["client"]: r["participations"] for r in res.tables["per_client"]}
    assert parts == {0: 3, 1: 2, 2: 3, 3: 2}          # the dropped round did not count
    assert all(math.isfinite(r["acc"]) for r in res.tables["per_client"])   # rehosted clients evaluated at the end
    assert 0 <= m["mean_acc"] <= 1


@pytest.mark.slow   # ~30 s: runs in `make bench` (keeps `make test` in its 15 minutes)
def test_php_fl_debug_experiment_end_to_end(run_experiment, mlflow_client):
    out = run_experiment("php_fl")
    assert not out.failed, {n: v.error[:300] for n, v in out.variants.items() if v.error}
    # 8 methods x 3 patterns (the grid) + 3 uniform controls + the fault drill
    assert len(out.variants) == 28 and {"php_linear", "fml_bimodal", "php_no_align_long_tail"} <= set(out.variants)
    for c in out.claims:
        assert not c.error, (c.name, c.error)          # every claim was computed (held or not)
    fault = out.variants["fault_drill"].result
    assert fault.metrics["host_failures"] == 1 and fault.tables["faults"]
    child = out.variants["php_linear"]
    arts = {a.path for a in mlflow_client.list_artifacts(child.run_id, "plots")}
    assert "plots/acc_vs_p.png" in arts
    assert {"mean_acc", "acc_std", "worst20_acc", "low_high_p_gap"} <= set(child.result.metrics)
