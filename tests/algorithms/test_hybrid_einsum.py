"""Hybrid einsum: COO == dense == numpy on random expressions (hypothesis), the switch rule, memory
caps, known answers of generated instances, and bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components.algorithms.hybrid_einsum import COO, MemoryCapExceeded, contract, einsum, plan
from components.algorithms.hybrid_einsum.technique import time_method
from components.core.errors import ConfigError
from components.data import einsum_instances as gen

LABELS = "abcdef"


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
        assert np.array_equal(einsum(expr, *tensors, representation="hybrid", tau=tau), want), tau
    got = einsum(expr, *tensors, representation="coo", output="coo")
    assert isinstance(got, COO) and np.array_equal(got.todense(), want)
    assert (got.values != 0).all()                  # exact zeros are dropped


def test_many_indices_and_implicit_output():
    inst = gen.grid_eq(9)                           # 81 indices, more than numpy's 52 letters
    assert einsum(inst.expr, *inst.tensors, representation="coo") == 2.0
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    assert np.array_equal(einsum("ij,jk", a, b, representation="coo"), a @ b)


def test_switch_happens_exactly_when_the_rule_says():
    inst = gen.grid_eq(8)
    p = plan(inst.expr, [t.shape for t in inst.tensors])
    dense = contract(p, inst.tensors, "dense", measure_density=True)
    rem = [s.remaining_density for s in dense.trace]
    for tau in (0.3, 0.05, 0.01, 1e-3):
        hy = contract(p, inst.tensors, "hybrid", tau=tau)
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
    hy = contract(p, inst.tensors, "hybrid", tau=0.0, memory_cap_bytes=cap)
    assert hy.switched_at == first_big and hy.switch_reason == "cap" and float(hy.result) == 2.0
    with pytest.raises(MemoryCapExceeded):
        contract(p, inst.tensors, "dense", memory_cap_bytes=cap)


def test_memory_cap_reported_as_exceeded_not_a_crash():
    inst = gen.chain_eq(20)
    p = plan(inst.expr, [t.shape for t in inst.tensors])
    t, res, status, _ = time_method("dense", p, inst.tensors, 1e-2, 2 ** 20)
    assert status == "exceeded" and math.isinf(t) and res is None
    t, res, status, _ = time_method("numpy_oe", p, inst.tensors, 1e-2, 2 ** 20)
    assert status == "exceeded"
    t, res, status, _ = time_method("coo", p, inst.tensors, 1e-2, 2 ** 20)
    assert status == "ok" and res.nnz == 2 and res.shape == (2,) * 20


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
