"""Registered techniques for the ``adaptive_beam_search`` experiment; each reads its data set as the
prepared input ``data`` (prepare step ``ann_vectors``; a variant binds it with ``inputs: {data: ENTRY}``).

- ``abs_sweep``: on one prepared data set and one graph (faiss HNSW level 0 with faiss's upper-level
  descent, or Vamana from its medoid) built from ``ctx.seed``, sweep fixed-width beam search over b
  and Adaptive Beam Search over gamma with the same search routine, and report distance
  computations at target recalls. Both stop rules are the measurement (two Pareto curves on the
  very same graph object in one process), so the comparison within a seed is exact. ``queries: ood``
  searches a data set's out-of-distribution queries (``abs_passages``); ``greedy_recall`` (gamma 0 = b = k)
  is the paper's premise, measured: below the target recall, a stop rule has something to save.
- ``faiss_hnsw``: faiss's own HNSW search (efSearch sweep, 1 thread) for absolute queries/s, on the
  index built from the same seed (the same graph abs_sweep searches).
- ``abs_navigable``: the guarantee check on an exactly navigable graph (gamma >= 2 exact; measured
  d_(k) / true k-th distance <= 2 / gamma below that). Deterministic: no seed enters it.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from components.algorithms.adaptive_beam_search import pareto
from components.algorithms.adaptive_beam_search.api import recall_at_k, search
from components.algorithms.adaptive_beam_search.graphs import build_hnsw, build_navigable, build_vamana
from components.core.errors import require
from components.core.registry import technique
from components.core.result import Result
from components.data.embeddings import VectorSetParams, exact_knn

TARGETS = (0.90, 0.95, 0.98, 0.99)
_DC = "distance computations per query"  # the x of the recall curves


def _tag(t: float) -> str:
    return f"r{int(round(t * 100)):03d}"


def _validate_data(p, exp: dict) -> None:
    """k against every ann_vectors / abs_passages entry a variant may bind as ``data`` (before Ray starts)."""
    from components.algorithms.adaptive_beam_search.passages import PassageParams

    steps = {"ann_vectors": VectorSetParams(), "abs_passages": PassageParams()}
    for name, spec in (exp.get("prepare") or {}).items():
        if not (isinstance(spec, dict) and spec.get("step") in steps):
            continue
        defaults = steps[spec["step"]]
        prm = spec.get("params") or {}
        n, k_gt = int(prm.get("n", defaults.n)), int(prm.get("k_gt", defaults.k_gt))
        require(p.k <= n, "k", p.k, f"at most the size n={n} of prepare entry {name}")
        require(p.k <= k_gt, "k", p.k, f"at most the ground-truth depth k_gt={k_gt} of prepare entry {name}")


def _queries(d: dict, limit: int | None, which: str = "in"):
    """The query set ``which`` ("in": held-out, "ood": out-of-distribution) and its ground truth."""
    key = "queries" if which == "in" else "ood_queries"
    require(key in d, "queries", which, "'in' (this data set has no out-of-distribution queries)")
    q, gi = d[key], d["gt_ids" if which == "in" else "ood_gt_ids"]
    if limit is not None:
        q, gi = q[:limit], gi[:limit]
    return np.ascontiguousarray(q), gi


# ------------------------------------------------------------------------------------------ sweep
@dataclass
class SweepParams:
    graph: Literal["hnsw", "vamana"] = "hnsw"
    k: int = 10
    M: int = 16                               # HNSW
    ef_construction: int = 100
    R: int = 32                               # Vamana
    L: int = 64
    alpha: float = 1.2
    widths: list[int] = field(default_factory=lambda: [10, 11, 12, 13, 14, 16, 18, 20, 22, 25, 28, 32, 36, 40, 48, 56,
                                                       64, 80, 96, 128, 160, 192, 256])
    gammas: list[float] = field(default_factory=lambda: [0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1,
                                                         0.12, 0.14, 0.17, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0])
    n_queries: int | None = None              # None: all prepared queries
    queries: Literal["in", "ood"] = "in"      # held-out queries, or the out-of-distribution set (abs_passages)
    repeats: int = 1                          # timing repeats (best of) for queries/s

    def check(self):
        require(self.k >= 1, "k", self.k, "a positive integer")
        require(len(self.widths) >= 2 and all(int(w) >= self.k for w in self.widths), "widths", self.widths,
                f"at least 2 beam widths, each >= k={self.k}")
        require(len(self.gammas) >= 2 and all(g >= 0 and math.isfinite(g) for g in self.gammas), "gammas",
                self.gammas, "at least 2 slacks, each gamma >= 0")
        require(self.M >= 2 and self.ef_construction >= 1, "M", self.M, "M >= 2 and ef_construction >= 1")
        require(self.R >= 2 and self.L >= self.R and self.alpha >= 1, "R", (self.R, self.L, self.alpha),
                "R >= 2, L >= R, alpha >= 1")
        require(self.n_queries is None or self.n_queries >= 1, "n_queries", self.n_queries, "null or a positive integer")
        require(self.repeats >= 1, "repeats", self.repeats, "a positive integer")


def make_graph(p: SweepParams, base: np.ndarray, seed: int = 0):
    """The graph ``p.graph`` over ``base``; ``seed`` drives HNSW's level draws / Vamana's order."""
    if p.graph == "hnsw":
        return build_hnsw(base, M=p.M, ef_construction=p.ef_construction, seed=seed)[0]
    return build_vamana(base, R=p.R, L=p.L, alpha=p.alpha, seed=seed)


def run_rule(g, q, gt, k, rule, values, repeats=1, progress=None) -> list[dict]:
    """One sweep: per parameter value recall@k, mean/percentile distance computations, queries/s."""
    rows = []
    search(g, q[:2], k, rule, values[0])                       # compile / warm up outside the timing
    for i, v in enumerate(values):
        best = None
        for _ in range(repeats):
            res = search(g, q, k, rule, v)
            best = res if best is None or res.qps > best.qps else best
        rec = recall_at_k(best.ids, gt, k)
        rows.append({"rule": rule, "param": float(v), "recall": float(rec.mean()), "recall_min": float(rec.min()),
                     "dist_comps": float(best.n_dist.mean()), "dist_comps_p95": float(np.percentile(best.n_dist, 95)),
                     "qps": float(best.qps)})
        if progress:
            progress(i + 1, len(values), recall=rows[-1]["recall"])
    return rows


def summarise(rows_b: list[dict], rows_a: list[dict], targets=TARGETS) -> dict:
    m = {}
    for name, rows in (("beam", rows_b), ("abs", rows_a)):
        c = [r["dist_comps"] for r in rows]
        rc = [r["recall"] for r in rows]
        m[f"{name}_max_recall"] = max(rc)
        for t in targets:
            m[f"{name}_dc_{_tag(t)}"] = pareto.cost_at(c, rc, t)
            m[f"{name}_qps_{_tag(t)}"] = pareto.value_at(c, rc, [r["qps"] for r in rows], t)
    for t in targets:
        b, a = m[f"beam_dc_{_tag(t)}"], m[f"abs_dc_{_tag(t)}"]
        m[f"saving_{_tag(t)}"] = 1.0 - a / b if b == b and a == a else math.nan
    return m


@technique("abs_sweep", family="algorithms", params=SweepParams, validate=_validate_data, inputs=("data",),
           summary="Adaptive Beam Search vs fixed-width beam search on one graph (faiss HNSW level 0 or Vamana): "
                   "recall@k against distance computations over gamma and b sweeps (arXiv 2505.15636).")
def run_abs_sweep(p: SweepParams, ctx) -> Result:
    d = ctx.input("data")
    base = d["base"]
    require(p.k <= len(base), "k", p.k, f"at most the data set's size n={len(base)}")
    q, gt = _queries(d, p.n_queries, p.queries)
    t0 = time.perf_counter()
    g = make_graph(p, base, ctx.seed)
    build_s = time.perf_counter() - t0
    total = len(p.widths) + len(p.gammas)
    rows_b = run_rule(g, q, gt, p.k, "beam", [int(w) for w in p.widths], p.repeats,
                      lambda i, n, **kw: ctx.progress(i, total, **kw))
    rows_a = run_rule(g, q, gt, p.k, "adaptive", [float(x) for x in p.gammas], p.repeats,
                      lambda i, n, **kw: ctx.progress(len(p.widths) + i, total, **kw))
    m = summarise(rows_b, rows_a)
    # gamma = 0 must coincide with greedy = beam width k, result for result
    r0 = search(g, q, p.k, "adaptive", 0.0)
    rk = search(g, q, p.k, "beam", p.k)
    m["gamma0_equals_greedy"] = float(np.array_equal(r0.ids, rk.ids) and np.array_equal(r0.n_dist, rk.n_dist))
    # the paper's premise: greedy search alone stays below the target recall (else no rule can save anything)
    m["greedy_recall"] = float(recall_at_k(r0.ids, gt, p.k).mean())
    m["greedy_dc"] = float(r0.n_dist.mean())
    m.update(build_s=build_s, n=float(len(base)), n_queries=float(len(q)), mean_degree=float(g.degrees().mean()))
    curves = {"beam search (b)": ([r["dist_comps"] for r in rows_b], [r["recall"] for r in rows_b]),
              "adaptive (gamma)": ([r["dist_comps"] for r in rows_a], [r["recall"] for r in rows_a])}
    kind = d.get("info", {}).get("kind", "data") + ("_ood" if p.queries == "ood" else "")
    title = f"{kind} / {p.graph}: recall@{p.k} vs distance computations ({len(q)} queries, seed {ctx.seed})"
    return Result(metrics=m,
                  series={"beam_recall_vs_dc": ([r["dist_comps"] for r in rows_b], [r["recall"] for r in rows_b], _DC),
                          "abs_recall_vs_dc": ([r["dist_comps"] for r in rows_a], [r["recall"] for r in rows_a], _DC)},
                  tables={"sweep": rows_b + rows_a},
                  info={"graph": p.graph, "data": d.get("info", {}), "graph_info": g.info},
                  files={f"plots/pareto_{kind}_{p.graph}.png": pareto.pareto_png(curves, title)})


# ------------------------------------------------------------------------------------------ faiss
@dataclass
class FaissParams:
    k: int = 10
    M: int = 16
    ef_construction: int = 100
    ef_search: list[int] = field(default_factory=lambda: [10, 12, 14, 16, 20, 25, 32, 40, 48, 64, 80, 96, 128, 160,
                                                          192, 256])
    n_queries: int | None = None
    queries: Literal["in", "ood"] = "in"
    repeats: int = 1

    def check(self):
        require(self.k >= 1, "k", self.k, "a positive integer")
        require(len(self.ef_search) >= 2 and all(e >= 1 for e in self.ef_search), "ef_search", self.ef_search,
                "at least 2 positive efSearch values")
        require(self.n_queries is None or self.n_queries >= 1, "n_queries", self.n_queries, "null or a positive integer")
        require(self.repeats >= 1, "repeats", self.repeats, "a positive integer")


@technique("faiss_hnsw", family="algorithms", params=FaissParams, validate=_validate_data, inputs=("data",),
           summary="faiss IndexHNSWFlat's own search (efSearch sweep, 1 thread): the absolute reference for queries/s.")
def run_faiss_hnsw(p: FaissParams, ctx) -> Result:
    import faiss

    d = ctx.input("data")
    q, gt = _queries(d, p.n_queries, p.queries)
    _, index = build_hnsw(d["base"], M=p.M, ef_construction=p.ef_construction, seed=ctx.seed)
    faiss.omp_set_num_threads(1)
    rows = []
    for i, ef in enumerate(p.ef_search):
        index.hnsw.efSearch = int(ef)
        best = math.inf
        for _ in range(p.repeats):
            stats = faiss.cvar.hnsw_stats
            stats.reset()
            t0 = time.process_time()          # CPU time, like our search (1 OpenMP thread)
            _, ids = index.search(q, p.k)
            best = min(best, time.process_time() - t0)
        ndis = stats.ndis / len(q)
        rows.append({"ef_search": int(ef), "recall": float(recall_at_k(ids, gt, p.k).mean()), "dist_comps": float(ndis),
                     "qps": len(q) / best})
        ctx.progress(i + 1, len(p.ef_search))
    c, r, v = [x["dist_comps"] for x in rows], [x["recall"] for x in rows], [x["qps"] for x in rows]
    m = {"max_recall": max(r)}
    for t in TARGETS:
        m[f"faiss_dc_{_tag(t)}"] = pareto.cost_at(c, r, t)
        m[f"faiss_qps_{_tag(t)}"] = pareto.value_at(c, r, v, t)
    return Result(metrics=m, series={"faiss_recall_vs_dc": (c, r, _DC)}, tables={"ef_sweep": rows},
                  info={"threads": 1})


# ------------------------------------------------------------------------------------------ navigable
@dataclass
class NavigableParams:
    n: int = 1000                          # base points (first n of the prepared set)
    k: int = 10
    n_queries: int | None = 300
    gammas: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0])

    def check(self):
        require(2 <= self.n <= 2000, "n", self.n, "an integer in [2, 2000] (the exact construction is O(n^3))")
        require(1 <= self.k <= self.n, "k", self.k, f"an integer in [1, n={self.n}]")
        require(all(g >= 0 for g in self.gammas) and any(g >= 2 for g in self.gammas), "gammas", self.gammas,
                "slacks >= 0 including at least one >= 2 (the exactness check)")
        require(self.n_queries is None or self.n_queries >= 1, "n_queries", self.n_queries, "null or a positive integer")


@technique("abs_navigable", family="algorithms", params=NavigableParams, validate=_validate_data, inputs=("data",),
           summary="ABS guarantee on an exactly navigable graph: gamma >= 2 returns the exact k-NN; below that the "
                   "k-th returned distance stays within 2/gamma of the true one.")
def run_abs_navigable(p: NavigableParams, ctx) -> Result:
    from components.algorithms.adaptive_beam_search.graphs import is_navigable

    d = ctx.input("data")
    base = d["base"][:p.n]
    q = d["queries"][:p.n_queries] if p.n_queries else d["queries"]
    gt, gd = exact_knn(base, q, p.k)
    g = build_navigable(base)
    nav = is_navigable(g)
    rows = []
    for gamma in p.gammas:
        res = search(g, q, p.k, "adaptive", gamma)
        rec = recall_at_k(res.ids, gt, p.k)
        ratio = res.distances[:, -1].astype(np.float64) / np.maximum(gd[:, -1].astype(np.float64), 1e-30)
        bound = 2.0 / gamma if gamma > 0 else math.inf
        rows.append({"gamma": gamma, "recall": float(rec.mean()), "recall_min": float(rec.min()),
                     "dist_comps": float(res.n_dist.mean()), "max_kth_ratio": float(ratio.max()), "bound": bound})
    exact = [r for r in rows if r["gamma"] >= 2]
    approx = [r for r in rows if 0 < r["gamma"] < 2]
    m = {"is_navigable": float(nav), "mean_degree": float(g.degrees().mean()),
         "min_recall_gamma_ge2": min(r["recall_min"] for r in exact),
         "max_ratio_over_bound": max((r["max_kth_ratio"] / r["bound"] for r in approx), default=0.0),
         "recall_gamma0": next((r["recall"] for r in rows if r["gamma"] == 0), math.nan)}
    return Result(metrics=m, tables={"gammas": rows}, series={"recall_vs_gamma": ([r["gamma"] for r in rows],
                                                                                  [r["recall"] for r in rows], "gamma")})
