"""Tight step sizes, rates and Lyapunov functions of Thomsen, Taylor & Dieuleveut (arXiv 2506.05271).

Setting: f L-smooth, mu-strongly convex; compressor C with ||C(v) - v||^2 <= eps ||v||^2; s = sqrt(eps).
EF and EF21 share the optimal step ``eta_star`` and tight factor ``rho_star`` for their Lyapunov
functions; compressed GD (CGD) has the tight rate ``rho_cgd`` on f - f*, and rho_cgd < rho_star.
"""
from __future__ import annotations

import math

import numpy as np


def eta_star(L: float, mu: float, eps: float) -> float:
    """Optimal step of EF and EF21: 2/(L+mu) * (1-s)/(1+s)."""
    s = math.sqrt(eps)
    return 2.0 / (L + mu) * (1 - s) / (1 + s)


def rho_star(L: float, mu: float, eps: float) -> float:
    """Tight contraction factor of EF's and EF21's Lyapunov functions at eta_star."""
    s = math.sqrt(eps)
    eta = eta_star(L, mu, eps)
    lam = eta / (L + mu) * ((1 - s) * (L - mu) + (1 + s) * math.sqrt((L - mu) ** 2 + 16 * L * mu * s / (1 + s) ** 2))
    return s + 0.25 * (1 + s) * (L - mu) * lam


def eta_cgd(L: float, mu: float, eps: float) -> float:
    """Step attaining CGD's tight rate: GD on L' = L(1+s), mu' = mu(1-s)."""
    s = math.sqrt(eps)
    return 2.0 / (L * (1 + s) + mu * (1 - s))


def rho_cgd(L: float, mu: float, eps: float) -> float:
    """Tight rate of CGD on f - f*: ((k_e - 1)/(k_e + 1))^2 with k_e = kappa (1+s)/(1-s)."""
    s = math.sqrt(eps)
    ke = (L / mu) * (1 + s) / (1 - s)
    return ((ke - 1) / (ke + 1)) ** 2


def rho_gd(L: float, mu: float) -> float:
    """Plain GD at step 2/(L+mu): ((L-mu)/(L+mu))^2 (the eps -> 0 limit of both)."""
    return ((L - mu) / (L + mu)) ** 2


def lyapunov_ef(x: np.ndarray, e: np.ndarray, x_star: np.ndarray, eps: float) -> float:
    """EF: ||x - x* - e||^2 + ||e||^2 / s (e = the uncommunicated residual)."""
    s = math.sqrt(eps)
    r = x - x_star - e
    return float(r @ r + (e @ e) / s) if s > 0 else float(r @ r)


def lyapunov_ef21(grad_x: np.ndarray, d: np.ndarray, eps: float) -> float:
    """EF21: ||grad f(x) - d||^2 + s ||grad f(x)||^2 (d = the gradient estimate)."""
    s = math.sqrt(eps)
    r = grad_x - d
    return float(r @ r + s * (grad_x @ grad_x))


def grid_gap(kappas: np.ndarray, epss: np.ndarray) -> np.ndarray:
    """rho_star - rho_cgd on a (kappa, eps) grid (mu = 1); positive everywhere per the paper."""
    out = np.empty((len(kappas), len(epss)))
    for i, k in enumerate(kappas):
        for j, e in enumerate(epss):
            out[i, j] = rho_star(k, 1.0, e) - rho_cgd(k, 1.0, e)
    return out
