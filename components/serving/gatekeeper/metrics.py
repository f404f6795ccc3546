"""Deferral metrics for a two-model cascade (Gatekeeper's evaluation).

Given, per test item, the small model's confidence g, whether the small model is correct and
whether the large model is correct:

- deferral curve acc(r): defer the ceil(r n) lowest-confidence items; kept items use the small
  prediction, deferred items the large model's actual prediction (r = k/n, k = 0..n).
- random curve: the expectation when a random r fraction is deferred, (1-r) acc_S + r acc_L
  item by item. Ideal curve: defer the small model's mistakes first (those the large model gets
  right first), then its correct answers (those the large model also gets right first).
- s_d = (A_real - A_rand) / (A_ideal - A_rand), areas under the curves over r in [0, 1]; NaN when
  A_ideal == A_rand (nothing to gain from ordering, e.g. a perfect small model).
- s_o = sum over bins of min(hist_correct, hist_incorrect) of g (normalised histograms; lower =
  better separated); AUROC of g for small-model correctness.
- joint accuracy at a target deferral ratio r: tau is the r-quantile of g on VALIDATION data, then
  test items with g < tau are deferred; the realised test deferral ratio is reported beside it.
- cost per item = c_S + r c_L (the small model always runs, the large one on deferrals).
- calibration of the small model's confidence g (Gatekeeper's premise: an over-confident small
  model): ECE = sum over equal-width bins of g on [0, 1] of (n_b / n) |acc_b - mean g_b| (Guo et al.
  2017, 15 bins, the top bin closed); over-confidence gap = mean g - accuracy (> 0: over-confident).
"""
from dataclasses import dataclass

import numpy as np


def _order_accuracy(order: np.ndarray, small_ok: np.ndarray, large_ok: np.ndarray) -> np.ndarray:
    """acc(k/n) for k = 0..n when items are deferred in ``order``."""
    n = len(order)
    gain = (large_ok[order].astype(float) - small_ok[order].astype(float))
    return (small_ok.sum() + np.concatenate([[0.0], np.cumsum(gain)])) / n


def deferral_curves(conf: np.ndarray, small_ok: np.ndarray, large_ok: np.ndarray) -> dict[str, np.ndarray]:
    """Real, random and ideal joint-accuracy curves at r = k/n, k = 0..n."""
    conf, small_ok, large_ok = np.asarray(conf, float), np.asarray(small_ok, bool), np.asarray(large_ok, bool)
    n = len(conf)
    r = np.arange(n + 1) / n
    real = _order_accuracy(np.argsort(conf, kind="stable"), small_ok, large_ok)
    ideal_order = np.lexsort((~large_ok, small_ok))   # mistakes first; among each, large-correct first
    ideal = _order_accuracy(ideal_order, small_ok, large_ok)
    rand = (1 - r) * small_ok.mean() + r * large_ok.mean()
    return {"r": r, "real": real, "random": rand, "ideal": ideal}


def deferral_performance(curves: dict[str, np.ndarray]) -> float:
    """s_d from the curves (NaN when the ideal and random areas coincide)."""
    r = curves["r"]
    a_real, a_rand, a_ideal = (float(np.trapezoid(curves[k], r)) for k in ("real", "random", "ideal"))
    den = a_ideal - a_rand
    return (a_real - a_rand) / den if den > 1e-12 else float("nan")


def overlap(conf: np.ndarray, small_ok: np.ndarray, bins: int = 20) -> float:
    """s_o: histogram overlap of the confidence of correct vs incorrect items on [0, 1]."""
    conf, small_ok = np.asarray(conf, float), np.asarray(small_ok, bool)
    if small_ok.all() or not small_ok.any():
        return float("nan")
    edges = np.linspace(0.0, 1.0, bins + 1)
    hc = np.histogram(np.clip(conf[small_ok], 0, 1), edges)[0] / small_ok.sum()
    hi = np.histogram(np.clip(conf[~small_ok], 0, 1), edges)[0] / (~small_ok).sum()
    return float(np.minimum(hc, hi).sum())


def auroc(conf: np.ndarray, small_ok: np.ndarray) -> float:
    """P(g(correct) > g(incorrect)) with ties counted half (Mann-Whitney)."""
    from scipy.stats import rankdata

    conf, small_ok = np.asarray(conf, float), np.asarray(small_ok, bool)
    n1, n0 = small_ok.sum(), (~small_ok).sum()
    if n1 == 0 or n0 == 0:
        return float("nan")
    ranks = rankdata(conf)
    return float((ranks[small_ok].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def ece(conf: np.ndarray, small_ok: np.ndarray, bins: int = 15) -> float:
    """Expected calibration error of g against correctness: equal-width bins on [0, 1] (an item
    with g == 1 falls in the top bin), sum_b (n_b / n) |acc_b - conf_b|."""
    conf, small_ok = np.asarray(conf, float), np.asarray(small_ok, float)
    if len(conf) == 0:
        return float("nan")
    idx = np.clip((np.clip(conf, 0.0, 1.0) * bins).astype(int), 0, bins - 1)
    total = 0.0
    for b in np.unique(idx):
        sel = idx == b
        total += sel.sum() * abs(small_ok[sel].mean() - conf[sel].mean())
    return float(total / len(conf))


def overconfidence(conf: np.ndarray, small_ok: np.ndarray) -> float:
    """Mean confidence minus accuracy (> 0: over-confident on average)."""
    return float(np.mean(np.asarray(conf, float)) - np.mean(np.asarray(small_ok, float)))


def threshold_for_ratio(conf_val: np.ndarray, r: float) -> float:
    """tau such that a fraction r of the validation items has g < tau."""
    if r <= 0:
        return -np.inf
    if r >= 1:
        return np.inf
    s = np.sort(np.asarray(conf_val, float))
    k = int(round(r * len(s)))
    return float(s[k]) if k < len(s) else np.inf


@dataclass
class CascadeReport:
    """All figures of one cascade on one test set."""

    small_acc: float
    large_acc: float
    s_d: float
    s_o: float
    auroc: float
    ece: float                          # calibration of g on the test items (see :func:`ece`)
    overconf: float                     # mean g - small accuracy on the test items
    joint_acc: dict[float, float]       # target r -> test joint accuracy (tau from validation)
    deferral: dict[float, float]        # target r -> realised test deferral ratio
    curves: dict[str, np.ndarray]

    def metrics(self, cost_small: float, cost_large: float) -> dict[str, float]:
        out = {"small_acc": self.small_acc, "large_acc": self.large_acc, "s_d": self.s_d, "s_o": self.s_o,
               "auroc": self.auroc, "ece": self.ece, "overconf": self.overconf}
        for r, acc in self.joint_acc.items():
            tag = f"r{int(round(100 * r)):02d}"
            out[f"joint_acc_{tag}"] = acc
            out[f"deferral_{tag}"] = self.deferral[r]
            out[f"cost_{tag}"] = cost_small + self.deferral[r] * cost_large
        return out


def evaluate_cascade(conf_val: np.ndarray, conf_test: np.ndarray, small_ok: np.ndarray, large_ok: np.ndarray,
                     ratios: tuple[float, ...] = (0.1, 0.2, 0.3), calib_test: np.ndarray | None = None) -> CascadeReport:
    """``calib_test``: the probability whose calibration ECE and the gap measure (default ``conf_test``;
    pass the max-probability when g is another score, e.g. negative entropy)."""
    small_ok, large_ok = np.asarray(small_ok, bool), np.asarray(large_ok, bool)
    calib = conf_test if calib_test is None else calib_test
    curves = deferral_curves(conf_test, small_ok, large_ok)
    joint, realised = {}, {}
    for r in ratios:
        defer = np.asarray(conf_test) < threshold_for_ratio(conf_val, r)
        joint[r] = float(np.where(defer, large_ok, small_ok).mean())
        realised[r] = float(defer.mean())
    return CascadeReport(float(small_ok.mean()), float(large_ok.mean()), deferral_performance(curves),
                         overlap(conf_test, small_ok), auroc(conf_test, small_ok), ece(calib, small_ok),
                         overconfidence(calib, small_ok), joint, realised, curves)
