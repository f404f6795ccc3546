"""sklearn's load_digits (1,797 8x8 images, 10 classes, shipped with the package: no download)
and the Dirichlet label-skew split that federated experiments use.

``dirichlet_partition`` is the usual non-IID split (Hsu et al., 2019): for every class, the
share of its samples each client receives is drawn from Dir(alpha * 1); small alpha gives each
client few classes. Every sample lands on exactly one client.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.core.errors import require
from components.core.registry import prepare_step


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Pixels scaled to [0, 1] (float32, shape (1797, 64)) and labels (int64)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def dirichlet_partition(y: np.ndarray, n_clients: int, alpha: float, rng: np.random.Generator,
                        min_size: int = 10, max_tries: int = 1000) -> list[np.ndarray]:
    """Split sample indices among ``n_clients`` with Dirichlet(alpha) label skew.

    Redraws until every client holds at least ``min_size`` samples (the common practice, so no
    client is empty); raises ValueError if that is impossible within ``max_tries``.
    """
    require(n_clients >= 1, "n_clients", n_clients, "a positive number of clients")
    require(alpha > 0, "alpha", alpha, "a positive Dirichlet concentration")
    require(min_size * n_clients <= len(y), "min_size", min_size, f"at most len(y)/n_clients = {len(y) // n_clients}")
    classes = np.unique(y)
    for _ in range(max_tries):
        parts: list[list[int]] = [[] for _ in range(n_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            share = rng.dirichlet(np.full(n_clients, alpha))
            cuts = (np.cumsum(share)[:-1] * len(idx)).astype(int)
            for i, chunk in enumerate(np.split(idx, cuts)):
                parts[i].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    raise ValueError(f"no Dirichlet({alpha}) split gave every one of {n_clients} clients >= {min_size} samples")


def train_test_split_per_client(parts: list[np.ndarray], test_frac: float, rng: np.random.Generator
                                ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each client's own samples split into (train indices, test indices); at least 1 of each."""
    out = []
    for p in parts:
        q = rng.permutation(p)
        n_test = min(max(1, int(round(test_frac * len(q)))), len(q) - 1)
        out.append((np.sort(q[n_test:]), np.sort(q[:n_test])))
    return out


@dataclass
class DigitsParams:
    scale: float = 1.0      # multiply pixels (already in [0, 1]); kept for cache keys / experiments

    def check(self):
        require(self.scale > 0, "scale", self.scale, "a positive factor")


@prepare_step("digits", summary="sklearn load_digits as float32 pixels in [0, 1] and int64 labels (shipped, no download).",
              params=DigitsParams)
def prepare_digits(p: DigitsParams, ctx) -> dict:
    X, y = load_digits_arrays()
    return {"X": X * np.float32(p.scale), "y": y}
