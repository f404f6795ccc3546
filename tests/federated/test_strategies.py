"""Strategies without Ray: the registry, FedAvg aggregation, the ISPU mask, one PHP-FL round,
every strategy runs, one seed fixes the split and the draws for every strategy."""
import importlib

import numpy as np
import pytest
import torch

from components.core.context import RunContext
from components.core.errors import ConfigError
from components.core.params import parse_params
from components.core.registry import get
from components.data.digits import DigitsParams, prepare_digits
from components.federated.client import ClientSpec
from components.federated.php_fl import PHPFL, PHPFLOptions, ispu_fraction, ispu_merge, top_fraction_mask
from components.federated.pool import HostPool
from components.federated.strategy import FLConfig, make_strategy, n_floats, state_of, strategy_class, weighted_average
from components.federated.technique import FederatedParams, fairness_metrics, run_federated
from components.models.small_nets import PRIVATE_ARCHS, make_aux, make_private, n_params

STRATEGIES = ("fedavg", "local_only", "fml", "fedproto", "php_fl")   # each in components/federated/<name>.py


@pytest.fixture(scope="module")
def digits():
    return {"digits": prepare_digits(DigitsParams(), RunContext())}


def test_every_strategy_is_registered_in_its_own_module():
    # Prepare: importing a strategy's module is what registers it
    for name in STRATEGIES:
        importlib.import_module(f"components.federated.{name}")
    # Execute
    found = {n: get("strategy", n) for n in STRATEGIES}
    # Assert: each one is where a newcomer would look, and the params key finds it by name
    for name in STRATEGIES:
        assert found[name].file == f"components/federated/{name}.py" and found[name].summary
        assert strategy_class(name) is found[name].obj
    assert strategy_class("php_fl") is PHPFL


def test_unknown_strategy_is_a_config_error_listing_the_known_ones():
    with pytest.raises(ConfigError) as e:
        parse_params(FederatedParams, {"strategy": "fedbogus"}, "params")
    assert e.value.key == "params.strategy" and "php_fl" in e.value.allowed and "fml" in e.value.allowed


def test_fedavg_of_identical_models_is_identity():
    s = state_of(make_private("mlp_deep"))
    avg = weighted_average([s, {k: v.clone() for k, v in s.items()}, {k: v.clone() for k, v in s.items()}], [3, 10, 1])
    for k in s:
        assert torch.allclose(avg[k], s[k], atol=1e-7)


def test_fedavg_of_known_models_is_the_weighted_average():
    a = {"w": torch.tensor([[1.0, 2.0]]), "b": torch.tensor([0.0])}
    b = {"w": torch.tensor([[3.0, 6.0]]), "b": torch.tensor([4.0])}
    avg = weighted_average([a, b], [1, 3])          # (1*a + 3*b) / 4
    assert torch.allclose(avg["w"], torch.tensor([[2.5, 5.0]]))
    assert torch.allclose(avg["b"], torch.tensor([3.0]))


@pytest.mark.parametrize("q", [0.0, 0.3, 0.55, 0.9, 1.0])
def test_ispu_mask_keeps_exactly_the_fraction_per_tensor(q):
    torch.manual_seed(0)
    local, glob = make_aux(16), make_aux(16)
    gstate = state_of(glob)
    before = state_of(local)
    scores = {n: torch.rand_like(p) for n, p in local.named_parameters()}
    kept = ispu_merge(local, gstate, scores, q)
    for n, p in local.named_parameters():
        numel = p.numel()
        k = min(numel, max(1 if q > 0 else 0, int(np.floor(q * numel + 0.5))))
        from_global = (p.detach() == gstate[n]) & (gstate[n] != before[n])
        assert int(from_global.sum()) == k, (n, q)
        assert kept[n] == pytest.approx(k / numel)
        # the entries taken from the global model are the highest-importance ones
        if 0 < k < numel:
            assert scores[n][from_global].min() >= scores[n][~from_global].max()
        assert torch.equal(p.detach()[~from_global], before[n][~from_global])


def test_ispu_progress_schedule():
    o = PHPFLOptions(q_min=0.3, q_max=0.9, warm_rounds=10)
    assert ispu_fraction(0, o, 100) == pytest.approx(0.3)
    assert ispu_fraction(5, o, 100) == pytest.approx(0.6)
    assert ispu_fraction(50, o, 100) == pytest.approx(0.9)
    assert top_fraction_mask(torch.rand(7), 0.01).sum() == 1   # small tensors keep a share


def _specs(n=2, seed=0, n_train=24, n_test=8):
    rng = np.random.default_rng(seed)
    out = []
    for cid in range(n):
        X = rng.random((n_train + n_test, 64), dtype=np.float32)
        y = rng.integers(0, 10, n_train + n_test)
        out.append(ClientSpec(cid, PRIVATE_ARCHS[cid % 3], X[:n_train], y[:n_train], X[n_train:], y[n_train:], 100 + cid))
    return out


def test_one_php_fl_round_changes_only_what_it_should():
    # Prepare: two tiny clients in-process; client 0 participates, client 1 does not
    fl = FLConfig(lr=0.1, local_epochs=1, batch_size=8, rounds=4)
    server = make_strategy(PHPFL, {}, fl)
    server.init_global(7)
    g0 = {k: v.clone() for k, v in server.payload(0).items()}
    pool = HostPool("t", PHPFL, {}, fl, _specs(), n_hosts=1)
    host = pool.slots[0].local
    c0, c1 = host.clients[0], host.clients[1]
    snap = {cid: {m: state_of(c.models[m]) for m in ("private", "aux")} for cid, c in host.clients.items()}
    w1 = float(c1.state["ens_logit"].detach())
    # Execute
    out = pool.round(0, server.payload(0), [0])
    server.aggregate(list(out.uploads.values()), 0)
    # Assert: only the participant's models moved; the upload is the auxiliary model alone
    assert set(out.uploads) == {0}
    n, upload = out.uploads[0]
    assert n == c0.n_train and set(upload) == set(state_of(c0.models["aux"]))
    assert n_floats(upload) == n_params(c0.models["aux"]) < n_params(c0.models["private"])
    for m in ("private", "aux"):
        assert any(not torch.equal(v, snap[0][m][k]) for k, v in state_of(c0.models[m]).items()), m
        assert all(torch.equal(v, snap[1][m][k]) for k, v in state_of(c1.models[m]).items()), m
    assert float(c1.state["ens_logit"].detach()) == w1 and float(c0.state["ens_logit"].detach()) != 0.0
    # the server's new global auxiliary model is the only upload (FedAvg of one), not the old one
    for k, v in server.payload(1).items():
        assert torch.equal(v, upload[k]) and not torch.equal(v, g0[k])
    assert c0.state["joined"] and not c1.state.get("joined")


def test_php_fl_second_participation_uses_ispu_merge():
    fl = FLConfig(lr=0.1, local_epochs=1, batch_size=8, rounds=4)
    server = make_strategy(PHPFL, {"q_min": 0.3, "q_max": 0.3}, fl)
    server.init_global(7)
    pool = HostPool("t", PHPFL, {"q_min": 0.3, "q_max": 0.3}, fl, _specs(1), n_hosts=1)
    c0 = pool.slots[0].local.clients[0]
    out = pool.round(0, server.payload(0), [0])
    server.aggregate(list(out.uploads.values()), 0)
    pool.round(1, server.payload(1), [0])
    assert all(v == pytest.approx(round(0.3 * n_params_of) / n_params_of)
               for v, n_params_of in zip(c0.state["last_kept"].values(),
                                         [p.numel() for p in c0.models["aux"].parameters()]))


@pytest.mark.parametrize("strategy,options", [("fedavg", {}), ("fedavg", {"prox_mu": 0.1}), ("local_only", {}),
                                              ("fml", {}), ("fedproto", {}), ("php_fl", {}),
                                              ("php_fl", {"ispu": False, "ensemble": False, "dual_align": False})])
def test_every_strategy_runs_in_process(strategy, options, digits):
    p = parse_params(FederatedParams, {"strategy": strategy, "options": options, "n_clients": 6, "rounds": 3,
                                       "hosts": 0, "eval_window": 2})
    res = run_federated(p, RunContext(seed=0, inputs=digits))
    m = res.metrics
    assert 0 <= m["mean_acc"] <= 1 and m["acc_std"] >= 0 and m["worst20_acc"] <= m["mean_acc"]
    assert len(res.series["round_mean_acc"]) == 4 and len(res.tables["per_client"]) == 6
    assert res.files["plots/acc_vs_p.png"][:4] == b"\x89PNG"
    assert m["dropped_participants"] == 0 and m["host_failures"] == 0


def _draws(res) -> list[tuple]:
    """What the seed alone must fix: each client's data, architecture, p_i and times drawn."""
    return [(r["client"], r["arch"], r["p"], r["n_train"], r["n_test"], r["classes"], r["sampled"])
            for r in res.tables["per_client"]]


def test_one_seed_fixes_split_probabilities_and_draws_for_every_strategy(digits):
    # Prepare: two unlike strategies on the same seed, and one of them on another seed
    base = {"n_clients": 6, "rounds": 4, "hosts": 0, "eval_window": 1, "local_epochs": 1,
            "participation": {"pattern": "long_tail"}}
    p_local = parse_params(FederatedParams, {**base, "strategy": "local_only"})
    p_php = parse_params(FederatedParams, {**base, "strategy": "php_fl"})
    # Execute
    local3 = run_federated(p_local, RunContext(seed=3, inputs=digits))
    php3 = run_federated(p_php, RunContext(seed=3, inputs=digits))
    php4 = run_federated(p_php, RunContext(seed=4, inputs=digits))
    # Assert: paired by seed (same split, same p_i, same participation draws), different across seeds
    assert _draws(local3) == _draws(php3)
    assert _draws(php3) != _draws(php4)
    assert local3.metrics["mean_acc"] != php3.metrics["mean_acc"]      # the strategies did differ


def test_fairness_metrics_by_hand():
    acc = np.array([0.2, 0.4, 0.6, 0.8, 1.0, 0.9, 0.7, 0.5])
    p = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    m = fairness_metrics(acc, p)
    assert m["mean_acc"] == pytest.approx(acc.mean()) and m["acc_std"] == pytest.approx(acc.std())
    assert m["worst20_acc"] == pytest.approx(0.3)                    # 2 worst of 8
    assert m["low_high_p_gap"] == pytest.approx(0.3 - 0.6)           # p-quartiles {0.1,0.2} vs {0.7,0.8}


@pytest.mark.parametrize("raw,key", [
    ({"n_clients": 0}, "n_clients"),
    ({"alpha": 0.0}, "alpha"),
    ({"alpha": -0.5}, "alpha"),
    ({"participation": {"pattern": "linear", "lo": -0.2}}, "participation.lo"),
    ({"participation": {"pattern": "custom", "probs": [1.5] * 20}}, "participation.probs[0]"),
    ({"strategy": "php_fl", "options": {"q_min": 0.95}}, "options.q_min"),
    ({"strategy": "fml", "options": {"gamma": 1}}, "options.gamma"),
    ({"fault": {"host": 9, "round": 1}}, "fault.host"),
])
def test_bad_params_are_one_line_config_errors(raw, key):
    with pytest.raises(ConfigError) as e:
        parse_params(FederatedParams, raw, "params")
    assert e.value.key.endswith(key) and "\n" not in str(e.value)


@pytest.mark.parametrize("override,key", [
    ("experiment.common.federated.alpha=0", "params.alpha"),
    ("experiment.common.federated.n_clients=0", "params.n_clients"),
    ("+experiment.variants.php.params.participation.hi=1.3", "php.params.participation.hi"),
    ("experiment.axes.pattern=[linear,zipf]", "params.participation.pattern"),     # a grid value, in every cell
])
def test_bad_experiment_values_fail_at_validation(override, key, tmp_path):
    from pipelines import config
    from pipelines.dag import validate

    cfg = config.compose(["experiment=php_fl", override, f"runs_dir={tmp_path}"])
    with pytest.raises(ConfigError) as e:
        validate(cfg)                       # the CLI's check, before Ray starts
    assert e.value.key.endswith(key) and "\n" not in str(e.value)
