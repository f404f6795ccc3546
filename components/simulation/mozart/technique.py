"""Registered techniques `mozart_moe` and `mozart_moe_lm`: one configuration of the Mozart stack
(expert allocation x schedule x network) on a wafer of chiplet packages, for one seed.

`mozart_moe` draws planted or uniform routing from ``ctx.seed``; `mozart_moe_lm` reads the routing
of the tiny MoE LM (input ``moe_traces``, prepare step `mozart_moe_traces` in ``prepare.py``).
A variant simulates only its own configuration: the traces and token homes depend on the seed
alone, never on the placement, so the baseline variant (contiguous, bulk, mesh) run on the same
seed sees the very same tokens and the DAG pairs them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from components.core.errors import ConfigError, require
from components.core.registry import lookup, technique
from components.core.result import Result
from components.simulation.mozart import allocation as _allocation  # noqa: F401  (registers the policies)
from components.simulation.mozart.dispatch import imbalance, package_load, remote_packages
from components.simulation.mozart.prepare import TinyMoEParams
from components.simulation.mozart.profiling import coactivation
from components.simulation.mozart.streaming import pipeline
from components.simulation.mozart.traces import planted, uniform
from components.simulation.mozart.wafer import MoEShape, Wafer, check_divisible, stage_times


@dataclass
class MozartParams:
    model: dict = field(default_factory=lambda: {"name": "olmoe_like", "experts": 64, "top_k": 8})
    trace: Literal["planted", "uniform"] = "planted"
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
    chunk_sweep: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    mode: Literal["vectorised", "actors"] = "vectorised"
    actor_tokens: int = 256               # actor mode: tokens of the checked micro-batch
    plots: bool = True

    def check(self):
        m = MoEShape.from_config(self.model, "model")
        w = Wafer.from_config(self.hardware, "hardware")
        if self.trace != "tiny_moe":
            check_divisible(m, w)
            require(self.topics >= 1 and m.experts % self.topics == 0, "topics", self.topics,
                    f"a divisor of model.experts={m.experts}")
        require(0 <= self.planted_p <= 1, "planted_p", self.planted_p, "a probability")
        lookup("allocation_policy", self.placement, "placement")
        require(self.balance_eps >= 0, "balance_eps", self.balance_eps, "a non-negative slack")
        require(self.chunks >= 1, "chunks", self.chunks, "a positive number of chunks")
        require(self.tokens_per_batch >= 1 and self.eval_tokens >= self.tokens_per_batch, "eval_tokens", self.eval_tokens,
                f"at least tokens_per_batch={self.tokens_per_batch}")
        require(self.profile_tokens >= 1, "profile_tokens", self.profile_tokens, "a positive number of tokens")
        require(all(isinstance(s, int) and s >= 1 for s in self.chunk_sweep), "chunk_sweep", self.chunk_sweep, "positive integers")


@dataclass
class MozartLMParams(MozartParams):
    """The same stack on the tiny MoE LM's routing: experts and top-k come from the traces
    (``model`` still gives hidden / ffn sizes); the planted-trace fields are unused."""

    trace: Literal["tiny_moe"] = "tiny_moe"


def _validate_lm(p: MozartLMParams, exp: dict) -> None:
    """Every mozart_moe_traces entry of the experiment must fit the wafer (E divisible by packages)."""
    preps = {k: s for k, s in (exp.get("prepare") or {}).items() if isinstance(s, dict) and s.get("step") == "mozart_moe_traces"}
    require(bool(preps), "experiment.prepare", list(exp.get("prepare") or {}), "an entry with step: mozart_moe_traces")
    for name, spec in preps.items():
        prm = spec.get("params") or {}
        m = MoEShape(experts=int(prm.get("experts", TinyMoEParams.experts)), top_k=int(prm.get("top_k", TinyMoEParams.top_k)))
        check_divisible(m, Wafer.from_config(p.hardware, "hardware"), f"experiment.prepare.{name}.params.experts")


def synthetic_traces(p: MozartParams, m: MoEShape, seed: int) -> list:
    """[(label, profile trace, evaluation trace)] drawn from ``seed`` (planted topics or uniform)."""
    rng = np.random.default_rng([seed, 1])
    if p.trace == "uniform":
        return [("uniform", uniform(p.profile_tokens, m.experts, m.top_k, rng), uniform(p.eval_tokens, m.experts, m.top_k, rng))]
    perm = rng.permutation(m.experts)
    return [("planted", planted(p.profile_tokens, m.experts, m.top_k, p.topics, p.planted_p, rng, perm),
             planted(p.eval_tokens, m.experts, m.top_k, p.topics, p.planted_p, rng, perm))]


def layer_time(st: dict, schedule: str, chunks: int, w: Wafer, shared: bool) -> tuple[float, list]:
    """Forward + backward of one MoE layer for one micro-batch (backward: same bytes, 2x FLOPs)."""
    s = chunks if schedule == "stream" else 1
    pre = schedule == "stream"
    fwd, ev = pipeline(s, st["dispatch"], st["compute"], st["combine"], st["weights"], w.launch_s, shared, pre)
    bwd, _ = pipeline(s, st["dispatch"], 2 * st["compute"], st["combine"], st["weights"], w.launch_s, shared, pre)
    return fwd + bwd, ev


def simulate(p: MozartParams, m: MoEShape, traces: list, ctx) -> Result:
    """This variant's configuration on every (profile, evaluation) trace pair of one seed."""
    w = Wafer.from_config(p.hardware, "hardware")
    check_divisible(m, w)
    G = w.packages
    net = w.network(p.network)
    alloc = lookup("allocation_policy", p.placement, "placement")
    rng_alloc, rng_home = np.random.default_rng([ctx.seed, 3]), np.random.default_rng([ctx.seed, 2])
    acc = {k: [] for k in ("bytes", "copies", "time", "imb", "imb_batch", "ratio", "affinity", "compute", "util")}
    sweep, n_sweep = np.zeros(len(p.chunk_sweep)), 0
    timeline = actor = None
    for li, (label, prof, ev) in enumerate(traces):
        f, C = coactivation(prof, m.experts)
        g = alloc(f, C, G, p.balance_eps, rng_alloc)
        home = rng_home.integers(G, size=ev.shape[0])
        acc["imb"].append(imbalance(package_load(ev, g, G)))
        same = g[:, None] == g[None, :]
        acc["affinity"].append(float((C * same).sum() / max(C.sum(), 1e-12)))
        nb = ev.shape[0] // p.tokens_per_batch
        if nb < 1:
            raise ConfigError("tokens_per_batch", p.tokens_per_batch, f"at most the {ev.shape[0]} evaluation tokens of the trace")
        for b in range(nb):
            sl = slice(b * p.tokens_per_batch, (b + 1) * p.tokens_per_batch)
            e_b, h_b = ev[sl], home[sl]
            st = stage_times(e_b, h_b, g, m, w, net)
            t, events = layer_time(st, p.schedule, p.chunks, w, p.shared_link)
            acc["time"].append(t)
            acc["bytes"].append(4 * st["inter_bytes"])           # dispatch + combine, forward + backward
            acc["copies"].append(remote_packages(e_b, h_b, g, G).sum() / e_b.shape[0])
            acc["imb_batch"].append(imbalance(package_load(e_b, g, G)))
            acc["ratio"].append((st["dispatch"](1) + st["combine"](1)) / max(st["compute"], 1e-30))
            acc["compute"].append(st["compute"])
            acc["util"].append(3 * st["compute"] / t)            # busiest chiplet: fwd b + bwd 2b over the layer time
            if b == 0:
                sweep += [layer_time(st, "stream", s, w, p.shared_link)[0] for s in p.chunk_sweep]
                n_sweep += 1
            if timeline is None:
                timeline = {f"{p.placement}, {p.schedule}{'' if p.schedule == 'bulk' else f' s={p.chunks}'}, "
                            f"{p.network} ({t * 1e6:.0f} us fwd+bwd)": events}
        if p.mode == "actors" and actor is None:
            actor = _actor_check(p, ctx, net, m, ev, home, g, w)
        ctx.progress(li + 1, len(traces))
    mean = lambda k: float(np.mean(acc[k]))  # noqa: E731
    metrics = {
        "inter_package_bytes": mean("bytes"), "remote_copies_per_token": mean("copies"),
        "load_imbalance": float(max(acc["imb"])), "load_imbalance_mean": mean("imb"),
        "load_imbalance_per_batch_max": float(max(acc["imb_batch"])), "moe_layer_time_s": mean("time"),
        "comm_compute_ratio": mean("ratio"), "intra_package_coactivation_share": mean("affinity"),
        "experts": m.experts, "top_k": m.top_k, "launch_over_compute": w.launch_s / max(mean("compute"), 1e-30),
        "chiplet_utilisation": mean("util"),
    }
    if actor is not None:
        metrics.update(actor)
        metrics["actor_copies_mismatch"] = abs(actor["actor_remote_copies"] - actor["vectorised_remote_copies"])
        metrics["actor_dispatch_rel_diff"] = abs(actor["actor_dispatch_s"] - actor["vectorised_dispatch_s"]) / max(actor["vectorised_dispatch_s"], 1e-30)
    curve = list(sweep / max(n_sweep, 1))
    files = {}
    if p.plots and timeline is not None:
        from components.simulation.mozart.plots import chunk_sweep, timelines

        files["plots/streaming_timeline.png"] = timelines(timeline)
        files["plots/chunk_sweep.png"] = chunk_sweep(p.chunk_sweep, {"this config": curve})
    return Result(metrics=metrics,
                  series={"layer_time_vs_chunks": (p.chunk_sweep, curve, "chunks")},
                  info={"model": {**p.model, "experts": m.experts, "top_k": m.top_k}, "hardware": {k: getattr(w, k) for k in Wafer.__dataclass_fields__},
                        "network": net.describe(), "placement": p.placement, "schedule": p.schedule, "chunks": p.chunks},
                  files=files)


def _actor_check(p: MozartParams, ctx, net, m: MoEShape, ev, home, g, w: Wafer) -> dict:
    """One micro-batch through package actors, beside the vectorised figures of the same tokens."""
    from components.simulation import engine
    from components.simulation.actors import pool_for
    from components.simulation.mozart.actors import run_actor_check

    pool, own = pool_for(ctx, 4, "mozart-package")
    try:
        e_a, h_a = ev[: p.actor_tokens], home[: p.actor_tokens]
        out = run_actor_check(ctx.host_key(), net, pool, e_a, h_a, g, m.token_bytes,
                              np.random.default_rng([ctx.seed, 4]))
        st_a = stage_times(e_a, h_a, g, m, w, net)
        out["vectorised_dispatch_s"] = engine.matrix_phase_time(net, st_a["traffic"])
        out["vectorised_remote_copies"] = float(remote_packages(e_a, h_a, g, w.packages).sum())
        return out
    finally:
        if own:
            import ray

            for a in pool:
                ray.kill(a)


@technique("mozart_moe", family="simulation", params=MozartParams,
           summary="Mozart (arXiv 2603.07006): co-activation expert clustering, token/expert streaming and NoP-Tree vs "
                   "contiguous placement, bulk all-to-all and a 2D mesh, on a wafer of chiplet packages.")
def run_mozart(p: MozartParams, ctx) -> Result:
    m = MoEShape.from_config(p.model, "model")
    return simulate(p, m, synthetic_traces(p, m, ctx.seed), ctx)


@technique("mozart_moe_lm", family="simulation", params=MozartLMParams, validate=_validate_lm, inputs=("moe_traces",),
           summary="Mozart's stack on real routing: every layer of the tiny MoE LM trained in prepare (mozart_moe_traces).")
def run_mozart_lm(p: MozartLMParams, ctx) -> Result:
    prep = ctx.input("moe_traces")
    m = MoEShape.from_config({**p.model, "experts": prep["experts"], "top_k": prep["top_k"]}, "model")
    traces = [(f"layer{i}", prof, ev[: p.eval_tokens]) for i, (prof, ev) in enumerate(zip(prep["profile"], prep["eval"]))]
    return simulate(p, m, traces, ctx)
