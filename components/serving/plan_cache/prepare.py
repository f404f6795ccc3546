"""Prepare step ``plan_cache_lms``: the large planner L and the small LM S of Agentic Plan Caching,
word-level tiny GPTs trained here on the agent workload's generator (uniform intents, fresh draws).

- L (default 4 layers, d=128): question -> concrete plan (``<bos> q <plan> plan <eos>``).
- S (default 2 layers, d=32), multi-task, loss on the answer part only:
  keyword extraction ``<bos> q <kw> keyword <eos>``, template adaptation
  ``<bos> q <tpl> template <plan> plan <eos>`` (fill a cached template from the question), and, on a
  small share of its batches, planning from scratch (the cost-optimal baseline's planner).

Budgets are optimizer steps (not wall time), so a rerun gives the same models; the DAG caches the
output. Plain data out: ``{"large": {"config", "state", "stats"}, "small": {...}}``. Kept apart from
the technique so that edits there leave the cached models alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from components.core.errors import require
from components.core.registry import prepare_step
from components.data import agent_tasks as A
from components.models.gpt import GPT, GPTConfig
from components.serving.reasoning_lms import train_lm

CONTEXT = 96          # <bos> question (<= 15) <tpl> template (<= 31) <plan> plan (<= 31) <eos>


def plan_prompt(question: str) -> list[int]:
    return A.encode(f"{A.BOS} {question} {A.PLAN}")


def keyword_prompt(question: str) -> list[int]:
    return A.encode(f"{A.BOS} {question} {A.KW}")


def adapt_prompt(question: str, template: str) -> list[int]:
    return A.encode(f"{A.BOS} {question} {A.TPL} {template} {A.PLAN}")


def _example(rng: np.random.Generator, task: str) -> tuple[list[int], list[int]]:
    t = A.sample_task(rng, int(rng.integers(len(A.INTENTS))))
    if task == "kw":
        return keyword_prompt(t.question), A.encode(t.keyword) + [A.EOS_ID]
    if task == "adapt":
        return adapt_prompt(t.question, A.INTENTS[t.intent].template), A.encode(t.plan) + [A.EOS_ID]
    return plan_prompt(t.question), A.encode(t.plan) + [A.EOS_ID]


def _batch(rng, n: int, mix: dict[str, float]):
    """Token ids, next-token targets and the loss mask (answer part) for ``n`` examples."""
    names, w = list(mix), np.array(list(mix.values()), float)
    ex = [_example(rng, names[int(rng.choice(len(names), p=w / w.sum()))]) for _ in range(n)]
    T = max(len(p) + len(a) for p, a in ex)
    x = np.full((n, T), A.PAD_ID, np.int64)
    mask = np.zeros((n, T - 1), bool)
    for i, (p, a) in enumerate(ex):
        x[i, :len(p) + len(a)] = p + a
        mask[i, len(p) - 1:len(p) + len(a) - 1] = True
    xt = torch.from_numpy(x)
    return xt[:, :-1], xt[:, 1:], torch.from_numpy(mask)


class _MixSampler:
    """The batch interface of :func:`components.serving.reasoning_lms.train_lm` (the project's one tiny-LM
    training loop) over the agent tasks: no judge examples, so its judge mask is all False."""

    def __init__(self, mix: dict[str, float]):
        self.mix = mix

    def batch(self, rng, n: int):
        x, y, mask = _batch(rng, n, self.mix)
        return x, y, mask, torch.zeros_like(mask)


def _train_mix(model: GPT, mix: dict[str, float], steps: int, batch: int, lr: float, seed: int, progress=None) -> dict:
    stats = train_lm(model, _MixSampler(mix), steps, batch, lr, 0.0, seed, progress)
    stats["loss"] = stats.pop("lm_loss")
    stats.pop("judge_loss")
    return stats


@torch.no_grad()
def greedy(model: GPT, prompt: list[int], max_new: int = 40) -> list[int]:
    """Greedy continuation up to ``<eos>`` (excluded from the returned ids)."""
    out = model.generate(prompt, max_new=min(max_new, model.cfg.context - len(prompt)), stop={A.EOS_ID})
    return out[:-1] if out and out[-1] == A.EOS_ID else out


def heldout_accuracy(model: GPT, task: str, n: int, seed: int) -> float:
    """Exact-match rate of the model's greedy output on ``n`` fresh examples of ``task``."""
    rng = np.random.default_rng(seed)
    ok = 0
    for _ in range(n):
        prompt, target = _example(rng, task)
        ok += greedy(model, prompt) == target[:-1]
    return ok / max(n, 1)


@dataclass
class PlanLMParams:
    large_size: dict = field(default_factory=lambda: {"n_layer": 4, "n_head": 4, "d_model": 128})
    small_size: dict = field(default_factory=lambda: {"n_layer": 2, "n_head": 2, "d_model": 32})
    large_steps: int = 1500
    small_steps: int = 1500
    batch: int = 32
    lr: float = 3e-3
    small_mix: dict = field(default_factory=lambda: {"kw": 0.4, "adapt": 0.5, "plan": 0.1})
    n_eval: int = 200
    seed: int = 0

    def check(self):
        for k in ("large_steps", "small_steps", "batch"):
            require(getattr(self, k) >= 1, k, getattr(self, k), "a positive integer")
        require(self.lr > 0, "lr", self.lr, "a positive learning rate")
        require(self.n_eval >= 0, "n_eval", self.n_eval, "a non-negative integer")
        require(isinstance(self.small_mix, dict) and set(self.small_mix) <= {"kw", "adapt", "plan"}
                and all(v >= 0 for v in self.small_mix.values()) and sum(self.small_mix.values()) > 0,
                "small_mix", self.small_mix, "non-negative weights over kw, adapt, plan (not all zero)")
        for k in ("large_size", "small_size"):
            size = getattr(self, k)
            require(isinstance(size, dict) and set(size) <= {"n_layer", "n_head", "d_model"}, k, size,
                    "a dict with keys among n_layer, n_head, d_model")


def train_plan_lms(p: PlanLMParams, progress=None) -> dict:
    """Train L (planning) and S (keyword + adaptation + some planning). Plain data out."""
    p.check()
    torch.set_num_threads(1)
    torch.manual_seed(p.seed)
    total = p.large_steps + p.small_steps

    def prog(offset):
        return None if progress is None else (lambda s, n, **kw: progress(offset + s, total, **kw))

    out = {}
    for name, size, steps, mix, off in (("large", p.large_size, p.large_steps, {"plan": 1.0}, 0),
                                         ("small", p.small_size, p.small_steps, p.small_mix, p.large_steps)):
        m = GPT(GPTConfig(vocab_size=len(A.VOCAB), context=CONTEXT, **size))
        stats = _train_mix(m, mix, steps, p.batch, p.lr, p.seed + off + 1, prog(off))
        for task in mix:
            stats[f"{task}_accuracy"] = heldout_accuracy(m, task, p.n_eval, p.seed + 99)
        out[name] = {"config": m.cfg.to_dict(), "state": {k: v.detach().clone() for k, v in m.state_dict().items()},
                     "stats": stats}
    return out


@prepare_step("plan_cache_lms", params=PlanLMParams,
              summary="Trains the large planner L (question -> plan) and the small LM S (intent keyword, template "
                      "adaptation, some planning) word-level GPTs on the agent workload's generator.")
def prepare_plan_lms(p: PlanLMParams, ctx) -> dict:
    return train_plan_lms(p, progress=ctx.progress)
