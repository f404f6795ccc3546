"""The evaluation harness shared by SpecReason and its baselines.

Every variant solves the same held-out problems (never trained on) with fresh per-request
prefix caches for both models; a variant is just a ``solve(small, base, prompt, problem, seed)
-> Trace`` function. Cost accounting is :class:`~components.serving.cost.Usage` everywhere:
decode and prefill tokens per model, simulated latency from per-model :class:`TokenCost`
(primary figure) and measured wall time (one torch thread, both models in this process), per
problem as ``wall_per_problem_s`` (the DAG records the variant's total wall time as ``wall_s``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from components.core.errors import require
from components.core.result import Result
from components.data import reasoning as R
from components.serving.cost import Usage
from components.serving.lms import lm_costs, lms_params, load_lm
from components.serving.specreason.loop import Trace
from components.serving.specreason.session import LMSession

Solve = Callable[[LMSession, LMSession, list, R.Problem, int], Trace]


@dataclass
class EvalParams:
    """Keys shared by every variant of the specreason experiment."""

    n_problems: int = 500
    max_tokens: int = 128          # output token budget per problem
    flops_per_s: float = 1e9       # simulated accelerator: a decoded token costs 2 * params FLOPs
    prefill_ratio: float = 0.1     # a prefilled token costs this share of a decoded one

    def check_eval(self):
        require(self.n_problems >= 1, "n_problems", self.n_problems, "a positive number of problems")
        require(self.max_tokens >= 1, "max_tokens", self.max_tokens, "a positive token budget")
        require(self.flops_per_s > 0, "flops_per_s", self.flops_per_s, "a positive FLOP rate")
        require(0 <= self.prefill_ratio <= 1, "prefill_ratio", self.prefill_ratio, "a ratio in [0, 1]")


def validate_prepare(p, exp: dict) -> None:
    """Technique ``validate`` hook: problems only from the prepared LMs' held-out set."""
    n_heldout = lms_params(exp).n_heldout
    require(p.n_problems <= n_heldout, "n_problems", p.n_problems,
            f"at most the prepared n_heldout={n_heldout} (held-out problems excluded from training)")


def _auroc(scores: list[float], labels: list[bool]) -> float:
    if len(set(labels)) < 2:
        return math.nan
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(np.asarray(labels, dtype=int), np.asarray(scores)))


def run_eval(p: EvalParams, ctx, solve: Solve, reference: bool = False) -> Result:
    """Solve every problem once on this call's seed; return the variant's metrics, a few traces
    and judge data. Sampling draws per problem from ``ctx.seed`` (a greedy variant ignores it).

    ``reference``: also decode each problem greedily with the base model alone (off the clock)
    and report ``matches_base``, the share of outputs identical to it.
    """
    torch.set_num_threads(1)
    lms = ctx.input("lms")
    small, base = load_lm(lms, "small"), load_lm(lms, "base")
    costs = lm_costs(lms, p.flops_per_s, p.prefill_ratio)
    problems = R.held_out_problems(p.n_problems, lms["level"], lms["heldout_seed"])
    total = Usage()
    correct, sims, walls, out_tokens, same = [], [], [], [], []
    scores, labels, accepted = [], [], []
    sd_drafted = sd_accepted = 0
    rows = []
    n_runs = len(problems)
    for i, prob in enumerate(problems):
        usage = Usage()
        sm, bs = LMSession(small, "small", usage), LMSession(base, "base", usage)
        prompt = R.encode(prob.text)
        t0 = time.perf_counter()
        trace = solve(sm, bs, prompt, prob, ctx.seed * 10_007 + i)
        usage.wall_s = time.perf_counter() - t0
        ok = R.final_answer(trace.steps) == prob.answer
        correct.append(ok)
        sims.append(usage.sim_latency_s(costs))
        walls.append(usage.wall_s)
        out_tokens.append(len(R.encode(trace.text)))
        total.merge(usage)
        for rec in trace.judged:
            scores.append(rec.score)
            labels.append(bool(rec.correct))
            accepted.append(rec.accepted)
        sd_drafted += trace.sd.drafted
        sd_accepted += trace.sd.accepted
        if reference:
            ref = base.generate(prompt, min(p.max_tokens, base.cfg.context - len(prompt)), stop={R.STOP_ID})
            same.append(R.decode(ref) == trace.text)
        if i < 8:
            rows.append({"problem": prob.text, "answer": prob.answer, "output": trace.text, "correct": ok,
                         "sources": "".join(x[0] for x in trace.sources), "stop": trace.stop_reason,
                         "sim_latency_ms": 1e3 * sims[-1]})
        ctx.progress(i + 1, n_runs, acc=float(np.mean(correct)))

    m = {"accuracy": float(np.mean(correct)), "sim_latency_s": float(np.mean(sims)),
         "wall_s": float(np.mean(walls)), "wall_per_problem_s": float(np.mean(walls)), "output_tokens": float(np.mean(out_tokens)), "n_runs": float(n_runs),
         "cost_ratio_base_small": costs["base"].decode_s / costs["small"].decode_s}
    for k, v in total.metrics().items():
        m[k] = v / n_runs                                   # per problem
    for name in ("small", "base"):
        for k in (f"{name}_tokens", f"{name}_prefill_tokens", f"{name}_calls"):
            m.setdefault(k, 0.0)
    if scores:
        acc_rate = float(np.mean(accepted))
        lab, acc = np.asarray(labels), np.asarray(accepted)
        m.update(step_acceptance_rate=acc_rate, fallback_rate=1.0 - acc_rate, acceptance_rate=acc_rate,
                 judge_auroc=_auroc(scores, labels), small_step_accuracy=float(lab.mean()),
                 accepted_wrong_rate=float((acc & ~lab).sum() / max(acc.sum(), 1)),
                 judge_tp=float((acc & lab).sum()), judge_fp=float((acc & ~lab).sum()),
                 judge_tn=float((~acc & ~lab).sum()), judge_fn=float((~acc & lab).sum()),
                 judged_steps=float(len(scores)))
    if sd_drafted:
        m["sd_acceptance_rate"] = sd_accepted / sd_drafted
        m.setdefault("acceptance_rate", m["sd_acceptance_rate"])
    if reference:
        m["matches_base"] = float(np.mean(same))
    files = {}
    if scores and len(set(labels)) == 2:
        files["plots/judge_scores.png"] = _score_hist(scores, labels, ctx.variant)
    return Result(metrics=m, tables={"traces": rows},
                  info={"costs": {k: vars(v) for k, v in costs.items()}, "level": lms["level"],
                        "train_stats": {k: {kk: vv for kk, vv in lms[k]["stats"].items()
                                            if not isinstance(vv, list)} for k in ("small", "base")}},
                  files=files)


def _score_hist(scores: list[float], labels: list[bool], title: str) -> bytes:
    from components.core.plotting import fig_png, figure

    fig, axes = figure(5, 3)
    ax = axes[0, 0]
    s, lab = np.asarray(scores), np.asarray(labels)
    bins = np.linspace(0, 9, 19)
    ax.hist(s[lab], bins=bins, alpha=0.6, label="correct steps (checker)")
    ax.hist(s[~lab], bins=bins, alpha=0.6, label="wrong steps")
    ax.set_yscale("log")
    ax.set_xlabel("judge score")
    ax.set_title(f"{title}: judge scores of S's proposals")
    ax.legend()
    return fig_png(fig, dpi=100)
