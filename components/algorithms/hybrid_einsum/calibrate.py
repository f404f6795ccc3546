"""Calibrate the hybrids once on this machine: the cost model of ``hybrid`` and the threshold tau of
``hybrid_oneway``.

Cost model (:func:`fit_cost_model`): CPU seconds of dense pairwise steps, COO pairwise steps,
dense -> COO conversions and non-zero counts over a grid of shapes and densities, each fitted by
non-negative least squares on RELATIVE error to the linear forms of ``costmodel.CostModel``.

Tau (the one-way rule):

Micro-benchmark of the step that dominates model-counting and graphical-model contractions: a
large "frontier" tensor of binary indices times a small dense factor sharing two of its indices
and adding two new ones. Dense cost (torch) does not depend on the density; COO cost grows with
the non-zeros. For each frontier size the crossover is the largest tested density at which COO is
at least as fast as dense (densities are tried sparse to dense, stopping once COO is 10x slower); tau is the geometric mean of the crossovers, snapped to the grid
{1e-1, 1e-2, 1e-3, 1e-4} (the values the spec sheet names).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from components.algorithms.hybrid_einsum.coo import COO, pair
from components.algorithms.hybrid_einsum.costmodel import N_BUCKETS, CostModel, coo_features, dense_features, size_bucket
from components.algorithms.hybrid_einsum.engine import _dense_pair
from components.core.timing import clock_of
from components.core.errors import require
from components.core.registry import prepare_step

TAU_GRID = (1e-1, 1e-2, 1e-3, 1e-4)


def _median_time(fn, reps: int, min_s: float = 0.0, stat=np.median) -> float:
    """Median (or ``stat``) CPU seconds of ``fn`` (thread CPU time, as the suite measures); each sample
    repeats ``fn`` until it has run ``min_s``, so micro-second steps are measured above the clock's noise."""
    ts, now = [], clock_of("thread")
    for _ in range(reps):
        n, t0 = 0, now()
        while True:
            fn()
            n += 1
            el = now() - t0
            if el >= min_s:
                break
        ts.append(el / n)
    return float(stat(ts))


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
    cost_reps: int = 3                 # samples per cost-model point (each at least cost_min_s long; the
                                       # fastest counts: the machine is shared, interference only adds)
    cost_min_s: float = 0.002
    cost_max_bits: int = 23            # largest dense tensor (2^bits entries) in the cost-model grid

    def check(self):
        require(len(self.frontier_bits) >= 1 and all(6 <= b <= 24 for b in self.frontier_bits), "frontier_bits",
                self.frontier_bits, "frontier sizes as bit counts in [6, 24]")
        require(len(self.densities) >= 2 and all(0 < d <= 1 for d in self.densities), "densities", self.densities,
                "at least 2 densities in (0, 1]")
        require(self.reps >= 1, "reps", self.reps, "a positive integer")
        require(self.cost_reps >= 1, "cost_reps", self.cost_reps, "a positive integer")
        require(8 <= self.cost_max_bits <= 24, "cost_max_bits", self.cost_max_bits, "an integer in [8, 24]")


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
    out = {"tau": float(tau), "tau_raw": float(raw), "crossovers": cross, "table": rows}
    out.update(fit_cost_model(p.cost_reps, p.cost_min_s, p.cost_max_bits, p.seed))
    return out


def _nnls_rel(X: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative coefficients minimising the RELATIVE error; (coefficients, median |rel. error|)."""
    from scipy.optimize import nnls

    A = X / t[:, None]
    scale = A.max(0)
    scale[scale == 0] = 1.0
    c, _ = nnls(A / scale, np.ones(len(t)))
    c = c / scale
    return c, float(np.median(np.abs(X @ c / t - 1)))


def _sparse(rng, shape, density):
    a = np.zeros(shape)
    n = a.size
    k = max(1, int(round(density * n)))
    a.reshape(-1)[rng.choice(n, k, replace=False)] = rng.uniform(0.5, 1.5, k)
    return a


def fit_cost_model(reps: int = 3, min_s: float = 0.002, max_bits: int = 23, seed: int = 0) -> dict:
    """Fit ``CostModel`` on this machine (torch single-threaded): returns {"cost_model": {...},
    "cost_fit": {part: median relative error}, "cost_table": rows}."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    rows, fit = [], {}
    # --- dense pairwise steps: binary frontiers x small factors, matrix products, vector contractions
    cases = []
    for b in range(4, max_bits + 1, 2):
        f = tuple(range(b))
        cases.append(((2,) * b, (2, 2, 2, 2), f, (b - 2, b - 1, b, b + 1), f[:-2] + (b, b + 1)))   # sum 2, add 2
        cases.append(((2,) * b, (2,), f, (b - 1,), f[:-1]))                                         # sum the last
        cases.append(((2,) * b, (2, 2), f, (0, b), f[1:] + (b,)))                                    # sum the first, add 1
        cases.append(((2,) * b, (2, 2, 2), f, (1, b // 2, b), f + (b,)))                            # keep all, add 1
        cases.append(((2,) * b, (2, 2, 2), f, (0, b - 1, b), (b,) + f[1:-1]))                       # sum 2, add 1 first
    for n in (2, 8, 32, 64, 128, 256):
        cases.append(((n, n), (n, n), (0, 1), (1, 2), (0, 2)))
        cases.append(((n, n), (n,), (0, 1), (0,), (1,)))
    X, t = [], []
    for sa, sb, ta, tb, keep in cases:
        a, b = torch.from_numpy(rng.standard_normal(sa)), torch.from_numpy(rng.standard_normal(sb))
        sizes = dict(zip(ta, sa)) | dict(zip(tb, sb))
        union = float(np.prod([sizes[i] for i in dict.fromkeys(ta + tb)]))
        out = float(np.prod([sizes[i] for i in keep]))
        io = float(a.numel() + b.numel() + out)
        sec = _median_time(lambda: _dense_pair([a, b], [ta, tb], keep), reps, min_s, np.min)
        X.append(dense_features(union, io, out))
        t.append(sec)
        rows.append({"part": "dense", "union": union, "io": io, "out": out, "s": sec})
    X_real, t_real, out_real = _real_dense_steps(reps, seed)     # steps of real paths: permutations the grid lacks
    rows += [{"part": "dense_real", "union": float(x[1] + x[3]), "io": float(x[2]), "out": o, "s": float(tt)}
             for x, tt, o in zip(X_real, t_real, out_real)]
    X, t = np.array(X + X_real), np.array(t + t_real)
    outs = np.array([r["out"] for r in rows if r["part"] in ("dense", "dense_real")])
    bucket = np.array([size_bucket(o) for o in outs])
    small = bucket < 0                     # in cache first, then a per-entry extra per size bucket on the residuals
    (d0, d1, d2, d3), _ = _nnls_rel(X[small], t[small])
    base = X @ np.array([d0, d1, d2, d3])
    d_big, last = [], 0.0
    for b in range(N_BUCKETS):             # median residual per io entry; non-decreasing; empty buckets carry on
        grp = bucket == b
        if grp.any():
            last = max(last, max(0.0, float(np.median((t[grp] - base[grp]) / X[grp, 2]))))
        d_big.append(last)
    pred = base + np.array([d_big[b] * x[2] if b >= 0 else 0.0 for b, x in zip(bucket, X)])
    fit["dense"] = float(np.median(np.abs(pred / t - 1)))
    # --- COO pairwise steps: sparse frontiers x dense factors, sparse matrix products
    X, t = [], []
    coo_cases = []
    for b in range(6, max_bits + 1, 2):
        for dens in (1.0, 0.1, 0.01, 1e-3, 1e-4):
            if dens * 2 ** b <= 2 ** 18 and dens * 2 ** b >= 1:
                coo_cases.append(("frontier", b, dens))
    for n in (16, 128, 1024):
        for dens in (0.3, 0.03, 0.003):
            if dens * n * n <= 2 ** 16 and dens * n * n >= 1:
                coo_cases.append(("matrix", n, dens))
    for kind, n, dens in coo_cases:
        if kind == "frontier":
            a, b = _sparse(rng, (2,) * n, dens), rng.uniform(0.5, 1.5, (2, 2, 2, 2))
            ta, tb, keep = tuple(range(n)), (n - 2, n - 1, n, n + 1), tuple(range(n - 2)) + (n, n + 1)
            sizes = {i: 2 for i in range(n + 2)}
        else:
            a, b = _sparse(rng, (n, n), dens), _sparse(rng, (n, n), dens)
            ta, tb, keep, sizes = (0, 1), (1, 2), (0, 2), {0: n, 1: n, 2: n}
        ac, bc = COO.from_dense(a), COO.from_dense(b)
        sh = [ta.index(i) for i in ta if i in tb]
        ka = ac.coords[:, sh] @ np.cumprod([1] + [sizes[ta[j]] for j in sh][:-1])
        kb = bc.coords[:, [tb.index(ta[j]) for j in sh]] @ np.cumprod([1] + [sizes[ta[j]] for j in sh][:-1])
        _, ca = np.unique(ka, return_counts=True)
        ub, cb = np.unique(kb, return_counts=True)
        cnt = dict(zip(ub.tolist(), cb.tolist()))
        join = float(sum(cnt.get(k, 0) for k in ka.tolist()))
        sec = _median_time(lambda: pair(ac, ta, bc, tb, keep, sizes), reps, min_s, np.min)
        X.append(coo_features(ac.nnz * len(ta) + bc.nnz * len(tb), join, len(keep)))
        t.append(sec)
        rows.append({"part": "coo", "kind": kind, "n": n, "density": dens, "join": join, "s": sec})
    (c0, c1, c2, c3, c4), fit["coo"] = _nnls_rel(np.array(X), np.array(t))
    # --- dense -> COO conversion and non-zero counts
    X, t, Xk, tk = [], [], [], []
    for b in range(2, min(max_bits, 21) + 1, 3):
        for dens in (1.0, 0.1, 1e-3):
            a = _sparse(rng, (2,) * b, dens)
            at = torch.from_numpy(a)
            sec = _median_time(lambda: COO.from_dense(at), reps, min_s, np.min)
            nnz = float(np.count_nonzero(a))
            X.append([1.0, a.size, nnz * b])
            t.append(sec)
            rows.append({"part": "convert", "numel": a.size, "nnz": nnz, "s": sec})
        sec = _median_time(lambda: int(torch.count_nonzero(at)), reps, min_s, np.min)
        Xk.append([1.0, a.size])
        tk.append(sec)
        rows.append({"part": "count", "numel": a.size, "s": sec})
    (v0, v1, v2), fit["convert"] = _nnls_rel(np.array(X), np.array(t))
    (k0, k1), fit["count"] = _nnls_rel(np.array(Xk), np.array(tk))
    consts = dict(d0=d0, d1=d1, d2=d2, d3=d3, c0=c0, c1=c1, c2=c2, c3=c3, c4=c4, v0=v0, v1=v1, v2=v2,
                  k0=k0, k1=k1)
    cm = CostModel(**{k: float(v) for k, v in consts.items()}, d_big=[float(x) for x in d_big],
                   py_step=_forecast_step_seconds())
    return {"cost_model": cm.as_dict(), "cost_fit": fit, "cost_table": rows}


CALIBRATION_INSTANCES = (("random_3cnf", (26, 3.0)), ("random_3cnf", (24, 4.0)), ("random_3cnf", (22, 4.3)),
                         ("random_3cnf", (28, 3.2)), ("random_factor_graph", (40, 50, 0.5)))


def _real_dense_steps(reps: int, seed: int) -> tuple[list, list, list]:
    """(features, fastest CPU seconds) of every dense step along the greedy paths of a few model-counting
    and factor-graph instances drawn with generator seeds 10_000 + (never the suite's or held-out's)."""
    from components.algorithms.hybrid_einsum.engine import contract, schedule
    from components.algorithms.hybrid_einsum.expression import plan
    from components.data import einsum_instances as gen

    X, t, outs = [], [], []
    for i, (fn, args) in enumerate(CALIBRATION_INSTANCES):
        inst = getattr(gen, fn)(*args, 10_000 + 10 * seed + i)
        p = plan(inst.expr, [a.shape for a in inst.tensors])
        sc = schedule(p)
        best = None
        for _ in range(reps):
            sec = [st.seconds for st in contract(p, inst.tensors, "dense", output="native",
                                                 measure_density=False).trace]
            best = sec if best is None else [min(a, b) for a, b in zip(best, sec)]
        for j, sec in enumerate(best):
            X.append(dense_features(sc.union[j], sc.io[j], sc.out_numel[j]))
            t.append(max(sec, 1e-7))
            outs.append(sc.out_numel[j])
    return X, t, outs


def _forecast_step_seconds() -> float:
    """CPU seconds per step of the hybrid's forecast loop, on a 3-CNF-like path."""
    from components.algorithms.hybrid_einsum.engine import dense_costs, forecast, schedule
    from components.algorithms.hybrid_einsum.expression import plan
    from components.data import einsum_instances as gen

    inst = gen.random_3cnf(24, 3.0, 12345)
    p = plan(inst.expr, [a.shape for a in inst.tensors])
    sc = schedule(p)
    cm = CostModel()
    dt = dense_costs(sc, cm, 2.0 ** 40)
    est = [float(np.count_nonzero(a)) for a in inst.tensors]
    sec = _median_time(lambda: forecast(sc, cm, dt, p, 0, est, sc.ndims), 5, 0.01)
    return sec / max(len(p.path), 1)


@prepare_step("einsum_calibration", params=CalibrationParams,
              summary="Micro-benchmark of dense (torch) vs COO pairwise steps across densities; picks the hybrid "
                      "einsum's switch threshold tau for this machine.")
def prepare_calibration(p: CalibrationParams, ctx) -> dict:
    return calibrate(p)
