"""Gatekeeper on the digits cascade (prepared per seed by :mod:`.prepare`): the techniques
``gatekeeper`` (stage-2 Gatekeeper fine-tuning), ``cascade_baseline`` (untuned, continued CE,
temperature scaling) and ``gatekeeper_alpha_sweep`` (the alpha trade-off, with a plot).

Each call runs one seed: every arm starts from that seed's stage-1 model and uses that seed's
batch order, so the ``gatekeeper`` and ``ce_continued`` variants of a seed differ only in their
loss, and the experiment pairs them per seed (``paired(gatekeeper.s_d - ce_continued.s_d)``).
"""
from dataclasses import dataclass, field

import numpy as np
import torch

from components.core.errors import require
from components.core.plotting import fig_png, figure
from components.core.registry import technique
from components.core.result import Result
from components.serving.gatekeeper.cascade import Stage2, evaluate_arm, score
from components.serving.gatekeeper.metrics import CascadeReport


def curve_result(m: dict, rep: CascadeReport, info: dict, title: str) -> Result:
    """The arm's metrics, its deferral curves (real, random, ideal) as series and as a plot."""
    r = rep.curves["r"].tolist()
    series = {"acc_vs_deferral": (r, rep.curves["real"].tolist(), "deferral ratio"),
              "acc_random": (r, rep.curves["random"].tolist(), "deferral ratio"),
              "acc_ideal": (r, rep.curves["ideal"].tolist(), "deferral ratio")}
    return Result(metrics=m, series=series, info=info, files={"plots/deferral_curves.png": curve_png(rep, title)})


def curve_png(rep: CascadeReport, title: str) -> bytes:
    """Joint accuracy against deferral ratio (real, random, ideal)."""
    fig, axes = figure(6, 4)
    ax = axes[0, 0]
    for k, style in (("ideal", "--"), ("real", "-"), ("random", ":")):
        ax.plot(rep.curves["r"], rep.curves[k], style, label=k)
    ax.set_xlabel("deferral ratio r")
    ax.set_ylabel("joint accuracy")
    ax.set_title(f"{title}: s_d={rep.s_d:.3f} s_o={rep.s_o:.3f} AUROC={rep.auroc:.3f}", fontsize=9)
    ax.legend()
    return fig_png(fig, dpi=90)


@dataclass
class GatekeeperParams(Stage2):
    alpha: float = 0.5

    def check(self):
        super().check()
        require(0 < self.alpha < 1, "alpha", self.alpha, "a weight in (0, 1)")


@technique("gatekeeper", family="serving", params=GatekeeperParams, inputs=("digits",),
           summary="Gatekeeper (arXiv 2502.19335): stage-2 fine-tuning of the small model with alpha*CE on correct + "
                   "(1-alpha)*KL(p||U) on incorrect; max-softmax deferral cascade to a large CNN.")
def run_gatekeeper(p: GatekeeperParams, ctx) -> Result:
    torch.set_num_threads(1)
    m, rep, _ = evaluate_arm(ctx.input("digits"), "gatekeeper", p, p.alpha)
    return curve_result(m, rep, {"alpha": p.alpha, "method": "gatekeeper"}, f"gatekeeper a={p.alpha}")


@dataclass
class BaselineParams(Stage2):
    method: str = "ce_continued"      # untuned | ce_continued | temperature

    def check(self):
        super().check()
        require(self.method in ("untuned", "ce_continued", "temperature"), "method", self.method,
                "untuned, ce_continued or temperature")


@technique("cascade_baseline", family="serving", params=BaselineParams, inputs=("digits",),
           summary="Cascade baselines for Gatekeeper: untuned stage-1 model, continued CE for the same extra epochs, "
                   "continued CE + temperature scaling; max-softmax deferral.")
def run_cascade_baseline(p: BaselineParams, ctx) -> Result:
    torch.set_num_threads(1)
    m, rep, _ = evaluate_arm(ctx.input("digits"), p.method, p)
    return curve_result(m, rep, {"method": p.method}, p.method)


# ------------------------------------------------------------------------------------ alpha sweep
@dataclass
class SweepParams(Stage2):
    alphas: list[float] = field(default_factory=lambda: [0.1, 0.3, 0.5, 0.7, 0.9])
    select_max_alpha: float = 0.5     # the validation-selected arm picks among alphas <= this

    def check(self):
        super().check()
        require(len(self.alphas) >= 3 and all(0 < a < 1 for a in self.alphas) and sorted(set(self.alphas)) == list(self.alphas),
                "alphas", self.alphas, "at least 3 increasing distinct weights in (0, 1)")
        require(any(a <= self.select_max_alpha for a in self.alphas), "select_max_alpha", self.select_max_alpha,
                "at least one alpha at or below it")


def _tag(a: float) -> str:
    return f"a{int(round(100 * a)):02d}"


@technique("gatekeeper_alpha_sweep", family="serving", params=SweepParams, inputs=("digits",),
           summary="Gatekeeper's alpha trade-off on one seed: s_d and small-model accuracy per alpha, their Spearman "
                   "trends over alpha, and the alpha <= select_max_alpha picked on validation s_d; plotted.")
def run_alpha_sweep(p: SweepParams, ctx) -> Result:
    """Every alpha fine-tuned from the same stage-1 model with the same batch order. The trends
    (Spearman over alphas) are within-run figures; gains over continued CE are the experiment's
    paired claims against the ``ce_continued`` variant."""
    from scipy.stats import spearmanr

    torch.set_num_threads(1)
    prep = ctx.input("digits")
    rows, val_sd = [], []
    for j, a in enumerate(p.alphas):
        m, _, (pv, pt) = evaluate_arm(prep, "gatekeeper", p, a)
        rows.append({"alpha": a, **{k: m[k] for k in ("s_d", "s_o", "auroc", "small_acc", "joint_acc_r20")}})
        val_sd.append(score(prep, pv, pt, p, split="val").s_d)
        ctx.progress(j + 1, len(p.alphas), s_d=m["s_d"])
    metrics = {f"{k}_{_tag(r['alpha'])}": r[k] for r in rows for k in r if k != "alpha"}
    sd, acc = [r["s_d"] for r in rows], [r["small_acc"] for r in rows]
    metrics["spearman_s_d"] = float(spearmanr(p.alphas, sd).statistic)
    metrics["spearman_small_acc"] = float(spearmanr(p.alphas, acc).statistic)
    cands = [j for j, a in enumerate(p.alphas) if a <= p.select_max_alpha]
    best = max(cands, key=lambda j: (np.nan_to_num(val_sd[j], nan=-1e9), -p.alphas[j]))
    metrics.update({f"best_{k}": rows[best][k] for k in ("s_d", "s_o", "small_acc", "joint_acc_r20")})
    metrics["best_alpha"] = float(p.alphas[best])
    return Result(metrics=metrics,
                  series={"s_d_vs_alpha": (list(p.alphas), sd, "alpha"), "small_acc_vs_alpha": (list(p.alphas), acc, "alpha")},
                  tables={"per_alpha": [r | {"val_s_d": v} for r, v in zip(rows, val_sd)]},
                  info={"alphas": list(p.alphas), "selected": p.alphas[best]},
                  files={"plots/alpha_tradeoff.png": tradeoff_figure(p.alphas, sd, None, acc, None)})


def tradeoff_figure(alphas, sd, sd_se, acc, acc_se, ce_sd=None, ce_acc=None, title="Gatekeeper alpha trade-off"):
    """s_d and small-model accuracy against alpha (error bars: standard errors over seeds, if given)."""
    fig, axes = figure(6.5, 4)
    ax = axes[0, 0]
    ax.errorbar(alphas, sd, yerr=sd_se, marker="o", color="C0", capsize=3, label="s_d (Gatekeeper)")
    if ce_sd is not None:
        ax.axhline(ce_sd, color="C0", ls=":", label="s_d (continued CE)")
    ax.set_xlabel("alpha (weight of CE on correct predictions)")
    ax.set_ylabel("deferral performance s_d", color="C0")
    ax2 = ax.twinx()
    ax2.errorbar(alphas, acc, yerr=acc_se, marker="s", color="C1", capsize=3, label="small accuracy")
    if ce_acc is not None:
        ax2.axhline(ce_acc, color="C1", ls=":", label="small acc (continued CE)")
    ax2.set_ylabel("small-model accuracy", color="C1")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="best")
    ax.set_title(title)
    return fig_png(fig, dpi=100)
