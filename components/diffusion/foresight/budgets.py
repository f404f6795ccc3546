"""Foresight (arXiv 2506.00329) against the reuse a user would pick instead, over several skip budgets
(issue 32 item 6), and the paper's premise measured: that a DiT's layers change at different rates.

At Static-2's 50% skip Foresight's schedule (W=6, R=3, last 3 full) reuses at every step it may: the
threshold no longer decides anything, so one matched point cannot tell adaptive reuse from a static
schedule. Here each policy is brought to the same budgets below its maximum and scored against the
full-compute reference on the same noise:

- Foresight: lambda bisected to the budget on a calibration draw (:func:`.technique.calibrate`);
- TeaCache-like: its threshold bisected the same way (rescaling fitted on a full-compute draw);
- static: the budget's steps skipped evenly (:class:`StaticBudget`; at 50% it is Static-2).

Budgets are in percent of the units (``budgets: [20, 30, 40]``, the experiment's ``budget`` axis too).
Metrics per budget b: ``<policy>_psnr_b<b>`` and ``<policy>_skip_b<b>``; over the budgets,
``psnr_gap_static`` and ``psnr_gap_teacache`` (Foresight's PSNR lead averaged over the budgets), ``ahead_static`` /
``ahead_teacache`` (budgets where Foresight leads) and ``max_skip_dev`` (the largest distance of a
policy's evaluated skip fraction from its budget: the comparison is at equal compute only when small).

The premise: ``layer_rate_spread``, the largest over the smallest of the blocks' mean relative change
between consecutive steps of a full-compute sample (``layer_rate_<l>`` each). Equal rates leave
per-layer thresholds nothing to adapt to. Beside it, ``layer_rate_corr``: the smallest correlation
between two blocks' log change per step over the steps. Foresight sets each block's threshold from its
own change at the end of warm-up, so scale differences between blocks cancel; only blocks whose
change moves differently over the steps (a low correlation) give per-layer decisions something a
single threshold could not do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from components.core.errors import require
from components.core.plotting import fig_png, figure
from components.core.registry import technique
from components.core.result import Result
from components.diffusion import quality
from components.diffusion.foresight.technique import ForesightParams, calibrate, fit_teacache_rescale
from components.diffusion.foresight.policies import Foresight, TeaCache
from components.diffusion.prepare import load_classifier, load_dit
from components.diffusion.sampling import BlockRunner, draw, sample, sample_batches

POLICIES = ("foresight", "teacache", "static")


class StaticBudget(BlockRunner):
    """A static schedule at skip fraction ``fraction``: step t reuses the last computed output when
    floor((t+1) f) > floor(t f), so the skipped steps are spread evenly (f = 0.5 is Static-2)."""

    name = "static_budget"

    def __init__(self, fraction: float):
        self.fraction = fraction

    def start(self, steps, model):
        super().start(steps, model)
        self.cached = None

    def __call__(self, t, h, c, model):
        f = self.fraction
        if self.cached is None or math.floor((t + 1) * f) == math.floor(t * f):
            self.count(self.depth * self.upb)
            self.cached = model.run_blocks(h, c)
            return self.cached
        self.count(0)
        return self.cached


class LayerRates(BlockRunner):
    """Full compute that records each block's relative change between consecutive steps,
    ||out_l(t) - out_l(t-1)|| / ||out_l(t-1)||, from step ``skip_first`` on."""

    name = "layer_rates"

    def __init__(self, skip_first: int = 1):
        self.skip_first = skip_first

    def start(self, steps, model):
        super().start(steps, model)
        self.prev: list[torch.Tensor | None] = [None] * self.depth
        self.rates: list[list[float]] = [[] for _ in range(self.depth)]

    def __call__(self, t, h, c, model):
        self.count(self.depth * self.upb)
        for l, blk in enumerate(model.blocks):
            h = blk(h, c)
            if self.prev[l] is not None and t >= self.skip_first:
                self.rates[l].append(float((h - self.prev[l]).norm() / self.prev[l].norm().clamp_min(1e-12)))
            self.prev[l] = h
        return h


@dataclass
class BudgetParams(ForesightParams):
    budgets: list = field(default_factory=lambda: [20, 30, 40])   # skip budgets in percent; []: rates only
    policies: list = field(default_factory=lambda: list(POLICIES))
    rate_samples: int = 16         # the full-compute draw the layer rates are measured on

    def check(self):
        super().check()
        require(all(isinstance(b, int) and 0 < b < 100 for b in self.budgets) and len(set(self.budgets)) == len(self.budgets),
                "budgets", self.budgets, "distinct whole percentages between 1 and 99")
        require(bool(self.policies) and set(self.policies) <= set(POLICIES) and "foresight" in self.policies,
                "policies", self.policies, "foresight and any of " + ", ".join(POLICIES[1:]))
        require(self.rate_samples >= 1, "rate_samples", self.rate_samples, "a positive number of samples")


def layer_rates(model, ref, seed: int, n: int, skip_first: int) -> tuple[list[float], float]:
    """Each block's mean relative change per step over a full-compute sample of ``n`` draws, and the
    smallest correlation between two blocks' log change over the steps (nan with fewer than 2 blocks or
    3 steps)."""
    noise, y = draw(7_000 + seed, n, model, ref["size"])
    probe = LayerRates(skip_first)
    sample(model, noise, y, ref["steps"], ref["cfg_scale"], probe)
    return [float(np.mean(r)) if r else math.nan for r in probe.rates], lockstep(probe.rates)


def lockstep(rates: list[list[float]]) -> float:
    """The smallest correlation between two blocks' log change over the steps (``rates[l][t]``): 1 when
    every block's change rises and falls together, whatever their scales; nan with fewer than 2 blocks
    or 3 steps."""
    logs = np.log(np.asarray(rates, dtype=float))
    if logs.ndim != 2 or logs.shape[0] < 2 or logs.shape[1] < 3:
        return math.nan
    return float(np.corrcoef(logs)[np.triu_indices(logs.shape[0], 1)].min())


@technique("reuse_budget_curve", family="diffusion", params=BudgetParams, inputs=("model", "reference", "classifier"),
           devices=("cpu", "cuda"), summary="Foresight (arXiv 2506.00329) vs static and TeaCache-like reuse at several skip budgets below each "
                   "policy's maximum (PSNR-vs-skip curves), and the spread of the DiT's per-layer change rates.")
def run_budget_curve(p: BudgetParams, ctx) -> Result:
    torch.set_num_threads(1)
    dev = ctx.device
    model, ref, clf = load_dit(ctx.input("model"), dev), ctx.input("reference"), load_classifier(ctx.input("classifier"), dev)
    rates, corr = layer_rates(model, ref, ctx.seed, p.rate_samples, skip_first=p.warmup)
    m: dict = {f"layer_rate_{l}": r for l, r in enumerate(rates)}
    m["layer_rate_spread"] = max(rates) / min(rates) if min(rates) > 0 else math.nan
    m["layer_rate_corr"] = corr
    series = {"layer_rate": (list(range(len(rates))), rates, "block")}
    budgets = sorted(p.budgets)
    if not budgets:
        return Result(metrics=m, series=series)
    n = p.n_samples or len(ref["noise"])
    require(n <= len(ref["noise"]), "n_samples", n, f"at most the reference's {len(ref['noise'])} samples")
    noise, y, x_ref = ref["noise"][:n].to(dev), ref["y"][:n].to(dev), ref["x"][:n].to(dev)
    coeffs = None
    if "teacache" in p.policies:
        cal_noise, cal_y = draw(6_000 + ctx.seed, min(p.calib_samples, p.batch), model, ref["size"])
        coeffs = fit_teacache_rescale(model, cal_noise, cal_y, ref["steps"], ref["cfg_scale"])
    rows, curves = [], {pol: [] for pol in p.policies}
    for i, b in enumerate(budgets):
        frac = b / 100
        for pol in p.policies:
            if pol == "static":
                make = lambda frac=frac: StaticBudget(frac)   # noqa: E731
            elif pol == "foresight":
                lam, _ = calibrate(model, "foresight", _at(p, frac), ref, ctx.seed)
                make = lambda lam=lam: Foresight(lam, p.warmup, p.interval, p.last_full, p.mode)   # noqa: E731
            else:
                cal = _at(p, frac)
                cal.coeffs = list(coeffs)
                delta, _ = calibrate(model, "teacache", cal, ref, ctx.seed)
                make = lambda delta=delta: TeaCache(delta, coeffs)   # noqa: E731
            x, st = sample_batches(model, noise, y, ref["steps"], ref["cfg_scale"], make, p.batch)
            q = quality.summary(x, x_ref, y, clf)
            m[f"{pol}_psnr_b{b}"], m[f"{pol}_skip_b{b}"] = q["psnr_db"], st["skip_fraction"]
            rows.append({"budget": frac, "policy": pol, "skip_fraction": st["skip_fraction"], "psnr_db": q["psnr_db"],
                         "class_acc": q["class_acc"]})
            curves[pol].append((st["skip_fraction"], q["psnr_db"]))
        ctx.progress(i + 1, len(budgets))
    m["max_skip_dev"] = max(abs(r["skip_fraction"] - r["budget"]) for r in rows)
    ours = [psnr for _, psnr in curves["foresight"]]
    for pol in p.policies:
        if pol != "foresight":
            gaps = [a - b for a, (_, b) in zip(ours, curves[pol])]
            m[f"psnr_gap_{pol}"] = float(np.mean(gaps))
            m[f"ahead_{pol}"] = float(sum(g > 0 for g in gaps))
    m["budgets"] = float(len(budgets))
    fig, axes = figure(5, 3.5)
    ax = axes[0, 0]
    for pol, pts in curves.items():
        ax.plot([s for s, _ in pts], [q for _, q in pts], "o-", label=pol)
    ax.set_xlabel("skip fraction (evaluated)")
    ax.set_ylabel("PSNR vs full (dB)")
    ax.set_title(f"reuse at equal budgets, seed {ctx.seed}", fontsize=9)
    ax.legend(fontsize=7)
    series.update({f"psnr_{pol}": (budgets, [q for _, q in pts], "skip budget (%)") for pol, pts in curves.items()})
    return Result(metrics=m, series=series, tables={"budget_curve": rows},
                  files={"plots/budget_curve.png": fig_png(fig, dpi=90)})


def _at(p: BudgetParams, budget: float):
    """``p`` with ``target_skip`` = ``budget`` (calibrate reads the knobs it needs from it)."""
    from dataclasses import replace

    return replace(p, target_skip=budget)
