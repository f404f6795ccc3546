"""Agentic Plan Caching as a service on Ray Serve (``dtlab serve plan_cache``), and its no-cache twin.

``PlanCacheAgent`` is one deployment holding L, S, the tool tables and one policy's cache (state
across requests, guarded by a lock: a replica's sync handlers run on a thread pool). ``POST /run``
with ``{"question": ...}`` plans (cache hit: S adapts the template; miss: L plans), executes the
plan with the tools and answers with the plan, the answer, hit/keyword, per-model tokens and the
simulated cost. With no ground truth at serving time a run is cached when its plan executes.
:func:`build_app` builds the APC service, :func:`build_large_app` the always-large one the load
test compares against. Bodies are bounded pydantic models: 422 on a bad body (unknown word, empty,
unknown key), 413 above the byte limit; the replica keeps serving.

No ``from __future__ import annotations`` here: FastAPI must resolve the body types in the replica.
"""
import threading
from typing import Optional

import torch
from pydantic import Field, field_validator
from ray import serve

from components.core.registry import register
from components.data import agent_tasks as A
from components.serving.app import TINY_REPLICA, BoundedModel, RequestModel, make_api
from components.serving.plan_cache.agent import Agent, AgentConfig, load_models, model_costs
from components.serving.services import Service

MAX_QUESTION_CHARS = 256


class PlanRequest(RequestModel):
    """One agent task in the workload's vocabulary, e.g. ``what is the current ratio of acme in 2021 ?``."""

    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)

    @field_validator("question")
    @classmethod
    def _words(cls, v: str) -> str:
        A.encode(v)                          # ValueError naming the unknown word -> 422
        if len(v.split()) > 24:
            raise ValueError("at most 24 words")
        return " ".join(v.split())


class PlanResponse(BoundedModel):
    plan: str
    answer: Optional[float]
    hit: bool
    keyword: str
    tokens: dict[str, float]
    cost_s: float
    cache_entries: int


api = make_api("plan_cache", max_body_bytes=1024)


@serve.deployment(ray_actor_options=TINY_REPLICA)
@serve.ingress(api)
class PlanCacheAgent:
    def __init__(self, lms: dict, method: str = "apc", table_seed: int = 0):
        torch.set_num_threads(1)
        self.costs = model_costs(lms)
        self.agent = Agent(load_models(lms), A.make_tables(len(A.COMPANIES), table_seed),
                           AgentConfig(method=method, insert_if="executes"))
        self.lock = threading.Lock()

    @api.post("/run")
    def run(self, req: PlanRequest) -> PlanResponse:
        with self.lock:
            out = self.agent.step(req.question)
            size = self.agent.cache_size()
        u = out["usage"]
        return PlanResponse(plan=out["plan"], answer=out["answer"], hit=out["hit"], keyword=out["keyword"],
                            tokens=u.metrics(), cost_s=u.sim_latency_s(self.costs) if u.calls else 0.0,
                            cache_entries=size)


def build_app(lms: dict):
    """The APC service on the experiment's prepared LMs (tables of seed 0)."""
    return PlanCacheAgent.bind(lms, "apc")


def build_large_app(lms: dict):
    """The no-cache service: L plans every request."""
    return PlanCacheAgent.options(name="LargePlannerAgent").bind(lms, "large")


PLAN_CACHE = Service(
    experiment="plan_cache", prepare="lms", build=build_app, route_prefix="/plan_cache", endpoint="/run",
    example={"question": "what is the current ratio of acme in 2021 ?"},
    summary="Agentic Plan Caching agent: S keyword -> exact-match template cache -> S adapts; misses planned by L")
register("service", "plan_cache", summary=PLAN_CACHE.summary)(PLAN_CACHE)
