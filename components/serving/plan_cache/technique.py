"""Techniques ``plan_cache`` (Agentic Plan Caching) and ``agent_baseline`` (always-large, small-only,
semantic answer cache, query-embedding plan cache): one seed's request stream replayed in order
through one :class:`~components.serving.plan_cache.agent.Agent`.

Metrics: ``accuracy`` (answer equals the truth), ``cost_s`` (simulated compute-seconds of every LM
call, priced per model by :class:`~components.serving.cost.TokenCost`: the price model),
``cost_ratio_vs_large`` (cost over the large planner's reference cost on the same requests: L
prompted with the question and decoding the canonical plan; the claims use the ratio to the
``always_large`` variant itself), ``cache_hit_ratio``, ``hit_ratio_after_200`` (cold start
excluded), ``false_hit_ratio`` (hits that answered wrong), ``overhead_share`` (S's keyword tokens
over the total cost), ``leaked_templates`` (cached templates keeping a literal of their question).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from components.core.errors import require
from components.core.registry import technique
from components.core.result import Result
from components.data import agent_tasks as A
from components.serving.cost import Usage
from components.serving.plan_cache.agent import Agent, AgentConfig, load_models, model_costs
from components.serving.plan_cache.prepare import keyword_prompt, plan_prompt


@dataclass
class StreamParams(AgentConfig):
    n_requests: int = 0            # 0: the whole prepared stream
    warm_requests: int = 200       # hit_ratio_after_200: hits after this many requests
    curve_every: int = 50

    def check(self):
        super().check()
        require(self.n_requests >= 0, "n_requests", self.n_requests, "a non-negative integer (0: all)")
        require(self.warm_requests >= 0, "warm_requests", self.warm_requests, "a non-negative integer")
        require(self.curve_every >= 1, "curve_every", self.curve_every, "a positive integer")


@dataclass
class APCParams(StreamParams):
    method: str = "apc"

    def check(self):
        super().check()
        require(self.method == "apc", "method", self.method, "apc (the baselines are technique agent_baseline)")


@dataclass
class BaselineParams(StreamParams):
    method: str = "large"

    def check(self):
        super().check()
        require(self.method != "apc", "method", self.method, "large, small, answer_cache or query_plan_cache")


def replay(p: StreamParams, ctx) -> Result:
    """Run the seed's request stream through one agent; metrics as in the module docstring."""
    torch.set_num_threads(1)
    work, lms = ctx.input("tasks"), ctx.input("lms")
    emb = ctx.inputs.get("embeddings")
    vecs = emb["vectors"] if emb is not None else None
    require(p.method in ("large", "small", "apc") or vecs is not None, "inputs", "embeddings",
            f"prepared query embeddings for method {p.method}")
    n = len(work["questions"]) if p.n_requests == 0 else min(p.n_requests, len(work["questions"]))
    costs = model_costs(lms)
    agent = Agent(load_models(lms), work["tables"], AgentConfig(p.method, p.sim_threshold, p.reuse, p.insert_if,
                                                               p.capacity), dim=vecs.shape[1] if vecs is not None else 1)
    total, kw_usage = Usage(), Usage()
    correct, hits, hit_wrong = np.zeros(n, bool), np.zeros(n, bool), 0
    ref_cost = 0.0
    t0 = time.perf_counter()
    for i in range(n):
        q, truth = work["questions"][i], work["answers"][i]
        out = agent.step(q, truth, vecs[i] if vecs is not None else None)
        total.merge(out["usage"])
        correct[i], hits[i] = A.same_answer(out["answer"], truth), out["hit"]
        hit_wrong += out["hit"] and not correct[i]
        if p.method == "apc":                         # the keyword call is the first S call of the request
            kw_usage.charge("small", prefill=len(keyword_prompt(q)), decode=len(A.encode(out["keyword"])) + 1)
        ref_cost += costs["large"].seconds(prefill=len(plan_prompt(q)), decode=len(work["plans"][i].split()) + 1,
                                           calls=1)
        ctx.progress(i + 1, n, acc=float(correct[:i + 1].mean()), hits=float(hits[:i + 1].mean()))
    total.wall_s = time.perf_counter() - t0
    cost = total.sim_latency_s(costs) if total.calls else 0.0
    kw_cost = kw_usage.sim_latency_s(costs) if kw_usage.calls else 0.0
    xs = list(range(p.curve_every, n + 1, p.curve_every))
    metrics = {
        "accuracy": float(correct.mean()), "cost_s": cost, "cost_per_request_s": cost / n,
        "cost_ratio_vs_large": cost / ref_cost, "cache_hit_ratio": float(hits.mean()),
        "hit_ratio_after_200": float(hits[p.warm_requests:].mean()) if n > p.warm_requests else float("nan"),
        "false_hit_ratio": hit_wrong / max(int(hits.sum()), 1), "overhead_share": kw_cost / cost if cost else 0.0,
        "leaked_templates": float(agent.leaks), "cache_entries": float(agent.cache_size()),
        "large_calls": float(total.calls.get("large", 0)), "small_calls": float(total.calls.get("small", 0)),
        "price_ratio": costs["large"].decode_s / costs["small"].decode_s,
        "wall_per_request_ms": 1e3 * total.wall_s / n, "n_requests": float(n),
    }
    metrics.update(total.metrics())
    series = {"hit_ratio_curve": (xs, [float(hits[:x].mean()) for x in xs], "requests"),
              "accuracy_curve": (xs, [float(correct[:x].mean()) for x in xs], "requests")}
    return Result(metrics=metrics, series=series,
                  info={"usage": total.to_dict(), "lm_stats": {k: {a: b for a, b in lms[k]["stats"].items() if a != "loss"}
                                                              for k in ("large", "small")}})


@technique("plan_cache", family="serving", params=APCParams, inputs=("tasks", "lms"),
           summary="Agentic Plan Caching: the small LM extracts the intent keyword, an exact-match cache returns a "
                   "plan template the small LM adapts; misses go to the large planner and successful runs are "
                   "induced into templates.")
def run_plan_cache(p: APCParams, ctx) -> Result:
    return replay(p, ctx)


@technique("agent_baseline", family="serving", params=BaselineParams, inputs=("tasks", "lms", "embeddings"),
           summary="Plan-act agent baselines: always-large or small-only planner, semantic answer cache, plan cache "
                   "keyed by the full query embedding (MiniLM).")
def run_agent_baseline(p: BaselineParams, ctx) -> Result:
    return replay(p, ctx)
