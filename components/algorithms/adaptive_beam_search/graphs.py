"""Proximity graphs for best-first search, all in one padded layout.

``Graph.adj`` is the level-0 adjacency, int32 (n, max_degree), neighbours first, -1 padding.
``Graph.upper`` holds the upper levels of an HNSW index, int32 (levels, n, M) in the same layout
(all -1 for a graph without hierarchy); the search descends them greedily from ``entry``.

- ``hnsw``: built by faiss ``IndexHNSWFlat`` and read back from ``index.hnsw.neighbors/offsets``
  (STACK.md section 5), so our search runs on exactly faiss's graph and entry point.
- ``vamana``: DiskANN's construction (two passes, RobustPrune with alpha = 1 then alpha), numba.
- ``navigable``: exactly navigable (every node x has, for every other node y, a neighbour z with
  d(z, y) < d(x, y)), by greedy set cover per node; O(n^2 d + n^3) so for n <= ~2000 only.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from components.core.errors import require


@dataclass
class Graph:
    vectors: np.ndarray               # float32 (n, d), C-contiguous
    adj: np.ndarray                   # int32 (n, max_degree), -1 padded
    entry: int                        # start node (HNSW entry point / Vamana medoid)
    upper: np.ndarray                 # int32 (levels, n, M), -1 padded; shape (0, n, 1) if flat
    kind: str = "graph"
    info: dict = field(default_factory=dict)
    _visited: np.ndarray | None = field(default=None, repr=False, compare=False)   # search's stamp array
    _stamp: int = field(default=0, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def n(self) -> int:
        return self.adj.shape[0]

    def __getstate__(self):          # picklable (Ray, caches): the scratch and its lock stay behind
        return {k: v for k, v in self.__dict__.items() if k not in ("_visited", "_stamp", "_lock")}

    def __setstate__(self, state):
        self.__dict__.update(state, _visited=None, _stamp=0, _lock=threading.Lock())

    def visited_stamps(self, n_queries: int) -> tuple[np.ndarray, int]:
        """The search's visited array (allocated once per graph) and the first stamp of a batch of
        ``n_queries``, reserved so that no query of another batch reuses it; wraps before int32 overflows."""
        with self._lock:
            if self._visited is None or self._visited.shape[0] != self.n or self._stamp + n_queries >= 2**31 - 2:
                self._visited, self._stamp = np.zeros(self.n, np.int32), 0
            s0 = self._stamp
            self._stamp += n_queries
            return self._visited, s0

    def degrees(self) -> np.ndarray:
        return (self.adj >= 0).sum(1)

    def save(self, path) -> None:
        """Save to one ``.npz`` file (load with :func:`load_graph`)."""
        np.savez(path, vectors=self.vectors, adj=self.adj, upper=self.upper, entry=self.entry,
                 kind=self.kind)


def load_graph(path) -> Graph:
    """Load a graph written by :meth:`Graph.save`."""
    z = np.load(path, allow_pickle=False)
    return Graph(np.ascontiguousarray(z["vectors"]), z["adj"], int(z["entry"]), z["upper"], str(z["kind"]))


def _pack(rows: list[np.ndarray], width: int | None = None) -> np.ndarray:
    width = width or max((len(r) for r in rows), default=1) or 1
    out = np.full((len(rows), max(width, 1)), -1, np.int32)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def _check_vectors(x: np.ndarray, min_n: int = 2) -> np.ndarray:
    x = np.asarray(x)
    require(x.ndim == 2, "vectors.shape", x.shape, "a 2-d array (n, d)")
    require(x.shape[0] >= min_n, "vectors.n", x.shape[0], f"at least {min_n} points (an empty graph cannot be searched)")
    require(np.isfinite(x).all(), "vectors", "non-finite values", "finite floats")
    return np.ascontiguousarray(x, dtype=np.float32)


# ------------------------------------------------------------------------------------------ HNSW
def build_hnsw(vectors: np.ndarray, M: int = 16, ef_construction: int = 100, seed: int = 0, threads: int = 1):
    """faiss ``IndexHNSWFlat`` plus our :class:`Graph` view of it. Returns (graph, faiss_index)."""
    import faiss

    require(M >= 2, "M", M, "an integer >= 2")
    require(ef_construction >= 1, "ef_construction", ef_construction, "a positive integer")
    x = _check_vectors(vectors)
    faiss.omp_set_num_threads(threads)
    index = faiss.IndexHNSWFlat(x.shape[1], M)
    index.hnsw.efConstruction = ef_construction
    # faiss draws levels from its own RNG seeded with 12345; re-seeding makes builds reproducible per seed
    index.hnsw.rng = faiss.RandomGenerator(12345 + seed) if hasattr(faiss, "RandomGenerator") else index.hnsw.rng
    index.add(x)
    return graph_from_faiss(index, x), index


def graph_from_faiss(index, vectors: np.ndarray) -> Graph:
    """Read the level-0 adjacency and the upper levels out of a faiss HNSW index."""
    import faiss

    h = index.hnsw
    nb = faiss.vector_to_array(h.neighbors)
    off = faiss.vector_to_array(h.offsets).astype(np.int64)       # uint64: cast before arithmetic
    lev = faiss.vector_to_array(h.levels).astype(np.int64)        # 1 = base level only
    cum = faiss.vector_to_array(h.cum_nneighbor_per_level).astype(np.int64)
    n = index.ntotal
    w0 = int(cum[1] - cum[0])
    slots0 = nb[off[:n, None] + np.arange(w0)[None, :]]
    adj = _compact(slots0)
    max_level = int(h.max_level)
    wu = int(cum[2] - cum[1]) if len(cum) > 2 else 1
    upper = np.full((max_level, n, max(wu, 1)), -1, np.int32)
    for L in range(1, max_level + 1):
        ids = np.nonzero(lev > L)[0]
        width = int(cum[L + 1] - cum[L])
        if len(ids):
            s = nb[off[ids, None] + cum[L] + np.arange(width)[None, :]]
            upper[L - 1, ids, :width] = _compact(s)
    return Graph(np.ascontiguousarray(vectors, dtype=np.float32), adj, int(h.entry_point), upper, "hnsw",
                 {"M": int(h.nb_neighbors(1)) if max_level else w0 // 2, "levels": max_level + 1})


def _compact(slots: np.ndarray) -> np.ndarray:
    """Move the valid (>= 0) entries of each row to the front, keeping their order."""
    slots = slots.astype(np.int32)
    order = np.argsort(slots < 0, axis=1, kind="stable")
    return np.take_along_axis(slots, order, 1)


def flat_upper(n: int) -> np.ndarray:
    return np.full((0, n, 1), -1, np.int32)


# ------------------------------------------------------------------------------------------ Vamana
@njit(cache=True)
def _d(X, i, j):
    s = 0.0
    for t in range(X.shape[1]):
        v = X[i, t] - X[j, t]
        s += v * v
    return np.sqrt(s)


@njit(cache=True)
def _dq(X, i, q):
    s = 0.0
    for t in range(X.shape[1]):
        v = X[i, t] - q[t]
        s += v * v
    return np.sqrt(s)


@njit(cache=True)
def _greedy_visit(X, adj, deg, start, p, L, stamp, mark, vis_ids, vis_d):
    """Vamana GreedySearch(start, x_p, L): returns the number of expanded nodes written to vis_*."""
    q = X[p]
    lid = np.empty(L + 1, np.int32)
    ld = np.empty(L + 1, np.float64)
    lexp = np.zeros(L + 1, np.bool_)
    lid[0] = start
    ld[0] = _dq(X, start, q)
    mark[start] = stamp
    size = 1
    nv = 0
    while True:
        best = -1
        for t in range(size):
            if not lexp[t]:
                best = t
                break
        if best < 0:
            break
        lexp[best] = True
        x = lid[best]
        if nv < vis_ids.shape[0]:
            vis_ids[nv] = x
            vis_d[nv] = ld[best]
            nv += 1
        for j in range(deg[x]):
            y = adj[x, j]
            if mark[y] == stamp:
                continue
            mark[y] = stamp
            dy = _dq(X, y, q)
            if size == L and dy >= ld[size - 1]:
                continue
            # insert into the sorted list
            pos = size if size < L else L - 1
            while pos > 0 and ld[pos - 1] > dy:
                if pos < L:
                    ld[pos] = ld[pos - 1]
                    lid[pos] = lid[pos - 1]
                    lexp[pos] = lexp[pos - 1]
                pos -= 1
            ld[pos] = dy
            lid[pos] = y
            lexp[pos] = False
            if size < L:
                size += 1
    return nv


@njit(cache=True)
def _robust_prune(X, p, cand, cd, nc, alpha, R, out):
    """RobustPrune(p, cand, alpha, R) -> number of neighbours written to ``out``."""
    order = np.argsort(cd[:nc], kind="mergesort")
    alive = np.ones(nc, np.bool_)
    cnt = 0
    for a in range(nc):
        ia = order[a]
        if not alive[ia]:
            continue
        c = cand[ia]
        if c == p:
            continue
        dup = False
        for t in range(cnt):
            if out[t] == c:
                dup = True
                break
        if dup:
            continue
        out[cnt] = c
        cnt += 1
        if cnt >= R:
            break
        for b in range(a + 1, nc):
            ib = order[b]
            if alive[ib] and alpha * _d(X, c, cand[ib]) <= cd[ib]:
                alive[ib] = False
    return cnt


@njit(cache=True)
def _vamana(X, R, L, alpha, order, init, deg0, medoid):
    n = X.shape[0]
    adj = init.copy()
    deg = np.full(n, deg0, np.int32)
    mark = np.zeros(n, np.int32)
    stamp = 0
    buf = 4 * L + 2 * R + 8
    vis_ids = np.empty(buf, np.int32)
    vis_d = np.empty(buf, np.float64)
    cand = np.empty(buf + R + 1, np.int32)
    cd = np.empty(buf + R + 1, np.float64)
    out = np.empty(R, np.int32)
    for pas in range(2):
        a = 1.0 if pas == 0 else alpha
        for t in range(n):
            p = order[t]
            stamp += 1
            nv = _greedy_visit(X, adj, deg, medoid, p, L, stamp, mark, vis_ids, vis_d)
            nc = 0
            for s in range(nv):
                cand[nc] = vis_ids[s]
                cd[nc] = vis_d[s]
                nc += 1
            for s in range(deg[p]):
                cand[nc] = adj[p, s]
                cd[nc] = _d(X, p, adj[p, s])
                nc += 1
            cnt = _robust_prune(X, p, cand, cd, nc, a, R, out)
            deg[p] = cnt
            adj[p, :cnt] = out[:cnt]
            for s in range(cnt):
                j = adj[p, s]
                present = False
                for u in range(deg[j]):
                    if adj[j, u] == p:
                        present = True
                        break
                if present:
                    continue
                if deg[j] < R:
                    adj[j, deg[j]] = p
                    deg[j] += 1
                else:
                    m = 0
                    for u in range(deg[j]):
                        cand[m] = adj[j, u]
                        cd[m] = _d(X, j, adj[j, u])
                        m += 1
                    cand[m] = p
                    cd[m] = _d(X, j, p)
                    m += 1
                    c2 = _robust_prune(X, j, cand, cd, m, a, R, out)
                    deg[j] = c2
                    adj[j, :c2] = out[:c2]
    for i in range(n):
        for s in range(deg[i], R):
            adj[i, s] = -1
    return adj


def build_vamana(vectors: np.ndarray, R: int = 32, L: int = 64, alpha: float = 1.2, seed: int = 0) -> Graph:
    """Vamana (DiskANN): random R-regular start, two passes of GreedySearch + RobustPrune; entry = medoid."""
    x = _check_vectors(vectors)
    n = len(x)
    require(R >= 2, "R", R, "an integer >= 2")
    require(L >= R, "L", L, f"an integer >= R={R}")
    require(alpha >= 1.0, "alpha", alpha, "a float >= 1")
    init, order, medoid = vamana_start(x, R, seed)
    adj = _vamana(x, R, L, float(alpha), order, init, min(R, n - 1), medoid)
    return Graph(x, np.ascontiguousarray(adj), medoid, flat_upper(n), "vamana", {"R": R, "L": L, "alpha": alpha})


def vamana_start(x: np.ndarray, R: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """Vamana's starting point from ``seed``: a random R-out-regular graph (no self loops, -1 padded
    to width R), the insertion order and the medoid (the point closest to the mean)."""
    n = len(x)
    rng = np.random.default_rng(seed)
    r0 = min(R, n - 1)
    init = np.full((n, R), -1, np.int32)
    for i in range(n):                          # random out-neighbours, no self loops
        nb = rng.choice(n - 1, r0, replace=False)
        nb[nb >= i] += 1
        init[i, :r0] = nb
    medoid = int(np.argmin(((x - x.mean(0)) ** 2).sum(1)))
    return init, rng.permutation(n).astype(np.int64), medoid


def build_pruned(vectors: np.ndarray, alpha: float = 1.2, R: int | None = None, entry: int = 0) -> Graph:
    """DiskANN's "slow preprocessing" graph: N(p) = RobustPrune(p, every other point, alpha, R) for each p,
    no search involved (O(n^2 R d)); small sets only. With R = n - 1 (default) it is exactly navigable:
    a pruned y has a kept neighbour z with d(z, y) <= d(p, y) / alpha. It pins RobustPrune down alone."""
    x = _check_vectors(vectors)
    n = len(x)
    require(n <= 5000, "vectors.n", n, "at most 5000 points for the brute-force pruned graph")
    require(alpha >= 1.0, "alpha", alpha, "a float >= 1")
    R = n - 1 if R is None else int(R)
    require(1 <= R <= n - 1, "R", R, f"an integer in [1, n-1={n - 1}]")
    adj = np.full((n, R), -1, np.int32)
    cand = np.arange(n, dtype=np.int32)
    out = np.empty(R, np.int32)
    xd = x.astype(np.float64)
    for p in range(n):
        cd = np.sqrt(((xd - xd[p]) ** 2).sum(1))
        cnt = _robust_prune(x, p, cand, cd, n, float(alpha), R, out)
        adj[p, :cnt] = out[:cnt]
    width = max(int((adj >= 0).sum(1).max()), 1)
    return Graph(x, np.ascontiguousarray(adj[:, :width]), int(entry), flat_upper(n), "pruned",
                 {"alpha": alpha, "R": R})


# ------------------------------------------------------------------------------------------ navigable
@njit(cache=True)
def _navigable(D):
    """Greedy set cover per node: z covers target y for node x if D[z, y] < D[x, y]."""
    n = D.shape[0]
    nbrs = np.full((n, n), -1, np.int32)
    deg = np.zeros(n, np.int32)
    for x in range(n):
        unc = np.ones(n, np.bool_)
        unc[x] = False
        left = n - 1
        count = np.zeros(n, np.int64)
        for z in range(n):
            if z == x:
                continue
            c = 0
            for y in range(n):
                if unc[y] and D[z, y] < D[x, y]:
                    c += 1
            count[z] = c
        count[x] = -1
        while left > 0:
            best = 0
            for z in range(1, n):
                if count[z] > count[best]:
                    best = z
            nbrs[x, deg[x]] = best
            deg[x] += 1
            count[best] = -1
            for y in range(n):
                if unc[y] and D[best, y] < D[x, y]:
                    unc[y] = False
                    left -= 1
                    for z in range(n):
                        if count[z] > 0 and D[z, y] < D[x, y]:
                            count[z] -= 1
    return nbrs, deg


def build_navigable(vectors: np.ndarray, entry: int = 0) -> Graph:
    """Exactly navigable graph on a small set (n <= 2000): greedy set cover of every node's targets."""
    x = _check_vectors(vectors)
    n = len(x)
    require(n <= 2000, "vectors.n", n, "at most 2000 points for the exactly navigable graph (O(n^3) build)")
    xd = x.astype(np.float64)
    sq = (xd * xd).sum(1)
    D = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * xd @ xd.T, 0.0))
    np.fill_diagonal(D, 0.0)
    nbrs, deg = _navigable(D)
    adj = np.ascontiguousarray(nbrs[:, :max(int(deg.max()), 1)])
    return Graph(x, adj, int(entry), flat_upper(n), "navigable", {"mean_degree": float(deg.mean())})


def is_navigable(graph: Graph) -> bool:
    """True if every node has, for every other node y, a neighbour strictly closer to y."""
    x = graph.vectors.astype(np.float64)
    sq = (x * x).sum(1)
    D = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0.0))
    np.fill_diagonal(D, 0.0)
    for i in range(graph.n):
        nb = graph.adj[i][graph.adj[i] >= 0]
        if len(nb) == 0:
            return False
        closer = (D[nb] < D[i][None, :]).any(0)
        closer[i] = True
        if not closer.all():
            return False
    return True
