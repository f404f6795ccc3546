"""Prepare step `ef_problems`: the problem set error feedback runs on (arXiv 2506.05271's settings),
built once per seed and cached. Kept apart from technique.py so the cache key covers only this
module, the problems and the registry."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from components.core.errors import require
from components.core.registry import prepare_step
from components.training import problems as P


@dataclass
class ProblemSetParams:
    quad_dim: int = 40                # single-agent quadratic (paper's setting)
    quad_kappa: float = 10.0
    n_agents: int = 4                 # distributed setting
    dist_dim: int = 100
    dist_spectrum: list[float] = field(default_factory=lambda: [0.1, 1.0])
    dist_spread: float = 3.0          # std of the local minimizers: the heterogeneity
    logreg_lambda: float = 0.01       # L2 weight (= mu) of the strongly convex logistic problem
    nonconvex_lambda: float = 0.1     # weight of sum x^2/(1+x^2)

    def check(self):
        require(self.quad_dim >= 2, "quad_dim", self.quad_dim, "an integer >= 2")
        require(self.quad_kappa >= 1, "quad_kappa", self.quad_kappa, "a condition number >= 1")
        require(self.n_agents >= 1, "n_agents", self.n_agents, "a positive number of agents")
        require(self.n_agents <= 10, "n_agents", self.n_agents, "at most 10 (load_digits has 10 digit shards)")
        require(self.dist_dim >= 2, "dist_dim", self.dist_dim, "an integer >= 2")
        lo, hi = (self.dist_spectrum + [0, 0])[:2]
        require(len(self.dist_spectrum) == 2 and 0 < lo <= hi, "dist_spectrum", self.dist_spectrum, "[lo, hi] with 0 < lo <= hi")
        require(self.logreg_lambda > 0, "logreg_lambda", self.logreg_lambda, "a positive weight")
        require(self.nonconvex_lambda >= 0, "nonconvex_lambda", self.nonconvex_lambda, "a non-negative weight")


def problem_dim(name: str, prep: dict) -> int:
    """Dimension of a prepared problem, known from config alone (for validation before Ray)."""
    if name == "quadratic":
        return int(prep.get("quad_dim", ProblemSetParams.quad_dim))
    if name == "dist_quadratic":
        return int(prep.get("dist_dim", ProblemSetParams.dist_dim))
    return 65  # load_digits: 64 pixels + bias


@prepare_step("ef_problems", seeded=True, params=ProblemSetParams,
              summary="Problem set for error feedback: quadratics (random per seed), load_digits logistic "
                      "(convex and nonconvex), heterogeneous shards, each with L, mu and a precise x*.")
def build_problems(p: ProblemSetParams, ctx) -> dict:
    quad = P.make_quadratic(p.quad_dim, p.quad_kappa, ctx.seed)
    X, y, digit = P.digits_binary()
    logreg = P.LogReg(X, y, p.logreg_lambda, "l2", name="logreg")
    logreg.x_star = P.minimize_precisely(logreg.grad, logreg.value, np.zeros(logreg.dim), logreg.L)
    nonconvex = P.LogReg(X, y, p.nonconvex_lambda, "nonconvex", name="nonconvex")

    dq = P.Federation(P.make_local_quadratics(p.n_agents, p.dist_dim, tuple(p.dist_spectrum), p.dist_spread,
                                              ctx.seed + 1), name="dist_quadratic")
    dq.x_star = np.linalg.solve(sum(q.A for q in dq.parts), sum(q.A @ q.b for q in dq.parts))
    # non-IID shards: agent i holds the digits i, i+n, ... (so labels and features differ by agent)
    shards = [np.isin(digit, [d for d in range(10) if d % p.n_agents == i]) for i in range(p.n_agents)]
    dl = P.Federation([P.LogReg(X[m], y[m], p.logreg_lambda, "l2", name=f"logreg[{i}]") for i, m in enumerate(shards)],
                      name="dist_logreg")
    dl.x_star = P.minimize_precisely(dl.grad, dl.value, np.zeros(dl.dim), dl.L)
    dn = P.Federation([P.LogReg(X[m], y[m], p.nonconvex_lambda, "nonconvex", name=f"nonconvex[{i}]")
                       for i, m in enumerate(shards)], name="dist_nonconvex")
    return {"quadratic": quad, "logreg": logreg, "nonconvex": nonconvex,
            "dist_quadratic": dq, "dist_logreg": dl, "dist_nonconvex": dn}
