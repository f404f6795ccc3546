"""The SpecReason loop (Pan et al., arXiv 2504.07891): step-level speculation with a judge.

Per step: the small model S proposes the next reasoning step (until the step delimiter); the
base model B scores it with ONE scoring decode (``<prefix><step>?`` -> a digit 0-9, the
paper's prompt-and-prefill "the quality score is: " reduced to a trained marker); the step is
kept if score >= threshold, otherwise B regenerates the step from the same prefix (greedily,
or with token-level speculative decoding when ``stack_sd``: "SpecReason+Decode"). The first
``first_n`` steps are written by B. Stops at the answer line, when a step repeats the previous
one verbatim, at the token budget or at the model context.

Scoring (paper's two modes plus the ablation of the sheet):
* ``greedy``  - the argmax token as an integer; a non-digit token scores 0.
* ``average`` - digits among the top-10 tokens, renormalised, score = sum d * p(d).
* ``loglik``  - no judge prompt: 9 * exp(mean log-likelihood of the step under B), one parallel
  prefill pass; the same 0-9 scale so thresholds are comparable.

Works with any clients having ``generate``/``next_logits``/``verify``/``loglik``
(:class:`LMSession` locally, the Serve deployment clients remotely).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch

from components.core.errors import require
from components.data import reasoning as R
from components.serving.speculative import SDStats, speculative_generate

SCORINGS = ("greedy", "average", "loglik")


@dataclass(frozen=True)
class SpecReasonConfig:
    threshold: float = 7.0
    scoring: Literal["greedy", "average", "loglik"] = "average"
    first_n: int = 0
    stack_sd: bool = False
    gamma: int = 4
    small_temperature: float = 0.6
    max_step_tokens: int = 16
    max_tokens: int = 128          # budget of accepted output tokens
    max_steps: int = 24
    repeat_guard: bool = True      # stop when a step repeats the previous one verbatim

    def check(self) -> "SpecReasonConfig":
        require(self.scoring in SCORINGS, "scoring", self.scoring, "one of " + ", ".join(SCORINGS))
        require(self.first_n >= 0, "first_n", self.first_n, "a non-negative number of steps")
        require(self.gamma >= 1, "gamma", self.gamma, "a positive number of drafted tokens")
        require(self.small_temperature >= 0, "small_temperature", self.small_temperature, "a temperature >= 0")
        require(self.max_step_tokens >= 2, "max_step_tokens", self.max_step_tokens, "at least 2 tokens")
        require(self.max_tokens >= 1 and self.max_steps >= 1, "max_tokens", self.max_tokens, "a positive budget")
        return self


def judge_score(logits: torch.Tensor, scoring: str) -> float:
    """The paper's score from the judge's next-token logits (digits = token ids R.DIGIT_IDS)."""
    if scoring == "greedy":
        top = int(logits.argmax())
        return float(R.DIGIT_IDS.index(top)) if top in R.DIGIT_IDS else 0.0
    probs = torch.softmax(logits.double(), -1)
    top10 = torch.topk(probs, min(10, probs.numel())).indices.tolist()
    digits = [(R.DIGIT_IDS.index(t), float(probs[t])) for t in top10 if t in R.DIGIT_IDS]
    z = sum(p for _, p in digits)
    return sum(d * p for d, p in digits) / z if z > 0 else 0.0


@dataclass
class StepRecord:
    index: int
    proposal: str
    score: float
    accepted: bool
    correct: bool | None      # exact checker on S's proposal (None when no problem is given)


@dataclass
class Trace:
    steps: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)       # "small" or "base" per step
    judged: list[StepRecord] = field(default_factory=list)
    sd: SDStats = field(default_factory=SDStats)
    stop_reason: str = ""

    @property
    def text(self) -> str:
        return "".join(self.steps)


def score_step(base, prefix: list[int], step: list[int], scoring: str) -> float:
    if scoring == "loglik":
        return 9.0 * math.exp(base.loglik(prefix, step))
    return judge_score(base.next_logits(prefix + step + [R.JUDGE_ID]), scoring)


def base_step(small, base, prefix: list[int], max_new: int, cfg: SpecReasonConfig, context: int,
              trace: Trace) -> list[int]:
    """B writes the step itself: greedy, or greedy via speculative decoding (identical tokens)."""
    if cfg.stack_sd:
        out, st = speculative_generate(small, base, prefix, max_new, R.STEP_STOP_IDS, cfg.gamma, context)
        trace.sd.add(st)
        return out
    return base.generate(prefix, max_new, R.STEP_STOP_IDS, 0.0)


def spec_reason(small, base, prompt: list[int], cfg: SpecReasonConfig, context: int,
                problem: R.Problem | None = None, seed: int = 0) -> Trace:
    """Run SpecReason on one prompt; returns the accepted steps and what the judge did."""
    trace = Trace()
    prefix = list(prompt)
    used = 0
    for k in range(cfg.max_steps):
        if len(prefix) >= context:
            trace.stop_reason = "context"
            break
        max_new = min(cfg.max_step_tokens, cfg.max_tokens - used)
        if k < cfg.first_n:
            step = base_step(small, base, prefix, max_new, cfg, context, trace)
            src = "base"
        else:
            cand = small.generate(prefix, max_new, R.STEP_STOP_IDS, cfg.small_temperature, seed * 1000 + k)
            room = context - len(prefix) - len(cand)
            score = score_step(base, prefix, cand, cfg.scoring) if room >= 1 else 0.0
            ok = score >= cfg.threshold
            correct = R.check_step(problem, trace.steps, R.decode(cand)) if problem is not None else None
            trace.judged.append(StepRecord(k, R.decode(cand), score, ok, correct))
            if ok:
                step, src = cand, "small"
            else:
                step, src = base_step(small, base, prefix, max_new, cfg, context, trace), "base"
        text = R.decode(step)
        repeat = bool(trace.steps) and text == trace.steps[-1]
        trace.steps.append(text)
        trace.sources.append(src)
        prefix += step
        used += len(step)
        if R.is_answer(text) or (step and step[-1] == R.STOP_ID):
            trace.stop_reason = "answer"
            break
        if repeat and cfg.repeat_guard:
            trace.stop_reason = "repeat"
            break
        if used >= cfg.max_tokens:
            trace.stop_reason = "budget"
            break
    else:
        trace.stop_reason = "max_steps"
    return trace
