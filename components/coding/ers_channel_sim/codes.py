"""Real prefix codes for positive integers: Elias gamma and Elias delta (lengths vectorised, and the
bit strings themselves, so the lengths counted are those of a code a decoder can parse)."""
from __future__ import annotations

import numpy as np


def _floor_log2(n) -> np.ndarray:
    n = np.asarray(n, dtype=np.int64)
    if np.any(n < 1):
        raise ValueError("Elias codes take integers >= 1")
    return np.floor(np.log2(n.astype(np.float64))).astype(np.int64) - (np.left_shift(1, np.floor(np.log2(
        n.astype(np.float64))).astype(np.int64)) > n)


def gamma_len(n) -> np.ndarray:
    """Bits of Elias gamma(n): 2 floor(log2 n) + 1."""
    return 2 * _floor_log2(n) + 1


def delta_len(n) -> np.ndarray:
    """Bits of Elias delta(n): floor(log2 n) + 2 floor(log2(floor(log2 n) + 1)) + 1."""
    b = _floor_log2(n)
    return b + 2 * _floor_log2(b + 1) + 1


def gamma_encode(n: int) -> str:
    b = bin(int(n))[2:]
    return "0" * (len(b) - 1) + b


def delta_encode(n: int) -> str:
    b = bin(int(n))[2:]
    return gamma_encode(len(b)) + b[1:]


def gamma_decode(bits: str, pos: int = 0) -> tuple[int, int]:
    z = 0
    while bits[pos + z] == "0":
        z += 1
    return int(bits[pos + z: pos + 2 * z + 1], 2), pos + 2 * z + 1


def delta_decode(bits: str, pos: int = 0) -> tuple[int, int]:
    length, pos = gamma_decode(bits, pos)
    return int("1" + bits[pos: pos + length - 1], 2), pos + length - 1
