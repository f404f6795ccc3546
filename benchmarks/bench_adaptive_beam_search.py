"""Adaptive Beam Search benchmark: Pareto tables (distance computations at target recall@10,
adaptive vs fixed-width beam search, same graph, same routine) for faiss HNSW and Vamana graphs,
plus queries per CPU-second of our numba search next to faiss's own HNSW search (1 thread), all from one run.

Run: .venv/bin/python benchmarks/bench_adaptive_beam_search.py [--embeddings] [--n 20000]
(--embeddings adds the MiniLM pydoc_data set: several CPU-minutes to embed.)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--embeddings", action="store_true")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--queries", type=int, default=1000)
    a = ap.parse_args()
    sets = {"clustered": VectorSetParams(kind="clustered", n=a.n, d=64, n_queries=a.queries),
            "gaussian": VectorSetParams(kind="gaussian", n=a.n, d=128, n_queries=a.queries)}
    if a.embeddings:
        sets = {"pydoc_minilm": VectorSetParams(kind="pydoc_minilm", n=a.n, n_queries=a.queries), **sets}
    sp = SweepParams()
    print(f"{'data':13s} {'graph':7s} {'target':>6s} {'beam dc':>8s} {'abs dc':>8s} {'abs/beam':>8s} "
          f"{'abs qps':>8s} {'faiss qps':>9s} {'ours/faiss':>10s} {'build s':>7s} {'peak MB':>7s}")
    for name, vp in sets.items():
        d = make_vector_set(vp)
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
            for t in TARGETS:
                tag = f"r{int(round(t * 100)):03d}"
                fq = pareto.value_at([r[0] for r in fr], [r[1] for r in fr], [r[2] for r in fr], t)
                aq = m[f"abs_qps_{tag}"]
                print(f"{name:13s} {graph:7s} {t:6.2f} {m[f'beam_dc_{tag}']:8.1f} {m[f'abs_dc_{tag}']:8.1f} "
                      f"{m[f'abs_dc_{tag}'] / m[f'beam_dc_{tag}'] if m[f'beam_dc_{tag}'] else math.nan:8.3f} "
                      f"{aq:8.0f} {fq:9.0f} {aq / fq if fq == fq else math.nan:10.2f} {build:7.1f} {peak_mb():7.0f}")


if __name__ == "__main__":
    main()
