"""Spreads of communication groups and Arnold's weighted max-spread objective.

A job is a D x P grid (DP replica d, pipeline stage p), one node per cell: ``node_of[d, p]``. The DP
group of stage p is column p, the PP group of replica d is row d. spread(g) = number of distinct
units (minipods, or leafs) holding g's nodes. Objective = alpha * max DP spread / LB_DP + (1 - alpha)
* max PP spread / LB_PP with LB = ceil(group size / largest free capacity of one unit).
"""
from __future__ import annotations

import math

import numpy as np


def group_spreads(node_of: np.ndarray, topo, level: int) -> tuple[np.ndarray, np.ndarray]:
    """(DP spread per stage [P], PP spread per replica [D]) at tier ``level`` (one bincount each)."""
    D, P = node_of.shape
    u = topo.unit(node_of, level)
    U = topo.units[level]
    dp = (np.bincount((np.arange(P)[None, :] * U + u).ravel(), minlength=P * U).reshape(P, U) > 0).sum(1)
    pp = (np.bincount((np.arange(D)[:, None] * U + u).ravel(), minlength=D * U).reshape(D, U) > 0).sum(1)
    return dp, pp


def lower_bounds(D: int, P: int, cap: np.ndarray) -> tuple[int, int]:
    cmax = max(int(cap.max()), 1)
    return math.ceil(D / cmax), math.ceil(P / cmax)


def objective(node_of: np.ndarray, topo, level: int, cap: np.ndarray, alpha: float) -> float:
    D, P = node_of.shape
    dp, pp = group_spreads(node_of, topo, level)
    lb_dp, lb_pp = lower_bounds(D, P, cap)
    return alpha * dp.max() / lb_dp + (1 - alpha) * pp.max() / lb_pp


def objective_from_spreads(max_dp: float, max_pp: float, D: int, P: int, cap: np.ndarray, alpha: float) -> float:
    lb_dp, lb_pp = lower_bounds(D, P, cap)
    return alpha * max_dp / lb_dp + (1 - alpha) * max_pp / lb_pp


def check_placement(node_of: np.ndarray, free: np.ndarray) -> None:
    """Raise if two cells share a node or a cell sits on a busy node (a policy bug, never user input)."""
    flat = node_of.ravel()
    if np.unique(flat).size != flat.size:
        raise AssertionError("two cells placed on one node")
    if not free[flat].all():
        raise AssertionError("a cell placed on a busy node")
