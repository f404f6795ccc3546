"""Calibrate the hybrid's density threshold tau once on this machine.

Micro-benchmark of the step that dominates model-counting and graphical-model contractions: a
large "frontier" tensor of binary indices times a small dense factor sharing two of its indices
and adding two new ones. Dense cost (torch) does not depend on the density; COO cost grows with
the non-zeros. For each frontier size the crossover is the largest tested density at which COO is
at least as fast as dense (densities are tried sparse to dense, stopping once COO is 10x slower); tau is the geometric mean of the crossovers, snapped to the grid
{1e-1, 1e-2, 1e-3, 1e-4} (the values the spec sheet names).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from components.algorithms.hybrid_einsum.coo import COO, pair
from components.algorithms.hybrid_einsum.engine import _dense_pair
from components.core.errors import require
from components.core.registry import prepare_step

TAU_GRID = (1e-1, 1e-2, 1e-3, 1e-4)


def _median_time(fn, reps: int) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        ts.append(time.process_time() - t0)
    return float(np.median(ts))


def measure(frontier_bits: int, density: float, reps: int, rng) -> tuple[float, float]:
    """(dense seconds, COO seconds) of one frontier x factor step at the given frontier density."""
    shape = (2,) * frontier_bits
    a = np.zeros(shape)
    n = a.size
    nnz = max(1, int(round(density * n)))
    a.reshape(-1)[rng.choice(n, nnz, replace=False)] = rng.uniform(0.5, 1.5, nnz)
    b = rng.uniform(0.5, 1.5, (2, 2, 2, 2))
    ta = tuple(range(frontier_bits))
    tb = (frontier_bits - 2, frontier_bits - 1, frontier_bits, frontier_bits + 1)
    keep = tuple(range(frontier_bits - 2)) + (frontier_bits, frontier_bits + 1)   # two indices summed out
    sizes = {i: 2 for i in range(frontier_bits + 2)}
    at, bt = torch.from_numpy(a), torch.from_numpy(b)
    ac, bc = COO.from_dense(a), COO.from_dense(b)
    td = _median_time(lambda: torch.count_nonzero(_dense_pair([at, bt], [ta, tb], keep)), reps)
    tc = _median_time(lambda: pair(ac, ta, bc, tb, keep, sizes), reps)
    return td, tc


@dataclass
class CalibrationParams:
    frontier_bits: list[int] = field(default_factory=lambda: [14, 17, 20])
    densities: list[float] = field(default_factory=lambda: [1.0, 0.3, 0.1, 0.03, 0.01, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5])
    reps: int = 5
    seed: int = 0

    def check(self):
        require(len(self.frontier_bits) >= 1 and all(6 <= b <= 24 for b in self.frontier_bits), "frontier_bits",
                self.frontier_bits, "frontier sizes as bit counts in [6, 24]")
        require(len(self.densities) >= 2 and all(0 < d <= 1 for d in self.densities), "densities", self.densities,
                "at least 2 densities in (0, 1]")
        require(self.reps >= 1, "reps", self.reps, "a positive integer")


def calibrate(p: CalibrationParams) -> dict:
    torch.set_num_threads(1)
    rng = np.random.default_rng(p.seed)
    rows, cross = [], []
    for bits in p.frontier_bits:
        best = None
        for d in sorted(p.densities):               # sparse to dense; stop once COO is far behind
            td, tc = measure(bits, d, p.reps, rng)
            rows.append({"frontier_bits": bits, "density": d, "dense_s": td, "coo_s": tc, "coo_over_dense": tc / td})
            if tc <= td:
                best = d
            if tc > 10 * td:
                break
        if best is not None:
            cross.append(best)
    raw = math.exp(np.mean(np.log(cross))) if cross else min(TAU_GRID)
    tau = min(TAU_GRID, key=lambda t: abs(math.log10(t) - math.log10(raw)))
    return {"tau": float(tau), "tau_raw": float(raw), "crossovers": cross, "table": rows}


@prepare_step("einsum_calibration", params=CalibrationParams,
              summary="Micro-benchmark of dense (torch) vs COO pairwise steps across densities; picks the hybrid "
                      "einsum's switch threshold tau for this machine.")
def prepare_calibration(p: CalibrationParams, ctx) -> dict:
    return calibrate(p)
