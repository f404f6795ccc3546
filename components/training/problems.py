"""Optimization problems with known smoothness L, strong convexity mu and minimizer x*.

Shared by every optimizer-level technique (error feedback, compressed GD...). Each problem has
``grad(x)``, ``value(x)``, ``dim``, ``L``, ``mu`` (0 when not strongly convex) and ``x_star`` where
known. Data comes from generators here or from sklearn's shipped ``load_digits`` (no downloads).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Quadratic:
    """f(x) = 1/2 (x - b)^T A (x - b), A symmetric positive definite."""

    A: np.ndarray
    b: np.ndarray
    name: str = "quadratic"

    def __post_init__(self):
        ev = np.linalg.eigvalsh(self.A)
        self.L, self.mu = float(ev[-1]), float(ev[0])
        self.x_star = self.b.copy()

    @property
    def dim(self) -> int:
        return self.b.size

    def grad(self, x):
        return self.A @ (x - self.b)

    def value(self, x):
        r = x - self.b
        return 0.5 * float(r @ self.A @ r)

    def gap(self, x):
        """f(x) - f*, computed without cancellation."""
        return self.value(x)


def make_quadratic(dim: int, kappa: float, seed: int, mu: float = 1.0) -> Quadratic:
    """Eigenvalues linear in [mu, kappa*mu], random rotation, minimizer ~ N(0, I)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    ev = np.linspace(mu, kappa * mu, dim)
    return Quadratic((q * ev) @ q.T, rng.standard_normal(dim))


def make_local_quadratics(n: int, dim: int, spectrum: tuple[float, float], spread: float, seed: int) -> list[Quadratic]:
    """n heterogeneous local quadratics: spectra U[lo, hi], minimizers N(0, spread^2 I)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
        ev = rng.uniform(spectrum[0], spectrum[1], dim)
        out.append(Quadratic((q * ev) @ q.T, spread * rng.standard_normal(dim), name=f"quadratic[{i}]"))
    return out


@dataclass
class LogReg:
    """Binary logistic regression, labels in {-1, +1}, with a regulariser.

    ``reg='l2'``: lam/2 ||x||^2 (strongly convex, mu = lam);
    ``reg='nonconvex'``: lam * sum x_j^2 / (1 + x_j^2) (smooth, nonconvex; mu = 0).
    """

    X: np.ndarray
    y: np.ndarray
    lam: float
    reg: str = "l2"
    name: str = "logreg"
    x_star: np.ndarray | None = field(default=None)

    def __post_init__(self):
        n = self.X.shape[0]
        smax = np.linalg.norm(self.X, 2)
        data_L = smax**2 / (4 * n)
        self.L = float(data_L + (self.lam if self.reg == "l2" else 2 * self.lam))
        self.mu = float(self.lam) if self.reg == "l2" else 0.0

    @property
    def dim(self) -> int:
        return self.X.shape[1]

    def value(self, x):
        z = self.y * (self.X @ x)
        loss = np.logaddexp(0.0, -z).mean()
        if self.reg == "l2":
            return float(loss + 0.5 * self.lam * x @ x)
        return float(loss + self.lam * np.sum(x**2 / (1 + x**2)))

    def grad(self, x):
        z = self.y * (self.X @ x)
        s = -self.y * _sigmoid(-z)
        g = self.X.T @ s / self.X.shape[0]
        if self.reg == "l2":
            return g + self.lam * x
        return g + self.lam * 2 * x / (1 + x**2) ** 2

    def gap(self, x):
        return self.value(x) - self.value(self.x_star) if self.x_star is not None else float("nan")


def _sigmoid(t):
    return np.where(t >= 0, 1 / (1 + np.exp(-np.clip(t, -500, 500))), np.exp(np.clip(t, -500, 500)) / (1 + np.exp(np.clip(t, -500, 500))))


def digits_binary(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """sklearn's load_digits as a binary task (digit < 5 -> -1, else +1), scaled, with a bias column.

    Returns (X, y, digit labels) so callers can shard by digit (non-IID).
    """
    from sklearn.datasets import load_digits

    d = load_digits()
    X = d.data / 16.0
    X = np.hstack([X, np.ones((X.shape[0], 1))])
    y = np.where(d.target < 5, -1.0, 1.0)
    return X, y, d.target


def minimize_precisely(grad, value, x0, L: float, tol: float = 1e-13, max_iter: int = 20000) -> np.ndarray:
    """L-BFGS to near machine precision, then plain gradient steps 1/L as a polish."""
    from scipy.optimize import minimize

    res = minimize(value, x0, jac=grad, method="L-BFGS-B", options={"gtol": 1e-14, "ftol": 0, "maxiter": max_iter})
    x = res.x
    for _ in range(2000):
        g = grad(x)
        if np.linalg.norm(g) < tol:
            break
        x = x - g / L
    return x


@dataclass
class Federation:
    """f = (1/n) sum_i f_i over n local problems (one per agent), with the global x*."""

    parts: list
    x_star: np.ndarray | None = None
    name: str = "federation"

    @property
    def dim(self) -> int:
        return self.parts[0].dim

    @property
    def n(self) -> int:
        return len(self.parts)

    @property
    def L(self) -> float:
        return float(np.mean([p.L for p in self.parts]))

    @property
    def mu(self) -> float:
        return float(np.mean([p.mu for p in self.parts]))

    def grad(self, x):
        return np.mean([p.grad(x) for p in self.parts], axis=0)

    def value(self, x):
        return float(np.mean([p.value(x) for p in self.parts]))

    def heterogeneity(self) -> float:
        """mean_i ||grad f_i(x*)||: how far apart the local problems pull at the optimum."""
        if self.x_star is None:
            return float("nan")
        return float(np.mean([np.linalg.norm(p.grad(self.x_star)) for p in self.parts]))
