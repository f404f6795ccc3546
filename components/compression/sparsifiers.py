"""Sparsifiers: top-k (deterministic, contractive) and rand-k (scaled: unbiased; unscaled)."""
from __future__ import annotations

import numpy as np

from components.compression.base import Compressor
from components.core.errors import require
from components.core.registry import register


def _resolve_k(dim: int, k: int | None, ratio: float | None) -> int:
    require((k is None) != (ratio is None), "k", k, "exactly one of k or ratio")
    if ratio is not None:
        require(0 < ratio <= 1, "ratio", ratio, "a fraction in (0, 1]")
        k = max(1, int(round(ratio * dim)))
    require(isinstance(k, int) and 1 <= k <= dim, "k", k, f"an integer in [1, {dim}] (the dimension)")
    return k


@register("codec", "top_k")
class TopK(Compressor):
    """Keep the k largest-magnitude coordinates. ``||C(v)-v||^2 <= (1 - k/d) ||v||^2``."""

    def __init__(self, dim: int, k: int | None = None, ratio: float | None = None, value_bits: int = 32):
        super().__init__(value_bits)
        self.dim = dim
        self.k = _resolve_k(dim, k, ratio)

    def __call__(self, v, rng=None):
        out = np.zeros_like(v)
        if self.k >= v.size:
            out[:] = v
        else:
            idx = np.argpartition(np.abs(v), v.size - self.k)[v.size - self.k:]
            out[idx] = v[idx]
        return out, self.k * (self.value_bits + self.index_bits(v.size))

    def contraction_eps(self, d):
        return 1.0 - self.k / d

    def __repr__(self):
        return f"TopK(k={self.k}/{self.dim})"


@register("codec", "rand_k")
class RandK(Compressor):
    """Keep k coordinates chosen uniformly at random.

    ``scaled=True`` multiplies by d/k (unbiased, variance factor d/k - 1); ``scaled=False`` is
    contractive in expectation with eps = 1 - k/d. With ``shared_seed`` the receiver regenerates the
    indices, so only the k values (plus a 32-bit seed) are sent.
    """

    def __init__(self, dim: int, k: int | None = None, ratio: float | None = None, scaled: bool = True,
                 shared_seed: bool = False, value_bits: int = 32):
        super().__init__(value_bits)
        self.dim, self.k, self.scaled, self.shared_seed = dim, _resolve_k(dim, k, ratio), scaled, shared_seed
        self.unbiased = scaled

    def __call__(self, v, rng=None):
        rng = rng if rng is not None else np.random.default_rng()
        idx = rng.choice(v.size, size=self.k, replace=False)
        out = np.zeros_like(v)
        out[idx] = v[idx] * (v.size / self.k if self.scaled else 1.0)
        idx_bits = 32 if self.shared_seed else self.k * self.index_bits(v.size)
        return out, self.k * self.value_bits + idx_bits

    def __repr__(self):
        return f"RandK(k={self.k}/{self.dim}, scaled={self.scaled})"
