"""Arnold's placement MIP for small instances, solved by HiGHS through ``scipy.optimize.milp``.

Variables: x[d,p,m] = 1 if cell (d, p) goes to unit m; z[p,m] >= x[d,p,m] (stage p's DP group
touches m); y[d,m] >= x[d,p,m] (replica d's PP group touches m), also in aggregated form
(sum_d x[d,p,m] <= min(D, c_m) z[p,m], which tightens the LP bound a lot); integer S_DP >= sum_m z[p,m];
S_PP >= sum_m y[d,m]. Each cell in one unit, unit capacity c_m. Minimise alpha S_DP / LB_DP +
(1 - alpha) S_PP / LB_PP. Symmetry cut: replicas are interchangeable, so the unit index of
stage 0 is non-decreasing in d. The solver's time limit is passed on and the status reported.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from components.simulation.arnold.spread import lower_bounds
from components.core.registry import register


@dataclass
class MipResult:
    node_of: np.ndarray | None
    objective: float
    status: str          # optimal | time_limit | infeasible | failed
    solver_s: float
    gap: float


def solve_counts(D: int, P: int, cap: np.ndarray, alpha: float, time_limit_s: float, aggregated: bool = True, zy_binary: bool = True) -> tuple[np.ndarray | None, MipResult]:
    """Solve the MIP over units with capacities ``cap``; returns unit_of[d, p] (or None) and the result."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    M = len(cap)
    nx, nz, ny = D * P * M, P * M, D * M
    n = nx + nz + ny + 2
    iS_dp, iS_pp = n - 2, n - 1
    xi = lambda d, p, m: (d * P + p) * M + m          # noqa: E731
    zi = lambda p, m: nx + p * M + m                  # noqa: E731
    yi = lambda d, m: nx + nz + d * M + m             # noqa: E731
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def add(entries, l, h):
        nonlocal r
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(l)
        hi.append(h)
        r += 1

    for d in range(D):
        for p in range(P):
            add([(xi(d, p, m), 1.0) for m in range(M)], 1, 1)
            for m in range(M):
                add([(xi(d, p, m), 1.0), (zi(p, m), -1.0)], -np.inf, 0)
                add([(xi(d, p, m), 1.0), (yi(d, m), -1.0)], -np.inf, 0)
    for m in range(M):
        add([(xi(d, p, m), 1.0) for d in range(D) for p in range(P)], -np.inf, float(cap[m]))
        if aggregated:              # aggregated linking: stage p puts <= min(D, c_m) cells on m, only if z
            for p in range(P):
                add([(xi(d, p, m), 1.0) for d in range(D)] + [(zi(p, m), -float(min(D, cap[m])))], -np.inf, 0)
            for d in range(D):
                add([(xi(d, p, m), 1.0) for p in range(P)] + [(yi(d, m), -float(min(P, cap[m])))], -np.inf, 0)
    for p in range(P):
        add([(zi(p, m), 1.0) for m in range(M)] + [(iS_dp, -1.0)], -np.inf, 0)
    for d in range(D):
        add([(yi(d, m), 1.0) for m in range(M)] + [(iS_pp, -1.0)], -np.inf, 0)
    for d in range(D - 1):                                   # replica-order symmetry cut
        add([(xi(d, 0, m), float(m)) for m in range(M)] + [(xi(d + 1, 0, m), -float(m)) for m in range(M)], -np.inf, 0)
    A = coo_matrix((vals, (rows, cols)), shape=(r, n)).tocsr()
    lb_dp, lb_pp = lower_bounds(D, P, cap)
    c = np.zeros(n)
    c[iS_dp], c[iS_pp] = alpha / lb_dp, (1 - alpha) / lb_pp
    integrality = np.zeros(n)
    integrality[:nx] = 1
    if zy_binary:
        integrality[nx:nx + nz + ny] = 1
    integrality[iS_dp] = integrality[iS_pp] = 1
    ub = np.ones(n)
    ub[iS_dp], ub[iS_pp] = M, M
    lb = np.zeros(n)
    lb[iS_dp], lb[iS_pp] = lb_dp, lb_pp
    t0 = time.perf_counter()
    res = milp(c, constraints=LinearConstraint(A, lo, hi), integrality=integrality, bounds=Bounds(lb, ub),
               options={"time_limit": float(time_limit_s), "disp": False})
    dt = time.perf_counter() - t0
    status = {0: "optimal", 1: "time_limit", 2: "infeasible"}.get(res.status, "failed")
    if res.x is None:
        return None, MipResult(None, float("nan"), status, dt, float("nan"))
    x = res.x[:nx].reshape(D, P, M)
    unit_of = np.argmax(x, axis=2)
    gap = float(getattr(res, "mip_gap", 0.0) or 0.0)
    return unit_of, MipResult(None, float(res.fun), status, dt, gap)


@register("placement_policy", "mip")
def place_mip(inst, rng=None, return_result: bool = False):
    """Exact placement (at the spread tier) by the MIP; nodes inside a unit taken leaf by leaf in
    replica-major order. Falls back to nothing: a solve without an incumbent raises."""
    cap = inst.cap()
    keep = np.nonzero(cap > 0)[0]
    unit_of, res = solve_counts(inst.D, inst.P, cap[keep], inst.alpha, inst.time_limit_s)
    if unit_of is None:
        raise RuntimeError(f"MIP found no placement within {inst.time_limit_s} s (status {res.status})")
    node_of = np.empty((inst.D, inst.P), dtype=np.int64)
    for k, u in enumerate(keep):
        cells = np.argwhere(unit_of == k)                   # replica-major: PP groups stay on leafs
        node_of[cells[:, 0], cells[:, 1]] = inst.unit_nodes(int(u))[: len(cells)]
    res.node_of = node_of
    return (node_of, res) if return_result else node_of
