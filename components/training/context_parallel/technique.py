"""Registered technique ``context_parallel``: ring attention over 4 chunks of a char GPT with the
K/V traffic uncompressed, int8, on a fixed random projection, or on learned (mixtures of)
subspaces; bytes of every hop on the shared Link, simulated time to the uncompressed loss.

Training (the ring vectorised in one process) runs on ``ctx.device``; the layer-0 actor check on cpu
(the node actors hold no GPU), against the vectorised ring on cpu (components.training.context_parallel.check).
The simulated clock is a FLOP count (``gflops``), not a measured time, so it does not depend on the device."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from components.core import devices
from components.core.errors import require
from components.core.memory import PeakRSS
from components.core.netsim import Link
from components.core.registry import technique
from components.core.result import Result
from components.core.timing import timed
from components.data.char_corpus import sample_batch
from components.data.ngram import bigram_val_loss, unigram_val_loss
from components.training.context_parallel import simtime
from components.training.context_parallel.check import exactness
from components.training.context_parallel.ring import KV_MODES, RingSpec
from components.training.context_parallel.train import CPSetup, train
from components.training.context_parallel.wire import CODECS

DEFAULT_LINKS = {"wan": {"bandwidth": "300Mbps", "latency": "5ms"},     # the paper's decentralised link
                 "dc": {"bandwidth": "100Gbps", "latency": "5us"}}      # the centralised "datacenter" preset


@dataclass
class CPParams(CPSetup):
    """What travels: ``kv`` (dense / randproj / subspace), its ``codec``, r = rank_frac * d_h, M."""

    kv: str = "dense"
    codec: str = "fp32"
    rank_frac: float = 0.0        # r / d_h for randproj and subspace (1/16, 1/8)
    M: int = 1                    # subspaces in the mixture
    bucket: int = 128             # int8: values per scale
    balance: float = 0.01         # load-balancing penalty (M > 1)
    links: dict = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_LINKS.items()})
    gflops: float = 15.0          # each rank's compute rate (this CPU at these shapes, see the benchmark)
    # > 0: a second clock of the same run with ranks at this rate (metrics and series suffixed _cb): blocks whose
    # compute hides a hop, the paper's long-context regime (block compute grows with the chunk length squared,
    # its K/V bytes linearly), without training anything twice
    compute_bound_gflops: float = 0.0
    actor_check: bool = True      # the layer-0 ring on rank actors after training
    check_batch: int = 2
    fail_rank: int = -1           # fault injection: this rank's actor dies on its first hop
    timeout_s: float = 300.0

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    @property
    def r(self) -> int:
        return round(self.rank_frac * self.d_head)

    def check(self):
        CPSetup.check(self)
        require(self.kv in KV_MODES, "kv", self.kv, "one of " + ", ".join(KV_MODES))
        require(self.codec in CODECS, "codec", self.codec, "one of " + ", ".join(CODECS))
        if self.kv == "dense":
            require(self.rank_frac == 0, "rank_frac", self.rank_frac, "0 for kv=dense (it sends the whole block)")
        else:
            dh = self.d_head
            ok = 0 < self.rank_frac < 1 and abs(self.rank_frac * dh - self.r) < 1e-9 and 1 <= self.r < dh
            require(ok, "rank_frac", self.rank_frac,
                    f"r/d_h in (0, 1) with r = rank_frac * d_h a whole number in [1, {dh - 1}] (d_h={dh}), e.g. 1/16, 1/8")
        require(isinstance(self.M, int) and 1 <= self.M <= 256, "M", self.M, "an integer in [1, 256]")
        require(self.M == 1 or self.kv == "subspace", "M", self.M, "1 unless kv=subspace (a mixture needs subspaces)")
        require(isinstance(self.bucket, int) and self.bucket >= 1, "bucket", self.bucket, "a positive integer")
        require(self.balance >= 0, "balance", self.balance, "a non-negative weight")
        require(isinstance(self.links, dict) and set(self.links) == {"wan", "dc"}, "links", self.links,
                "a mapping with exactly the links wan and dc, each {bandwidth, latency}")
        for name, cfg in self.links.items():
            Link.from_config(cfg, key=f"links.{name}")
        require(self.gflops > 0, "gflops", self.gflops, "a positive compute rate")
        require(self.compute_bound_gflops >= 0, "compute_bound_gflops", self.compute_bound_gflops,
                "0 (no second clock) or a positive compute rate")
        require(isinstance(self.fail_rank, int) and -1 <= self.fail_rank < self.chunks, "fail_rank", self.fail_rank,
                f"-1 (none) or a rank in [0, {self.chunks - 1}]")
        require(self.check_batch >= 1, "check_batch", self.check_batch, "a positive integer")

    def spec(self, seed: int) -> RingSpec:
        return RingSpec(chunks=self.chunks, kv=self.kv, codec=self.codec, r=self.r if self.kv != "dense" else 0,
                        M=self.M, bucket=self.bucket, balance=self.balance, seed=seed)


@technique("context_parallel", family="training", params=CPParams, inputs=("corpus",), devices=("cpu", "cuda"),
           summary="Ring attention over 4 context chunks (Ray actors) with K/V sent uncompressed, int8, on a "
                   "random projection, or on learned mixtures of subspaces (coefficients + index); bytes per hop "
                   "on 300 Mbps and 100 Gbps links, simulated time to the uncompressed loss.")
def run_context_parallel(p: CPParams, ctx) -> Result:
    corpus = ctx.input("corpus")
    spec, dev = p.spec(ctx.seed), ctx.device
    with PeakRSS() as mem:
        with timed(devices.clock(dev, "wall")) as trained:     # train_s_per_step: the whole training loop's wall clock
            out = train(p.train_setup(), spec, corpus, ctx.seed, progress=ctx.progress, device=dev)
            devices.synchronize(dev)
        x, _ = sample_batch(corpus.val, p.check_batch, p.context, np.random.default_rng(ctx.seed + 777))
        check = exactness(out["model"], x, ctx.seed, nodes=ctx.nodes, key=ctx.host_key("exactness"),
                          fail_rank=p.fail_rank, use_actors=p.actor_check, timeout_s=p.timeout_s)
    links = {n: Link.from_config(c, key=f"links.{n}") for n, c in p.links.items()}
    fl = simtime.flops(p.batch, p.context // p.chunks, p.d_model, p.n_head, p.n_layer, corpus.vocab_size)
    sims = {n: simtime.sim_step(out["layers"], fl, p.chunks, link, p.gflops) for n, link in links.items()}
    layers = out["layers"]
    hop = layers[0]["fwd_block"]
    dense_hop = 2 * p.batch * (p.context // p.chunks) * p.d_model * 4          # K + V of one block in fp32
    tokens = [s * p.batch * p.context for s in out["steps"]]
    m = {"final_val_loss": out["final_val_loss"],
         "bytes_per_step": sum(st["fwd_bytes"] + st["bwd_bytes"] for st in layers),
         "fwd_bytes_per_step": sum(st["fwd_bytes"] for st in layers),
         "bwd_bytes_per_step": sum(st["bwd_bytes"] for st in layers),
         "kv_bytes_per_hop": hop, "grad_bytes_per_hop": layers[0]["bwd_block"], "idx_bytes_per_hop": layers[0]["idx_block"],
         "hops_per_step": sum(st["fwd_hops"] + st["bwd_hops"] for st in layers),
         "compression_ratio": dense_hop / hop, "kv_bytes_cut": 1 - hop / dense_hop,
         "sim_step_s": sims["wan"]["sim_step_s"], "sim_step_s_dc": sims["dc"]["sim_step_s"],
         "compute_s_per_step": sims["wan"]["compute_s"], "exposed_comm_s": sims["wan"]["exposed_comm_s"],
         "exposed_comm_s_dc": sims["dc"]["exposed_comm_s"], "block_compute_s": sims["wan"]["block_compute_s"],
         "hop_s": sims["wan"]["hop_s"], "hop_s_dc": sims["dc"]["hop_s"],
         "allreduce_bytes_per_step": 2 * (p.chunks - 1) / p.chunks * 4 * out["n_params"],
         "allreduce_s_per_step": simtime.allreduce_s(links["wan"], out["n_params"], p.chunks),
         "allreduce_s_per_step_dc": simtime.allreduce_s(links["dc"], out["n_params"], p.chunks),
         "router_usage_entropy": out["usage_entropy"], "r": float(spec.r), "M": float(p.M),
         "n_params": float(out["n_params"]), "tokens_per_step": float(p.batch * p.context),
         "train_s_per_step": trained.s / p.steps, "peak_rss_mb": mem.peak_mb,
         # the plateaus of the loss curve (components.data.ngram): a seed above the bigram level has not left them
         "unigram_val_loss": unigram_val_loss(corpus.train, corpus.val, corpus.vocab_size),
         "bigram_val_loss": bigram_val_loss(corpus.train, corpus.val, corpus.vocab_size), **check}
    series = {"val_loss": (out["steps"], out["val_loss"]),
              "val_loss_vs_tokens": (tokens, out["val_loss"], "tokens"),
              "val_loss_vs_sim_s": ([s * sims["wan"]["sim_step_s"] for s in out["steps"]], out["val_loss"],
                                    "simulated s (300 Mbps link)"),
              "val_loss_vs_sim_s_dc": ([s * sims["dc"]["sim_step_s"] for s in out["steps"]], out["val_loss"],
                                       "simulated s (100 Gbps link)"),
              "train_loss": out["train_loss"]}
    if p.compute_bound_gflops > 0:
        cb = {n: simtime.sim_step(out["layers"], fl, p.chunks, link, p.compute_bound_gflops) for n, link in links.items()}
        sims.update({f"{n}_cb": v for n, v in cb.items()})
        m.update({"sim_step_s_cb": cb["wan"]["sim_step_s"], "sim_step_s_dc_cb": cb["dc"]["sim_step_s"],
                  "exposed_comm_s_cb": cb["wan"]["exposed_comm_s"], "block_compute_s_cb": cb["wan"]["block_compute_s"]})
        series["val_loss_vs_sim_s_cb"] = ([s * cb["wan"]["sim_step_s"] for s in out["steps"]], out["val_loss"],
                                          f"simulated s (300 Mbps link, ranks at {p.compute_bound_gflops:g} GFLOP/s)")
        series["val_loss_vs_sim_s_dc_cb"] = ([s * cb["dc"]["sim_step_s"] for s in out["steps"]], out["val_loss"],
                                             f"simulated s (100 Gbps link, ranks at {p.compute_bound_gflops:g} GFLOP/s)")
    return Result(metrics=m, series=series, tables={"layers": layers},
                  info={"spec": asdict(spec), "links": p.links, "flops": fl, "sim": sims,
                        "link_model": "latency + 8 bytes / bandwidth per hop, overlapped with the receiver's block",
                        "ring": "causal, no zig-zag; block j travels j -> P-1, its dK/dV accumulator P-1 -> j"})
