"""Compressor interface; codecs register as kind ``codec`` and configs name them by ``kind``.

A compressor maps a vector ``v`` (1-D numpy float array) to ``(C(v), bits)``: the decoded vector
the receiver reconstructs, and the number of bits the encoded message takes on the wire. Values
are counted at ``value_bits`` (32 by default: what a float32 payload costs) and indices at
``ceil(log2 d)`` bits each.

Two properties matter to error-feedback analysis and are exposed so tests can check them:
``contraction_eps(d)``: the eps with ``||C(v) - v||^2 <= eps ||v||^2`` for every v (deterministic
contractive compressors; ``None`` when there is no such bound), and ``unbiased``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from components.core.errors import ConfigError, require
from components.core.registry import lookup, register


class Compressor:
    unbiased = False

    def __init__(self, value_bits: int = 32):
        require(value_bits in (8, 16, 32, 64), "value_bits", value_bits, "8, 16, 32 or 64")
        self.value_bits = value_bits

    def __call__(self, v: np.ndarray, rng: np.random.Generator | None = None) -> tuple[np.ndarray, int]:
        raise NotImplementedError  # abstract; every codec below implements it

    def contraction_eps(self, d: int) -> float | None:
        return None

    def dense_bits(self, d: int) -> int:
        return d * self.value_bits

    @staticmethod
    def index_bits(d: int) -> int:
        return max(1, math.ceil(math.log2(max(d, 2))))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@register("codec", "identity")
class Identity(Compressor):
    """No compression: the baseline every codec is compared with."""

    unbiased = True

    def __call__(self, v, rng=None):
        return np.array(v, copy=True), v.size * self.value_bits

    def contraction_eps(self, d):
        return 0.0


def make_compressor(cfg: dict[str, Any] | None, dim: int, key: str = "compressor") -> Compressor:
    """Build a compressor for vectors of length ``dim`` from ``{'kind': <a registered codec>, **options}``."""
    cfg = dict(cfg or {"kind": "identity"})
    kind = cfg.pop("kind", None)
    cls = lookup("codec", kind, key=f"{key}.kind")
    try:
        return cls(dim=dim, **cfg) if "dim" in cls.__init__.__code__.co_varnames else cls(**cfg)
    except TypeError as e:
        raise ConfigError(key, cfg, f"options of {kind}: {e}") from None
    except ConfigError as e:
        raise ConfigError(f"{key}.{e.key}", e.value, e.allowed) from None
