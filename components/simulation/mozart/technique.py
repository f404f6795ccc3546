"""Registered technique `mozart_moe` (one configuration of the stack: expert allocation x schedule x
network, on planted / uniform / tiny-MoE routing traces) and the prepare step `mozart_moe_traces`
(trains the tiny MoE LM on stdlib text and records its routing)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from components.core.errors import ConfigError, require
from components.core.registry import prepare_step, technique
from components.core.result import Result
from components.simulation.mozart import allocation as _allocation  # noqa: F401  (registers the policies)
from components.simulation.mozart.dispatch import imbalance, package_load, remote_packages
from components.simulation.mozart.profiling import coactivation
from components.simulation.mozart.streaming import pipeline
from components.simulation.mozart.traces import planted, pydoc_text, uniform
from components.simulation.mozart.wafer import MoEShape, Wafer, check_divisible, stage_times
from components.simulation.policies import get_policy


# ------------------------------------------------------------------------------------ prepare
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
    seed: int = 0

    def check(self):
        require(self.layers >= 1 and self.d >= 8 and self.ffn >= 1, "layers", self.layers, "a positive model size")
        require(1 <= self.top_k <= self.experts, "top_k", self.top_k, f"1 <= top_k <= experts={self.experts}")
        require(self.steps >= 1 and self.batch >= 1, "steps", self.steps, "positive steps and batch")
        require(self.profile_tokens >= 64 and self.eval_tokens >= 64, "eval_tokens", self.eval_tokens, ">= 64 tokens")


@prepare_step("mozart_moe_traces", summary="Trains a tiny byte-level MoE LM (top-k routing, load-balancing loss) on "
              "stdlib pydoc text and records its per-layer routing on two disjoint held-out splits.", params=TinyMoEParams)
def build_traces(p: TinyMoEParams, ctx) -> dict:
    import torch

    from components.models.moe import MoEConfig, train_and_trace

    torch.set_num_threads(1)
    c = MoEConfig(d=p.d, layers=p.layers, experts=p.experts, top_k=p.top_k, ffn=p.ffn, seq=p.seq, aux_weight=p.aux_weight)
    return train_and_trace(pydoc_text(), c, p.steps, p.batch, p.profile_tokens, p.eval_tokens, p.seed)


# ------------------------------------------------------------------------------------ technique
@dataclass
class MozartParams:
    model: dict = field(default_factory=lambda: {"name": "olmoe_like", "experts": 64, "top_k": 8})
    trace: Literal["planted", "uniform", "tiny_moe"] = "planted"
    topics: int = 8                       # planted traces: latent topics, experts/topics experts each
    planted_p: float = 0.9                # probability that a pick comes from the token's topic
    placement: str = "clustered"          # allocation policy: clustered, contiguous, random
    balance_eps: float = 0.1              # clustered: package load <= (1 + eps) x mean on the profile split
    schedule: Literal["bulk", "stream"] = "bulk"
    chunks: int = 8                       # stream: token chunks per micro-batch
    network: Literal["mesh", "tree"] = "mesh"
    hardware: dict = field(default_factory=dict)   # Wafer overrides
    shared_link: bool = True              # dispatch and combine share the inter-package links
    tokens_per_batch: int = 4096          # micro-batch
    profile_tokens: int = 4096            # planted/uniform: profiling split (disjoint from evaluation)
    eval_tokens: int = 32768              # evaluation split (imbalance gated over all of it)
    seeds: int = 5
    chunk_sweep: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    mode: Literal["vectorised", "actors"] = "vectorised"
    actor_tokens: int = 256               # actor mode: tokens of the checked micro-batch
    plots: bool = True

    def check(self):
        m = MoEShape.from_config(self.model, "model")
        w = Wafer.from_config(self.hardware, "hardware")
        if self.trace != "tiny_moe":
            check_divisible(m, w)
            require(m.experts % self.topics == 0, "topics", self.topics, f"a divisor of model.experts={m.experts}")
        require(0 <= self.planted_p <= 1, "planted_p", self.planted_p, "a probability")
        get_policy("allocation", self.placement, "placement")
        require(self.balance_eps >= 0, "balance_eps", self.balance_eps, "a non-negative slack")
        require(self.chunks >= 1, "chunks", self.chunks, "a positive number of chunks")
        require(self.tokens_per_batch >= 1 and self.eval_tokens >= self.tokens_per_batch, "eval_tokens", self.eval_tokens,
                f"at least tokens_per_batch={self.tokens_per_batch}")
        require(self.profile_tokens >= 1, "profile_tokens", self.profile_tokens, "a positive number of tokens")
        require(self.seeds >= 1, "seeds", self.seeds, "a positive number of seeds")
        require(all(isinstance(s, int) and s >= 1 for s in self.chunk_sweep), "chunk_sweep", self.chunk_sweep, "positive integers")


def _validate(p: MozartParams, exp: dict) -> None:
    if p.trace != "tiny_moe":
        return
    preps = [s for s in (exp.get("prepare") or {}).values() if isinstance(s, dict) and s.get("step") == "mozart_moe_traces"]
    require(bool(preps), "experiment.prepare", exp.get("prepare"), "a prepare entry with step: mozart_moe_traces (trace: tiny_moe)")
    prm = preps[0].get("params") or {}
    m = MoEShape(experts=int(prm.get("experts", TinyMoEParams.experts)), top_k=int(prm.get("top_k", TinyMoEParams.top_k)))
    check_divisible(m, Wafer.from_config(p.hardware, "hardware"), "experiment.prepare.params.experts")


def _traces(p: MozartParams, m: MoEShape, ctx, seed: int):
    """Yield (label, profile trace, evaluation trace) for one seed."""
    rng = np.random.default_rng([ctx.seed, seed, 1])
    if p.trace == "tiny_moe":
        prep = next((v for v in ctx.inputs.values() if isinstance(v, dict) and "profile" in v), None)
        if prep is None:
            raise ConfigError("prepare", list(ctx.inputs), "the mozart_moe_traces prepare step")
        for layer, (prof, ev) in enumerate(zip(prep["profile"], prep["eval"])):
            yield f"layer{layer}", prof, ev[: p.eval_tokens]
        return
    if p.trace == "uniform":
        yield "uniform", uniform(p.profile_tokens, m.experts, m.top_k, rng), uniform(p.eval_tokens, m.experts, m.top_k, rng)
        return
    perm = rng.permutation(m.experts)
    yield "planted", planted(p.profile_tokens, m.experts, m.top_k, p.topics, p.planted_p, rng, perm), \
        planted(p.eval_tokens, m.experts, m.top_k, p.topics, p.planted_p, rng, perm)


def layer_time(st: dict, schedule: str, chunks: int, w: Wafer, shared: bool) -> tuple[float, list]:
    """Forward + backward of one MoE layer for one micro-batch (backward: same bytes, 2x FLOPs)."""
    s = chunks if schedule == "stream" else 1
    pre = schedule == "stream"
    fwd, ev = pipeline(s, st["dispatch"], st["compute"], st["combine"], st["weights"], w.launch_s, shared, pre)
    bwd, _ = pipeline(s, st["dispatch"], 2 * st["compute"], st["combine"], st["weights"], w.launch_s, shared, pre)
    return fwd + bwd, ev


@technique("mozart_moe", family="simulation", params=MozartParams, validate=_validate,
           summary="Mozart (arXiv 2603.07006): co-activation expert clustering, token/expert streaming and NoP-Tree vs "
                   "contiguous placement, bulk all-to-all and a 2D mesh, on a wafer of chiplet packages.")
def run_mozart(p: MozartParams, ctx) -> Result:
    w = Wafer.from_config(p.hardware, "hardware")
    if p.trace == "tiny_moe":
        prep = next((v for v in ctx.inputs.values() if isinstance(v, dict) and "profile" in v), None)
        if prep is None:
            raise ConfigError("prepare", list(ctx.inputs), "the mozart_moe_traces prepare step")
        m = MoEShape.from_config({**p.model, "experts": prep["experts"], "top_k": prep["top_k"]}, "model")
    else:
        m = MoEShape.from_config(p.model, "model")
    check_divisible(m, w)
    G = w.packages
    net, mesh = w.network(p.network), w.network("mesh")
    alloc = get_policy("allocation", p.placement)
    contiguous = get_policy("allocation", "contiguous")
    acc = {k: [] for k in ("bytes", "base_bytes", "copies", "base_copies", "time", "base_time", "imb", "base_imb",
                           "imb_batch", "ratio", "affinity", "compute", "util")}
    sweep = {"this config": np.zeros(len(p.chunk_sweep)), "baseline placement": np.zeros(len(p.chunk_sweep))}
    n_sweep = 0
    timeline = actor = None
    total = p.seeds
    for seed in range(p.seeds):
        rng = np.random.default_rng([ctx.seed, seed, 2])
        for label, prof, ev in _traces(p, m, ctx, seed):
            f, C = coactivation(prof, m.experts)
            g = alloc(f, C, G, p.balance_eps, rng)
            g0 = contiguous(f, C, G, p.balance_eps, rng)
            home = rng.integers(G, size=ev.shape[0])
            acc["imb"].append(imbalance(package_load(ev, g, G)))
            acc["base_imb"].append(imbalance(package_load(ev, g0, G)))
            same = g[:, None] == g[None, :]
            acc["affinity"].append(float((C * same).sum() / max(C.sum(), 1e-12)))
            nb = ev.shape[0] // p.tokens_per_batch
            if nb < 1:
                raise ConfigError("tokens_per_batch", p.tokens_per_batch, f"at most the {ev.shape[0]} evaluation tokens of the trace")
            for b in range(nb):
                sl = slice(b * p.tokens_per_batch, (b + 1) * p.tokens_per_batch)
                e_b, h_b = ev[sl], home[sl]
                st = stage_times(e_b, h_b, g, m, w, net)
                st0 = stage_times(e_b, h_b, g0, m, w, mesh)
                t, events = layer_time(st, p.schedule, p.chunks, w, p.shared_link)
                t0, events0 = layer_time(st0, "bulk", 1, w, p.shared_link)
                acc["time"].append(t)
                acc["base_time"].append(t0)
                acc["bytes"].append(4 * st["inter_bytes"])           # dispatch + combine, forward + backward
                acc["base_bytes"].append(4 * st0["inter_bytes"])
                acc["copies"].append(remote_packages(e_b, h_b, g, G).sum() / e_b.shape[0])
                acc["base_copies"].append(remote_packages(e_b, h_b, g0, G).sum() / e_b.shape[0])
                acc["imb_batch"].append(imbalance(package_load(e_b, g, G)))
                acc["ratio"].append((st0["dispatch"](1) + st0["combine"](1)) / max(st0["compute"], 1e-30))
                acc["compute"].append(st["compute"])
                acc["util"].append(3 * st["compute"] / t)            # busiest chiplet: fwd b + bwd 2b over the layer time
                if b == 0:
                    for i, s in enumerate(p.chunk_sweep):
                        sweep["this config"][i] += layer_time(st, "stream", s, w, p.shared_link)[0]
                        sweep["baseline placement"][i] += layer_time(st0, "stream", s, w, p.shared_link)[0]
                    n_sweep += 1
                if timeline is None:
                    timeline = {f"baseline: contiguous, bulk, mesh ({t0 * 1e6:.0f} us fwd+bwd)": events0,
                                f"this: {p.placement}, {p.schedule}{'' if p.schedule == 'bulk' else f' s={p.chunks}'}, "
                                f"{p.network} ({t * 1e6:.0f} us fwd+bwd)": events}
            if p.mode == "actors" and actor is None:
                from components.simulation.actors import pool_for
                from components.simulation.mozart.actors import run_actor_check

                pool, own = pool_for(ctx, 4, "mozart-package")
                try:
                    e_a, h_a = ev[: p.actor_tokens], home[: p.actor_tokens]
                    actor = run_actor_check(f"{ctx.experiment}/{ctx.variant}", net, pool, e_a, h_a, g, m.token_bytes, rng)
                    st_a = stage_times(e_a, h_a, g, m, w, net)
                    from components.simulation import engine

                    actor["vectorised_dispatch_s"] = engine.matrix_phase_time(net, st_a["traffic"])
                    actor["vectorised_remote_copies"] = float(remote_packages(e_a, h_a, g, G).sum())
                finally:
                    if own:
                        import ray

                        for a in pool:
                            ray.kill(a)
        ctx.progress(seed + 1, total)
    mean = lambda k: float(np.mean(acc[k]))  # noqa: E731
    metrics = {
        "inter_package_bytes": mean("bytes"), "baseline_inter_package_bytes": mean("base_bytes"),
        "bytes_reduction_vs_contiguous": 1 - mean("bytes") / mean("base_bytes") if mean("base_bytes") else 0.0,
        "remote_copies_per_token": mean("copies"), "contiguous_remote_copies_per_token": mean("base_copies"),
        "load_imbalance": float(max(acc["imb"])), "load_imbalance_mean": mean("imb"),
        "contiguous_load_imbalance": float(max(acc["base_imb"])), "load_imbalance_per_batch_max": float(max(acc["imb_batch"])),
        "moe_layer_time_s": mean("time"), "baseline_moe_layer_time_s": mean("base_time"),
        "speedup_vs_baseline": mean("base_time") / mean("time"), "comm_compute_ratio": mean("ratio"),
        "intra_package_coactivation_share": mean("affinity"), "experts": m.experts, "top_k": m.top_k,
        "launch_over_compute": w.launch_s / max(mean("compute"), 1e-30), "chiplet_utilisation": mean("util"),
    }
    if actor is not None:
        metrics.update(actor)
        metrics["actor_copies_mismatch"] = abs(actor["actor_remote_copies"] - actor["vectorised_remote_copies"])
        metrics["actor_dispatch_rel_diff"] = abs(actor["actor_dispatch_s"] - actor["vectorised_dispatch_s"]) / max(actor["vectorised_dispatch_s"], 1e-30)
    files = {}
    if p.plots and timeline is not None:
        from components.simulation.mozart.plots import chunk_sweep, timelines

        files["plots/streaming_timeline.png"] = timelines(timeline)
        files["plots/chunk_sweep.png"] = chunk_sweep(p.chunk_sweep, {k: list(v / max(n_sweep, 1)) for k, v in sweep.items()})
    return Result(metrics=metrics,
                  series={"layer_time_vs_chunks": (p.chunk_sweep, list(sweep["this config"] / max(n_sweep, 1)))},
                  info={"model": {**p.model, "experts": m.experts, "top_k": m.top_k}, "hardware": {k: getattr(w, k) for k in Wafer.__dataclass_fields__},
                        "network": net.describe(), "placement": p.placement, "schedule": p.schedule, "chunks": p.chunks},
                  files=files)
