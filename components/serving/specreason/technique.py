"""Registered techniques of the ``specreason`` experiment, all on the shared harness:

* ``specreason``           - step-level speculative reasoning, optionally stacked with SD;
* ``speculative_decoding`` - token-level speculative decoding (the baseline a user would pick);
* ``reasoning_lm_only``    - plain greedy/sampled decoding with the base or the small model alone.

Which judge: both are implemented. The paper's judge (``greedy``/``average``) is one scoring
decode of a digit after a ``?`` marker, learned by multi-task training of the base model with
hard negatives. At this scale (2 layers, d=96, a few CPU-minutes) that head stays near its label
prior: the judge loss ends at ~1.06 nats (the prior's entropy is ~1.3, a perfect judge ~0.5),
greedy scoring answers 9 for every step (AUROC 0.5) and average scoring ranks steps only fairly
(AUROC ~0.84) with every score below 7. The experiment therefore uses the issue's alternative
for a base model that cannot be prompted to rate: ``loglik``, 9 * exp(mean log-likelihood of
the step under B), one parallel prefill pass, same 0-9 scale (AUROC ~0.99 here). Its known
cost: it also scores the *surface form*, so correct steps in the form B rarely writes are
rejected more often than a semantic judge would. The digit judge runs as an ablation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from components.core.errors import require
from components.core.registry import technique
from components.core.result import Result
from components.data import reasoning as R
from components.serving.specreason.evaluate import EvalParams, run_eval, validate_prepare
from components.serving.specreason.loop import SCORINGS, SpecReasonConfig, Trace, spec_reason
from components.serving.speculative import speculative_generate


@dataclass
class SpecReasonParams(EvalParams):
    threshold: float = 7.0                 # accept S's step when the judge score >= threshold (0-9 scale)
    scoring: Literal["greedy", "average", "loglik"] = "average"
    first_n: int = 0                       # the first n steps are written by the base model
    stack_sd: bool = False                 # base-model steps via token-level speculative decoding
    gamma: int = 4                         # drafted tokens per SD round
    small_temperature: float = 0.6         # S samples its proposals (paper: 0.6)
    max_step_tokens: int = 16

    def check(self):
        self.check_eval()
        require(self.scoring in SCORINGS, "scoring", self.scoring, "one of " + ", ".join(SCORINGS))
        require(0 <= self.threshold <= 10, "threshold", self.threshold, "a score threshold in [0, 10] (10 = always fall back)")
        self.config().check()

    def config(self) -> SpecReasonConfig:
        return SpecReasonConfig(self.threshold, self.scoring, self.first_n, self.stack_sd, self.gamma,
                                self.small_temperature, self.max_step_tokens, self.max_tokens)


@technique("specreason", family="serving", params=SpecReasonParams,
           inputs=("lms",), validate=validate_prepare,
           summary="SpecReason: the small LM proposes each reasoning step, the base LM scores it with one decode "
                   "and regenerates it below a threshold (optionally with speculative decoding); arXiv 2504.07891.")
def run_specreason(p: SpecReasonParams, ctx) -> Result:
    cfg = p.config()

    def solve(small, base, prompt, problem, seed) -> Trace:
        return spec_reason(small, base, prompt, cfg, base.context, problem, seed)

    return run_eval(p, ctx, solve)


@dataclass
class SpeculativeParams(EvalParams):
    gamma: int = 4
    draft_temperature: float = 0.0         # greedy drafts; verification is greedy either way

    def check(self):
        self.check_eval()
        require(1 <= self.gamma <= 16, "gamma", self.gamma, "an integer in [1, 16]")
        require(self.draft_temperature >= 0, "draft_temperature", self.draft_temperature, "a temperature >= 0")


@technique("speculative_decoding", family="serving", params=SpeculativeParams,
           inputs=("lms",), validate=validate_prepare,
           summary="Token-level speculative decoding: the small LM drafts gamma tokens, the base LM verifies them "
                   "in one pass; output identical to the base model's greedy decoding.")
def run_speculative(p: SpeculativeParams, ctx) -> Result:
    def solve(small, base, prompt, problem, seed) -> Trace:
        out, st = speculative_generate(small, base, prompt, p.max_tokens, {R.STOP_ID}, p.gamma, base.context,
                                       p.draft_temperature, seed)
        return Trace(steps=R.split_steps(R.decode(out)), sources=["base"], sd=st, stop_reason="answer")

    return run_eval(p, ctx, solve, reference=True)


@dataclass
class LMOnlyParams(EvalParams):
    model: Literal["small", "base"] = "base"
    temperature: float = 0.0

    def check(self):
        self.check_eval()
        require(self.temperature >= 0, "temperature", self.temperature, "a temperature >= 0")


@technique("reasoning_lm_only", family="serving", params=LMOnlyParams,
           inputs=("lms",), validate=validate_prepare,
           summary="One reasoning LM alone (vanilla inference): the base model (B-only) or the small one (S-only).")
def run_lm_only(p: LMOnlyParams, ctx) -> Result:
    def solve(small, base, prompt, problem, seed) -> Trace:
        lm = base if p.model == "base" else small
        out = lm.generate(prompt, p.max_tokens, {R.STOP_ID}, p.temperature, seed)
        return Trace(steps=R.split_steps(R.decode(out)), sources=[p.model], stop_reason="answer")

    return run_eval(p, ctx, solve)
