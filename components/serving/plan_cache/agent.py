"""One plan-act agent request under each caching policy; shared by the experiment and the service.

Every request ends in a plan that the deterministic tools execute (its answer is checked against the
truth by the caller). Policies (``AgentConfig.method``):

- ``large``: the large planner L plans every request (accuracy-optimal).
- ``small``: the small LM S plans every request (cost-optimal).
- ``answer_cache``: semantic answer cache (GPTCache-like): the nearest cached query by embedding
  cosine >= ``sim_threshold`` returns its cached answer; else L plans and the answer is cached.
- ``query_plan_cache``: a plan cache keyed by the full query embedding: a hit reuses the nearest
  query's plan template, adapted by S (``reuse: adapt``) or its concrete plan verbatim
  (``reuse: verbatim``); else L plans and the run's template is cached.
- ``apc``: Agentic Plan Caching: S extracts the intent keyword; an exact match on the normalised
  keyword returns a template that S adapts to the question; on a miss L plans and the successful
  run's template (rule-based induction) is inserted under the keyword.

Only runs that pass ``insert_if`` are cached: ``correct`` (the answer equals the truth, the paper
code's check when ground truth exists) or ``executes`` (the plan runs; the service, with no truth).
Tokens of every call (L's planning, S's keyword, adaptation and planning) go into a
:class:`~components.serving.cost.Usage`; query embeddings are computed once outside (not charged).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from components.core.errors import require
from components.data import agent_tasks as A
from components.models.gpt import GPT, GPTConfig
from components.serving.cost import TokenCost, Usage
from components.serving.plan_cache.cache import PlanCache, VectorIndex, induce_template, leaked_literals, normalise_keyword
from components.serving.plan_cache.prepare import adapt_prompt, greedy, keyword_prompt, plan_prompt

METHODS = ("large", "small", "answer_cache", "query_plan_cache", "apc")


def load_models(lms: dict) -> dict[str, GPT]:
    """L and S from the ``plan_cache_lms`` output, in eval mode."""
    out = {}
    for name in ("large", "small"):
        m = GPT(GPTConfig(**lms[name]["config"]))
        m.load_state_dict(lms[name]["state"])
        out[name] = m.eval()
    return out


def model_costs(lms: dict, flops_per_s: float = 1e9, prefill_ratio: float = 0.1) -> dict[str, TokenCost]:
    """Per-token prices of L and S from their non-embedding parameter counts (compute-bound)."""
    return {n: TokenCost.from_params(GPT(GPTConfig(**lms[n]["config"])).num_params(), flops_per_s, prefill_ratio)
            for n in ("large", "small")}


@dataclass
class AgentConfig:
    method: Literal["large", "small", "answer_cache", "query_plan_cache", "apc"] = "apc"
    sim_threshold: float = 0.9
    reuse: Literal["adapt", "verbatim"] = "adapt"
    insert_if: Literal["correct", "executes"] = "correct"
    capacity: int = 1024

    def check(self) -> "AgentConfig":
        require(self.method in METHODS, "method", self.method, "one of " + ", ".join(METHODS))
        require(-1.0 <= self.sim_threshold <= 1.0, "sim_threshold", self.sim_threshold, "a cosine in [-1, 1]")
        require(self.capacity >= 1, "capacity", self.capacity, "a positive number of entries")
        return self


class Agent:
    """The planner side of one agent under one policy, with its cache (state across requests)."""

    def __init__(self, models: dict[str, GPT], tables: dict, cfg: AgentConfig, dim: int = 384):
        self.models, self.tables, self.cfg = models, tables, cfg.check()
        self.cache = PlanCache(cfg.capacity)
        self.index = VectorIndex(dim, cfg.capacity)
        self.leaks = 0

    def _call(self, name: str, prompt: list[int], usage: Usage) -> str:
        out = greedy(self.models[name], prompt)
        usage.charge(name, prefill=len(prompt), decode=len(out) + 1)     # + the <eos> it decoded
        return A.decode(out)

    def _plan(self, name: str, question: str, usage: Usage) -> str:
        return self._call(name, plan_prompt(question), usage)

    def _adapt(self, question: str, template: str, usage: Usage) -> str:
        prompt = adapt_prompt(question, template)
        if len(prompt) >= self.models["small"].cfg.context:
            return ""                          # no room to adapt: an empty plan fails like a bad one
        return self._call("small", prompt, usage)

    def _admit(self, answer: float | None, truth: float | None) -> bool:
        if self.cfg.insert_if == "correct":
            return A.same_answer(answer, truth)
        return answer is not None

    def step(self, question: str, truth: float | None = None, vec: np.ndarray | None = None) -> dict:
        """Plan and execute one request; returns plan, answer, hit, keyword and the usage."""
        usage, m, hit, keyword, cached_answer = Usage(), self.cfg.method, False, "", None
        if m in ("large", "small"):
            plan = self._plan(m, question, usage)
        elif m == "apc":
            keyword = normalise_keyword(self._call("small", keyword_prompt(question), usage))
            entry = self.cache.get(keyword) if keyword else None
            hit = entry is not None
            plan = self._adapt(question, entry["template"], usage) if hit else self._plan("large", question, usage)
        else:
            require(vec is not None, "vec", None, f"a query embedding for method {m}")
            sim, payload = self.index.nearest(vec)
            hit = payload is not None and sim >= self.cfg.sim_threshold
            if hit and m == "answer_cache":
                plan, cached_answer = payload["plan"], payload["answer"]
            elif hit:
                plan = payload["plan"] if self.cfg.reuse == "verbatim" else self._adapt(question, payload["template"], usage)
            else:
                plan = self._plan("large", question, usage)
        answer = cached_answer if m == "answer_cache" and hit else A.answer_of(plan, self.tables)
        if not hit and m != "large" and m != "small" and self._admit(answer, truth):
            task, template = induce_template(question, plan)
            self.leaks += bool(leaked_literals(question, template))
            if m == "apc":
                if keyword:
                    self.cache.put(keyword, task, template)
            else:
                self.index.add(vec, {"plan": plan, "template": template, "answer": answer, "question": question})
        return {"plan": plan, "answer": answer, "hit": hit, "keyword": keyword, "usage": usage}

    def cache_size(self) -> int:
        return len(self.cache) if self.cfg.method == "apc" else len(self.index)
