"""Max-weight matching with at most k edges: the server kernel, the naive baseline, the exact solver.

Edges are rows ``(u, v)`` with weights ``w`` and global ids; the strict order is weight descending,
id ascending (components.algorithms.zero_comm_matroid_matching.matroids.order).

- :func:`matching_kernel`: scan in that order over the simple graph (self-loops dropped, the heaviest
  copy of each vertex pair kept), keep (u, v) while both kept-degrees are < 2k-1, stop after
  ``kernel_bound(k) = (2k-1)(2k-2)+1`` kept edges. Optimal by the exchange argument of the spec
  (our derivation and constant, not necessarily the paper's), on multigraphs too.
- :func:`naive_topk`: the k heaviest edges (small, NOT optimal when heavy edges share vertices).
- :func:`kcapped_mwm`: exact k-capped MWM as a MILP with scipy's HiGHS (relative gap 0).
- :func:`networkx_kcapped`: the same optimum by networkx's max_weight_matching after adding n-2k dummy
  vertices joined to every real vertex with a huge weight (small graphs; a cross-check).
"""
from __future__ import annotations

import numpy as np

from components.algorithms.zero_comm_matroid_matching.matroids import order
from components.core.errors import require


def kernel_bound(k: int) -> int:
    return (2 * k - 1) * (2 * k - 2) + 1


def matching_kernel(ids: np.ndarray, edges: np.ndarray, w: np.ndarray, k: int) -> np.ndarray:
    """Ids of the degree-capped greedy kernel (at most kernel_bound(k) edges), in scan order.

    The shard is first read as a simple graph: self-loops are dropped (no matching uses one) and of
    parallel edges only the first in scan order (the heaviest, then the lowest id) is kept; a matching
    uses at most one edge per pair, so this keeps the optimum, and without it copies of one pair would
    spend both ends' degree cap on a single choice (the exchange argument needs distinct neighbours)."""
    require(k >= 1, "k", k, "an integer >= 1")
    cap, limit = 2 * k - 1, kernel_bound(k)
    deg: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()
    kept = []
    for pos in order(ids, w):
        if w[pos] <= 0:
            break
        u, v = int(edges[pos, 0]), int(edges[pos, 1])
        pair = (min(u, v), max(u, v))
        if u == v or pair in seen:
            continue
        seen.add(pair)
        if deg.get(u, 0) < cap and deg.get(v, 0) < cap:
            deg[u] = deg.get(u, 0) + 1
            deg[v] = deg.get(v, 0) + 1
            kept.append(int(ids[pos]))
            if len(kept) == limit:
                break
    return np.asarray(kept, dtype=np.int64)


def naive_topk(ids: np.ndarray, edges: np.ndarray, w: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k heaviest positive edges (the map-reduce default 'local top-k')."""
    pos = order(ids, w)[:k]
    return np.asarray([int(ids[p]) for p in pos if w[p] > 0], dtype=np.int64)


def kcapped_mwm(edges: np.ndarray, w: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    """Exact max weight of a matching with at most k edges: (weight, positions of its edges).

    MILP: max sum w_e x_e, sum_{e ni v} x_e <= 1, sum_e x_e <= k, x binary (HiGHS, mip_rel_gap 0).
    Non-positive edges and self-loops are dropped. The weight is recomputed from the chosen edges."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_matrix, vstack

    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    w = np.asarray(w, dtype=np.float64)
    keep = np.flatnonzero((w > 0) & (edges[:, 0] != edges[:, 1]))
    if len(keep) == 0:
        return 0.0, np.zeros(0, dtype=np.int64)
    e, we = edges[keep], w[keep]
    verts, inv = np.unique(e.ravel(), return_inverse=True)
    n_e = len(keep)
    cols = np.repeat(np.arange(n_e), 2)
    inc = csr_matrix((np.ones(2 * n_e), (inv, cols)), shape=(len(verts), n_e))
    a = vstack([inc, csr_matrix(np.ones((1, n_e)))]).tocsr()
    ub = np.concatenate([np.ones(len(verts)), [float(k)]])
    res = milp(-we, constraints=LinearConstraint(a, -np.inf, ub), integrality=np.ones(n_e),
               bounds=Bounds(0, 1), options={"mip_rel_gap": 0.0, "disp": False})
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"HiGHS did not solve the k-capped matching MILP: {res.message}")
    chosen = np.flatnonzero(res.x > 0.5)
    return float(np.sum(we[chosen])), keep[chosen]


def is_matching(edges: np.ndarray, k: int) -> bool:
    flat = np.asarray(edges).ravel()
    return len(edges) <= k and len(np.unique(flat)) == len(flat)


def networkx_kcapped(edges: np.ndarray, w: np.ndarray, k: int) -> float:
    """The k-capped optimum by networkx (dummy-vertex trick); for small graphs only."""
    import networkx as nx

    g = nx.Graph()
    for (u, v), x in zip(np.asarray(edges), np.asarray(w, dtype=np.float64)):
        if x > 0 and u != v and (not g.has_edge(int(u), int(v)) or g[int(u)][int(v)]["weight"] < x):
            g.add_edge(int(u), int(v), weight=float(x))
    real = list(g.nodes)
    n_dummy = max(0, len(real) - 2 * k)
    big = 1.0 + 2.0 * float(sum(d["weight"] for *_, d in g.edges(data=True)))
    for j in range(n_dummy):
        for r in real:
            g.add_edge(("dummy", j), r, weight=big)
    m = nx.max_weight_matching(g, maxcardinality=False)
    return float(sum(g[a][b]["weight"] for a, b in m if not isinstance(a, tuple) and not isinstance(b, tuple)))
