"""Routing traces: which top-k experts each token picks. Planted co-activation (latent topics), a
uniform-routing control, and the text helper for the tiny MoE LM (stdlib ``pydoc_data`` only)."""
from __future__ import annotations

import numpy as np


def planted(n_tokens: int, experts: int, top_k: int, topics: int, p: float, rng: np.random.Generator,
            perm: np.ndarray | None = None) -> np.ndarray:
    """Each token has a latent topic owning experts/topics experts; each of its k picks comes from the
    topic with probability p (else uniformly), without repeats. Expert ids are then permuted by
    ``perm`` so that contiguous placement knows nothing of the topics. Returns [n_tokens, k] ids."""
    per = experts // topics
    topic = rng.integers(topics, size=n_tokens)
    out = np.empty((n_tokens, top_k), dtype=np.int64)
    taken = np.zeros((n_tokens, experts), dtype=bool)
    rows = np.arange(n_tokens)
    for j in range(top_k):
        in_topic = rng.random(n_tokens) < p
        # topic pick: a random not-yet-taken expert of the topic (falls back to any if the topic is used up)
        scores = rng.random((n_tokens, experts))
        own = (np.arange(experts)[None, :] // per) == topic[:, None]
        allowed = ~taken & np.where(in_topic[:, None] & (own & ~taken).any(1, keepdims=True), own, True)
        pick = np.argmax(np.where(allowed, scores, -1.0), axis=1)
        out[:, j] = pick
        taken[rows, pick] = True
    return out if perm is None else perm[out]


def uniform(n_tokens: int, experts: int, top_k: int, rng: np.random.Generator) -> np.ndarray:
    """Control: k distinct experts uniformly at random per token."""
    return np.argsort(rng.random((n_tokens, experts)), axis=1)[:, :top_k]


def pydoc_text() -> str:
    """The stdlib's pydoc topics (~465k characters of English technical text), joined in key order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))
