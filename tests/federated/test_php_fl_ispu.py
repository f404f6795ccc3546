"""ISPU by hand: the importance mask and the merged auxiliary model of PHP-FL on a tiny model
(a 2x2 linear layer, 6 parameters, 3 clients), every number derived on paper from the sheet's
formula (../shared/techniques/php_fl.md):

    s = |theta_G * dL_i/dtheta_G|  (cross-entropy of the received global G on one local batch)
    M = top-q_t of s per tensor,   G_i <- M * G + (1 - M) * G_i,   q_t = q_min + (q_max - q_min) min(1, t / T_warm)

and a first participation copies G. Also the low-participation metrics the ISPU premise is read from.
"""
import numpy as np
import pytest
import torch

from components.federated.client import Client, ClientSpec
from components.federated.php_fl import PHPFL, importance, ispu_fraction, ispu_merge
from components.federated.strategy import FLConfig, make_strategy

# The global auxiliary model G (a linear layer z = W x + b), chosen so both hand-made batches
# below give equal logits (softmax 1/2, 1/2):
W_G = [[3.0, -1.25], [-1.0, 0.25]]
B_G = [0.0, 1.0]
# Client 1: x = (1, 2), y = 0 -> z = (3 - 2.5, -1 + 0.5 + 1) = (0.5, 0.5), dL/dz = p - e_0 = (-0.5, 0.5)
#   dL/dW = dz x^T = [[-0.5, -1], [0.5, 1]],  dL/db = (-0.5, 0.5)
#   s_W = |W * dL/dW| = [[1.5, 1.25], [0.5, 0.25]],  s_b = |b * dL/db| = (0, 0.5)
S1_W, S1_B = [[1.5, 1.25], [0.5, 0.25]], [0.0, 0.5]
# Client 2: x = (0.25, 0), y = 1 -> z = (0.75, -0.25 + 1) = (0.75, 0.75), dL/dz = (0.5, -0.5)
#   dL/dW = [[0.125, 0], [-0.125, 0]],  s_W = [[0.375, 0], [0.125, 0]],  s_b = (0, 0.5)
S2_W, S2_B = [[0.375, 0.0], [0.125, 0.0]], [0.0, 0.5]
# round t = 1 with q_min 0.3, q_max 0.9, T_warm 4: q = 0.3 + 0.6 * 1/4 = 0.45
#   -> round(0.45 * 4) = 2 of the 4 weights and round(0.45 * 2) = 1 of the 2 biases from G
OPTS = {"q_min": 0.3, "q_max": 0.9, "warm_rounds": 4}
# each client's own auxiliary model before the merge (values that cannot be confused with G's)
LOCAL = {1: ([[10.0, 20.0], [30.0, 40.0]], [50.0, 60.0]),
         2: ([[-10.0, -20.0], [-30.0, -40.0]], [-50.0, -60.0]),
         3: ([[7.0, 8.0], [9.0, 11.0]], [12.0, 13.0])}
# expected after the merge: client 1 takes row 0 of W (1.5, 1.25 are its top 2) and b[1] from G;
# client 2 takes column 0 of W (0.375, 0.125) and b[1]; client 3 joins now: a full copy of G
MERGED = {1: ([[3.0, -1.25], [30.0, 40.0]], [50.0, 1.0]),
          2: ([[3.0, -20.0], [-1.0, -40.0]], [-50.0, 1.0]),
          3: (W_G, B_G)}
DATA = {1: ([[1.0, 2.0]], [0]), 2: ([[0.25, 0.0]], [1]), 3: ([[1.0, 1.0]], [0])}
# client 1's test point x = (1, 1), y = 1 (the private model is zero, so the ensemble's argmax is G_i's):
#   stale G_1: z = (10 + 20 + 50, 30 + 40 + 60) = (80, 130) -> 1, right
#   G:         z = (3 - 1.25, -1 + 0.25 + 1) = (1.75, 0.25) -> 0, wrong
#   merged:    z = (3 - 1.25 + 50, 30 + 40 + 1) = (51.75, 71) -> 1, right
TEST = {1: ([[1.0, 1.0]], [1])}


def _linear(w, b) -> torch.nn.Linear:
    m = torch.nn.Linear(2, 2)
    with torch.no_grad():
        m.weight.copy_(torch.tensor(w))
        m.bias.copy_(torch.tensor(b))
    return m


def _client(cid: int, joined: bool) -> Client:
    X, y = (np.asarray(v, t) for v, t in zip(DATA[cid], (np.float32, np.int64)))
    Xte, yte = (np.asarray(v, t) for v, t in zip(TEST.get(cid, DATA[cid]), (np.float32, np.int64)))
    c = Client(ClientSpec(cid, "mlp_small", X, y, Xte, yte, seed=cid))
    c.models["aux"] = _linear(*LOCAL[cid])
    c.models["private"] = _linear([[0.0, 0.0], [0.0, 0.0]], [0.0, 0.0])
    c.state["ens_logit"] = torch.zeros(())
    if joined:
        c.state["joined"] = True
    return c


def _global_state() -> dict:
    return {"weight": torch.tensor(W_G), "bias": torch.tensor(B_G)}


def test_importance_of_the_global_model_on_one_local_batch_by_hand():
    # Prepare
    g = _linear(W_G, B_G)
    # Execute
    s1 = importance(g, torch.tensor(DATA[1][0]), torch.tensor(DATA[1][1]))
    s2 = importance(g, torch.tensor(DATA[2][0]), torch.tensor(DATA[2][1]))
    # Assert: exactly the numbers worked out above
    assert torch.equal(s1["weight"], torch.tensor(S1_W)) and torch.equal(s1["bias"], torch.tensor(S1_B))
    assert torch.equal(s2["weight"], torch.tensor(S2_W)) and torch.equal(s2["bias"], torch.tensor(S2_B))


def test_ispu_merge_of_a_tiny_model_by_hand():
    # Prepare
    local = _linear(*LOCAL[1])
    scores = {"weight": torch.tensor(S1_W), "bias": torch.tensor(S1_B)}
    # Execute
    kept = ispu_merge(local, _global_state(), scores, 0.45)
    # Assert
    assert torch.equal(local.weight.detach(), torch.tensor(MERGED[1][0]))
    assert torch.equal(local.bias.detach(), torch.tensor(MERGED[1][1]))
    assert kept == {"weight": 0.5, "bias": 0.5}


def test_php_fl_round_merge_of_three_clients_by_hand():
    # Prepare: the server's G is the FedAvg of three uploads weighted by sample counts 1, 1, 2:
    # (G + D) / 4 + (G - D) / 4 + 2 G / 4 = G for any D (here D = 1 everywhere)
    fl = FLConfig(rounds=8, batch_size=16)
    server = make_strategy(PHPFL, OPTS, fl)
    plus = {"weight": torch.tensor(W_G) + 1, "bias": torch.tensor(B_G) + 1}
    minus = {"weight": torch.tensor(W_G) - 1, "bias": torch.tensor(B_G) - 1}
    server.aggregate([(1, plus), (1, minus), (2, _global_state())], 0)
    clients = {1: _client(1, True), 2: _client(2, True), 3: _client(3, False)}
    side = make_strategy(PHPFL, OPTS, fl)          # the client side's own instance, as on a host
    # Execute
    payload = server.payload(1)
    for c in clients.values():
        side.receive(c, payload, 1)
    # Assert: the schedule's q, the averaged G, and every merged parameter as worked out by hand
    assert ispu_fraction(1, side.o, fl.rounds) == pytest.approx(0.45)
    assert torch.equal(payload["weight"], torch.tensor(W_G)) and torch.equal(payload["bias"], torch.tensor(B_G))
    for cid, c in clients.items():
        aux = c.models["aux"]
        assert torch.equal(aux.weight.detach(), torch.tensor(MERGED[cid][0])), cid
        assert torch.equal(aux.bias.detach(), torch.tensor(MERGED[cid][1])), cid
        assert c.state["joined"]
    assert clients[1].state["last_kept"] == {"weight": 0.5, "bias": 0.5}
    assert "last_kept" not in clients[3].state                       # a first participation is a copy


def test_without_ispu_every_client_is_overwritten_by_g():
    # Prepare
    side = make_strategy(PHPFL, {**OPTS, "ispu": False}, FLConfig(rounds=8, batch_size=16))
    c = _client(1, True)
    # Execute
    side.receive(c, _global_state(), 1)
    # Assert: the ablation is the full overwrite ISPU is measured against
    assert torch.equal(c.models["aux"].weight.detach(), torch.tensor(W_G))
    assert torch.equal(c.models["aux"].bias.detach(), torch.tensor(B_G))


@pytest.mark.parametrize("ispu,merge_gain", [(True, 1.0), (False, 0.0)])
def test_merge_diagnostics_measure_what_an_overwrite_would_lose(ispu, merge_gain):
    # Prepare: client 1 (re-participating) and client 3 (joining now), test points as worked out above
    side = make_strategy(PHPFL, {**OPTS, "ispu": ispu}, FLConfig(rounds=8, batch_size=16))
    c1, c3 = _client(1, True), _client(3, False)
    # Execute
    for c in (c1, c3):
        side.receive(c, _global_state(), 1)
    r1, r3 = side.client_report(c1), side.client_report(c3)
    # Assert: G would lose client 1's one right answer; ISPU's merge keeps it, the overwrite does not
    assert r1 == {"merges": 1.0, "overwrite_loss": 1.0, "overwrite_loss_aux": 1.0, "merge_gain": merge_gain}
    assert r3["merges"] == 0.0 and all(np.isnan(r3[k]) for k in ("overwrite_loss", "merge_gain"))


def test_low_participation_metrics_by_hand():
    # Prepare: 8 clients, p 0.1 .. 0.8 in shuffled order; the lowest-p quarter is clients 5 and 2
    from components.federated.server import History
    from components.federated.technique import fairness_metrics, low_part_metrics

    probs = np.array([0.5, 0.7, 0.2, 0.8, 0.3, 0.1, 0.6, 0.4])
    acc = np.array([0.9, 0.8, 0.4, 1.0, 0.7, 0.2, 0.6, 0.5])
    parts = np.array([10, 14, 4, 16, 6, 2, 12, 8])
    report = {c: {"overwrite_loss": float(c) / 10} for c in range(8)}
    report[5]["overwrite_loss"] = float("nan")                 # client 5 never came back
    hist = History(acc[None, :], probs, parts, parts, client_report=report)
    # Execute
    fm, lp = fairness_metrics(acc, probs), low_part_metrics(hist, rounds=20)
    # Assert
    assert fm["low_part_acc"] == pytest.approx((0.2 + 0.4) / 2) and fm["high_part_acc"] == pytest.approx((0.8 + 1.0) / 2)
    assert fm["low_high_p_gap"] == pytest.approx(fm["low_part_acc"] - fm["high_part_acc"])
    assert lp["low_part_rate"] == pytest.approx((2 + 4) / 2 / 20)
    assert lp["low_part_overwrite_loss"] == pytest.approx(0.2)  # client 2 only: NaN is skipped


def test_a_php_fl_run_reports_its_low_participation_diagnostics():
    # Prepare: 4 in-process clients, everyone participates every round, so each comes back twice
    from components.core.context import RunContext
    from components.core.params import parse_params
    from components.data.digits import DigitsParams, prepare_digits
    from components.federated.technique import FederatedParams, p_quartiles, run_federated

    digits = {"digits": prepare_digits(DigitsParams(), RunContext())}
    p = parse_params(FederatedParams, {"strategy": "php_fl", "n_clients": 4, "rounds": 3, "hosts": 0, "eval_window": 1,
                                       "local_epochs": 1, "participation": {"pattern": "custom", "probs": [1.0] * 4}})
    # Execute
    res = run_federated(p, RunContext(seed=0, inputs=digits))
    # Assert: the per-client table carries the strategy's report, the metrics its lowest-p quarter's mean
    rows = res.tables["per_client"]
    assert all(r["merges"] == 2.0 for r in rows)
    low, _ = p_quartiles(np.array([r["p"] for r in rows]))
    m = res.metrics
    assert m["low_part_rate"] == 1.0
    assert m["low_part_overwrite_loss"] == pytest.approx(np.mean([rows[i]["overwrite_loss"] for i in low]))
    assert m["low_part_merge_gain"] == pytest.approx(np.mean([rows[i]["merge_gain"] for i in low]))
    assert m["low_part_acc"] == pytest.approx(np.mean([rows[i]["acc"] for i in low]))
