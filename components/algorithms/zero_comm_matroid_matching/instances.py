"""Generated instances and their split over m servers (all drawn from one numpy Generator).

Weights: i.i.d. exponential, or "tied" (integers 1..5, so many ties and the global-id order matters).
Splits: "random" (each element to a uniform server), "one_holds_opt" (an optimum on server 0, the
rest random: the adversary of the Omega(k) lower bound), "heavy_on_one" (the n/m heaviest on server 0).
Matching families: random general graphs, and "heavy stars": h = max(1, k//3) hubs whose edges are the
heaviest of the graph (10 + Exp), hub degree a multiple of k*m, plus light random edges (Exp) among
the leaves, so the optimum needs k-h light edges that a per-server top-k never sends.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPLITS = ("random", "one_holds_opt", "heavy_on_one")


@dataclass
class MatroidInstance:
    kind: str
    meta: dict
    w: np.ndarray
    data: np.ndarray | None
    k: int
    m: int
    split: str = "random"
    owner: np.ndarray | None = None      # server of each element

    @property
    def n(self) -> int:
        return len(self.w)


@dataclass
class MatchingInstance:
    edges: np.ndarray
    w: np.ndarray
    k: int
    m: int
    family: str = "random"
    split: str = "random"
    hub_degree: int = 0
    owner: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.w)


def _weights(rng, n: int, tied: bool) -> np.ndarray:
    return rng.integers(1, 6, n).astype(np.float64) if tied else rng.exponential(1.0, n)


def matroid_instance(rng, kind: str, n: int, k: int, m: int, tied: bool) -> MatroidInstance:
    w = _weights(rng, n, tied)
    if kind == "uniform":
        return MatroidInstance(kind, {"rank": int(rng.integers(k, 2 * k + 1))}, w, None, k, m)
    if kind == "partition":
        c = int(rng.integers(2, 2 * k + 3))
        quotas = rng.integers(1, 4, c)
        return MatroidInstance(kind, {"quotas": quotas.tolist()}, w, rng.integers(0, c, n), k, m)
    if kind == "graphic":
        nv = int(rng.integers(max(2 * k, 4), max(2 * k + 1, 5, min(4000, n // 2))))
        uv = rng.integers(0, nv, (n, 2))
        uv[:, 1] = np.where(uv[:, 1] == uv[:, 0], (uv[:, 0] + 1) % nv, uv[:, 1])
        return MatroidInstance(kind, {"n_vertices": nv}, w, uv, k, m)
    if kind == "linear":                     # a few random subspaces: exact dependencies of every size
        d = k + 2
        sub = max(1, d // 2)
        bases = rng.standard_normal((4, d, sub))
        pick = rng.integers(0, 4, n)
        vec = np.einsum("nds,ns->nd", bases[pick], rng.standard_normal((n, sub)))
        return MatroidInstance(kind, {"dim": d}, w, vec, k, m)
    raise ValueError(kind)


def random_graph(rng, nv: int, ne: int, k: int, m: int, tied: bool) -> MatchingInstance:
    uv = rng.integers(0, nv, (ne, 2))
    uv[:, 1] = np.where(uv[:, 1] == uv[:, 0], (uv[:, 0] + 1) % nv, uv[:, 1])
    return MatchingInstance(uv, _weights(rng, ne, tied), k, m, "random")


def heavy_star(rng, k: int, m: int, factor: float, max_hub_degree: int = 3000) -> MatchingInstance:
    h = max(1, k // 3)
    deg = int(min(max(2 * k, round(factor * k * m)), max(max_hub_degree, 2 * k)))
    n_leaves = deg + 4 * k
    hub_e = np.column_stack([np.repeat(np.arange(h), deg),
                             h + np.concatenate([rng.choice(n_leaves, deg, replace=False) for _ in range(h)])])
    n_light = max(8 * k, deg // 2)
    lu = h + rng.integers(0, n_leaves, (n_light, 2))
    lu[:, 1] = np.where(lu[:, 1] == lu[:, 0], h + (lu[:, 0] - h + 1) % n_leaves, lu[:, 1])
    edges = np.concatenate([hub_e, lu])
    w = np.concatenate([10.0 + rng.exponential(1.0, len(hub_e)), rng.exponential(1.0, n_light)])
    perm = rng.permutation(len(w))                  # ids carry no information about heaviness
    return MatchingInstance(edges[perm], w[perm], k, m, "heavy_star", hub_degree=deg)


def split(rng, n: int, m: int, how: str, w: np.ndarray, opt_ids: np.ndarray | None = None) -> np.ndarray:
    """Server index of every element under split ``how``."""
    owner = rng.integers(0, m, n)
    if how == "one_holds_opt" and opt_ids is not None:
        owner[opt_ids] = 0
    elif how == "heavy_on_one":
        owner[np.argsort(-w, kind="stable")[: max(1, n // m)]] = 0
    return owner
