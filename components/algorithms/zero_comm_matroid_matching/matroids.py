"""Matroids as incremental independence oracles, and the greedy that every server and the centre run.

An instance is ``(kind, data, meta)``: ``data[e]`` is element e's own description (graphic: its two
endpoints; linear: its vector; partition: its category; uniform: nothing) and ``meta`` the matroid's
shared constants (number of vertices, quotas, rank), which every server and the centre know (the
model gives each of them an independence oracle; only the elements are distributed).
Ties are broken by a strict total order (weight descending, then global id ascending) everywhere,
so greedy on any subset is deterministic and the exchange argument holds.
"""
from __future__ import annotations

import itertools

import numpy as np

from components.core.errors import require

MATROIDS = ("uniform", "partition", "graphic", "linear")


class _Uniform:
    def __init__(self, meta):
        self.rank, self.size = int(meta["rank"]), 0

    def try_add(self, _x) -> bool:
        if self.size < self.rank:
            self.size += 1
            return True
        return False


class _Partition:
    def __init__(self, meta):
        self.left = np.asarray(meta["quotas"], dtype=np.int64).copy()

    def try_add(self, c) -> bool:
        c = int(c)
        if self.left[c] > 0:
            self.left[c] -= 1
            return True
        return False


class _Graphic:
    """Forests of a multigraph: union-find with path halving."""

    def __init__(self, meta):
        self.parent: dict[int, int] = {}

    def _find(self, a: int) -> int:
        p = self.parent
        while p.get(a, a) != a:
            p[a] = p.get(p[a], p[a])
            a = p[a]
        return a

    def try_add(self, uv) -> bool:
        ra, rb = self._find(int(uv[0])), self._find(int(uv[1]))
        if ra == rb:
            return False
        self.parent[ra] = rb
        return True


class _Linear:
    """Column matroid over the reals: incremental Gram-Schmidt, a vector is independent of the kept ones
    when its residual keeps more than ``tol`` of its norm (the generated dependencies are exact, so the
    residual is ~1e-15 or O(1); nothing in between)."""

    def __init__(self, meta, tol: float = 1e-8):
        self.q: list[np.ndarray] = []
        self.tol = tol

    def try_add(self, v) -> bool:
        v = np.asarray(v, dtype=np.float64)
        r = v.copy()
        for _ in range(2):                      # twice is enough (Kahan-Parlett) for orthogonality
            for q in self.q:
                r -= (q @ r) * q
        nr = float(np.linalg.norm(r))
        if nr <= self.tol * max(1.0, float(np.linalg.norm(v))):
            return False
        self.q.append(r / nr)
        return True


_ORACLES = {"uniform": _Uniform, "partition": _Partition, "graphic": _Graphic, "linear": _Linear}


def oracle(kind: str, meta: dict):
    """A fresh, empty independent set of matroid ``kind`` with ``try_add(x) -> bool``."""
    require(kind in _ORACLES, "matroid", kind, "one of " + ", ".join(MATROIDS))
    return _ORACLES[kind](meta)


def order(ids: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Positions of ``(ids, w)`` in the strict order: weight descending, global id ascending."""
    return np.lexsort((np.asarray(ids), -np.asarray(w, dtype=np.float64)))


def greedy(kind: str, meta: dict, ids: np.ndarray, w: np.ndarray, data, k: int) -> np.ndarray:
    """Max-weight independent set of at most ``k`` elements among ``ids`` (weights ``w``, descriptions
    ``data``, aligned): greedy in the strict order, non-positive weights dropped. Returns the kept ids
    in greedy order. This is the max-weight basis of the rank-k truncation restricted to ``ids``."""
    require(k >= 1, "k", k, "an integer >= 1")
    ind = oracle(kind, meta)
    kept = []
    for pos in order(ids, w):
        if w[pos] <= 0:
            break
        if ind.try_add(None if data is None else data[pos]):
            kept.append(int(ids[pos]))
            if len(kept) == k:
                break
    return np.asarray(kept, dtype=np.int64)


def is_independent(kind: str, meta: dict, items) -> bool:
    ind = oracle(kind, meta)
    return all(ind.try_add(x) for x in items)


def brute_force(kind: str, meta: dict, w: np.ndarray, data, k: int) -> float:
    """Max weight of an independent set of size <= k by enumeration (tiny instances, tests)."""
    n, best = len(w), 0.0
    for size in range(1, min(k, n) + 1):
        for s in itertools.combinations(range(n), size):
            if is_independent(kind, meta, [None if data is None else data[i] for i in s]):
                best = max(best, float(sum(max(w[i], 0.0) for i in s)))
    return best
