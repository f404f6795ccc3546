"""RobustPrune and the Vamana construction against DiskANN's definitions, written out plainly: a
hand-checked prune on a line, the brute-force pruned graph (N(p) = RobustPrune(p, all others, alpha, R))
node for node, and the whole two-pass build on a few dozen points, neighbour set for neighbour set."""
from __future__ import annotations

import numpy as np
import pytest

from components.algorithms.adaptive_beam_search import is_navigable, search
from components.algorithms.adaptive_beam_search.graphs import (_robust_prune, _vamana, build_pruned, build_vamana,
                                                               vamana_start)
from components.data.embeddings import clustered


def _d(x, a, b) -> float:
    return float(np.sqrt(((x[a].astype(np.float64) - x[b]) ** 2).sum()))


def robust_prune_by_definition(x, p, V, alpha, R) -> list[int]:
    """DiskANN (Subramanya et al. 2019), Algorithm 2: V <- V \\ {p}; repeatedly move the closest p* of V
    to N(p) (stop at R) and drop every p' of V with alpha * d(p*, p') <= d(p, p')."""
    V, out = set(int(v) for v in V) - {p}, []
    while V:
        star = min(V, key=lambda v: (_d(x, p, v), v))
        out.append(star)
        if len(out) == R:
            break
        V = {v for v in V if not alpha * _d(x, star, v) <= _d(x, p, v)}
    return out


def _prune(x, p, V, alpha, R) -> list[int]:
    V = np.asarray(V, np.int32)
    cd = np.array([_d(x, p, v) for v in V])
    out = np.empty(R, np.int32)
    return out[:_robust_prune(x, p, V, cd, len(V), float(alpha), R, out)].tolist()


def test_robust_prune_on_a_line_by_hand():
    # Prepare: p = 0 at 0; candidates at 1, 2, 5 (ids 1, 2, 3), p itself and a duplicate of id 2 in V
    x = np.array([[0.0], [1.0], [2.0], [5.0]], np.float32)
    V = [3, 2, 0, 1, 2]
    # Execute / Assert: p* = 1 is kept first. alpha 1: d(1,2) = 1 <= 2 and d(1,5) = 4 <= 5 drop both.
    assert _prune(x, 0, V, 1.0, 3) == [1]
    # alpha 1.2: 1.2 <= 2 and 4.8 <= 5 still drop both
    assert _prune(x, 0, V, 1.2, 3) == [1]
    # alpha 2: 2 * 1 <= 2 drops 2 (the rule is <=), 2 * 4 = 8 > 5 keeps 5
    assert _prune(x, 0, V, 2.0, 3) == [1, 3]
    # R = 1 stops after the first
    assert _prune(x, 0, V, 2.0, 1) == [1]


def test_brute_force_pruned_graph_matches_the_definition():
    # Prepare: 36 points in 3 clusters, every alpha the experiment uses and a tight degree bound
    x = clustered(36, 3, 3, 0.6, seed=11)
    for alpha, R in ((1.0, 35), (1.2, 35), (1.2, 4), (1.5, 6)):
        # Execute
        g = build_pruned(x, alpha=alpha, R=R)
        # Assert: every node's neighbour list is the definition's, in the same (kept) order
        for p in range(len(x)):
            ours = [int(v) for v in g.adj[p] if v >= 0]
            assert ours == robust_prune_by_definition(x, p, range(len(x)), alpha, R), (alpha, R, p)
    # unbounded degree: every pruned y has a kept neighbour closer to it, so the graph is navigable and
    # greedy search from node 0 finds every base point exactly
    g = build_pruned(x, alpha=1.2)
    assert is_navigable(g)
    res = search(g, x, k=1, rule="greedy")
    assert res.ids[:, 0].tolist() == list(range(len(x)))


def _greedy_search_by_definition(x, N, s, p, L) -> list[int]:
    """DiskANN Algorithm 1 GreedySearch(s, x_p, L): returns the visited (expanded) nodes in order."""
    pool, visited, seen = {s}, [], {s}
    while True:
        fresh = [u for u in pool if u not in visited]
        if not fresh:
            return visited
        u = min(fresh, key=lambda v: (_d(x, p, v), v))
        visited.append(u)
        for y in N[u]:
            if y not in seen:
                seen.add(y)
                pool.add(y)
        if len(pool) > L:
            pool = set(sorted(pool, key=lambda v: (_d(x, p, v), v))[:L])


def vamana_by_definition(x, R, L, alpha, init, order, medoid) -> list[list[int]]:
    """DiskANN Algorithm 3: two passes (alpha 1, then alpha) of GreedySearch + RobustPrune + back edges."""
    N = [[int(v) for v in row if v >= 0] for row in init]
    for a in (1.0, alpha):
        for p in order:
            p = int(p)
            N[p] = robust_prune_by_definition(x, p, _greedy_search_by_definition(x, N, medoid, p, L) + N[p], a, R)
            for j in N[p]:
                if p not in N[j]:
                    N[j] = N[j] + [p] if len(N[j]) < R else robust_prune_by_definition(x, j, N[j] + [p], a, R)
    return N


@pytest.mark.parametrize("alpha, R, L", [(1.2, 6, 10), (1.0, 5, 12)])
def test_vamana_build_matches_the_definition(alpha, R, L):
    # Prepare: 48 points, the same random start and order for both builds
    x = clustered(48, 4, 3, 0.5, seed=7)
    init, order, medoid = vamana_start(x, R, seed=3)
    # Execute
    ours = build_vamana(x, R=R, L=L, alpha=alpha, seed=3)
    ref = vamana_by_definition(x, R, L, alpha, init, order, medoid)
    # Assert: the same neighbour set at every node, and build_vamana uses exactly that start
    assert ours.entry == medoid
    assert np.array_equal(ours.adj, _vamana(x, R, L, alpha, order, init, min(R, len(x) - 1), medoid))
    for p in range(len(x)):
        assert set(int(v) for v in ours.adj[p] if v >= 0) == set(ref[p]), p
