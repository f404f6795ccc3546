"""The Gaussian channels of the reproduction: weights in closed form, mutual information by quadrature.

Part A: X ~ N(0, I_d) truncated to |x_j| <= xmax, Y = X + N(0, s2 I_d); proposal r = P_Y = N(0, (1+s2) I)
(of the untruncated source), so w(y|x) = p(y|x)/r(y) and sup_y w = (1+1/s2)^(d/2) exp(|x|^2/2).
"""
from __future__ import annotations

import functools
import math

import numpy as np


class GaussChannel:
    """Target N(x, s2 I) over proposal N(0, v I) (v = 1 + s2 in Part A)."""

    def __init__(self, s2: float, v: float | None = None):
        self.s2, self.v = float(s2), float(1.0 + s2 if v is None else v)

    def logw(self, x, y):
        d = y.shape[-1]
        return (-np.sum((y - x) ** 2, -1) / (2 * self.s2) + np.sum(y ** 2, -1) / (2 * self.v)
                + 0.5 * d * math.log(self.v / self.s2))

    def logwbar(self, x):
        # sup over y of logw: at y = x v / (v - s2); equals (d/2) log(v/s2) + |x|^2 / (2 (v - s2))
        d = x.shape[-1]
        return 0.5 * d * math.log(self.v / self.s2) + np.sum(x ** 2, -1) / (2 * (self.v - self.s2))

    def propose(self, rng, shape):
        return rng.standard_normal(shape) * math.sqrt(self.v)


def truncated_source(rng, n: int, d: int, xmax: float) -> np.ndarray:
    """N(0, I_d) truncated to |x_j| <= xmax (per coordinate, by rejection)."""
    out = np.empty((n, d))
    filled = 0
    while filled < n:
        z = rng.standard_normal((2 * (n - filled) + 16, d))
        z = z[np.all(np.abs(z) <= xmax, axis=1)][: n - filled]
        out[filled: filled + len(z)] = z
        filled += len(z)
    return out


def mutual_info_bits(s2: float, d: int, xmax: float, grid: int = 1201) -> float:
    """I(X;Y) in bits for the truncated Gaussian source (coordinates independent: d times the 1-D value).
    h(Y) by quadrature of p_Y = truncated-normal * N(0, s2); h(Y|X) = 0.5 log2(2 pi e s2)."""
    return d * _mi_1d(float(s2), float(xmax), int(grid))


@functools.lru_cache(maxsize=64)
def _mi_1d(s2: float, xmax: float, grid: int) -> float:
    from scipy.stats import norm

    xs = np.linspace(-xmax, xmax, grid)
    px = norm.pdf(xs)
    px /= np.trapezoid(px, xs)
    s = math.sqrt(s2)
    ys = np.linspace(-xmax - 10 * s, xmax + 10 * s, grid)
    py = np.trapezoid(px[None, :] * norm.pdf((ys[:, None] - xs[None, :]) / s) / s, xs, axis=1)
    hy = -np.trapezoid(np.where(py > 0, py * np.log2(np.maximum(py, 1e-300)), 0.0), ys)
    return float(hy - 0.5 * math.log2(2 * math.pi * math.e * s2))
