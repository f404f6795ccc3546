"""Quantizers: b-bit absmax per bucket, 1-bit scaled sign per bucket, and the 0-bit codec."""
from __future__ import annotations

import numpy as np

from components.compression.base import Compressor
from components.core.errors import require
from components.core.registry import register


def _buckets(v: np.ndarray, bucket: int) -> tuple[np.ndarray, int]:
    """Reshape to (n_buckets, bucket), zero-padding the tail; returns (view, pad)."""
    pad = (-v.size) % bucket
    w = np.concatenate([v, np.zeros(pad, dtype=v.dtype)]) if pad else v
    return w.reshape(-1, bucket), pad


@register("codec", "absmax")
class AbsmaxQuantizer(Compressor):
    """Symmetric b-bit quantizer with one absmax scale per bucket (the usual 4-bit/8-bit codec).

    Levels are ``scale * j / L`` for integers |j| <= L = 2^(b-1) - 1. Rounding is to nearest
    (deterministic; contractive with eps <= bucket / (4 L^2)) or stochastic (unbiased).
    Bits: b per coordinate plus one ``value_bits`` scale per bucket.
    """

    def __init__(self, bits: int = 4, bucket: int = 64, stochastic: bool = False, value_bits: int = 32):
        super().__init__(value_bits)
        require(isinstance(bits, int) and 2 <= bits <= 16, "bits", bits, "an integer in [2, 16]")
        require(isinstance(bucket, int) and bucket >= 1, "bucket", bucket, "a positive integer")
        self.bits, self.bucket, self.stochastic = bits, bucket, stochastic
        self.levels = 2 ** (bits - 1) - 1
        self.unbiased = stochastic

    def __call__(self, v, rng=None):
        b, pad = _buckets(v, self.bucket)
        scale = np.abs(b).max(axis=1, keepdims=True)
        safe = np.where(scale > 0, scale, 1.0)
        x = b / safe * self.levels
        if self.stochastic:
            rng = rng if rng is not None else np.random.default_rng()
            q = np.floor(x + rng.random(x.shape))
        else:
            q = np.rint(x)
        out = (q / self.levels * safe).reshape(-1)
        out = out[: v.size] if pad else out
        n_buckets = b.shape[0]
        return out.astype(v.dtype, copy=False), v.size * self.bits + n_buckets * self.value_bits

    def contraction_eps(self, d):
        if self.stochastic:
            return None
        eps = self.bucket / (4.0 * self.levels**2)  # worst case: every coordinate off by half a level
        return eps if eps < 1 else None

    def __repr__(self):
        return f"AbsmaxQuantizer(bits={self.bits}, bucket={self.bucket})"


@register("codec", "sign")
class ScaledSign(Compressor):
    """1-bit codec: sign(v) times the mean |v| of its bucket (signSGD with scale, as in EF-SignSGD).

    ``||C(v)-v||^2 = ||v||^2 - ||v||_1^2 / n`` per bucket of n, so eps = 1 - 1/bucket at worst.
    """

    def __init__(self, bucket: int = 0, value_bits: int = 32):
        super().__init__(value_bits)
        require(isinstance(bucket, int) and bucket >= 0, "bucket", bucket, "0 (whole vector) or a positive integer")
        self.bucket = bucket

    def __call__(self, v, rng=None):
        bucket = self.bucket or v.size
        b, pad = _buckets(v, bucket)
        counts = np.full((b.shape[0], 1), float(bucket))
        if pad:
            counts[-1, 0] = bucket - pad
        scale = np.abs(b).sum(axis=1, keepdims=True) / counts
        out = (np.sign(b) * scale).reshape(-1)
        out = out[: v.size] if pad else out
        return out.astype(v.dtype, copy=False), v.size + b.shape[0] * self.value_bits

    def contraction_eps(self, d):
        return 1.0 - 1.0 / (self.bucket or d)

    def __repr__(self):
        return f"ScaledSign(bucket={self.bucket or 'all'})"


@register("codec", "zero")
class ZeroBit(Compressor):
    """Sends nothing; the receiver sees zeros (DUO's 0-bit fast path: no tentative update)."""

    def __call__(self, v, rng=None):
        return np.zeros_like(v), 0

    def contraction_eps(self, d):
        return 1.0
