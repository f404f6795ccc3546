"""Activation priors from a routing trace: per-expert frequency and pairwise co-activation."""
from __future__ import annotations

import numpy as np


def coactivation(experts: np.ndarray, n_experts: int) -> tuple[np.ndarray, np.ndarray]:
    """``experts[t]`` = token t's top-k ids. Returns (f[e] = tokens routed to e, C[e, e'] = tokens whose
    top-k set holds both e and e' (zero diagonal))."""
    T = experts.shape[0]
    M = np.zeros((T, n_experts), dtype=np.float64)
    np.put_along_axis(M, experts, 1.0, axis=1)
    C = M.T @ M
    f = np.diag(C).copy()
    np.fill_diagonal(C, 0.0)
    return f, C
