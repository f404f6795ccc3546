"""Sparsifiers: top-k (deterministic, contractive) and rand-k (scaled: unbiased; unscaled).

Top-k is one codec, :class:`RowTopK`: the k largest |x| along the last axis, kept with their
indices, on numpy arrays or torch tensors (``backend``). :class:`TopK` (the registered ``top_k``
codec over numpy vectors) and :class:`~components.compression.torch_topk.TorchRowTopK` (the byte
payload of pipeline boundaries) are built on it, and both size their message with
:func:`sparse_wire_bits`: k values plus k indices, counted in one place (rand-k too).
"""
from __future__ import annotations

import numpy as np

from components.compression.base import Compressor
from components.core.errors import require
from components.core.registry import register


def sparse_wire_bits(kept: int, value_bits: int, index_bits: int) -> int:
    """Bits of a sparse message: ``kept`` values of ``value_bits`` each plus their indices of ``index_bits``."""
    return kept * (value_bits + index_bits)


class _NumpyRows:
    """Top-k selection and scatter on numpy arrays (``np.argpartition``: unordered, O(n))."""

    @staticmethod
    def select(x, k):
        n = x.shape[-1]
        idx = np.argpartition(np.abs(x), n - k, axis=-1)[..., n - k:]
        return np.take_along_axis(x, idx, -1), idx

    @staticmethod
    def dense(values, idx, width):
        out = np.zeros(values.shape[:-1] + (width,), dtype=values.dtype)
        np.put_along_axis(out, idx, values, -1)
        return out


class _TorchRows:
    """The same on torch tensors (``Tensor.topk(sorted=False)``); needs no torch import here."""

    @staticmethod
    def select(x, k):
        idx = x.abs().topk(k, dim=-1, sorted=False).indices
        return x.gather(-1, idx), idx

    @staticmethod
    def dense(values, idx, width):
        return values.new_zeros(*values.shape[:-1], width).scatter_(-1, idx, values)


BACKENDS = {"numpy": _NumpyRows, "torch": _TorchRows}


class RowTopK:
    """Keep the ``k`` largest-magnitude entries of every row (the last axis) of an array or tensor.

    ``encode(x)`` gives ``(values, indices)``, each ``x.shape[:-1] + (k,)``, in the backend's own
    (unsorted) order; ``decode(values, indices, width)`` rebuilds the dense rows, zeros elsewhere,
    in the values' dtype. Ties among equal magnitudes are broken the way the backend's selection
    breaks them, so the two backends agree wherever the k-th largest magnitude is unique.
    """

    def __init__(self, k: int, backend: str = "numpy"):
        require(backend in BACKENDS, "backend", backend, "numpy or torch")
        require(isinstance(k, int) and k >= 1, "k", k, "a positive integer")
        self.k, self.backend, self._ops = k, backend, BACKENDS[backend]

    def encode(self, x):
        return self._ops.select(x, self.k)

    def decode(self, values, indices, width: int):
        return self._ops.dense(values, indices, width)

    def __call__(self, x):
        """``x`` with all but its rows' top-k entries zeroed."""
        return self.decode(*self.encode(x), x.shape[-1])

    def __repr__(self) -> str:
        return f"RowTopK(k={self.k}, backend={self.backend})"


def _resolve_k(dim: int, k: int | None, ratio: float | None) -> int:
    require((k is None) != (ratio is None), "k", k, "exactly one of k or ratio")
    if ratio is not None:
        require(0 < ratio <= 1, "ratio", ratio, "a fraction in (0, 1]")
        k = max(1, int(round(ratio * dim)))
    require(isinstance(k, int) and 1 <= k <= dim, "k", k, f"an integer in [1, {dim}] (the dimension)")
    return k


@register("codec", "top_k")
class TopK(Compressor):
    """Keep the k largest-magnitude coordinates. ``||C(v)-v||^2 <= (1 - k/d) ||v||^2``.

    :class:`RowTopK` on numpy vectors; indices counted at ``ceil(log2 d)`` bits."""

    def __init__(self, dim: int, k: int | None = None, ratio: float | None = None, value_bits: int = 32):
        super().__init__(value_bits)
        self.dim = dim
        self.k = _resolve_k(dim, k, ratio)
        self.codec = RowTopK(self.k, "numpy")

    def __call__(self, v, rng=None):
        out = v.copy() if self.k >= v.size else self.codec(v)
        return out, sparse_wire_bits(self.k, self.value_bits, self.index_bits(v.size))

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
        if self.shared_seed:                       # the seed replaces the indices
            return out, sparse_wire_bits(self.k, self.value_bits, 0) + 32
        return out, sparse_wire_bits(self.k, self.value_bits, self.index_bits(v.size))

    def __repr__(self):
        return f"RandK(k={self.k}/{self.dim}, scaled={self.scaled})"
