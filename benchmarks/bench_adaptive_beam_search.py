"""Adaptive Beam Search benchmark: Pareto tables (distance computations at target recall@10,
adaptive vs fixed-width beam search, same graph, same routine) for faiss HNSW and Vamana graphs,
plus queries per CPU-second of our numba search next to faiss's own HNSW search (1 thread), all from one run,
and the kernel profile: at equal efSearch on faiss's own graph (so equal distance computations, checked),
our beam search's queries per CPU-second over faiss's, per data set (its ratio is what the kernel costs).

Run: .venv/bin/python benchmarks/bench_adaptive_beam_search.py [--embeddings] [--passages] [--n 20000]
(--embeddings adds the MiniLM pydoc_data windows, --passages the paper's regime: MiniLM embeddings of
non-overlapping passages with held-out and out-of-distribution queries; each several CPU-minutes to embed.)
"""
from __future__ import annotations

import argparse
import math
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from components.algorithms.adaptive_beam_search import pareto  # noqa: E402
from components.algorithms.adaptive_beam_search.technique import (TARGETS, SweepParams, make_graph, run_rule,  # noqa: E402
                                                                  summarise)
from components.data.embeddings import VectorSetParams, make_vector_set  # noqa: E402


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def faiss_curve(base, q, gt, k=10, efs=(10, 12, 16, 20, 25, 32, 40, 48, 64, 96, 128, 192, 256)):
    import faiss

    from components.algorithms.adaptive_beam_search.api import recall_at_k
    from components.algorithms.adaptive_beam_search.graphs import build_hnsw

    _, index = build_hnsw(base)
    faiss.omp_set_num_threads(1)
    rows = []
    for ef in efs:
        index.hnsw.efSearch = ef
        faiss.cvar.hnsw_stats.reset()
        t0 = time.process_time()                 # CPU time, like our search's qps
        _, ids = index.search(q, k)
        dt = time.process_time() - t0
        rows.append((faiss.cvar.hnsw_stats.ndis / len(q), float(recall_at_k(ids, gt, k).mean()), len(q) / dt))
    return rows


def kernel_vs_faiss(name, base, q, efs=(16, 32, 64, 128), repeats=3):
    """Same faiss graph, same efSearch: distance computations per query (ours, faiss) and qps ratio."""
    import faiss

    from components.algorithms.adaptive_beam_search.api import search
    from components.algorithms.adaptive_beam_search.graphs import build_hnsw

    g, index = build_hnsw(base)
    faiss.omp_set_num_threads(1)
    search(g, q[:2], 10, "beam", efs[0])                       # compile outside the timing
    for ef in efs:
        index.hnsw.efSearch = ef
        ft = math.inf
        for _ in range(repeats):
            faiss.cvar.hnsw_stats.reset()
            t0 = time.process_time()
            index.search(q, 10)
            ft = min(ft, time.process_time() - t0)
        fdc = faiss.cvar.hnsw_stats.ndis / len(q)
        ours = max((search(g, q, 10, "beam", ef) for _ in range(repeats)), key=lambda r: r.qps)
        print(f"{name:13s} {ef:6d} {ours.n_dist.mean():8.1f} {fdc:8.1f} {ours.qps:9.0f} {len(q) / ft:9.0f} "
              f"{ours.qps * ft / len(q):10.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--embeddings", action="store_true")
    ap.add_argument("--passages", action="store_true")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--queries", type=int, default=1000)
    a = ap.parse_args()
    sets = {"clustered": VectorSetParams(kind="clustered", n=a.n, d=64, n_queries=a.queries),
            "gaussian": VectorSetParams(kind="gaussian", n=a.n, d=128, n_queries=a.queries)}
    if a.embeddings:
        sets = {"pydoc_minilm": VectorSetParams(kind="pydoc_minilm", n=a.n, n_queries=a.queries), **sets}
    data = {name: make_vector_set(vp) for name, vp in sets.items()}
    if a.passages:
        from components.algorithms.adaptive_beam_search.passages import PassageParams, make_passage_set

        d = make_passage_set(PassageParams(n=min(a.n, 6000), n_queries=min(a.queries, 500), n_ood=min(a.queries, 500)))
        data = {"passages": d, "passages_ood": {**d, "queries": d["ood_queries"], "gt_ids": d["ood_gt_ids"]}, **data}
    print("## kernel profile: our beam search vs faiss's on faiss's graph, equal efSearch, 1 thread (CPU time)")
    print(f"{'data':13s} {'ef':>6s} {'ours dc':>8s} {'faiss dc':>8s} {'ours qps':>9s} {'faiss qps':>9s} {'ours/faiss':>10s}")
    for name, d in data.items():
        kernel_vs_faiss(name, d["base"], d["queries"])
    print()
    sp = SweepParams()
    print(f"{'data':13s} {'graph':7s} {'target':>6s} {'beam dc':>8s} {'abs dc':>8s} {'abs/beam':>8s} "
          f"{'abs qps':>8s} {'faiss qps':>9s} {'ours/faiss':>10s} {'build s':>7s} {'peak MB':>7s}")
    for name, d in data.items():
        q, gt = d["queries"], d["gt_ids"]
        fr = faiss_curve(d["base"], q, gt)
        for graph in ("hnsw", "vamana"):
            sp.graph = graph
            t0 = time.perf_counter()
            g = make_graph(sp, d["base"])
            build = time.perf_counter() - t0
            rb = run_rule(g, q, gt, 10, "beam", sp.widths)
            ra = run_rule(g, q, gt, 10, "adaptive", sp.gammas)
            m = summarise(rb, ra)
            greedy = next(r["recall"] for r in ra if r["param"] == 0.0)
            print(f"{name:13s} {graph:7s} greedy (b = k) recall@10 {greedy:.4f} (premise: below the target)")
            for t in TARGETS:
                tag = f"r{int(round(t * 100)):03d}"
                fq = pareto.value_at([r[0] for r in fr], [r[1] for r in fr], [r[2] for r in fr], t)
                aq = m[f"abs_qps_{tag}"]
                print(f"{name:13s} {graph:7s} {t:6.2f} {m[f'beam_dc_{tag}']:8.1f} {m[f'abs_dc_{tag}']:8.1f} "
                      f"{m[f'abs_dc_{tag}'] / m[f'beam_dc_{tag}'] if m[f'beam_dc_{tag}'] else math.nan:8.3f} "
                      f"{aq:8.0f} {fq:9.0f} {aq / fq if fq == fq else math.nan:10.2f} {build:7.1f} {peak_mb():7.0f}")


if __name__ == "__main__":
    main()
