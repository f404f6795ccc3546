"""SpecReason as a service on Ray Serve: one deployment per model plus a controller with an HTTP API.

* ``SmallLM`` and ``BaseLM``: one :class:`LMReplica` deployment per model, scaled independently
  (``small_replicas``, ``base_replicas``). Each replica keeps per-request prefix caches
  (:class:`~components.serving.specreason.session.LMSession`, LRU-bounded), mimicking vLLM
  prefix caching, and exposes ``generate`` / ``next_logits`` (the judge's scoring decode) /
  ``verify`` (speculative decoding) / ``loglik``; every call returns its token counts.
* ``SpecReasonController``: the HTTP ingress (``POST /solve``). It runs base-only, small-only,
  speculative decoding or SpecReason (optionally stacked with SD) with the *same* loop code as
  the offline experiment, calling the model deployments through handles, and answers with the
  chain of thought, the answer, per-model token counts and simulated/measured latency.
* Registered as service ``specreason`` (``dtlab serve specreason``): :func:`build_app` on the
  specreason experiment's prepared LMs, mounted at ``/specreason/solve``.

Bodies are pydantic models (:class:`SolveRequest`, :class:`SolveResponse`) with bounded prompt
length and token budgets; malformed or oversized bodies get 422/413 from the shared API
(:func:`components.serving.app.make_api`) and the service keeps serving. With several replicas
per model a request's calls may land on different replicas; the cache then misses and the
extra prefill is charged (correct output, honest cost).

No ``from __future__ import annotations`` here: FastAPI must resolve the body types in the replica.
"""
import time
import uuid
from collections import OrderedDict
from typing import Literal, Optional

import torch
from pydantic import Field, field_validator
from ray import serve

from components.core.errors import require
from components.core.registry import register
from components.data import reasoning as R
from components.serving.app import TINY_REPLICA, BoundedModel, RequestModel, make_api
from components.serving.cost import Usage
from components.serving.lms import lm_costs, load_lm
from components.serving.services import Service
from components.serving.specreason.loop import SpecReasonConfig, Trace, spec_reason
from components.serving.specreason.session import LMSession
from components.serving.speculative import speculative_generate

MAX_TOKENS_LIMIT = 256        # hard cap on a request's output budget
MAX_SESSIONS = 256            # per replica: per-request caches kept (LRU)


# ------------------------------------------------------------------------------ model replicas
class LMReplica:
    """One model, per-request prefix caches; each call returns (result, prefill, decode)."""

    def __init__(self, lms: dict, name: str, max_sessions: int = MAX_SESSIONS):
        torch.set_num_threads(1)
        self.name = name
        self.model = load_lm(lms, name)
        self.sessions: "OrderedDict[str, LMSession]" = OrderedDict()
        self.max_sessions = max_sessions

    def _session(self, rid: str) -> LMSession:
        s = self.sessions.pop(rid, None) or LMSession(self.model, self.name, Usage())
        self.sessions[rid] = s
        while len(self.sessions) > self.max_sessions:
            self.sessions.popitem(last=False)
        return s

    def _counted(self, rid: str, fn):
        s = self._session(rid)
        p0, d0 = s.usage.prefill[self.name], s.usage.decode[self.name]
        out = fn(s)
        return out, s.usage.prefill[self.name] - p0, s.usage.decode[self.name] - d0

    def generate(self, rid: str, prefix: list, max_new: int, stop: list, temperature: float, seed):
        return self._counted(rid, lambda s: s.generate(prefix, max_new, frozenset(stop), temperature, seed))

    def next_logits(self, rid: str, prefix: list):
        return self._counted(rid, lambda s: s.next_logits(prefix).tolist())

    def verify(self, rid: str, prefix: list, draft: list):
        return self._counted(rid, lambda s: s.verify(prefix, draft))

    def loglik(self, rid: str, prefix: list, cont: list):
        return self._counted(rid, lambda s: s.loglik(prefix, cont))

    def end(self, rid: str) -> None:
        self.sessions.pop(rid, None)

    def context(self) -> int:
        return self.model.cfg.context


class RemoteLM:
    """Client with the LMSession interface that calls a model deployment and charges ``usage``."""

    def __init__(self, handle, name: str, rid: str, usage: Usage, context: int):
        self.handle, self.name, self.rid, self.usage, self.context = handle, name, rid, usage, context

    def _call(self, method: str, *args):
        out, prefill, decode = getattr(self.handle, method).remote(self.rid, *args).result()
        self.usage.charge(self.name, prefill=prefill, decode=decode)
        return out

    def generate(self, prefix, max_new, stop=frozenset(), temperature=0.0, seed=None):
        return self._call("generate", list(prefix), int(max_new), sorted(stop), float(temperature), seed)

    def next_logits(self, prefix):
        return torch.tensor(self._call("next_logits", list(prefix)))

    def verify(self, prefix, draft):
        return tuple(self._call("verify", list(prefix), list(draft)))

    def loglik(self, prefix, cont):
        return self._call("loglik", list(prefix), list(cont))

    def end(self) -> None:
        self.handle.end.remote(self.rid)


# ------------------------------------------------------------------------------ HTTP schemas
class SolveRequest(RequestModel):
    """One reasoning request. ``problem`` like ``17|+1|*9|-7`` (the trailing ``>`` is optional)."""

    problem: str = Field(min_length=2, max_length=64)
    method: Literal["specreason", "base", "small", "sd"] = "specreason"
    threshold: float = Field(default=7.0, ge=0.0, le=10.0)
    scoring: Literal["greedy", "average", "loglik"] = "loglik"    # the judge the experiment uses (see technique.py)
    stack_sd: bool = False
    first_n: int = Field(default=0, ge=0, le=16)
    gamma: int = Field(default=4, ge=1, le=16)
    temperature: float = Field(default=0.6, ge=0.0, le=2.0)      # S's proposals (SpecReason)
    max_tokens: int = Field(default=128, ge=1, le=MAX_TOKENS_LIMIT)
    seed: int = Field(default=0, ge=0, le=2**31 - 1)

    @field_validator("problem")
    @classmethod
    def _parse(cls, v: str) -> str:
        R.Problem.parse(v)          # ValueError -> 422 with the parser's message
        return v if v.endswith(R.OPEN) else v + R.OPEN


class SolveResponse(BoundedModel):
    output: str
    steps: list[str]
    sources: list[str]
    answer: Optional[int]
    correct: bool
    judged_steps: int
    accepted_steps: int
    sd_drafted: int
    sd_accepted: int
    tokens: dict[str, float]
    sim_latency_s: float
    wall_s: float
    stop_reason: str


api = make_api("specreason", max_body_bytes=2048)


@serve.deployment(ray_actor_options=TINY_REPLICA)
@serve.ingress(api)
class SpecReasonController:
    """HTTP ingress running the request's method against the SmallLM/BaseLM deployments."""

    def __init__(self, small, base, lms_meta: dict):
        torch.set_num_threads(1)
        self.small, self.base = small, base
        self.costs = lms_meta["costs"]
        self.context = int(lms_meta["context"])

    def run(self, req: SolveRequest) -> SolveResponse:
        prompt = R.encode(req.problem)
        if len(prompt) + 2 > self.context:
            raise ValueError(f"problem: {len(prompt)} tokens leave no room in the model context of {self.context}")
        problem = R.Problem.parse(req.problem)
        usage = Usage()
        rid = uuid.uuid4().hex
        sm = RemoteLM(self.small, "small", rid, usage, self.context)
        bs = RemoteLM(self.base, "base", rid, usage, self.context)
        t0 = time.perf_counter()
        try:
            trace = self._solve(req, sm, bs, prompt, problem)
        finally:
            sm.end()
            bs.end()
        usage.wall_s = time.perf_counter() - t0
        answer = R.final_answer(trace.steps)
        return SolveResponse(
            output=trace.text, steps=trace.steps, sources=trace.sources, answer=answer,
            correct=answer == problem.answer, judged_steps=len(trace.judged),
            accepted_steps=sum(r.accepted for r in trace.judged), sd_drafted=trace.sd.drafted,
            sd_accepted=trace.sd.accepted, tokens=usage.metrics(), sim_latency_s=usage.sim_latency_s(self.costs)
            if usage.calls else 0.0, wall_s=usage.wall_s, stop_reason=trace.stop_reason)

    def _solve(self, req: SolveRequest, sm: RemoteLM, bs: RemoteLM, prompt: list, problem) -> Trace:
        if req.method in ("base", "small"):
            lm = bs if req.method == "base" else sm
            out = lm.generate(prompt, req.max_tokens, {R.STOP_ID}, 0.0, req.seed)
            return Trace(steps=R.split_steps(R.decode(out)), sources=[req.method], stop_reason="answer")
        if req.method == "sd":
            out, st = speculative_generate(sm, bs, prompt, req.max_tokens, {R.STOP_ID}, req.gamma, self.context)
            return Trace(steps=R.split_steps(R.decode(out)), sources=["base"], sd=st, stop_reason="answer")
        cfg = SpecReasonConfig(req.threshold, req.scoring, req.first_n, req.stack_sd, req.gamma, req.temperature,
                               max_tokens=req.max_tokens).check()
        return spec_reason(sm, bs, prompt, cfg, self.context, problem, req.seed)

    @api.post("/solve")
    def solve(self, req: SolveRequest) -> SolveResponse:
        return self.run(req)


def build_app(lms: dict, small_replicas: int = 1, base_replicas: int = 1):
    """The bound application: SmallLM and BaseLM deployments composed under the controller."""
    require(1 <= small_replicas <= 8, "small_replicas", small_replicas, "an integer in [1, 8]")
    require(1 <= base_replicas <= 8, "base_replicas", base_replicas, "an integer in [1, 8]")
    model = serve.deployment(LMReplica)
    small = model.options(name="SmallLM", num_replicas=small_replicas, ray_actor_options=TINY_REPLICA).bind(lms, "small")
    base = model.options(name="BaseLM", num_replicas=base_replicas, ray_actor_options=TINY_REPLICA).bind(lms, "base")
    meta = {"costs": lm_costs(lms), "context": lms["base"]["config"]["context"]}
    return SpecReasonController.bind(small, base, meta)


SPECREASON = Service(
    experiment="specreason", prepare="lms", build=build_app, route_prefix="/specreason", endpoint="/solve",
    example={"problem": "17|+1|*9|-7|+3|*2|-6", "method": "specreason", "threshold": 7},
    summary="SmallLM + BaseLM deployments under a controller: specreason, base, small or sd per request")
register("service", "specreason", summary=SPECREASON.summary)(SPECREASON)
