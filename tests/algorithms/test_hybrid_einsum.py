"""Hybrid einsum: COO == dense == numpy on random expressions (hypothesis), both switch rules (the
cost-predicted one and the one-way density threshold), the cost predictor and the density tracker,
memory caps, known answers of generated instances, and bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components.algorithms.hybrid_einsum import COO, MemoryCapExceeded, contract, einsum, plan
from components.algorithms.hybrid_einsum.costmodel import CostModel, estimate_pair, nnz_bound, pair_shape, spread
from components.algorithms.hybrid_einsum.engine import dense_costs, forecast, schedule
from components.algorithms.hybrid_einsum.technique import method_call, seconds_of, status_of
from components.core.errors import ConfigError
from components.data import einsum_instances as gen

LABELS = "abcdef"
ALWAYS_COO = CostModel(d0=1.0, c0=0.0, c1=0, c2=0, c3=0, v0=0, v1=0, v2=0)        # dense steps cost 1 s each
NEVER_COO = CostModel(c0=1.0)                                                       # COO steps cost 1 s each


@st.composite
def expressions(draw):
    """2-4 operands over up to 6 labels (dims 1-3), sparse random values, random (explicit) output."""
    dims = {c: draw(st.integers(1, 3)) for c in LABELS}
    n_ops = draw(st.integers(1, 4))
    terms = [draw(st.text(alphabet=LABELS, min_size=0, max_size=4)) for _ in range(n_ops)]
    used = sorted(set("".join(terms)))
    out = draw(st.permutations(used)) if used else []
    out = "".join(out[: draw(st.integers(0, len(out)))])
    seed = draw(st.integers(0, 2 ** 31 - 1))
    density = draw(st.sampled_from([1.0, 0.5, 0.1]))
    rng = np.random.default_rng(seed)
    tensors = []
    for t in terms:
        shape = tuple(dims[c] for c in t)
        a = rng.integers(-3, 4, shape).astype(np.float64) * (rng.random(shape) < density)
        tensors.append(a)
    return ",".join(terms) + "->" + out, tensors


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions())
def test_coo_dense_hybrid_equal_numpy(case):
    expr, tensors = case
    want = np.einsum(expr, *tensors)
    for rep in ("dense", "coo"):
        assert np.array_equal(einsum(expr, *tensors, representation=rep), want), rep
    for tau in (0.0, 0.5, 1.0):                      # never / sometimes / always switch
        assert np.array_equal(einsum(expr, *tensors, representation="hybrid_oneway", tau=tau), want), tau
    for cm in (None, ALWAYS_COO, NEVER_COO):         # calibrated-like / switch at once / never switch
        assert np.array_equal(einsum(expr, *tensors, representation="hybrid", cost_model=cm), want)
    got = einsum(expr, *tensors, representation="coo", output="coo")
    assert isinstance(got, COO) and np.array_equal(got.todense(), want)
    assert (got.values != 0).all()                  # exact zeros are dropped


def test_many_indices_and_implicit_output():
    inst = gen.grid_eq(9)                           # 81 indices, more than numpy's 52 letters
    assert einsum(inst.expr, *inst.tensors, representation="coo") == 2.0
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    assert np.array_equal(einsum("ij,jk", a, b, representation="coo"), a @ b)


def test_oneway_switch_happens_exactly_when_the_rule_says():
    inst = gen.grid_eq(8)
    p = plan(inst.expr, [t.shape for t in inst.tensors])
    dense = contract(p, inst.tensors, "hybrid_oneway", tau=0.0)       # never switches, counts every step
    assert dense.switched_at is None
    rem = [s.remaining_density for s in dense.trace]
    for tau in (0.3, 0.05, 0.01, 1e-3):
        hy = contract(p, inst.tensors, "hybrid_oneway", tau=tau)
        below = [i for i, r in enumerate(rem[:-1]) if r < tau]
        expect = below[0] + 1 if below else None
        assert hy.switched_at == expect, tau
        if expect is not None:
            assert hy.switch_reason == "density"
            assert all(s.representation == "dense" for s in hy.trace[:expect])
            assert all(s.representation == "coo" for s in hy.trace[expect:])   # one way only
        assert float(hy.result) == 2.0
    # the memory cap forces the switch before the first step whose dense output would pass it
    numel = [s.numel for s in dense.trace]
    cap = 8 * 2 ** 6
    first_big = next(i for i, n in enumerate(numel) if n * 8 > cap)
    hy = contract(p, inst.tensors, "hybrid_oneway", tau=0.0, memory_cap_bytes=cap)
    assert hy.switched_at == first_big and hy.switch_reason == "cap" and float(hy.result) == 2.0
    # the cost-predicted hybrid never runs a dense step past the cap either (that step costs infinity)
    hy = contract(p, inst.tensors, "hybrid", memory_cap_bytes=cap, cost_model=NEVER_COO)
    assert hy.switched_at is not None and hy.switched_at <= first_big and float(hy.result) == 2.0
    with pytest.raises(MemoryCapExceeded):
        contract(p, inst.tensors, "dense", memory_cap_bytes=cap)


def test_memory_cap_reported_as_exceeded_not_a_crash():
    from components.core.timing import interleave

    # Prepare
    inst = gen.chain_eq(20)
    p = plan(inst.expr, [t.shape for t in inst.tensors])
    runs: dict = {}
    # Execute
    t = interleave({m: method_call(m, p, inst.tensors, 1e-2, 2 ** 20, None, runs) for m in ("dense", "numpy_oe", "coo")},
                   ("dense", "coo"), min_rounds=1, max_rounds=1)
    # Assert: dense and numpy past the cap are results (exceeded, infinitely slow), COO runs
    assert status_of(t, "dense") == "exceeded" and math.isinf(seconds_of(t, "dense")) and "dense" not in t.results
    assert status_of(t, "numpy_oe") == "exceeded" and t.baseline == "coo"
    res = t.results["coo"]
    assert status_of(t, "coo") == "ok" and res.nnz == 2 and res.shape == (2,) * 20 and "coo" in runs


@pytest.mark.parametrize("inst", [gen.random_3cnf(14, 4.3, 0), gen.random_3cnf(16, 3.0, 1), gen.parity_ring(12),
                                  gen.pigeonhole(3)], ids=lambda i: i.name)
def test_model_counts_match_brute_force(inst):
    for rep in ("dense", "coo", "hybrid"):
        got = float(einsum(inst.expr, *inst.tensors, representation=rep))
        assert math.isclose(got, inst.expected, rel_tol=1e-9, abs_tol=1e-300), rep


def test_gap_instances_stay_tiny_in_coo():
    inst = gen.grid_eq(12)
    _, run = einsum(inst.expr, *inst.tensors, representation="coo", return_trace=True)
    assert max(s.nnz for s in run.trace) <= 2
    assert max(s.numel for s in run.trace) >= 2 ** 12     # while dense would hold 2^n entries


@pytest.mark.parametrize("expr, shapes, key", [
    ("ab,bc->ac->a", [(2, 2), (2, 2)], "expr"),     # two arrows
    ("a...,b->a", [(2, 2), (2,)], "expr"),          # ellipsis
    ("ab,bc->ac", [(2, 2)], "expr"),                # operand count
    ("ab,bc->ac", [(2, 3), (4, 2)], "shapes"),      # b = 3 vs 4
    ("ab,bc->ad", [(2, 2), (2, 2)], "expr"),        # output index not in inputs
    ("ab,bc->aa", [(2, 2), (2, 2)], "expr"),        # repeated output index
    ("abc,bc->a", [(2, 2), (2, 2)], "expr"),        # term rank vs operand rank
    ("", [], "expr"),
])
def test_bad_expressions(expr, shapes, key):
    with pytest.raises(ConfigError) as e:
        einsum(expr, *[np.ones(s) for s in shapes])
    assert e.value.key == key


def test_bad_options():
    with pytest.raises(ConfigError):
        einsum("ab->a", np.ones((2, 2)), representation="csr")
    with pytest.raises(ConfigError):
        einsum("ab->a", np.ones((2, 2)), tau=2.0)
    with pytest.raises(ConfigError):
        einsum("ab->a", np.array([["x", "y"]]))


def test_suite_reads_tau_from_the_calibration_input_and_draws_instances_from_the_seed():
    from components.algorithms.hybrid_einsum.technique import SuiteParams, run_einsum_suite
    from components.core.context import RunContext
    from components.core.params import parse_params

    # Prepare: the debug suite, our three representations only, a calibrated tau as the named input
    p = parse_params(SuiteParams, {"scale": "debug", "methods": ["dense", "coo", "hybrid"], "max_reps": 1,
                                   "budget_s": 0.2, "warmup": False})
    cal = {"tau": 1e-3, "table": []}
    # Execute
    r0 = run_einsum_suite(p, RunContext(seed=0, inputs={"calibration": cal}))
    r1 = run_einsum_suite(p, RunContext(seed=1, inputs={"calibration": cal}))
    # Assert: tau comes from the input; the seed changes the random instances, not the fixed ones
    assert r0.info["tau"] == 1e-3 and r0.info["tau_source"] == "calibrated"
    assert r0.metrics["all_correct"] == 1 and r1.metrics["all_correct"] == 1
    names0, names1 = ([row["instance"] for row in r.tables["suite"]] for r in (r0, r1))
    assert "grid_eq_5" in names0 and "grid_eq_5" in names1 and names0 != names1
    with pytest.raises(ConfigError, match="calibration"):
        run_einsum_suite(p, RunContext(seed=0))


# ------------------------------------------------------------------ cost predictor and density tracker
def test_cost_predictor_on_a_hand_checkable_pair():
    # ab,bc->ac with a=2, b=3, c=4: A has 6 entries, B 12, joint space 24, output 8, shared space 3
    sizes = {0: 2, 1: 3, 2: 4}
    ps = pair_shape((0, 1), (1, 2), (0, 2), sizes)
    assert (ps.numel_a, ps.numel_b, ps.shared, ps.union, ps.out) == (6, 12, 3, 24, 8)
    assert (ps.only_b_out, ps.only_a_out) == (4, 2)
    cm = CostModel(d0=1.0, d1=0.1, d2=0.01, d3=0.0, d_big=[0.0] * 8, c0=2.0, c1=0.5, c2=0.25, c3=0.125, c4=0.0)
    # dense: union 24 with 24/8 = 3 summed entries per output entry (< 16: not BLAS-like), io 6+12+8
    assert math.isclose(cm.dense(24, 26, 8), 1.0 + 0.1 * 24 + 0.01 * 26)
    # COO, both dense operands: join = 6 * 12 / 3 = 24 pairs; every output entry is hit 3 times -> 8 nnz
    t, out = estimate_pair(cm, ps, 6, 12)
    assert math.isclose(out, 8.0)
    assert math.isclose(t, 2.0 + 0.5 * (6 * 2 + 12 * 2) + 0.25 * 24 + 0.125 * 24 * 2)
    # A half full: join 3 * 12 / 3 = 12 over 24 joint entries (density 1/2), 3 summed per output entry:
    # P(output entry non-zero) = 1 - (1/2)^3 -> 8 * 7/8 = 7
    t, out = estimate_pair(cm, ps, 3, 12)
    assert math.isclose(out, 7.0) and math.isclose(t, 2.0 + 0.5 * (3 * 2 + 12 * 2) + 0.25 * 12 + 0.125 * 12 * 2)
    assert math.isclose(spread(1, 16, 16), 1.0) and spread(0, 16, 4) == 0


def test_switch_decision_flips_where_predicted_costs_cross():
    # one step ab,bc->ac: switching at 0 costs convert(2 tensors) + one COO step = 2 * v0 + c0 = 3 s
    # (every per-entry constant 0); staying dense costs d0. The decision flips at d0 = 3.
    a, b = np.eye(3), np.ones((3, 3))
    p = plan("ab,bc->ac", [a.shape, b.shape])
    zero = dict(d1=0, d2=0, d3=0, d_big=[0.0] * 8, c1=0, c2=0, c3=0, c4=0, v1=0, v2=0, k0=0, k1=0)
    for d0, switched in ((2.9, None), (3.1, 0)):
        cm = CostModel(d0=d0, c0=1.0, v0=1.0, **zero)
        sc = schedule(p)
        fc = forecast(sc, cm, dense_costs(sc, cm, 2.0 ** 40), p, 0, [3.0, 9.0], sc.ndims)
        assert fc.k == (0 if switched == 0 else 1)
        assert math.isclose(fc.cost_dense, d0) and math.isclose(fc.cost_switch, min(d0, 3.0))
        run = contract(p, [a, b], "hybrid", cost_model=cm, switch_margin=1.0)
        assert run.switched_at == switched and np.array_equal(run.result, a @ b)
        if switched is None:       # the lower bound (2 conversions + 1 COO step = 3 > 2.9) rules it out: no counts
            assert run.decision == "never" and run.counts == 0
        else:
            assert run.decision == "forecast" and run.switch_reason == "predicted"
    # with the default margin a switch must be predicted 1.25x cheaper than staying dense: 3 * 1.25 = 3.75
    for d0, switched in ((3.7, None), (3.8, 0)):
        run = contract(p, [a, b], "hybrid", cost_model=CostModel(d0=d0, c0=1.0, v0=1.0, **zero))
        assert run.switched_at == switched and np.array_equal(run.result, a @ b)


def test_density_tracker_bounds_and_exact_counts():
    rng = np.random.default_rng(0)
    for _ in range(200):                             # the pair bound is >= the true nnz
        da, db, dc = (int(x) for x in rng.integers(1, 4, 3))
        a = rng.integers(-1, 2, (da, db)) * (rng.random((da, db)) < rng.random())
        b = rng.integers(-1, 2, (db, dc)) * (rng.random((db, dc)) < rng.random())
        sizes = {0: da, 1: db, 2: dc}
        for keep in ((0, 2), (0,), (2,), ()):
            ps = pair_shape((0, 1), (1, 2), keep, sizes)
            true = np.count_nonzero(np.einsum("ab,bc->" + "".join("abc"[i] for i in keep), a, b))
            assert nnz_bound(ps, np.count_nonzero(a), np.count_nonzero(b)) >= true
    # along a real contraction: every step's bound >= its true nnz, and exact where the hybrid counted
    for inst in (gen.random_3cnf(16, 3.5, 3), gen.random_factor_graph(12, 14, 0.5, 1), gen.chain_eq(12)):
        p = plan(inst.expr, [t.shape for t in inst.tensors])
        truth = [s.nnz for s in contract(p, inst.tensors, "hybrid_oneway", tau=0.0).trace]
        # COO paid per join pair only (the lower bound cannot rule it out, the forecast never picks it);
        # counting free: every dense step is counted
        free = dict(d0=1e-3, d1=0, d2=0, d3=0, d_big=[0.0] * 8, c0=0, c1=0, c2=1.0, c3=0, c4=0, v0=0, v1=0, v2=0,
                    k1=0, py_step=0)
        cm = CostModel(k0=0.0, **free)
        hy = contract(p, inst.tensors, "hybrid", cost_model=cm, track_budget=1.0)
        assert hy.decision == "forecast" and hy.counts > len(inst.tensors)
        for step, n in zip(hy.trace, truth):
            assert step.nnz_bound >= n
            if step.nnz >= 0:
                assert step.nnz == n == step.nnz_bound
        frugal = contract(p, inst.tensors, "hybrid", cost_model=CostModel(k0=1.0, **free))   # counts too dear: bounds
        assert frugal.counts == len(inst.tensors) or frugal.switched_at is not None   # + the check before a switch
        assert all((st.nnz == -1 or st.representation == "coo") and st.nnz_bound >= n
                   for st, n in zip(frugal.trace[:-1], truth))


def test_dense_chain_is_left_alone():
    # tiny dense matrix chain: the lower bound rules out any switch, so the hybrid counts nothing
    inst = gen.matrix_chain(12, 16, 0)
    p = plan(inst.expr, [t.shape for t in inst.tensors])
    run = contract(p, inst.tensors, "hybrid")
    assert run.decision == "never" and run.counts == 0 and run.switched_at is None
    assert np.allclose(run.result, contract(p, inst.tensors, "dense").result)


def test_timing_order_is_a_fresh_seeded_shuffle_per_repetition(monkeypatch):
    """A rotation made each method always follow the same neighbour (6-25% on sub-ms instances):
    the order is reshuffled every round, the same for the same seed and instance."""
    from components.algorithms.hybrid_einsum import technique as tech

    # Prepare: record the call order; every call instant
    calls = []

    def fake(m, *a, **k):
        return lambda: calls.append(m)

    monkeypatch.setattr(tech, "method_call", fake)
    monkeypatch.setattr(tech, "_matches", lambda *a: True)
    inst = gen.suite("debug", 0)[0]
    p = tech.SuiteParams(methods=["dense", "coo", "hybrid", "hybrid_oneway"], max_reps=12, min_reps=12, warmup=False)

    def orders(seed):
        calls.clear()
        tech._run_instance(inst, p, 0.1, 2 ** 30, None, seed=seed)
        return [tuple(calls[1 + i:1 + i + 5]) for i in range(0, 60, 5)]   # calls[0]: the baseline's probe

    # Execute
    a, b, c = orders(0), orders(0), orders(1)
    # Assert: every round runs each method once, and dense (the baseline) a second time for the noise
    # floor; more than one predecessor per method; seeded
    assert len(calls) == 61 and calls[0] == "dense" and all(sorted(o) == sorted([*p.methods, "dense"]) for o in a)
    assert all(len({o[o.index(m) - 1] for o in a if o.index(m) > 0}) >= 2 for m in p.methods)
    assert a == b and a != c


def test_suite_noise_floors_in_the_units_of_each_figure():
    from components.algorithms.hybrid_einsum.technique import _geomean_noise, _within_noise

    # Prepare: three instances' hybrid / best static, the middle one's floor 10%
    ratios, floors = [1.0, 1.2, 1.3], [0.0, math.log(1.1), 0.0]
    # Execute / Assert: 1.2 x 1.1 crosses 1.25, so the share within 1.25 moves by one instance of three
    assert _within_noise(ratios, floors, 1.25) == pytest.approx(1 / 3)
    g = (1.0 * 1.2 * 1.3) ** (1 / 3)
    assert _geomean_noise(ratios, floors) == pytest.approx(g * (1.1 ** (1 / 3) - 1))
    assert _within_noise([1.0, math.inf], [0.1, math.nan], 1.25) == 0.0   # inf never counts; a NaN floor is none


def test_gap_speedups_carry_their_noise_floor_and_an_exceeded_dense_needs_none():
    from components.algorithms.hybrid_einsum.technique import GapParams, run_einsum_gap
    from components.core.context import RunContext
    from components.core.params import parse_params

    # Prepare: equality chains; dense past a 1 MiB cap from n = 20 on
    p = parse_params(GapParams, {"family": "chain_eq", "n_values": [6, 10, 20, 24], "memory_cap_mib": 1, "reps": 2})
    # Execute
    r = run_einsum_gap(p, RunContext(seed=0, inputs={"calibration": {"tau": 1e-3}}))
    # Assert: infinitely slower is decided without timing; every size ran its rounds, COO the baseline
    m = r.metrics
    assert m["coo_speedup_n24"] == math.inf and m["coo_speedup_n24_noise"] == 0.0
    assert m["coo_s_at_largest_n_noise"] >= 0 and m["all_correct"] == 1
    assert [row["rounds"] for row in r.tables["gap"]] == [2, 2, 2, 2]
    assert [row["dense_status"] for row in r.tables["gap"]] == ["ok", "ok", "exceeded", "exceeded"]
