"""Recall-vs-cost curves: Pareto front and log-linear interpolation at a target recall."""
from __future__ import annotations

import math

import numpy as np
from components.core.plotting import fig_png


def front(cost: list[float], recall: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Points sorted by cost, keeping only those that raise the best recall so far (the Pareto front)."""
    c = np.asarray(cost, float)
    r = np.asarray(recall, float)
    order = np.lexsort((-r, c))
    keep_c, keep_r, best = [], [], -math.inf
    for i in order:
        if r[i] > best:
            keep_c.append(c[i])
            keep_r.append(r[i])
            best = r[i]
    return np.array(keep_c), np.array(keep_r)


def cost_at(cost: list[float], recall: list[float], target: float) -> float:
    """Cost needed to reach ``target`` recall on the Pareto front, interpolating log(cost) linearly in
    recall between the bracketing points; NaN if the sweep never reaches it."""
    c, r = front(cost, recall)
    hit = np.nonzero(r >= target - 1e-12)[0]
    if len(hit) == 0:
        return math.nan
    i = int(hit[0])
    if i == 0:
        return float(c[0])
    r0, r1, c0, c1 = r[i - 1], r[i], math.log(c[i - 1]), math.log(c[i])
    return float(math.exp(c0 + (target - r0) / (r1 - r0) * (c1 - c0)))


def value_at(cost: list[float], recall: list[float], value: list[float], target: float) -> float:
    """A per-point quantity (e.g. queries/s), log-interpolated at the front's crossing of ``target``."""
    c = np.asarray(cost, float)
    r = np.asarray(recall, float)
    v = np.asarray(value, float)
    order = np.argsort(r, kind="stable")
    r, v = r[order], v[order]
    hit = np.nonzero(r >= target - 1e-12)[0]
    if len(hit) == 0 or not np.all(v > 0):
        return math.nan
    i = int(hit[0])
    if i == 0 or r[i] == r[i - 1]:
        return float(v[i])
    w = (target - r[i - 1]) / (r[i] - r[i - 1])
    return float(math.exp((1 - w) * math.log(v[i - 1]) + w * math.log(v[i])))


def pareto_png(curves: dict[str, tuple[list[float], list[float]]], title: str, targets=(0.95, 0.98, 0.99)) -> bytes:
    """Recall@k against distance computations, one line per curve (log x), target recalls marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, (c, r) in curves.items():
        order = np.argsort(c)
        ax.plot(np.asarray(c)[order], np.asarray(r)[order], "o-" if "adaptive" in name else "s--", ms=3, lw=1.3,
                label=name)
    for t in targets:
        ax.axhline(t, color="grey", lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("distance computations per query")
    ax.set_ylabel("recall@k")
    ax.set_ylim(max(0.0, min(min(r) for _, r in curves.values()) - 0.02), 1.005)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig_png(fig, dpi=110)
