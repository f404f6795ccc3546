"""Public API: build (or load) a graph, then search with a named stop rule.

    from components.algorithms.adaptive_beam_search import build_graph, search
    g = build_graph(vectors, "hnsw", M=16, ef_construction=100)        # or "vamana", "navigable"
    res = search(g, queries, k=10, rule="adaptive", param=0.1)          # ABS with slack gamma = 0.1
    res.ids, res.distances, res.n_dist                                  # (q, k), (q, k), (q,)

Rules: ``"beam"`` (param = beam width b >= k, HNSW's ef), ``"adaptive"`` (param = gamma >= 0),
``"greedy"`` (no param; = adaptive with gamma 0 = beam with b = k).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from components.algorithms.adaptive_beam_search.graphs import (Graph, build_hnsw, build_navigable, build_vamana,
                                                               load_graph)
from components.algorithms.adaptive_beam_search.search import RULE_ADAPTIVE, RULE_BEAM, search_batch_kernel
from components.core.errors import ConfigError, require

RULES = ("beam", "adaptive", "greedy")
GRAPHS = ("hnsw", "vamana", "navigable")


@dataclass
class SearchResult:
    ids: np.ndarray          # int32 (q, k), closest first; -1 where fewer than k nodes were reachable
    distances: np.ndarray    # float32 (q, k), L2
    n_dist: np.ndarray       # int64 (q,), distance computations per query (descent + level 0)
    seconds: float           # wall time of the batch (compiled kernel only)
    cpu_seconds: float = 0.0  # process CPU time of the batch (robust on a shared machine)

    @property
    def qps(self) -> float:
        """Queries per CPU-second (one thread; CPU time, since this machine is shared)."""
        return len(self.n_dist) / max(self.cpu_seconds or self.seconds, 1e-12)


def build_graph(vectors: np.ndarray, kind: str = "hnsw", **params) -> Graph:
    """Build a search graph over ``vectors`` (n, d).

    kind ``hnsw``: faiss IndexHNSWFlat (params M=16, ef_construction=100, seed); ``vamana``: RobustPrune
    (R=32, L=64, alpha=1.2, seed); ``navigable``: exactly navigable, n <= 2000 (entry=0).
    A path string (``*.npz``) loads a graph saved with ``Graph.save``.
    """
    if isinstance(vectors, (str, bytes)) or hasattr(vectors, "__fspath__"):
        return load_graph(vectors)
    if kind == "hnsw":
        return build_hnsw(vectors, **params)[0]
    if kind == "vamana":
        return build_vamana(vectors, **params)
    if kind == "navigable":
        return build_navigable(vectors, **params)
    raise ConfigError("kind", kind, "one of " + ", ".join(GRAPHS))


def check_rule(rule: str, param, k: int, n: int | None = None) -> tuple[int, int, float]:
    """Validate (rule, param, k) and return the kernel's (rule code, width, gamma)."""
    require(isinstance(k, (int, np.integer)) and k >= 1, "k", k, "a positive integer")
    if n is not None:
        require(k <= n, "k", k, f"at most the number of indexed points ({n})")
    if rule == "beam":
        require(param is not None and float(param) == int(param) and int(param) >= k, "param", param,
                f"an integer beam width >= k={k} for rule 'beam'")
        return RULE_BEAM, int(param), 0.0
    if rule == "adaptive":
        require(param is not None and np.isfinite(float(param)) and float(param) >= 0, "param", param,
                "a slack gamma >= 0 for rule 'adaptive'")
        return RULE_ADAPTIVE, k, float(param)
    if rule == "greedy":
        require(param in (None, 0, 0.0), "param", param, "nothing (greedy takes no parameter)")
        return RULE_ADAPTIVE, k, 0.0
    raise ConfigError("rule", rule, "one of " + ", ".join(RULES))


def search(graph: Graph, queries: np.ndarray, k: int = 10, rule: str = "adaptive", param=None) -> SearchResult:
    """Best-first search of ``queries`` (q, d) or one query (d,) on ``graph`` with the named stop rule.

    Returns the k best discovered nodes per query and the number of distance computations,
    counted identically for every rule (see ``search.py``).
    """
    require(isinstance(graph, Graph), "graph", type(graph).__name__, "a Graph (build_graph or load_graph)")
    require(graph.n >= 1 and graph.adj.size >= 1, "graph", "empty", "a graph with at least one node")
    code, width, gamma = check_rule(rule, param, k, graph.n)
    q = np.asarray(queries, dtype=np.float32)
    if q.ndim == 1:
        q = q[None, :]
    require(q.ndim == 2 and q.shape[1] == graph.vectors.shape[1], "queries.shape", tuple(np.shape(queries)),
            f"(q, {graph.vectors.shape[1]}) or ({graph.vectors.shape[1]},) to match the graph's dimension")
    require(bool(np.isfinite(q).all()), "queries", "non-finite values", "finite floats")
    q = np.ascontiguousarray(q)
    ids = np.empty((len(q), k), np.int32)
    dist = np.empty((len(q), k), np.float32)
    nd = np.empty(len(q), np.int64)
    visited, stamp0 = graph.visited_stamps(len(q))
    t0, c0 = time.perf_counter(), time.process_time()
    search_batch_kernel(graph.vectors, graph.adj, graph.upper, graph.entry, q, k, code, width, gamma, ids, dist, nd,
                        visited, stamp0)
    return SearchResult(ids, dist, nd, time.perf_counter() - t0, time.process_time() - c0)


def recall_at_k(ids: np.ndarray, gt_ids: np.ndarray, k: int) -> np.ndarray:
    """Per-query recall@k: |returned k ∩ true k| / k."""
    g = gt_ids[:, :k]
    hit = (ids[:, :k, None] == g[:, None, :]).any(2).sum(1)
    return hit / k
