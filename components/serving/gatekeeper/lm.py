"""Gatekeeper on an LM cascade: the reasoning task's small GPT defers whole problems to the base GPT.

Models come from specreason's prepare step ``reasoning_lms`` (input ``lms``: a small and a base
char GPT trained on the arithmetic-chain task of :mod:`components.data.reasoning`; the experiment
sizes them). Stage 2 fine-tunes the SMALL model only, per token (a token is correct when its
argmax equals the target; loss on solution tokens only, N = number of solution tokens in the
batch), on training chains freshly sampled from the seed (held-out problems excluded), for a
fixed number of steps. Arms, as for digits:
``untuned`` (as trained), ``ce_continued`` (same steps, plain token CE), ``gatekeeper`` (alpha).

Cascade: the small model decodes its chain of thought greedily; sequence confidence g = mean
(or min) over its generated tokens of the token max-probability. Deferred problems are solved by
the base model, whose answers are prepared once for every arm and seed (:mod:`.large_answers`). Correctness = the exact final answer. Validation and test problems are disjoint
slices of the held-out set; tau comes from validation. Cost is simulated per token with
``lm_costs`` (prefill + decode of the small model always, of the base model when deferred).
"""
from dataclasses import dataclass, field

import numpy as np
import torch

from components.core.errors import require
from components.core.registry import technique
from components.core.result import Result
from components.data import reasoning as R
from components.serving.cost import Usage
from components.serving.gatekeeper.answers import greedy_answers
from components.serving.gatekeeper.loss import gatekeeper_loss
from components.serving.gatekeeper.metrics import ece, evaluate_cascade, overconfidence
from components.serving.gatekeeper.technique import curve_result
from components.serving.lms import lm_costs, load_lm


def lm_batch(rng: np.random.Generator, n: int, level: str, excluded: set[str], style_b: float = 0.5, flip: float = 0.2):
    """(inputs, targets, solution mask) for ``n`` fresh chains; the loss covers solution tokens only."""
    texts = []
    while len(texts) < n:
        p = R.sample_problem(rng, level)
        if p.text in excluded:
            continue
        texts.append((p.text + "".join(R.solution(p, R.sample_forms(rng, len(p.ops), style_b, flip))), len(p.text)))
    T = max(len(t) for t, _ in texts)
    x = np.full((n, T), R.PAD_ID, dtype=np.int64)
    mask = np.zeros((n, T - 1), dtype=bool)
    for i, (t, start) in enumerate(texts):
        x[i, :len(t)] = R.encode(t)
        mask[i, start - 1:len(t) - 1] = True
    xt = torch.from_numpy(x)
    return xt[:, :-1], xt[:, 1:], torch.from_numpy(mask)


def finetune(model, method: str, alpha: float, steps: int, batch: int, lr: float, seed: int, level: str,
             excluded: set[str], style_b: float = 0.5, flip: float = 0.2) -> list[float]:
    """Stage 2 on the small LM: ``gatekeeper`` (per-token loss) or ``ce_continued`` (token CE)."""
    require(method in ("gatekeeper", "ce_continued"), "method", method, "gatekeeper or ce_continued")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    model.train()
    losses = []
    for _ in range(steps):
        x, y, m = lm_batch(rng, batch, level, excluded, style_b, flip)
        logits = model(x)
        if method == "gatekeeper":
            loss = gatekeeper_loss(logits, y, alpha, mask=m)
        else:
            ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none")
            loss = (ce * m.reshape(-1)).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def token_calibration(model, problems: list, style_b: float = 0.0, flip: float = 0.0, seed: int = 0,
                      chunk: int = 256) -> dict[str, float]:
    """Per-token calibration of ``model`` on the reference solutions of ``problems`` (teacher forced,
    solution tokens only): token accuracy (argmax == target, Gatekeeper's per-token "correct"),
    ECE and mean max-probability minus accuracy of the token max-probabilities."""
    rng = np.random.default_rng(seed)
    conf, ok = [], []
    for s in range(0, len(problems), chunk):
        texts = [(p.text + "".join(R.solution(p, R.sample_forms(rng, len(p.ops), style_b, flip))), len(p.text))
                 for p in problems[s:s + chunk]]
        T = max(len(t) for t, _ in texts)
        x = np.full((len(texts), T), R.PAD_ID, dtype=np.int64)
        mask = np.zeros((len(texts), T - 1), dtype=bool)
        for i, (t, start) in enumerate(texts):
            x[i, :len(t)] = R.encode(t)
            mask[i, start - 1:len(t) - 1] = True
        xt = torch.from_numpy(x)
        p = torch.softmax(model(xt[:, :-1]).float(), -1)
        c, pred = p.max(-1)
        m = torch.from_numpy(mask)
        conf.append(c[m].numpy())
        ok.append((pred == xt[:, 1:])[m].numpy())
    conf, ok = np.concatenate(conf), np.concatenate(ok)
    return {"token_acc": float(ok.mean()), "token_ece": ece(conf, ok), "token_overconf": overconfidence(conf, ok)}


@dataclass
class LMCascadeParams:
    method: str = "gatekeeper"          # untuned | ce_continued | gatekeeper
    alpha: float = 0.5
    steps: int = 300                    # stage-2 optimizer steps (equal for every fine-tuned arm)
    batch: int = 32
    lr: float = 5e-4
    n_val: int = 300
    n_test: int = 500
    seq_conf: str = "mean"              # mean | min of the token max-probabilities
    style_b: float = 0.5                # surface-form mix of the stage-2 chains: must equal the prepare
    flip: float = 0.2                   # step's small_style_b / small_flip (checked), i.e. S's training mix
    ratios: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.3])

    def check(self):
        require(self.method in ("untuned", "ce_continued", "gatekeeper"), "method", self.method,
                "untuned, ce_continued or gatekeeper")
        require(0 < self.alpha < 1, "alpha", self.alpha, "a weight in (0, 1)")
        require(self.steps >= 1 and self.batch >= 1 and self.lr > 0, "steps", self.steps, "positive steps, batch, lr")
        require(self.n_val >= 10, "n_val", self.n_val, "at least 10 problems")
        require(self.n_test >= 10, "n_test", self.n_test, "at least 10 problems")
        require(self.seq_conf in ("mean", "min"), "seq_conf", self.seq_conf, "mean or min")
        require(self.ratios and all(0 < r < 1 for r in self.ratios), "ratios", self.ratios, "deferral ratios in (0, 1)")


def _needs_lms(p: LMCascadeParams, exp: dict, inputs: dict) -> None:
    """The stage-2 mix and the held-out split against the reasoning_lms entry input ``lms`` is bound to, and
    the base model's answers (input ``large``) made from that entry on the same split."""
    entry = inputs["lms"]
    require(entry.step == "reasoning_lms", f"experiment.prepare.{entry.name}.step", entry.step,
            "reasoning_lms (gatekeeper_lm's input lms is the small/base model pair)")
    lp = entry.params
    large = inputs["large"]
    require(large.step == "cascade_large_answers", f"experiment.prepare.{large.name}.step", large.step,
            "cascade_large_answers (gatekeeper_lm's input large is the base model's answers)")
    require(large.inputs.get("lms") == entry.name, f"experiment.prepare.{large.name}.inputs.lms",
            large.inputs.get("lms"), f"{entry.name} (the entry this variant's input lms is bound to)")
    for knob in ("n_val", "n_test"):
        require(getattr(large.params, knob) == getattr(p, knob), knob, getattr(p, knob),
                f"{getattr(large.params, knob)} (prepare {large.name} {knob}: the split its answers were made on)")
    for mine, theirs in (("style_b", "small_style_b"), ("flip", "small_flip")):
        require(getattr(p, mine) == getattr(lp, theirs), mine, getattr(p, mine),
                f"{getattr(lp, theirs)} (the small model's training mix: prepare {entry.name} {theirs})")
    free = lp.n_heldout - (lp.n_select if lp.small_target_acc is not None else 0)
    require(p.n_val + p.n_test <= free, "n_test", p.n_val + p.n_test,
            f"n_val + n_test <= {free}: the prepare step's n_heldout={lp.n_heldout} never-trained problems"
            + (f", less the last n_select={lp.n_select} that chose the small model" if free < lp.n_heldout else ""))


@technique("gatekeeper_lm", family="serving", params=LMCascadeParams, validate=_needs_lms, inputs=("lms", "large"),
           summary="Gatekeeper on an LM cascade (reasoning task): per-token stage-2 fine-tuning of the small GPT, "
                   "sequence confidence = mean token max-prob, deferral of whole problems to the base GPT.")
def run_gatekeeper_lm(p: LMCascadeParams, ctx) -> Result:
    """One seed: the seed draws the stage-2 chains (``untuned`` does not use it: deterministic)."""
    torch.set_num_threads(1)
    lms = ctx.input("lms")
    held = R.held_out_problems(p.n_val + p.n_test, lms["level"], lms["heldout_seed"])
    val, test = held[:p.n_val], held[p.n_val:]
    costs = lm_costs(lms)
    large = ctx.input("large")                    # the base model's answers on `test` (prepare cascade_large_answers)
    small = load_lm(lms, "small")
    if p.method != "untuned":
        excluded = {q.text for q in R.held_out_problems(lms["n_heldout"], lms["level"], lms["heldout_seed"])}
        finetune(small, p.method, p.alpha, p.steps, p.batch, p.lr, 10_000 + ctx.seed, lms["level"], excluded,
                 p.style_b, p.flip)
    ctx.progress(1, 2)
    sv, st = greedy_answers(small, val), greedy_answers(small, test)
    key = f"conf_{p.seq_conf}"
    rep = evaluate_cascade(sv[key], st[key], st["ok"], large["ok"], tuple(p.ratios))
    usage_small = Usage()
    usage_small.charge("small", prefill=int(st["n_prompt"].sum()), decode=int(st["n_gen"].sum()), calls=len(test))
    c_small = usage_small.sim_latency_s(costs) / len(test)
    per_large = (costs["base"].seconds(prefill=1) * large["n_prompt"] + costs["base"].seconds(decode=1) * large["n_gen"]
                 + costs["base"].call_s)
    c_large = float(per_large.mean())
    m = rep.metrics(c_small, c_large)
    for k in [k for k in m if k.startswith("cost_")]:
        m[k.replace("cost_", "cost_rel_")] = m[k] / c_large
    m["small_tokens_per_problem"] = float(st["n_gen"].mean())
    m.update(token_calibration(small, test, p.style_b, p.flip))
    ctx.progress(2, 2, s_d=m["s_d"])
    return curve_result(m, rep, {"method": p.method, "alpha": p.alpha, "seq_conf": p.seq_conf,
                                 "small_stats": lms["small"]["stats"].get("heldout_accuracy"),
                                 "base_stats": lms["base"]["stats"].get("heldout_accuracy")}, f"LM {p.method}")
