"""Adaptive Beam Search: stop rules on a hand-built graph, agreement with a pure-Python reference,
gamma = 0 == greedy, the navigable-graph guarantee, real HNSW/Vamana graphs, and bad input."""
from __future__ import annotations

import heapq

import numpy as np
import pytest

from components.algorithms.adaptive_beam_search import (Graph, build_graph, is_navigable, load_graph, recall_at_k,
                                                        search)
from components.algorithms.adaptive_beam_search.graphs import build_hnsw, flat_upper
from components.core.errors import ConfigError
from components.data.embeddings import clustered, exact_knn


def _line_graph() -> Graph:
    """Points on a line. From entry 0 (at 0) a chain 1-2-3 leads to 3 (at 3); a detour through 4
    (at -3) reaches 5 (at 4.2). Query 4.6: d = 4.6, 3.6, 2.6, 1.6, 7.6, 0.4."""
    pos = np.array([[0.0], [1.0], [2.0], [3.0], [-3.0], [4.2]], np.float32)
    adj = np.array([[1, 4], [0, 2], [1, 3], [2, -1], [0, 5], [4, -1]], np.int32)
    return Graph(pos, adj, 0, flat_upper(6), "hand")


Q = np.array([[4.6]], np.float32)


def test_stop_rules_on_hand_built_graph():
    g = _line_graph()
    # greedy: expands 0, 1, 2, 3; pops 4 (7.6 > 1.6) and stops: 0,1,4,2,3 were measured -> 5
    r = search(g, Q, k=1, rule="greedy")
    assert r.ids.tolist() == [[3]] and r.n_dist.tolist() == [5]
    assert np.isclose(r.distances[0, 0], 1.6, atol=1e-6)
    # beam b = 3 keeps 3.6 as its 3rd best, so 4 (7.6) is still beyond it: same answer, same count
    r = search(g, Q, k=1, rule="beam", param=3)
    assert r.ids.tolist() == [[3]] and r.n_dist.tolist() == [5]
    # adaptive gamma = 1: 7.6 > 2 * 1.6 -> stop, like greedy
    r = search(g, Q, k=1, rule="adaptive", param=1.0)
    assert r.ids.tolist() == [[3]] and r.n_dist.tolist() == [5]
    # adaptive gamma = 4: 7.6 <= 5 * 1.6 -> expands 4, discovers 5 (the true nearest neighbour)
    r = search(g, Q, k=1, rule="adaptive", param=4.0)
    assert r.ids.tolist() == [[5]] and r.n_dist.tolist() == [6]
    # k = 2 with greedy: 4 is popped at 7.6 > d_(2) = 2.6 -> stop; returns 3 then 2
    r = search(g, Q, k=2, rule="greedy")
    assert r.ids.tolist() == [[3, 2]]


def _reference(g: Graph, q: np.ndarray, k: int, rule: str, param) -> tuple[list[int], int]:
    """The spec sheet's loop, written plainly with heapq (flat graphs only)."""
    d = lambda i: float(np.sqrt(((g.vectors[i].astype(np.float64) - q) ** 2).sum()))  # noqa: E731
    m = int(param) if rule == "beam" else k
    slack = 1.0 + (float(param) if rule == "adaptive" else 0.0)
    disc = {g.entry: d(g.entry)}
    cand = [(disc[g.entry], g.entry)]
    while cand:
        dx, x = heapq.heappop(cand)
        best = sorted(disc.values())
        if rule == "beam" and len(best) >= m and dx > best[m - 1]:
            break
        if rule != "beam" and len(best) >= k and dx > slack * best[k - 1]:
            break
        for y in g.adj[x]:
            if y < 0:
                break
            if int(y) not in disc:
                disc[int(y)] = d(int(y))
                heapq.heappush(cand, (disc[int(y)], int(y)))
    return [i for i, _ in sorted(disc.items(), key=lambda t: t[1])[:k]], len(disc)


def test_kernel_matches_plain_reference_on_vamana():
    x = clustered(400, 8, 5, 0.5, seed=3)
    q = clustered(420, 8, 5, 0.5, seed=3)[400:].astype(np.float64)
    g = build_graph(x, "vamana", R=8, L=16, seed=0)
    for rule, param in (("beam", 10), ("beam", 24), ("adaptive", 0.0), ("adaptive", 0.15), ("greedy", None)):
        res = search(g, q, 10, rule, param)
        for i in range(len(q)):
            ids, nd = _reference(g, q[i], 10, rule, param)
            assert res.n_dist[i] == nd, (rule, param, i)
            assert set(res.ids[i].tolist()) == set(ids), (rule, param, i)


def test_gamma_zero_equals_greedy_on_hnsw():
    x = clustered(2000, 16, 10, 0.5, seed=1)
    q = clustered(2100, 16, 10, 0.5, seed=1)[2000:]
    g = build_graph(x, "hnsw", M=8, ef_construction=40)
    a = search(g, q, 10, "adaptive", 0.0)
    b = search(g, q, 10, "beam", 10)
    c = search(g, q, 10, "greedy")
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.ids, c.ids)
    assert np.array_equal(a.n_dist, b.n_dist) and np.array_equal(a.distances, c.distances)
    # more slack never costs fewer distance computations nor lowers recall (same entry, monotone rule)
    gi, _ = exact_knn(x, q, 10)
    r_lo, r_hi = search(g, q, 10, "adaptive", 0.05), search(g, q, 10, "adaptive", 0.5)
    assert r_hi.n_dist.mean() >= r_lo.n_dist.mean()
    assert recall_at_k(r_hi.ids, gi, 10).mean() >= recall_at_k(r_lo.ids, gi, 10).mean() > 0.5


def test_hnsw_graph_matches_faiss_counts():
    import faiss

    x = clustered(3000, 16, 10, 0.5, seed=2)
    q = clustered(3200, 16, 10, 0.5, seed=2)[3000:]
    g, index = build_hnsw(x, M=16, ef_construction=100)
    assert g.upper.shape[0] >= 1 and g.degrees().max() <= 32 and (g.adj < g.n).all()
    faiss.omp_set_num_threads(1)
    index.hnsw.efSearch = 32
    faiss.cvar.hnsw_stats.reset()
    _, fi = index.search(q, 10)
    ndis = faiss.cvar.hnsw_stats.ndis / len(q)
    ours = search(g, q, 10, "beam", 32)
    assert abs(ours.n_dist.mean() / ndis - 1) < 0.05
    gi, _ = exact_knn(x, q, 10)
    assert abs(recall_at_k(ours.ids, gi, 10).mean() - recall_at_k(fi, gi, 10).mean()) < 0.02


def test_navigable_graph_guarantee(tmp_path):
    x = clustered(250, 8, 4, 0.6, seed=5)
    q = clustered(330, 8, 4, 0.6, seed=5)[250:]
    g = build_graph(x, "navigable")
    assert is_navigable(g)
    gi, gd = exact_knn(x, q, 10)
    exact = search(g, q, 10, "adaptive", 2.0)
    assert (recall_at_k(exact.ids, gi, 10) == 1.0).all()
    for gamma in (0.25, 0.5, 1.0):
        r = search(g, q, 10, "adaptive", gamma)
        assert (r.distances[:, -1] <= (2 / gamma) * gd[:, -1] * (1 + 1e-5)).all()
    g.save(tmp_path / "g.npz")
    g2 = load_graph(tmp_path / "g.npz")
    assert np.array_equal(search(g2, q, 10, "adaptive", 2.0).ids, exact.ids)
    # a graph that is not navigable is recognised as such
    broken = Graph(g.vectors, np.where(np.arange(g.adj.shape[1])[None, :] == 0, g.adj, -1).astype(np.int32), 0,
                   flat_upper(g.n))
    assert not is_navigable(broken)


def test_vamana_structure():
    x = clustered(1500, 12, 8, 0.5, seed=4)
    g = build_graph(x, "vamana", R=16, L=32, alpha=1.2)
    deg = g.degrees()
    assert deg.max() <= 16 and deg.min() >= 1
    assert not any(i in g.adj[i] for i in range(g.n))
    q = clustered(1600, 12, 8, 0.5, seed=4)[1500:]
    gi, _ = exact_knn(x, q, 10)
    assert recall_at_k(search(g, q, 10, "beam", 64).ids, gi, 10).mean() > 0.95


@pytest.mark.parametrize("kwargs, key", [
    ({"k": 3, "rule": "beam", "param": 2}, "param"),          # width below k
    ({"k": 3, "rule": "adaptive", "param": -0.1}, "param"),   # negative gamma
    ({"k": 3, "rule": "adaptive", "param": float("nan")}, "param"),
    ({"k": 99, "rule": "greedy", "param": None}, "k"),        # k above the data set size
    ({"k": 0, "rule": "greedy", "param": None}, "k"),
    ({"k": 3, "rule": "fastest", "param": None}, "rule"),
])
def test_bad_search_input(kwargs, key):
    with pytest.raises(ConfigError) as e:
        search(_line_graph(), Q, **kwargs)
    assert e.value.key == key


def test_bad_graph_input():
    with pytest.raises(ConfigError):
        build_graph(np.zeros((0, 4), np.float32), "hnsw")          # empty
    with pytest.raises(ConfigError):
        build_graph(np.zeros((10, 4), np.float32), "kd-tree")
    with pytest.raises(ConfigError):
        search(_line_graph(), np.zeros((1, 3), np.float32), k=1, rule="greedy")   # dimension mismatch
    empty = Graph(np.zeros((0, 1), np.float32), np.zeros((0, 0), np.int32), 0, flat_upper(0))
    with pytest.raises(ConfigError):
        search(empty, Q, k=1, rule="greedy")


def test_sweep_and_faiss_search_the_graph_of_their_seed():
    from components.algorithms.adaptive_beam_search.technique import (FaissParams, SweepParams, run_abs_sweep,
                                                                      run_faiss_hnsw)
    from components.core.context import RunContext
    from components.core.params import parse_params
    from components.data.embeddings import VectorSetParams, make_vector_set

    # Prepare: one small data set (the prepared input "data"), our sweep and faiss at the same widths
    data = make_vector_set(VectorSetParams(kind="clustered", n=1500, d=16, n_clusters=10, n_queries=60, k_gt=20))
    widths = [10, 16, 32, 64]
    sweep = parse_params(SweepParams, {"M": 8, "ef_construction": 40, "widths": widths, "gammas": [0.0, 0.05, 0.2, 1.0]})
    faiss_p = parse_params(FaissParams, {"M": 8, "ef_construction": 40, "ef_search": widths})
    # Execute
    runs = {seed: (run_abs_sweep(sweep, RunContext(seed=seed, inputs={"data": data})),
                   run_faiss_hnsw(faiss_p, RunContext(seed=seed, inputs={"data": data}))) for seed in (0, 1)}
    # Assert: on one seed, beam width b on our graph = faiss's efSearch b on its index (same recall,
    # distance counts within the entry point faiss does not count); another seed builds another graph
    for ours, theirs in runs.values():
        beam = [r for r in ours.tables["sweep"] if r["rule"] == "beam"]
        for b, f in zip(beam, theirs.tables["ef_sweep"]):
            assert b["recall"] == f["recall"] and abs(b["dist_comps"] - f["dist_comps"]) <= 1.0
        assert ours.metrics["gamma0_equals_greedy"] == 1.0
    assert runs[0][0].metrics["mean_degree"] != runs[1][0].metrics["mean_degree"]
    with pytest.raises(ConfigError, match="data"):
        run_abs_sweep(sweep, RunContext(seed=0))


def test_visited_stamps_carry_across_calls_and_wrap():
    import pickle

    # Prepare: one graph, a batch of queries
    x = clustered(600, 8, 5, 0.5, seed=6)
    q = clustered(640, 8, 5, 0.5, seed=6)[600:]
    g = build_graph(x, "vamana", R=8, L=16, seed=0)
    batch = search(g, q, 10, "adaptive", 0.1)
    # Execute: the same queries one call each (the service path), then across a forced int32 wrap, then
    # on a pickled copy (its scratch stays behind)
    one = [search(g, qi, 10, "adaptive", 0.1) for qi in q]
    visited_before = g._visited
    g._stamp = 2**31 - 5
    wrapped = search(g, q, 10, "adaptive", 0.1)
    copy = pickle.loads(pickle.dumps(g))
    # Assert: identical answers and counts every time; one array reused, reset only on the wrap
    for r in [wrapped, search(copy, q, 10, "adaptive", 0.1)]:
        assert np.array_equal(r.ids, batch.ids) and np.array_equal(r.n_dist, batch.n_dist)
    assert np.array_equal(np.concatenate([r.ids for r in one]), batch.ids)
    assert np.array_equal(np.concatenate([r.n_dist for r in one]), batch.n_dist)
    assert g._visited is not visited_before and g._stamp == len(q) and copy._stamp == len(q)
