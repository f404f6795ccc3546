"""SmartCache as a Ray Serve service (``dtlab serve smartcache``): one deployment holding the LM,
the block pool and the cache (SmartCache or no cache, per application), with an HTTP API
``POST /smartcache/chat``: one turn of a session; the reply says whether the cache answered, the
prefill tokens computed and the simulated TTFT. ``end: true`` closes the session (its pin on the
forest is released). One replica serialises mutations of the forest and pool (the sheet's single
``SmartCacheManager`` actor).

Queries are word-level in the LM's vocabulary (else 400); their embedding comes from the prepared
table, or from MiniLM loaded on first use for a new in-vocabulary wording. Bodies are bounded
pydantic models: 422 on malformed ones, 413 above 2 KiB; the replica keeps serving.

No ``from __future__ import annotations`` here: FastAPI must resolve the body types in the replica.
"""
import threading
import time
from typing import Literal

import numpy as np
import torch
from pydantic import Field
from ray import serve

from components.core.registry import register
from components.data.conversations import KBParams, Tokenizer, Turn, make_kb
from components.serving.app import TINY_REPLICA, BoundedModel, RequestModel, make_api
from components.serving.cost import TokenCost, Usage
from components.serving.services import Service
from components.serving.smartcache.engine import Engine
from components.serving.smartcache.kvpool import BlockPool
from components.serving.smartcache.prepare import load_lm
from components.serving.smartcache.systems import make_system
from components.serving.smartcache.technique import SmartCacheParams


class ChatRequest(RequestModel):
    session: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    query: str = Field(min_length=1, max_length=200)
    end: bool = False


class ChatResponse(BoundedModel):
    answer: str
    hit: bool
    node: int
    prefill_tokens: int
    decode_tokens: int
    sim_ttft_s: float
    wall_s: float
    system: str


api = make_api("smartcache", max_body_bytes=2048)


@serve.deployment(ray_actor_options=TINY_REPLICA)
@serve.ingress(api)
class SmartCacheService:
    def __init__(self, bundle: dict, system: str = "smartcache", params: dict | None = None):
        torch.set_num_threads(1)
        lm, e = bundle["lm"], bundle["embeddings"]
        self.p = SmartCacheParams(system=system, **(params or {}))
        self.p.check()
        model = load_lm(lm)
        self.tok = Tokenizer(make_kb(KBParams(**lm["kb"])).vocab)
        cfg = model.cfg
        self.pool = BlockPool(cfg.n_layer, cfg.n_head, cfg.d_model // cfg.n_head, self.p.block_size)
        self.engine = Engine(model, self.tok, self.pool, Usage(), self.p.rho_layers, self.p.rho_tokens == "last")
        self.emb = dict(zip(e["texts"], e["emb"]))
        self.embed_model = e.get("model", "")
        self.system = make_system(self.engine, self.emb, self.p)
        self.sessions: dict = {}
        self.lock = threading.Lock()
        self.lm_cost = TokenCost.from_params(int(self.p.sim_lm_params), self.p.flops_per_s)
        self.emb_cost = TokenCost.from_params(int(self.p.embed_params), self.p.flops_per_s)

    def _embedding(self, query: str) -> None:
        if query in self.emb:
            return
        if self.embed_model != "all-MiniLM-L6-v2":
            raise ValueError("query: not among the prepared query texts (debug embeddings cannot embed new text)")
        from components.data.text_embeddings import embed

        self.emb[query] = embed([query], "minilm", threads=1)[0]     # the model loads once per replica

    def chat(self, req: ChatRequest) -> ChatResponse:
        self.tok.encode(req.query)                       # ValueError (400) on out-of-vocabulary words
        t0 = time.perf_counter()
        with self.lock:
            self._embedding(req.query)
            sid = self.sessions.setdefault(req.session, len(self.sessions))
            out = self.system.turn(Turn(sid, 0, req.query, "", "", "", False))
            if req.end:
                self.system.end(sid)
                self.sessions.pop(req.session, None)
        look = self.emb_cost.seconds(prefill=len(req.query.split())) if out.embedded else 0.0
        ttft = look + self.lm_cost.seconds(prefill=out.computed, decode=1 if out.decoded else 0)
        return ChatResponse(answer=out.answer, hit=out.hit, node=out.node, prefill_tokens=out.computed,
                            decode_tokens=out.decoded, sim_ttft_s=ttft, wall_s=time.perf_counter() - t0,
                            system=self.p.system)

    def stats(self) -> dict:
        with self.lock:
            return {"kv_blocks": self.pool.resident, "kv_blocks_peak": self.pool.peak,
                    "sessions": len(self.sessions), "usage": self.engine.usage.to_dict()}

    @api.post("/chat")
    def post_chat(self, req: ChatRequest) -> ChatResponse:
        return self.chat(req)


def build_app(bundle: dict, system: Literal["smartcache", "none", "prefix"] = "smartcache", params: dict | None = None):
    """The bound application (one replica: the forest and the pool are mutated in one place)."""
    return SmartCacheService.options(name=f"SmartCache_{system}").bind(bundle, system, params)


SMARTCACHE = Service(
    experiment="smartcache", prepare="served", build=build_app, route_prefix="/smartcache", endpoint="/chat",
    example={"session": "u1", "query": "what is the colour of Lumtha ?"},
    summary="One turn of a chat session through SmartCache (semantic forest + shared KV blocks) on the tiny LM")
register("service", "smartcache", summary=SMARTCACHE.summary)(SMARTCACHE)
