"""Registered technique ``tensor_parallel``: the shared GPT with one block kind (``pre_ln``,
``parallel``, ``fal``, ``fal_plus``) under Megatron TP-``tp``. Trains single-process (same math),
measures one rank's compute with the communication taken out, charges every all-reduce the rank
issues to the shared Link (comm-bound and datacenter presets), and after training runs one step on
``tp`` Ray actors over gloo against the single-process model (forward, backward, counts, bytes).

Training, the rank's measured compute and the timed steps run on ``ctx.device`` (cpu by default; on
cuda each timed step is wall time to the device's sync); the actor check runs on cpu (the node actors
hold no GPU) against a cpu copy of the trained model.

With ``timed_against`` (a block kind), the step is also timed against that block's in one process
(components.core.timing: interleaved rounds, a noise floor from the reference timed against
itself), and the simulated step ratios on every link carry that floor (``step_ratio*`` and their
``_noise``): two variants' compute measured in two processes differ by the machine's load between
them (5% between two runs of fal here), which no threshold can tell from an effect."""
from __future__ import annotations

import time
import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from components.core import devices
from components.core.errors import require
from components.core.memory import PeakRSS
from components.core.netsim import Link
from components.core.registry import get, technique
from components.core.result import Result
from components.core.timing import interleave
from components.data.char_corpus import sample_batch
from components.models.gpt import GPT, GPTConfig
from components.models.knobs import GPTTrainKnobs
from components.training.tensor_parallel import simtime
from components.training.tensor_parallel.check import tp_exactness
from components.training.tensor_parallel.model import check_tp
from components.training.tensor_parallel.ranks import RankTimer
from components.training.tensor_parallel.train import train

DEFAULT_LINKS = {"comm_bound": {"bandwidth": "1Gbps", "latency": "50us"},    # the sheet's comm-bound link
                 "dc": {"bandwidth": "100Gbps", "latency": "5us"}}           # a datacenter fabric


@dataclass
class TPParams(GPTTrainKnobs):
    """Model (``block`` on the one GPT), TP degree, links, and the actor check; sizes, schedule and
    eval windows are the shared knobs (:class:`GPTTrainKnobs`), with this technique's defaults below."""

    EVAL_EVERY_MIN = 0            # eval_every: 0 = final evaluation only

    block: str = "pre_ln"
    tp: int = 2
    n_layer: int = 6
    eval_batches: int = 8
    final_eval_batches: int = 40
    threads: int = 1
    timing_repeats: int = 3       # one rank's step compute: this many timed steps at every evaluation, best of all
    links: dict = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_LINKS.items()})
    # more links to clock the same measured step on (metrics sim_step_s_NAME, comm_share_NAME): the step ratio
    # against the communication share, from one training run
    sweep_links: dict = field(default_factory=dict)
    actor_check: bool = True      # one step on tp rank actors (gloo) after training
    check_batch: int = 4
    fail_rank: int = -1           # fault injection: this rank's actor exits at the check step
    timeout_s: float = 120.0
    timed_against: str = ""       # a block kind: time this block's rank step against it in one process ("" = no)
    timing_rounds: int = 40       # at most this many interleaved rounds (they stop early once the ratio is settled)

    def gpt(self, vocab_size: int = 2) -> GPTConfig:
        return super().gpt(vocab_size, block=self.block)

    def check(self):
        self.check_knobs("final_eval_batches", "threads", "timing_repeats", "check_batch")
        cfg = self.gpt().check()                 # unknown block: one ConfigError naming the registered ones
        require(isinstance(self.tp, int) and self.tp >= 2, "tp", self.tp, "a TP degree of at least 2")
        check_tp(self.tp, cfg)
        require(isinstance(self.links, dict) and set(self.links) == set(DEFAULT_LINKS), "links", self.links,
                "a mapping with exactly the links comm_bound and dc, each {bandwidth, latency}")
        for name, c in self.links.items():
            Link.from_config(c, key=f"links.{name}")
        require(isinstance(self.sweep_links, dict), "sweep_links", self.sweep_links, "a mapping name -> {bandwidth, latency}")
        for name, c in self.sweep_links.items():
            require(isinstance(name, str) and name.isidentifier() and name not in DEFAULT_LINKS, "sweep_links", name,
                    "link names of letters, digits and _ (they suffix metric names), not comm_bound or dc")
            Link.from_config(c, key=f"sweep_links.{name}")
        require(isinstance(self.fail_rank, int) and -1 <= self.fail_rank < self.tp, "fail_rank", self.fail_rank,
                f"-1 (none) or a rank in [0, {self.tp - 1}]")
        require(self.timeout_s > 0, "timeout_s", self.timeout_s, "a positive number of seconds")
        require(isinstance(self.timed_against, str), "timed_against", self.timed_against, "a block kind, or \"\"")
        if self.timed_against:
            get("block", self.timed_against, key="timed_against")   # unknown: one ConfigError naming the blocks
        require(isinstance(self.timing_rounds, int) and self.timing_rounds >= 5, "timing_rounds", self.timing_rounds,
                "at least 5 interleaved rounds")


@technique("tensor_parallel", family="training", params=TPParams, inputs=("corpus",), devices=("cpu", "cuda"),
           summary="Megatron TP-2 of the shared GPT with pre-LN, parallel (GPT-J), FAL or FAL+ blocks: every "
                   "all-reduce counted and charged to 1 Gbps and 100 Gbps links, TP ranks as Ray actors over "
                   "gloo checked equal to the single-process model.")
def run_tensor_parallel(p: TPParams, ctx) -> Result:
    corpus, dev = ctx.input("corpus"), ctx.device
    cfg = p.gpt(corpus.vocab_size)
    x, y = (t.to(dev) for t in sample_batch(corpus.train, p.batch, p.context, np.random.default_rng(ctx.seed + 999)))
    timer: list[RankTimer] = []

    def time_rank(model):
        if not timer:
            timer.append(RankTimer(model, p.tp, p.threads))
        timer[0].sample(x, y, p.timing_repeats)

    t0 = time.perf_counter()
    with PeakRSS() as mem:
        out = train(cfg, corpus, ctx.seed, p.steps, p.batch, p.lr, p.warmup, p.final_lr_frac, p.weight_decay,
                    p.eval_every, p.eval_batches, p.final_eval_batches, p.threads, progress=ctx.progress,
                    on_eval=time_rank, device=dev)
        model = out["model"]
        rank = timer[0].result()
        xc, yc = sample_batch(corpus.val, p.check_batch, p.context, np.random.default_rng(ctx.seed + 777))
        check = tp_exactness(model, xc, yc, p.tp, use_actors=p.actor_check, timeout_s=p.timeout_s,
                             fail_rank=p.fail_rank)
    links = {n: Link.from_config(c, key=f"links.{n}") for n, c in p.links.items()}
    sims = {n: simtime.sim_step(rank["compute_s"], rank["sizes"], link, p.tp) for n, link in links.items()}
    c, f = rank["counts"], rank["fwd_counts"]
    per_step = {"allreduces_per_forward": float(f["fwd_allreduces"]),
                "allreduces_per_backward": float(c["bwd_allreduces"]),
                "param_allreduces_per_step": float(c["param_allreduces"]),
                "allreduces_per_step": float(len(rank["sizes"])),
                "allreduce_bytes_per_step": float(sum(rank["sizes"])),
                "allreduce_bytes_per_forward": float(f["fwd_bytes"])}
    # the check batch is smaller than the training batch: compare counts, and bytes scaled per sequence
    actor_counts_match = float(all(check[k] == per_step[k] for k in ("allreduces_per_forward", "allreduces_per_backward",
                                                                     "param_allreduces_per_step"))
                               and check["allreduce_bytes_per_step"] == _bytes_at(rank, p.batch, p.check_batch))
    tokens = p.batch * p.context
    cb, dc = sims["comm_bound"], sims["dc"]
    m = {"final_val_loss": out["final_val_loss"], **per_step,
         "sim_step_s": cb["sim_step_s"], "sim_step_s_dc": dc["sim_step_s"],
         "compute_s_per_step": rank["compute_s"], "comm_s_per_step": cb["comm_s"], "comm_s_per_step_dc": dc["comm_s"],
         "comm_share": cb["comm_s"] / cb["sim_step_s"],
         "tokens_per_s": tokens / cb["sim_step_s"], "tokens_per_s_dc": tokens / dc["sim_step_s"],
         "max_tp_abs_err": check["max_tp_abs_err"], "tp_fwd_abs_err": check["tp_fwd_abs_err"],
         "tp_grad_abs_err": check["tp_grad_abs_err"], "tp_actor_counts_match": actor_counts_match,
         "tp_check_wall_s": check["tp_check_wall_s"], "tp_check_comm_s": check["tp_check_comm_s"],
         "train_s_per_step": out["train_s_per_step"], "n_layer": float(p.n_layer), "tp": float(p.tp),
         "n_params": float(sum(q.numel() for q in model.parameters())), "peak_rss_mb": mem.peak_mb,
         "wall_s": time.perf_counter() - t0}
    for n, c in p.sweep_links.items():
        links[n] = Link.from_config(c, key=f"sweep_links.{n}")
        sw = simtime.sim_step(rank["compute_s"], rank["sizes"], links[n], p.tp)
        m[f"sim_step_s_{n}"], m[f"comm_share_{n}"] = sw["sim_step_s"], sw["comm_s"] / sw["sim_step_s"]
    timing_info = {}
    if p.timed_against:
        timed, timing_info = _step_against(p, corpus.vocab_size, timer[0], x, y, links, ctx.seed, dev)
        m.update(timed)
    series = {"val_loss": (out["steps"], out["val_loss"]),
              "val_loss_vs_sim_s": ([s * cb["sim_step_s"] for s in out["steps"]], out["val_loss"],
                                    "simulated s (TP-2, 1 Gbps / 50 us)"),
              "val_loss_vs_sim_s_dc": ([s * dc["sim_step_s"] for s in out["steps"]], out["val_loss"],
                                       "simulated s (TP-2, 100 Gbps / 5 us)"),
              "train_loss": out["train_loss"]}
    return Result(metrics=m, series=series,
                  info={"block": p.block, "tp": p.tp, "links": p.links, "sim": sims, "rank_counts": c,
                        "timed_against": timing_info,
                        "actor_check": {k: v for k, v in check.items()},
                        "link_model": "each all-reduce a blocking ring all-reduce over tp ranks on the Link; "
                                      "compute = one rank's measured step (forward, backward, AdamW), comm taken out"})


def _step_against(p: TPParams, vocab_size: int, own: RankTimer, x, y, links: dict[str, Link],
                  seed: int, device: str = "cpu") -> tuple[dict, dict]:
    """This block's rank step against ``p.timed_against``'s, interleaved in this process on ``device``
    (``own``'s model, ``x`` and ``y`` there; on cuda the wall clock, each step ending with the sync).

    Both steps (forward, backward, AdamW on one rank's shard, communication taken out) run on the
    same batch; the reference model is a fresh one of the same size (its compute does not depend on
    its weights). ``step_ratio_L`` is this block's simulated step over the reference's on link ``L``
    (``step_ratio`` on comm_bound), built from the compute ratio ``r`` and each one's all-reduces;
    ``_noise`` is how far the figure moves when ``r`` moves by the noise floor ``h`` (either way)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed + 4241)
        ref = RankTimer(GPT(dataclasses.replace(p, block=p.timed_against).gpt(vocab_size)).to(device), p.tp, p.threads)
    ref.sample(x, y, 1)

    def step(t: RankTimer):
        def run():
            t.last = t.rank.step(x, y)
            t.opt.step()
            devices.synchronize(device)
        return run

    t = interleave({"self": step(own), "ref": step(ref)}, "ref",
                   clock=devices.clock(device, "thread" if p.threads == 1 else "wall"), seed=[seed, 4241],
                   max_rounds=p.timing_rounds)
    out = t.metrics("compute_ratio", "self")    # compute_ratio and its _noise, _lo, _hi, _rounds, _thread_clock
    r, h, c_ref = out["compute_ratio"], t.noise, t.median("ref")
    sizes_own, sizes_ref = own.result()["sizes"], ref.result()["sizes"]

    def ratio(link: Link, rr: float) -> float:
        return (simtime.sim_step(rr * c_ref, sizes_own, link, p.tp)["sim_step_s"]
                / simtime.sim_step(c_ref, sizes_ref, link, p.tp)["sim_step_s"])

    for n, link in links.items():
        key = "step_ratio" if n == "comm_bound" else f"step_ratio_{n}"
        out[key] = ratio(link, r)
        out[f"{key}_noise"] = (max(abs(ratio(link, r * math.exp(s * h)) - out[key]) for s in (-1, 1))
                               if math.isfinite(h) else math.nan)
    return out, {"against": p.timed_against, "compute_ref_s": c_ref, **t.info()}


def _bytes_at(rank: dict, batch: int, check_batch: int) -> float:
    """Bytes per step at ``check_batch`` sequences: activation all-reduces scale with the batch, the
    ``param`` bucket does not."""
    act = rank["counts"]["fwd_bytes"] + rank["counts"]["bwd_bytes"]
    return act * check_batch / batch + rank["counts"]["param_bytes"]
