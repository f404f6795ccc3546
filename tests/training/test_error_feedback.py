"""EF / EF21 / CGD against the paper's tight analysis, on small problems (no Ray)."""
import time

import numpy as np
import pytest

from components.core.context import RunContext
from components.core.params import parse_params
from components.training import problems as P
from components.training.error_feedback import theory
from components.training.error_feedback.prepare import ProblemSetParams, build_problems
from components.training.error_feedback.technique import EFParams, run_error_feedback


@pytest.fixture(scope="module")
def ctx():
    probs = build_problems(ProblemSetParams(quad_dim=20, quad_kappa=4.0, dist_dim=30), RunContext(seed=0))
    return RunContext(inputs={"problems": probs})


def test_formulas_match_the_sheet():
    assert theory.rho_star(4, 1, 0.5) == pytest.approx(0.8711, abs=1e-4)
    assert theory.rho_cgd(4, 1, 0.5) == pytest.approx(0.8423, abs=1e-4)
    assert theory.rho_star(10, 1, 0.9) == pytest.approx(0.9905, abs=1e-4)
    assert theory.rho_cgd(2, 1, 0.25) == pytest.approx(0.5102, abs=1e-4)
    for kappa in (1.5, 10, 100):
        assert theory.rho_star(kappa, 1, 1e-14) == pytest.approx(theory.rho_gd(kappa, 1), abs=1e-6)


def test_cgd_rate_beats_ef_on_grid():
    gap = theory.grid_gap(np.geomspace(1.5, 100, 40), np.linspace(0.01, 0.99, 39))
    assert (gap > 0).all()


@pytest.mark.parametrize("method", ["ef", "ef21"])
@pytest.mark.parametrize("problem", ["quadratic", "logreg"])
def test_lyapunov_ratio_within_rho_star(ctx, method, problem):
    p = parse_params(EFParams, {"method": method, "problem": problem, "compressor": {"kind": "top_k", "ratio": 0.3},
                                "iters": 400, "tail": 10})
    r = run_error_feedback(p, ctx)
    assert r.metrics["max_lyapunov_ratio"] <= r.metrics["rho_star"] + 1e-9
    assert r.metrics["max_lyapunov_ratio"] > 0.5 * r.metrics["rho_star"]  # the bound is not vacuous here


def test_lyapunov_check_can_fail_with_a_too_large_step(ctx):
    """Beyond 2/L the iteration diverges and the measured ratio exceeds rho* (the check is not vacuous)."""
    q = ctx.input("problems")["quadratic"]
    step = 2.5 / q.L
    p = parse_params(EFParams, {"method": "ef21", "problem": "quadratic", "compressor": {"kind": "top_k", "ratio": 0.3},
                                "iters": 200, "tail": 10, "step": step})
    r = run_error_feedback(p, ctx)
    assert r.metrics["max_lyapunov_ratio"] > r.metrics["rho_star"]


def test_cgd_within_its_rate_and_gd_matches_theory(ctx):
    p = parse_params(EFParams, {"method": "cgd", "problem": "quadratic", "compressor": {"kind": "top_k", "ratio": 0.5},
                                "iters": 300, "tail": 10})
    r = run_error_feedback(p, ctx)
    assert r.metrics["max_rate_ratio"] <= r.metrics["rho_cgd"] + 1e-9
    g = run_error_feedback(parse_params(EFParams, {"method": "gd", "problem": "quadratic", "iters": 300, "tail": 10}), ctx)
    assert g.metrics["max_rate_ratio"] <= theory.rho_gd(g.metrics["L"], g.metrics["mu"]) + 1e-9
    assert g.metrics["bits_per_round"] == 32 * 20


def test_ef21_converges_where_cgd_stalls_on_heterogeneous_agents(ctx, ray_session):
    """Distributed setting: with no node pool in the context, the technique starts its own n agent actors
    (on the suite's Ray session; the experiment's node pool is tested end to end)."""
    base = {"problem": "dist_quadratic", "compressor": {"kind": "top_k", "ratio": 0.1}, "iters": 400, "tail": 100, "step": 0.3}
    ef21 = run_error_feedback(parse_params(EFParams, {**base, "method": "ef21"}), RunContext(inputs=ctx.inputs, nodes=None))
    cgd = run_error_feedback(parse_params(EFParams, {**base, "method": "cgd"}), RunContext(inputs=ctx.inputs, nodes=None))
    assert ef21.metrics["final_grad_norm_sq"] <= 1e-16
    assert cgd.metrics["tail_grad_norm"] >= 0.1 * cgd.metrics["heterogeneity"]



def test_agents_it_started_are_killed_when_the_run_raises(ctx, ray_session, monkeypatch):
    """A distributed run that raises mid-way (here its progress reporter) kills the agent actors it
    started, instead of leaving them to the end of the Ray session."""
    import ray

    from components.training.error_feedback import technique as T

    # Prepare: record the actors the technique starts; a reporter that fails on its first report
    started, start = [], T.start_nodes

    def start_and_record(*args, **kwargs):
        started.extend(start(*args, **kwargs))
        return started

    monkeypatch.setattr(T, "start_nodes", start_and_record)

    def failing_reporter(*_):
        raise RuntimeError("reporter down")

    params = parse_params(EFParams, {"problem": "dist_quadratic", "method": "ef21", "iters": 50, "tail": 10, "step": 0.3})
    run_ctx = RunContext(inputs=ctx.inputs, nodes=None, reporter=failing_reporter, min_interval_s=0.0)

    # Execute
    with pytest.raises(RuntimeError, match="reporter down"):
        run_error_feedback(params, run_ctx)

    # Assert: every agent it started dies. ray.kill is asynchronous: a call sent right after it can still
    # reach the actor's worker before the kill does and be answered, so each agent gets until a deadline
    assert started
    deadline = time.monotonic() + 30.0
    for node in started:
        while True:
            try:
                ray.get(node.keys.remote(), timeout=30)
            except ray.exceptions.RayActorError:
                break
            assert time.monotonic() < deadline, "an agent the failed run started still answers 30 s later"
            time.sleep(0.1)


def test_problem_set_is_drawn_from_the_seed(ctx):
    """A seeded step: the random quadratics change with ctx.seed, the load_digits problems do not."""
    small = ProblemSetParams(quad_dim=20, quad_kappa=4.0, dist_dim=30)
    again = build_problems(small, RunContext(seed=0))
    other = build_problems(small, RunContext(seed=1))
    mine = ctx.input("problems")
    assert np.array_equal(again["quadratic"].A, mine["quadratic"].A)
    assert not np.allclose(other["quadratic"].A, mine["quadratic"].A)
    assert not np.allclose(other["dist_quadratic"].x_star, mine["dist_quadratic"].x_star)
    assert np.array_equal(other["logreg"].x_star, mine["logreg"].x_star)


def test_logreg_minimizer_is_precise():
    X, y, _ = P.digits_binary()
    f = P.LogReg(X, y, 0.01)
    x = P.minimize_precisely(f.grad, f.value, np.zeros(f.dim), f.L)
    assert np.linalg.norm(f.grad(x)) < 1e-10
    assert f.mu == 0.01 and f.L > f.mu
