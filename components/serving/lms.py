"""The trained reasoning LMs as techniques use them (output of prepare step ``reasoning_lms``).

Usage (a technique that declares ``inputs=("lms",)``)::

    from components.serving.lms import load_lm, lm_costs
    from components.data import reasoning as R

    lms = ctx.input("lms")                        # output of prepare step `reasoning_lms`
    small, base = load_lm(lms, "small"), load_lm(lms, "base")   # GPT modules, eval mode
    costs = lm_costs(lms)                         # {"small": TokenCost, "base": TokenCost}
    problems = R.held_out_problems(500, lms["level"], lms["heldout_seed"])  # never trained on
    ids = R.encode(problems[0].text)              # prompt tokens; R.decode(ids) back to text
    out = base.generate(ids, max_new=96, stop={R.STOP_ID})     # greedy chain of thought
    steps = R.split_steps(R.decode(out))            # ["(17)+1=18\\n", ..., "A=55."]
    R.final_answer(steps) == problems[0].answer   # exact answer check
    R.check_step(problems[0], steps[:i], steps[i])   # exact check of step i

Apart from :mod:`components.serving.reasoning_lms` so that editing these readers (or the cost
model) leaves the cached models alone.
"""
from __future__ import annotations

import dataclasses

import torch

from components.core.errors import require
from components.models.gpt import GPT, GPTConfig
from components.serving.cost import TokenCost
from components.serving.reasoning_lms import ReasoningLMParams

MODEL_NAMES = ("small", "base")


def load_lm(lms: dict, name: str, dtype: torch.dtype = torch.float32) -> GPT:
    """The trained model ``name`` ("small" or "base") from the prepare step's output, in eval mode."""
    require(name in MODEL_NAMES, "model", name, "one of " + ", ".join(MODEL_NAMES))
    entry = lms[name]
    m = GPT(GPTConfig(**entry["config"]))
    m.load_state_dict(entry["state"])
    return m.to(dtype).eval()


def lm_costs(lms: dict, flops_per_s: float = 1e9, prefill_ratio: float = 0.1, call_s: float = 0.0) -> dict[str, TokenCost]:
    """Simulated per-token costs of both models, from their non-embedding parameter counts."""
    out = {}
    for name in MODEL_NAMES:
        m = GPT(GPTConfig(**lms[name]["config"]))
        out[name] = TokenCost.from_params(m.num_params(), flops_per_s, prefill_ratio, call_s)
    return out


def lms_params(exp: dict, entry: str = "lms") -> ReasoningLMParams:
    """The params (defaults filled) of the experiment's prepare entry ``entry``, which must be a
    ``reasoning_lms`` step: for a technique's ``validate`` hook (checks against the models)."""
    spec = (exp.get("prepare") or {}).get(entry)
    require(isinstance(spec, dict) and spec.get("step") == "reasoning_lms", f"experiment.prepare.{entry}",
            spec.get("step") if isinstance(spec, dict) else spec, "a prepare entry with step: reasoning_lms")
    known = {f.name for f in dataclasses.fields(ReasoningLMParams)}
    return ReasoningLMParams(**{k: v for k, v in (spec.get("params") or {}).items() if k in known})
