"""Prepare steps of known behaviour, for checking the prepare graph itself (see core/probe.py).

``probe_table`` is unseeded and has no inputs; ``probe_draw`` is seeded and consumes a table, so
one experiment exercises dependency order, per-seed outputs, by-name inputs and cache keys.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.core.errors import require
from components.core.registry import prepare_step


@dataclass
class TableParams:
    n: int = 3
    scale: float = 1.0

    def check(self):
        require(1 <= self.n <= 10_000, "n", self.n, "an integer in [1, 10000]")


@prepare_step("probe_table", params=TableParams, summary="Platform self-check: a small table of numbers.")
def probe_table(p: TableParams, ctx) -> dict:
    return {"values": [p.scale * i for i in range(p.n)]}


@dataclass
class DrawParams:
    sigma: float = 1.0


@prepare_step("probe_draw", params=DrawParams, inputs=("table",), seeded=True,
              summary="Platform self-check: one draw per seed, plus the sum of its upstream table.")
def probe_draw(p: DrawParams, ctx) -> dict:
    return {"seed": ctx.seed, "draw": p.sigma * float(np.random.default_rng(ctx.seed).standard_normal()),
            "table_sum": float(sum(ctx.input("table")["values"]))}
