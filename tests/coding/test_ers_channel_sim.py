"""ERS channel simulation and Wyner-Ziv: exactness on a discrete law (chi-square), the prefix codes,
decodability from (T, rank) alone, the acceptance rate, the RS group code, matching, bad input and
the debug flavour through the DAG."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chisquare

from components.coding.ers_channel_sim import wyner_ziv as wz
from components.coding.ers_channel_sim.codes import (delta_decode, delta_encode, delta_len, gamma_decode,
                                                     gamma_encode, gamma_len)
from components.coding.ers_channel_sim.gaussian import GaussChannel, truncated_source
from components.coding.ers_channel_sim.samplers import ers, rs_grouped
from components.coding.ers_channel_sim.technique import (ChannelSimParams, WynerZivParams, run_channel_sim)
from components.core.context import RunContext
from components.core.errors import ConfigError
from tests.pipelines.test_config_validation import run_cli  # the one CLI runner for bad-input checks


class Discrete:
    """Targets p[x] over 6 symbols, proposal r; y is a symbol index (last axis of size 1)."""

    def __init__(self):
        self.r = np.array([0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
        self.p = np.array([[0.05, 0.05, 0.1, 0.2, 0.3, 0.3], [0.4, 0.3, 0.1, 0.1, 0.05, 0.05]])

    def logw(self, x, y):
        xi, yi = np.broadcast_arrays(x[..., 0].astype(int), y[..., 0].astype(int))
        return np.log(self.p[xi, yi] / self.r[yi])

    def logwbar(self, x):
        return np.log(np.max(self.p / self.r[None, :], axis=1))[x[:, 0].astype(int)]

    def propose(self, rng, shape):
        return rng.choice(len(self.r), size=shape, p=self.r).astype(np.float64)


@pytest.mark.parametrize("N", [1, 3, 16])
def test_ers_samples_the_discrete_target_exactly(N):
    # Prepare: two targets (rows of p), 20000 trials each
    m, rng = Discrete(), np.random.default_rng(N)
    for row in (0, 1):
        x = np.full((20000, 1), float(row))
        # Execute
        out = ers(m, x, N, rng)
        # Assert: chi-square against the exact law; every trial finished
        counts = np.bincount(out["y"][:, 0].astype(int), minlength=6)
        assert (out["T"] > 0).all()
        assert chisquare(counts, 20000 * m.p[row]).pvalue > 1e-3


def test_one_batch_without_the_rejection_step_is_biased():
    # the same chi-square catches IML's bias (N = 3, no accept/reject): the test can fail
    m, rng = Discrete(), np.random.default_rng(0)
    y = m.propose(rng, (20000, 3, 1))
    e = rng.exponential(1.0, (20000, 3))
    j = np.argmax(m.logw(np.zeros((20000, 1, 1)), y) - np.log(e), axis=1)
    counts = np.bincount(y[np.arange(20000), j, 0].astype(int), minlength=6)
    assert chisquare(counts, 20000 * m.p[0]).pvalue < 1e-6


def test_prefix_codes_are_real_and_lengths_match():
    for n in [1, 2, 3, 7, 8, 100, 2 ** 20 - 1, 2 ** 20, 10 ** 9]:
        assert gamma_len(n) == len(gamma_encode(n)) and delta_len(n) == len(delta_encode(n))
        bits = gamma_encode(n) + delta_encode(n + 5)
        a, pos = gamma_decode(bits)
        b, pos = delta_decode(bits, pos)
        assert (a, b, pos) == (n, n + 5, len(bits))
    with pytest.raises(ValueError):
        gamma_len(0)


def test_decoder_recovers_the_sample_from_t_and_rank_alone():
    # the decoder sees round T's shared batch and the rank of J by race variable, never the weights
    rng = np.random.default_rng(3)
    x = truncated_source(rng, 500, 2, 3.0)
    out = ers(GaussChannel(0.2), x, 16, rng, keep_batch=True)
    pick = np.argsort(out["batch_e"], axis=1)[np.arange(500), out["rank"] - 1]
    assert np.array_equal(out["batch_y"][np.arange(500), pick], out["y"])


def test_acceptance_per_round_is_at_least_n_over_n_minus_1_plus_wbar():
    m, rng = GaussChannel(0.05), np.random.default_rng(4)
    x = np.full((4000, 1), 2.5)
    wbar = float(np.exp(m.logwbar(x[:1]))[0])
    for N in (4, 64):
        T = ers(m, x, N, rng)["T"]
        rate = len(T) / T.sum()                 # accepted rounds / rounds
        assert rate >= N / (N - 1 + wbar) * 0.93, (N, rate, N / (N - 1 + wbar))


def test_rs_groups_are_consistent_and_rank_is_within_the_group():
    rng = np.random.default_rng(5)
    x = truncated_source(rng, 3000, 1, 3.0)
    r = rs_grouped(GaussChannel(0.05), x, rng)
    g = 2 ** r["mexp"]
    assert (r["K"] > 0).all()
    assert np.array_equal(r["L"], -(-r["K"] // g))
    assert (r["rank"] >= 1).all() and (r["rank"] <= g).all()
    assert np.all(g <= np.exp(GaussChannel(0.05).logwbar(x)))     # group size never exceeds wbar


def test_matching_improves_with_bin_bits_and_pml_is_exact():
    rows = wz.run_point(np.random.default_rng(6), 0.2, 0.02, 3000, 16, [0, 3, 8], 1024, 4.0)
    ers_mis = [r["mismatch"] for r in rows if r["scheme"] == "ers"]
    assert ers_mis[0] > ers_mis[1] > ers_mis[2]
    rs = [r for r in rows if r["scheme"] == "rs"][0]
    assert rs["mismatch"] == 0 and rs["rate"] > 3         # RS sends the index: no mismatch, many bits
    assert min(r["ks_p"] for r in rows if r["scheme"] == "pml") > 1e-3


def test_bound_control_and_a_tiny_scheme_run():
    r = run_channel_sim(ChannelSimParams(scheme="rs_sorting", ds=[1], s2s=[0.2], n_trials=300), RunContext(seed=1))
    assert r.metrics["ks_tests"] == 1 and r.metrics["bits_d1_s0p2"] > 1
    b = run_channel_sim(ChannelSimParams(scheme="bound", ds=[1, 2], s2s=[1.0]), RunContext())
    info = b.metrics["info_d1_s1"]
    assert 0.45 < info < 0.5 and b.metrics["bits_d1_s1"] == pytest.approx(info + math.log2(info + 1) + 5)


@pytest.mark.parametrize("cls, change, key", [
    (ChannelSimParams, {"N": 0}, "N"), (ChannelSimParams, {"s2s": [0.2, 0.0]}, "s2s"),
    (ChannelSimParams, {"ds": [0]}, "ds"), (WynerZivParams, {"N": 0}, "N"),
    (WynerZivParams, {"sw2s": [-0.1]}, "sw2s"), (WynerZivParams, {"sz2s": [0]}, "sz2s"),
    (WynerZivParams, {"Ls": [11]}, "Ls"),
])
def test_bad_params_name_the_key(cls, change, key):
    with pytest.raises(ConfigError) as e:
        cls(**change).check()
    assert e.value.key == key


def test_bad_input_on_the_cli_is_one_line_exit_2_before_ray():
    r = run_cli("experiment=ers_channel_sim", "experiment.variants.ers_n64.params.N=0")
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "N=0" in lines[0], r.stderr
    assert "ray" not in r.stdout.lower()


def test_debug_flavour_end_to_end(run_experiment):
    out = run_experiment("ers_channel_sim")
    assert not out.failed and len(out.variants) == 11
    names = {c.name: c for c in out.claims}
    for n in ("ers_and_rs_sorting_exact", "bits_within_bound_d_le2", "ers_mse_below_rs"):
        assert names[n].error == "", names[n].error


@pytest.mark.parametrize("d, s2, max_rounds", [(2, 0.001, 256), (1, 0.001, 8), (4, 0.01, 4096)])
def test_rs_sorting_codes_the_group_size_when_the_round_cap_is_below_2_to_m0(d, s2, max_rounds):
    # Prepare: a cap below 2^m0, m0 = floor((d/2) log2(1 + 1/s2)) (the d=2, s2=0.001, cap 256;
    # d=8, s2=0.05 is m0 = 17 against the default cap's 16: the same case, too slow for a test)
    m0 = math.floor(0.5 * d * math.log2(1 + 1 / s2))
    assert 2 ** m0 > max_rounds
    p = ChannelSimParams(scheme="rs_sorting", ds=[d], s2s=[s2], n_trials=200, max_rounds=max_rounds)
    # Execute
    r = run_channel_sim(p, RunContext(seed=3))
    # Assert: every group is capped at floor(log2 max_rounds), the least exponent both sides know, so its
    # code is gamma(1) = 1 bit: bits = 1 + gamma(L) + delta(rank) over the trials that finished
    key = f"d{d}_s{f'{s2:g}'.replace('.', 'p')}"
    rs = rs_grouped(GaussChannel(s2), truncated_source(np.random.default_rng(0), 200, d, 3.0),
                    np.random.default_rng(1), max_rounds)
    assert (rs["mexp"] == math.floor(math.log2(max_rounds))).all()
    assert r.metrics[f"truncated_{key}"] < 1 and math.isfinite(r.metrics[f"bits_{key}"])
    assert r.metrics[f"bits_{key}"] >= 1 + 1 + 1


def test_rs_sorting_group_code_is_decodable_at_every_exponent_the_cap_allows():
    # Prepare: d = 1, s2 = 0.05 (m0 = 2) under caps from 1 round (exponent 0) to above every group
    from components.coding.ers_channel_sim.technique import least_group_exp

    model, d = GaussChannel(0.05), 1
    for cap in (1, 2, 3, 4, 64, 100_000):
        x = truncated_source(np.random.default_rng(cap), 400, d, 3.0)
        r = rs_grouped(model, x, np.random.default_rng(cap + 1), cap)
        # Execute: the group exponent sent as gamma(mexp - least + 1), decoded back
        least = least_group_exp(model, d, cap)
        codes = [gamma_encode(int(m) - least + 1) for m in r["mexp"]]
        # Assert: every exponent is >= the least one both sides compute, and round-trips
        assert (r["mexp"] >= least).all()
        assert [gamma_decode(c)[0] + least - 1 for c in codes] == r["mexp"].tolist()
