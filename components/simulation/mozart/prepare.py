"""Prepare step `mozart_moe_traces`: real routing for Mozart from a tiny MoE LM trained here.

Its own module, so the cache key covers exactly what the traces depend on (this file,
``components/models/moe.py`` and the text helper in ``traces.py``), not the simulator.
"""
from __future__ import annotations

from dataclasses import dataclass

from components.core.errors import require
from components.core.registry import prepare_step
from components.simulation.mozart.traces import pydoc_text


@dataclass
class TinyMoEParams:
    layers: int = 4
    d: int = 64
    experts: int = 16
    top_k: int = 2
    ffn: int = 128
    seq: int = 64
    steps: int = 200
    batch: int = 8
    aux_weight: float = 0.01
    profile_tokens: int = 4096
    eval_tokens: int = 32768

    def check(self):
        require(self.layers >= 1 and self.d >= 8 and self.ffn >= 1, "layers", self.layers, "a positive model size")
        require(1 <= self.top_k <= self.experts, "top_k", self.top_k, f"1 <= top_k <= experts={self.experts}")
        require(self.steps >= 1 and self.batch >= 1, "steps", self.steps, "positive steps and batch")
        require(self.profile_tokens >= 64 and self.eval_tokens >= 64, "eval_tokens", self.eval_tokens, ">= 64 tokens")


@prepare_step("mozart_moe_traces", params=TinyMoEParams, seeded=True,
              summary="Trains a tiny byte-level MoE LM (top-k routing, load-balancing loss; one model per seed) on "
                      "stdlib pydoc text and records its per-layer routing on two disjoint held-out splits.")
def build_traces(p: TinyMoEParams, ctx) -> dict:
    import torch

    from components.models.moe import MoEConfig, train_and_trace

    torch.set_num_threads(1)
    c = MoEConfig(d=p.d, layers=p.layers, experts=p.experts, top_k=p.top_k, ffn=p.ffn, seq=p.seq, aux_weight=p.aux_weight)
    return train_and_trace(pydoc_text(), c, p.steps, p.batch, p.profile_tokens, p.eval_tokens, ctx.seed)
