"""Sentence embeddings for prepare steps: the offline all-MiniLM-L6-v2 model, or a hashed bag of
words for debug flavours and unit tests (no model load; MiniLM takes ~20 s to load here).

Usage (inside a prepare step, so the vectors are computed once and cached)::

    from components.data.text_embeddings import embed
    vecs = embed(texts, model="minilm")      # (n, 384) float32, unit rows
    vecs = embed(texts, model="bow")         # (n, 256) float32, unit rows, word-order blind

Both return L2-normalised rows, so inner product = cosine similarity.
"""
from __future__ import annotations

import zlib

import numpy as np

from components.core.errors import require

MODELS = ("minilm", "bow")


def bow_embed(texts: list[str], dim: int = 256) -> np.ndarray:
    """Hashed bag of words (crc32 of each whitespace word mod ``dim``), L2-normalised: deterministic,
    blind to word order and paraphrase, which is what a debug stand-in should be."""
    out = np.zeros((len(texts), dim), np.float32)
    for i, t in enumerate(texts):
        for w in t.split():
            out[i, zlib.crc32(w.encode()) % dim] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def embed(texts: list[str], model: str = "minilm", batch_size: int = 32, threads: int = 2,
          key: str = "model") -> np.ndarray:
    """Unit embeddings of ``texts`` with ``model`` ("minilm" or "bow"); float32, C-contiguous.
    MiniLM loads once per process, so a service may call this per request."""
    require(model in MODELS, key, model, "one of " + ", ".join(MODELS))
    if model == "bow":
        return bow_embed(texts)
    from components.data.embeddings import embed_texts

    return embed_texts(texts, batch_size=batch_size, threads=threads)
