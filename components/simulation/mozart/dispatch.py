"""Dispatch accounting: a token is sent once to each distinct REMOTE package among its top-k
experts (the package router fans it out to the experts' chiplets); combine sends the same copies
back. Same per-package deduplication for every placement, so only the placement differs."""
from __future__ import annotations

import numpy as np


def package_sets(experts: np.ndarray, group_of: np.ndarray, groups: int) -> np.ndarray:
    """[T, G] bool: package g holds at least one of token t's experts."""
    M = np.zeros((experts.shape[0], groups), dtype=bool)
    np.put_along_axis(M, group_of[experts], True, axis=1)
    return M


def remote_packages(experts: np.ndarray, home: np.ndarray, group_of: np.ndarray, groups: int) -> np.ndarray:
    """[T, G] bool: token t must be copied to package g (holds one of its experts, and is not home)."""
    M = package_sets(experts, group_of, groups)
    M[np.arange(len(home)), home] = False
    return M


def traffic_matrix(experts: np.ndarray, home: np.ndarray, group_of: np.ndarray, groups: int, token_bytes: float) -> np.ndarray:
    """[G, G] dispatch bytes from home package (row) to expert package (column)."""
    R = remote_packages(experts, home, group_of, groups)
    t, g = np.nonzero(R)
    return np.bincount(home[t] * groups + g, minlength=groups * groups).reshape(groups, groups) * float(token_bytes)


def package_load(experts: np.ndarray, group_of: np.ndarray, groups: int) -> np.ndarray:
    """Token-expert assignments per package (the compute each package must do)."""
    return np.bincount(group_of[experts].ravel(), minlength=groups).astype(float)


def imbalance(load: np.ndarray) -> float:
    """max / mean package load."""
    return float(load.max() / load.mean()) if load.mean() > 0 else 1.0
