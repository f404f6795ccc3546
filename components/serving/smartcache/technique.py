"""Technique ``smartcache``: one cache system (``system``) replays one seed's interleaved multi-session
workload on the tiny LM over a real paged KV-block pool; every answer is checked against the
knowledge base, so a false cache hit is a wrong answer.

Metrics: ``hit_ratio`` (turns answered from a cache entry; for ``prefix``, turns that reused at
least one block), ``false_hit_ratio`` (wrong cached answers / turns) and ``false_hit_share``
(/ hits), ``answer_accuracy``, ``kv_blocks_peak`` / ``kv_blocks_mean`` (resident physical blocks),
``prefill_tokens`` (computed) and ``prefill_tokens_saved`` (context + query tokens not computed),
``sim_ttft_s`` (mean simulated time to first token, below), the shift detector's
``shift_precision`` / ``shift_recall`` / ``shift_f1`` (SmartCache) and ``reuse_distance`` (mean
ticks, i.e. turns served, since a hit entry's previous access). SmartCache also reports where its
misses come from and whether the embedding recognises the workload's paraphrases at its threshold
(``miss_cold`` / ``miss_paraphrase`` / ``miss_detect`` / ``miss_branch``, ``hit_ceiling``,
``paraphrase_recall_explicit`` / ``_followup``, ``cross_meaning_max``: :mod:`.misses`).

Simulated TTFT prices the computed tokens as if on the paper's model: the LM is charged as a
``sim_lm_params`` model (Qwen-2.5-1.5B by default) and each embedding lookup as the MiniLM
encoder (22.7M) over the query's words, through :class:`~components.serving.cost.TokenCost`:
hit = lookup + detection prefill; miss = lookup (if any) + prefill + first decoded token + call.

Memory budgets (``budget_frac`` > 0) are fractions of the workload's private footprint: the
blocks every session would hold if its whole conversation were cached privately (computed from
the workload, no run), so the same budget binds every system and policy alike.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import torch

from components.core.errors import ConfigError, require
from components.core.registry import technique
from components.core.result import Result
from components.data.conversations import (PHRASINGS, KBParams, Phrasing, Tokenizer, WorkloadParams, make_kb,
                                          make_workload)
from components.serving.cost import TokenCost, Usage
from components.serving.smartcache.engine import Engine
from components.serving.smartcache.eviction import StepWeights
from components.serving.smartcache.kvpool import BlockPool
from components.serving.smartcache.misses import MissLedger, paraphrase_recall
from components.serving.smartcache.prepare import load_lm
from components.serving.smartcache.systems import make_system

SYSTEMS = ("none", "prefix", "semantic_query", "semantic_context", "smartcache")


@dataclass
class SmartCacheParams:
    system: Literal["none", "prefix", "semantic_query", "semantic_context", "smartcache"] = "smartcache"
    workload: dict = field(default_factory=dict)       # WorkloadParams keys
    block_size: int = 4
    budget_frac: float = 0.0       # 0: unbounded; else a fraction of the private footprint
    eviction: Literal["lru", "lfu", "step"] = "lru"
    step: dict = field(default_factory=dict)           # StepWeights keys
    tau_sim: float = 0.9           # semantic answer caches (the sheet's GPTCache setting)
    tau_sim_smart: float = 0.85    # SmartCache's forest
    tau_ctx: float = 0.4           # rho below this: topic shift (chosen on validation seed 100)
    rho_layers: int = 2
    rho_tokens: Literal["last", "all"] = "last"   # attention of the 'A' cue only, or of every query token
    detect: bool = True            # ablation: False = always search the current subtree
    share_kv: bool = True          # ablation: False = private block copies per node and session
    guard: bool = True             # entity/number guard on forest hits
    sim_lm_params: float = 1.5e9
    embed_params: float = 22.7e6
    flops_per_s: float = 1e14

    def check(self):
        WorkloadParams(**self.workload).check()
        StepWeights(**self.step).check()
        require(1 <= self.block_size <= 64, "block_size", self.block_size, "an integer in [1, 64]")
        require(0 <= self.budget_frac <= 1, "budget_frac", self.budget_frac, "a fraction in [0, 1] (0: unbounded)")
        for k in ("tau_sim", "tau_sim_smart", "tau_ctx"):
            require(0 < getattr(self, k) <= 1, k, getattr(self, k), "a threshold in (0, 1]")
        require(self.rho_layers >= 1, "rho_layers", self.rho_layers, "a positive number of layers")
        for k in ("sim_lm_params", "embed_params"):
            require(getattr(self, k) > 0, k, getattr(self, k), "a positive parameter count")


def longest_prompt(wp: WorkloadParams, phrasing: Phrasing = PHRASINGS["templated"]) -> int:
    """The most tokens the workload can put before an answer: ``<bos>`` and ``max_turns - 1`` whole turns
    (each ``Q query A value .``) and the last turn's ``Q query A``. Turn 0 and every topic shift are
    explicit questions, the rest follow-ups; with ``p_shift > 0`` any later turn can be a shift, so
    every turn is counted at the longest paraphrase it can take (entities, attribute names and values
    are one word each)."""
    words = lambda templates: max(len(t.format(a="a", e="e").split()) for t in templates)  # noqa: E731
    explicit, followup = words(phrasing.explicit) + 4, words(phrasing.followup) + 4     # + Q, A, the value, '.'
    later = max(explicit, followup) if wp.p_shift > 0 else followup
    return 1 + explicit + (wp.max_turns - 1) * later - 2


def _phrasing(entry) -> str:
    return KBParams(**(getattr(entry.params, "kb", None) or {})).phrasing


def validate(p: SmartCacheParams, exp: dict, inputs: dict) -> None:
    """The workload's longest prompt fits the context of the LM its ``lm`` input is bound to (else every
    session that long fails mid-run), and the ``embeddings`` input embedded the phrasing that LM was
    trained on (the workload's questions are the LM's)."""
    wp = WorkloadParams(**p.workload)
    lm, emb = inputs["lm"], inputs["embeddings"]
    if _phrasing(emb) != _phrasing(lm):
        raise ConfigError(f"experiment.prepare.{emb.name}.params.kb.phrasing", _phrasing(emb),
                          f"the phrasing of the LM it is paired with: {_phrasing(lm)} (experiment.prepare.{lm.name})")
    phrasing = PHRASINGS[_phrasing(lm)]
    context = getattr(lm.params, "context", None)
    if context is None or longest_prompt(wp, phrasing) <= context:
        return
    fits = max((n for n in range(1, wp.max_turns) if longest_prompt(replace(wp, max_turns=n), phrasing) <= context),
               default=0)
    raise ConfigError("workload.max_turns", wp.max_turns,
                      f"at most {fits} turns: {wp.max_turns} turns can build a {longest_prompt(wp, phrasing)}-token "
                      f"prompt, over the context of {context} of the LM prepared by experiment.prepare.{lm.name}")


def private_footprint(turns, tok: Tokenizer, block_size: int) -> int:
    """Blocks if every session's whole conversation were cached privately."""
    n: dict[int, int] = {}
    for t in turns:
        n[t.session] = n.get(t.session, 1) + len(tok.turn_tokens(t.query, t.answer))
    return int(sum(math.ceil(v / block_size) for v in n.values()))


def _prf(pred: list[bool], true: list[bool]) -> tuple[float, float, float]:
    tp = sum(p and t for p, t in zip(pred, true))
    prec = tp / max(sum(pred), 1)
    rec = tp / max(sum(true), 1)
    return prec, rec, (2 * prec * rec / (prec + rec) if prec + rec else 0.0)


def replay(p: SmartCacheParams, lm: dict, emb: dict, seed: int, progress=None) -> Result:
    """Run one system over one seed's workload (see the module docstring)."""
    torch.set_num_threads(1)
    model = load_lm(lm)
    kbp = KBParams(**lm["kb"])
    kb = make_kb(kbp)
    tok = Tokenizer(kb.vocab)
    wp = WorkloadParams(**p.workload)
    turns = make_workload(kb, wp, seed)
    last_turn = {}
    for i, t in enumerate(turns):
        last_turn[t.session] = i
    ref = private_footprint(turns, tok, p.block_size)
    budget = int(max(1, round(p.budget_frac * ref))) if p.budget_frac > 0 else None
    cfg = model.cfg
    pool = BlockPool(cfg.n_layer, cfg.n_head, cfg.d_model // cfg.n_head, p.block_size, budget)
    usage = Usage()
    engine = Engine(model, tok, pool, usage, p.rho_layers, p.rho_tokens == "last")
    system = make_system(engine, emb, p)
    ledger = MissLedger(system.forest) if p.system == "smartcache" else None
    lm_cost = TokenCost.from_params(int(p.sim_lm_params), p.flops_per_s)
    emb_cost = TokenCost.from_params(int(p.embed_params), p.flops_per_s)
    hits = false = correct = computed = saved = decoded = 0
    ttft, resident, reuse = [], [], []
    pred, true = [], []
    t0 = time.perf_counter()
    for i, t in enumerate(turns):
        out = system.turn(t)
        if ledger is not None:
            ledger.record(t, out, emb[t.query])
        ok = out.answer == t.answer
        correct += ok
        hits += out.hit
        false += out.hit and not ok and p.system != "prefix"
        computed += out.computed
        decoded += out.decoded
        saved += out.prompt - out.computed
        lookup_s = emb_cost.seconds(prefill=len(t.query.split())) if out.embedded else 0.0
        if out.decoded:
            ttft.append(lookup_s + lm_cost.seconds(prefill=out.computed, decode=1))
        else:
            ttft.append(lookup_s + lm_cost.seconds(prefill=out.computed))
        if out.reuse >= 0:
            reuse.append(out.reuse)
        if out.shift_pred is not None:
            pred.append(bool(out.shift_pred))
            true.append(t.shift)
        resident.append(pool.resident)
        if last_turn[t.session] == i:
            system.end(t.session)
        if progress is not None and i % 200 == 0:
            progress(i + 1, len(turns), hit_ratio=hits / (i + 1))
    n = len(turns)
    metrics = {
        "hit_ratio": hits / n, "false_hit_ratio": false / n, "false_hit_share": false / max(hits, 1),
        "answer_accuracy": correct / n, "kv_blocks_peak": float(pool.peak), "kv_blocks_mean": float(np.mean(resident)),
        "prefill_tokens": float(computed), "prefill_tokens_saved": float(saved), "decode_tokens": float(decoded),
        "sim_ttft_s": float(np.mean(ttft)), "reuse_distance": float(np.mean(reuse)) if reuse else float("nan"),
        "turns": float(n), "budget_blocks": float(budget or 0), "private_footprint_blocks": float(ref),
        "budget_overflows": float(pool.overflows), "blocks_allocated": float(pool.allocated),
        "wall_per_turn_s": (time.perf_counter() - t0) / n,
    }
    if pred:
        pr, rc, f1 = _prf(pred, true)
        metrics.update(shift_precision=pr, shift_recall=rc, shift_f1=f1)
    if ledger is not None:
        metrics.update(ledger.metrics())
        metrics.update(paraphrase_recall(kb, emb, p.tau_sim_smart))
    return Result(metrics=metrics, series={"resident_blocks": resident[::max(1, n // 500)]},
                  info={"lm_heldout_accuracy": lm["heldout_accuracy"], "system": p.system, "budget": budget,
                        "phrasing": kbp.phrasing})


@technique("smartcache", family="serving", params=SmartCacheParams, inputs=("lm", "embeddings"), validate=validate,
           summary="SmartCache: semantic forest + attention topic-shift detection + cross-session KV block sharing + "
                   "STEP eviction, or a baseline cache (none, vLLM prefix caching, query/context semantic caches).")
def run_smartcache(p: SmartCacheParams, ctx) -> Result:
    e = ctx.input("embeddings")
    emb = dict(zip(e["texts"], e["emb"]))
    return replay(p, ctx.input("lm"), emb, ctx.seed, ctx.progress)
