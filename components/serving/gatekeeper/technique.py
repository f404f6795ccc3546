"""Gatekeeper on the digits cascade (prepared by :mod:`.prepare`): the techniques
``gatekeeper`` (stage-2 Gatekeeper fine-tuning), ``cascade_baseline`` (untuned, continued CE,
temperature scaling) and ``gatekeeper_alpha_sweep`` (the alpha trade-off, with a plot).

Every technique runs all prepared seeds and reports the mean over seeds, ``<metric>_se``
(standard error) and a per-seed table. ``gatekeeper`` also re-runs the continued-CE control on
the same seeds (same code, same batch order: identical to the ``cascade_baseline`` variant) and
reports the paired gains ``s_d_gain`` / ``s_o_gain`` with their paired standard errors, which
the acceptance test needs (mean difference > 2 SE).
"""
from dataclasses import dataclass, field

import numpy as np
import torch

from components.core.errors import require
from components.core.plotting import fig_png, figure
from components.core.registry import technique
from components.core.result import Result
from components.serving.gatekeeper.cascade import Stage2, mean_curve, mean_se, paired, score, seed_metrics


def prepared_digits(ctx) -> dict:
    for v in ctx.inputs.values():
        if isinstance(v, dict) and "seeds" in v and "small_hidden" in v:
            return v
    require(False, "prepare", list(ctx.inputs), "a prepare entry with step: gatekeeper_digits")


def needs_digits(p, exp: dict) -> None:
    steps = [s.get("step") for s in (exp.get("prepare") or {}).values() if isinstance(s, dict)]
    require("gatekeeper_digits" in steps, "experiment.prepare", steps, "a prepare entry with step: gatekeeper_digits")


# ------------------------------------------------------------------------------------ runs
def _run_arm_all_seeds(prep: dict, method: str, s2: Stage2, alpha: float, ctx=None):
    rows, reps = [], []
    for i, sp in enumerate(prep["seeds"]):
        m, rep, _ = seed_metrics(prep, sp, method, s2, alpha)
        rows.append(m | {"seed": sp["seed"]})
        reps.append(rep)
        if ctx is not None:
            ctx.progress(i + 1, len(prep["seeds"]), s_d=m["s_d"])
    return rows, reps


def _result(rows: list[dict], reps: list, info: dict, extra: dict | None = None, title: str = "") -> Result:
    metrics = mean_se([{k: v for k, v in r.items() if k != "seed"} for r in rows])
    metrics["n_seeds"] = float(len(rows))
    metrics.update(extra or {})
    r, curves = mean_curve(reps)
    series = {"acc_vs_deferral": (r, curves["real"]), "acc_random": (r, curves["random"]),
              "acc_ideal": (r, curves["ideal"])}
    return Result(metrics=metrics, series=series, tables={"per_seed": rows}, info=info,
                  files={"plots/deferral_curves.png": curve_png(r, curves, reps, title)})


def _nanmean(values) -> float:
    v = np.asarray(values, float)
    return float(v[np.isfinite(v)].mean()) if np.isfinite(v).any() else float("nan")


def curve_png(r, curves, reps, title: str) -> bytes:
    """Joint accuracy against deferral ratio (real, random, ideal; mean over seeds)."""
    fig, axes = figure(6, 4)
    ax = axes[0, 0]
    for k, style in (("ideal", "--"), ("real", "-"), ("random", ":")):
        ax.plot(r, curves[k], style, label=k)
    ax.set_xlabel("deferral ratio r")
    ax.set_ylabel("joint accuracy (mean over seeds)")
    ax.set_title(f"{title}: s_d={_nanmean([x.s_d for x in reps]):.3f} s_o={_nanmean([x.s_o for x in reps]):.3f} "
                 f"AUROC={_nanmean([x.auroc for x in reps]):.3f}", fontsize=9)
    ax.legend()
    return fig_png(fig, dpi=90)


@dataclass
class GatekeeperParams(Stage2):
    alpha: float = 0.5
    paired_control: bool = True       # re-run continued CE on the same seeds for paired gains

    def check(self):
        super().check()
        require(0 < self.alpha < 1, "alpha", self.alpha, "a weight in (0, 1)")


@technique("gatekeeper", family="serving", params=GatekeeperParams, validate=needs_digits,
           summary="Gatekeeper (arXiv 2502.19335): stage-2 fine-tuning of the small model with alpha*CE on correct + "
                   "(1-alpha)*KL(p||U) on incorrect; max-softmax deferral cascade to a large CNN.")
def run_gatekeeper(p: GatekeeperParams, ctx) -> Result:
    torch.set_num_threads(1)
    prep = prepared_digits(ctx)
    rows, reps = _run_arm_all_seeds(prep, "gatekeeper", p, p.alpha, ctx)
    extra = {}
    if p.paired_control:
        ce_rows, _ = _run_arm_all_seeds(prep, "ce_continued", p, p.alpha)
        for m in ("s_d", "s_o", "auroc", "small_acc", "joint_acc_r20"):
            if m in rows[0]:
                extra[f"{m}_gain"], extra[f"{m}_gain_se"] = paired([r[m] for r in rows], [r[m] for r in ce_rows])
    return _result(rows, reps, {"alpha": p.alpha, "method": "gatekeeper"}, extra, f"gatekeeper a={p.alpha}")


@dataclass
class BaselineParams(Stage2):
    method: str = "ce_continued"      # untuned | ce_continued | temperature

    def check(self):
        super().check()
        require(self.method in ("untuned", "ce_continued", "temperature"), "method", self.method,
                "untuned, ce_continued or temperature")


@technique("cascade_baseline", family="serving", params=BaselineParams, validate=needs_digits,
           summary="Cascade baselines for Gatekeeper: untuned stage-1 model, continued CE for the same extra epochs, "
                   "continued CE + temperature scaling; max-softmax deferral.")
def run_cascade_baseline(p: BaselineParams, ctx) -> Result:
    torch.set_num_threads(1)
    prep = prepared_digits(ctx)
    rows, reps = _run_arm_all_seeds(prep, p.method, p, 0.5, ctx)
    return _result(rows, reps, {"method": p.method}, title=p.method)


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


@technique("gatekeeper_alpha_sweep", family="serving", params=SweepParams, validate=needs_digits,
           summary="Gatekeeper's alpha trade-off: s_d and small-model accuracy per alpha (Spearman trends), the "
                   "alpha <= 0.5 picked on validation s_d, against continued CE; plotted.")
def run_alpha_sweep(p: SweepParams, ctx) -> Result:
    from scipy.stats import spearmanr

    torch.set_num_threads(1)
    prep = prepared_digits(ctx)
    n = len(prep["seeds"])
    ce = [seed_metrics(prep, sp, "ce_continued", p)[0] for sp in prep["seeds"]]
    per_alpha, val_sd = {}, {}
    for j, a in enumerate(p.alphas):
        rows = []
        for sp in prep["seeds"]:
            m, _, (pv, pt) = seed_metrics(prep, sp, "gatekeeper", p, a)
            rows.append(m)
            val_sd[(a, sp["seed"])] = score(sp, pv, pt, p, split="val").s_d
        per_alpha[a] = rows
        ctx.progress(j + 1, len(p.alphas))
    metrics: dict[str, float] = {}
    table = []
    for a, rows in per_alpha.items():
        ms = mean_se(rows)
        for k in ("s_d", "s_o", "auroc", "small_acc", "joint_acc_r20"):
            metrics[f"{k}_{_tag(a)}"] = ms[k]
            metrics[f"{k}_{_tag(a)}_se"] = ms[f"{k}_se"]
        table.append({"alpha": a, **{k: ms[k] for k in ("s_d", "s_d_se", "s_o", "auroc", "small_acc", "small_acc_se",
                                                        "joint_acc_r20")}})
    means_sd = [np.mean([r["s_d"] for r in per_alpha[a]]) for a in p.alphas]
    means_acc = [np.mean([r["small_acc"] for r in per_alpha[a]]) for a in p.alphas]
    metrics["spearman_s_d"] = float(spearmanr(p.alphas, means_sd).statistic)
    metrics["spearman_small_acc"] = float(spearmanr(p.alphas, means_acc).statistic)
    ce_ms = mean_se(ce)
    metrics["ce_s_d"], metrics["ce_small_acc"] = ce_ms["s_d"], ce_ms["small_acc"]
    # validation-selected alpha <= select_max_alpha, per seed
    cands = [a for a in p.alphas if a <= p.select_max_alpha]
    best_rows, best_alphas = [], []
    for i, sp in enumerate(prep["seeds"]):
        a = max(cands, key=lambda a: (np.nan_to_num(val_sd[(a, sp["seed"])], nan=-1e9), -a))
        best_alphas.append(a)
        best_rows.append(per_alpha[a][i])
    bm = mean_se(best_rows)
    metrics["best_s_d"], metrics["best_small_acc"], metrics["best_s_o"] = bm["s_d"], bm["small_acc"], bm["s_o"]
    metrics["best_joint_acc_r20"] = bm["joint_acc_r20"]
    metrics["best_alpha_mean"] = float(np.mean(best_alphas))
    metrics["best_s_d_gain"], metrics["best_s_d_gain_se"] = paired([r["s_d"] for r in best_rows], [r["s_d"] for r in ce])
    metrics["n_seeds"] = float(n)
    png = _tradeoff_png(p.alphas, per_alpha, ce)
    return Result(metrics=metrics,
                  series={"s_d_vs_alpha": (list(p.alphas), means_sd), "small_acc_vs_alpha": (list(p.alphas), means_acc)},
                  tables={"per_alpha": table, "selected_alpha": [{"seed": sp["seed"], "alpha": a}
                                                                 for sp, a in zip(prep["seeds"], best_alphas)]},
                  info={"alphas": list(p.alphas), "selected": best_alphas},
                  files={"plots/alpha_tradeoff.png": png})


def tradeoff_figure(alphas, sd, sd_se, acc, acc_se, ce_sd=None, ce_acc=None, title="Gatekeeper alpha trade-off"):
    """s_d and small-model accuracy against alpha (error bars: standard errors over seeds)."""
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


def _tradeoff_png(alphas, per_alpha, ce) -> bytes:
    ms = [mean_se(per_alpha[a]) for a in alphas]
    ce_ms = mean_se(ce)
    return tradeoff_figure(alphas, [m["s_d"] for m in ms], [m["s_d_se"] for m in ms], [m["small_acc"] for m in ms],
                           [m["small_acc_se"] for m in ms], ce_ms["s_d"], ce_ms["small_acc"])
