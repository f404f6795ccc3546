"""Registered technique `subspace_pp`: a GPT trained with GPipe pipeline parallelism over Ray
actors (one stage per actor), every boundary message coded by one codec and charged to the shared
``Link``; SSN (subspace networks) sends k coordinates plus token ids, rebuilt exactly.

One call runs one codec and one seed. Before the first optimizer step the pipelined loss and
gradients are compared with the same model run in one process (``loss_rel_err``, ``grad_rel_err``).

``execution``: ``actors`` trains on the stage actors throughout; ``in_process`` (what the full
experiment uses: ~4x faster here, where Ray calls and object transfers cost ~5x the compute of these
tiny stages) runs the same StageWorker code in the driver after the first ``actor_check_steps`` steps
ran on the stage actors from the same initial weights and batches, and records how far the two
differ (losses, bytes, weights: ``actor_vs_local_*``; 0 when they are bitwise equal; NaN with
``actor_check_steps: 0``, for variants no claim checks this way).
Device: ``in_process`` runs the pipeline on ``ctx.device``; the stage actors run on cpu (Ray gives them
no GPU), so on cuda the actor check compares them with the same steps run in process on cpu.
The simulated clock is the GPipe schedule on each configured link (``links``: name -> link), from
the stages' measured compute (thread CPU time on cpu, wall time to the device's sync on cuda) and the
bytes the codec really produced.
``bandwidth_share_<link>``: of the boundary messages' transfer time on that link, the share that is
serialisation (bytes / bandwidth) rather than latency. SSN cuts bytes, not messages, so its time
advantage needs a link where that share is large for the dense baseline.
"""
from __future__ import annotations

import copy
import math
import os
import resource
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from components.core.errors import require
from components.core.netsim import Link
from components.core.registry import technique
from components.core.result import Result
from components.core.timing import timed
from components.data.char_corpus import sample_batch
from components.models.knobs import GPTTrainKnobs
from components.training.ddp.optim import lr_at
from components.training.subspace_pp.codecs import BoundaryCodec
from components.training.subspace_pp.model import build_stages, reference_loss
from components.training.subspace_pp.schedule import gpipe_step_s
from components.training.subspace_pp.stage import Done, LocalStage, local_stages, start_stages

VAL_SEED = 20_251  # the validation windows are the same for every variant and seed


class StageDied(RuntimeError):
    """A pipeline stage's actor died mid-run (Ray's reason in the message)."""


@dataclass
class SubspacePPParams(GPTTrainKnobs):
    """The codec on the stage boundaries and the pipeline; sizes, schedule and eval windows are the
    shared knobs (:class:`GPTTrainKnobs`), with this technique's defaults below."""

    codec: Literal["fp32", "bf16", "int8", "topk", "naive", "ssn"] = "fp32"
    k: int = 4                      # subspace dimension (naive, ssn)
    topk_keep: int = 4              # coordinates kept per token (topk)
    wire_dtype: Literal["fp32", "bf16"] = "fp32"   # value bytes of topk / naive / ssn
    n_layer: int = 4
    stages: int = 4
    micro_batches: int = 4
    batch: int = 32                 # sequences per step (all micro-batches)
    steps: int = 600
    eval_every: int = 50
    final_eval_batches: int = 16
    links: dict = field(default_factory=lambda: {"link80": {"bandwidth": "80Mbps", "latency": "10ms"},
                                                 "link300": {"bandwidth": "300Mbps", "latency": "5ms"}})
    basis_seed: int = 1234
    reference_check: bool = True
    die_stage: int = -1             # fault injection: this stage's process exits at step die_at_step
    die_at_step: int = 1
    timeout_s: float = 300.0        # no answer from the pipeline for this long: the variant fails
    execution: Literal["actors", "in_process"] = "actors"
    actor_check_steps: int = 8      # in_process: these first steps also run on the stage actors (0: none)

    def check(self):
        self.check_knobs("final_eval_batches")
        require(self.stages >= 2 and self.n_layer % self.stages == 0, "stages", self.stages,
                f"at least 2 and dividing n_layer={self.n_layer}")
        require(1 <= self.k < self.d_model, "k", self.k, f"an integer in [1, {self.d_model - 1}] (below the width d_model)")
        require(1 <= self.topk_keep < self.d_model, "topk_keep", self.topk_keep,
                f"an integer in [1, {self.d_model - 1}] (below the width d_model)")
        require(self.micro_batches >= 1 and self.batch % self.micro_batches == 0, "micro_batches",
                self.micro_batches, f"a positive divisor of batch={self.batch}")
        require(isinstance(self.links, dict) and len(self.links) >= 1, "links", self.links,
                "a mapping name -> {bandwidth, latency}")
        for name, cfg in self.links.items():
            require(isinstance(name, str) and name.replace("_", "").isalnum(), "links", name,
                    "link names of letters, digits and _ (they suffix metric names)")
            Link.from_config(cfg, key=f"links.{name}")
        require(-1 <= self.die_stage < self.stages, "die_stage", self.die_stage, f"-1 (none) or a stage in [0, {self.stages})")
        require(self.timeout_s > 0, "timeout_s", self.timeout_s, "positive seconds")
        if self.execution == "in_process":
            require(0 <= self.actor_check_steps <= self.steps, "actor_check_steps", self.actor_check_steps,
                    f"an integer in [0, steps={self.steps}] (execution: in_process; 0: no actor check)")
        if self.execution == "in_process" and self.die_stage >= 0:
            require(self.die_at_step < self.actor_check_steps, "die_at_step", self.die_at_step,
                    f"below actor_check_steps={self.actor_check_steps} (in_process: only those steps run on actors)")


def _validate(p: SubspacePPParams, exp: dict) -> None:
    """``device: cuda`` needs ``execution: in_process``: the stage actors hold no GPU, and a cuda request that
    trains on cpu would be a silent cpu run (``auto`` runs the actors on cpu, as it runs each technique
    where it can)."""
    require(not (exp.get("device") == "cuda" and p.execution == "actors"), "execution", p.execution,
            "in_process with experiment.device=cuda (the stage actors hold no GPU)")


def _fwd_pass(actors, step: int, x, y, micro: int, train: bool):
    """Submit micro-batch forwards through the chain; returns the last stage's loss refs."""
    refs = []
    for xm, ym in zip(x.chunk(micro), y.chunk(micro)):
        m = len(refs)
        ref = actors[0].forward.remote(step, m, xm, None, train)
        for s in range(1, len(actors)):
            ref = actors[s].forward.remote(step, m, ref, ym if s == len(actors) - 1 else None, train)
        refs.append(ref)
    return refs


class _Pipeline:
    """The driver's side: actors, the GPipe submission order, and death/timeout handling."""

    def __init__(self, actors, timeout_s: float):
        self.actors, self.timeout_s = actors, timeout_s

    def get(self, refs, step: int):
        if all(isinstance(r, Done) for r in refs):   # in-process stages: the calls already ran
            return [r.value for r in refs]
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError, RayActorError

        try:
            return ray.get(refs, timeout=self.timeout_s)
        except GetTimeoutError:
            raise StageDied(f"pipeline gave no answer within {self.timeout_s:g}s at step {step}") from None
        except (RayActorError, ActorDiedError, ActorUnavailableError) as e:
            raise StageDied(self._who_died(step, e)) from e

    def _who_died(self, step: int, e: Exception) -> str:
        import ray

        dead = []
        for i, a in enumerate(self.actors):
            try:
                ray.get(a.ping.remote(), timeout=10)
            except Exception:
                dead.append(i)
        cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"pipeline stage {dead or '?'} actor died at step {step}: {type(e).__name__}: {cause}"

    def train_step(self, step, x, y, micro, lr):
        losses = _fwd_pass(self.actors, step, x, y, micro, True)
        back = []
        for m in range(micro):
            g = self.actors[-1].backward.remote(m, None)
            for s in range(len(self.actors) - 2, -1, -1):
                g = self.actors[s].backward.remote(m, g)
            back.append(g)
        out = self.get(losses + back, step)
        return float(np.mean(out[:micro]))

    def grads(self, step):
        return self.get([a.grads.remote() for a in self.actors], step)

    def opt_step(self, step, lr):
        return self.get([a.step.remote(lr) for a in self.actors], step)

    def val_loss(self, step, batches):
        refs = [_fwd_pass(self.actors, -1, x, y, 1, False)[0] for x, y in batches]
        return float(np.mean(self.get(refs, step)))

    def close(self):
        if not self.actors or isinstance(self.actors[0], LocalStage):
            return
        import ray

        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:
                pass


def prefix_run(stages, p: SubspacePPParams, corpus, seed: int):
    """The first ``actor_check_steps`` training steps on ``stages`` (actors or in-process), drawing the
    batches the in-process run draws: (per-step losses, per-step stage stats, stage weights after them)."""
    pipe = _Pipeline(stages, p.timeout_s)
    rng = np.random.default_rng(seed)
    losses, stats = [], []
    try:
        for step in range(p.actor_check_steps):
            x, y = sample_batch(corpus.train, p.batch, p.context, rng)
            lr = lr_at(step, p.steps, p.lr, p.warmup, p.final_lr_frac)
            losses.append(pipe.train_step(step, x, y, p.micro_batches, lr))
            stats.append(pipe.opt_step(step, lr))
        weights = pipe.get([a.weights.remote() for a in pipe.actors], p.actor_check_steps)
    finally:
        pipe.close()
    return losses, stats, weights


def _bytes_of(st: list[dict]) -> list:
    return [(s["fwd_bytes"], s["bwd_bytes"]) for s in st]


def actor_vs_local(actors: tuple, local: tuple) -> dict:
    """How far the stage actors' first steps are from the in-process ones: two (losses, stats, weights)
    of :func:`prefix_run`'s form, both on cpu."""
    return {"actor_vs_local_loss_err": float(np.max(np.abs(np.subtract(local[0], actors[0])))),
            "actor_vs_local_weight_err": max(float((lw[k] - aw[k]).abs().max())
                                             for lw, aw in zip(local[2], actors[2]) for k in lw),
            "actor_bytes_match": float(all(_bytes_of(a) == _bytes_of(b) for a, b in zip(local[1], actors[1])))}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def reference_errors(ref_stages, x, y, pipe_loss: float, pipe_grads: list[dict]) -> tuple[float, float]:
    """(loss rel. error, max gradient rel. error over parameter tensors) of the pipeline vs one process."""
    for st in ref_stages:
        st.zero_grad(set_to_none=True)
    loss = reference_loss(ref_stages, x, y)
    loss.backward()
    gerr = 0.0
    for st, got in zip(ref_stages, pipe_grads):
        for n, p in st.named_parameters():
            if p.grad is None:
                continue
            gerr = max(gerr, _rel(got[n], p.grad) if n in got else math.inf)
    ref = float(loss.detach())
    return abs(pipe_loss - ref) / abs(ref), gerr


@technique("subspace_pp", family="training", params=SubspacePPParams, validate=_validate, inputs=("corpus",),
           devices=("cpu", "cuda"),
           summary="Pipeline parallelism over Ray actors (GPipe, one stage per actor) with boundary codecs: "
                   "SSN subspace coordinates + token ids (exact) vs dense fp32/bf16, int8, top-k, naive projection.")
def run_subspace_pp(p: SubspacePPParams, ctx) -> Result:
    t_start = time.perf_counter()
    corpus = ctx.input("corpus")
    cfg = p.gpt(corpus.vocab_size, tie_embeddings=False)
    in_process = p.execution == "in_process"
    dev = ctx.device if in_process else "cpu"   # where the pipeline runs: stage actors hold no GPU
    stages, const = build_stages(cfg, p.stages, ctx.seed, p.k, ssn=p.codec == "ssn", basis_seed=p.basis_seed)
    ref_stages = [st.to(dev) for st in copy.deepcopy(stages)] if p.reference_check else None
    codec = [BoundaryCodec(p.codec, p.d_model, const["basis"], const["table"], p.topk_keep, p.wire_dtype,
                           corpus.vocab_size) for _ in range(p.stages - 1)]
    args = [dict(index=s, n_stages=p.stages, module=stages[s], recv=codec[s - 1] if s else None,
                 send=codec[s] if s < p.stages - 1 else None, lr=p.lr, weight_decay=p.weight_decay,
                 micro_batches=p.micro_batches, die_at_step=p.die_at_step if s == p.die_stage else -1)
            for s in range(p.stages)]
    links = {name: Link.from_config(c, key=f"links.{name}") for name, c in p.links.items()}
    rng = np.random.default_rng(ctx.seed)
    vrng = np.random.default_rng(VAL_SEED)
    val = [sample_batch(corpus.val, p.batch, p.context, vrng) for _ in range(max(p.eval_batches, p.final_eval_batches))]
    check = prefix_run(start_stages(args), p, corpus, ctx.seed) if in_process and p.actor_check_steps else None
    actor_err = {"actor_vs_local_loss_err": math.nan, "actor_vs_local_weight_err": math.nan,
                 "actor_bytes_match": math.nan}
    if check is not None and dev != "cpu":   # the actors ran on cpu: compared with their steps in process on cpu
        actor_err = actor_vs_local(check, prefix_run(local_stages(copy.deepcopy(args)), p, corpus, ctx.seed))
    pipe = _Pipeline(local_stages(args, dev) if in_process else start_stages(args), p.timeout_s)
    local_stats = []   # on cpu, the in-process run's first steps are what the actors are compared with
    train_loss, sim = [], {n: [] for n in links}
    wire = {n: [0.0, 0.0] for n in links}   # per link: boundary seconds that are bandwidth, and in all
    compute_s, wall_step, fwd_bytes, bwd_bytes = [], [], [], []
    eval_steps, eval_vals, eval_tokens, eval_sim = [], [], [], {n: [] for n in links}
    loss_err = grad_err = math.nan
    tokens_per_step = p.batch * p.context
    try:
        for step in range(p.steps + 1):
            if step % p.eval_every == 0 or step == p.steps:
                v = pipe.val_loss(step, val[:p.eval_batches])
                eval_steps.append(step)
                eval_vals.append(v)
                eval_tokens.append(step * tokens_per_step)
                for n in links:
                    eval_sim[n].append(float(sum(sim[n])))
            if step == p.steps:
                break
            with timed("wall") as t_step:   # the stages end each call with their device synchronized
                x, y = sample_batch(corpus.train, p.batch, p.context, rng)
                lr = lr_at(step, p.steps, p.lr, p.warmup, p.final_lr_frac)
                train_loss.append(pipe.train_step(step, x, y, p.micro_batches, lr))
                if step == 0 and ref_stages is not None:
                    loss_err, grad_err = reference_errors(ref_stages, x, y, train_loss[0], pipe.grads(step))
                st = pipe.opt_step(step, lr)
            wall_step.append(t_step.s)
            if check is not None and dev == "cpu" and step < p.actor_check_steps:
                local_stats.append(st)
                if step == p.actor_check_steps - 1:
                    local_w = pipe.get([a.weights.remote() for a in pipe.actors], step)
                    actor_err = actor_vs_local(check, (train_loss[:step + 1], local_stats, local_w))
            fwd = [s["fwd_s"] for s in st]
            bwd = [s["bwd_s"] for s in st]
            fb = [s["fwd_bytes"] for s in st[:-1]]
            bb = [s["bwd_bytes"] for s in st[1:]]
            opt = [s["opt_s"] for s in st]
            fwd_bytes.append(sum(map(sum, fb)))
            bwd_bytes.append(sum(map(sum, bb)))
            compute_s.append(gpipe_step_s(Link(float("inf")), fwd, bwd, fb, bb, opt))
            for n, link in links.items():
                sim[n].append(gpipe_step_s(link, fwd, bwd, fb, bb, opt))
                for size in (b for per_stage in (*fb, *bb) for b in per_stage):
                    wire[n][0] += link.transfer_s(size) - link.latency_s
                    wire[n][1] += link.transfer_s(size)
            ctx.progress(step + 1, p.steps, loss=train_loss[-1], val=eval_vals[-1])
        # the curve's last point already is the final loss when it reads the same windows
        final_val = (eval_vals[-1] if p.final_eval_batches == p.eval_batches
                     else pipe.val_loss(p.steps, val[:p.final_eval_batches]))
        stats = pipe.get([a.stats.remote() for a in pipe.actors], p.steps)
    finally:
        pipe.close()

    dense_bytes = 2 * (p.stages - 1) * p.batch * p.context * p.d_model * 4  # fp32 both ways, same shapes
    bytes_step = float(np.mean(np.add(fwd_bytes, bwd_bytes)))
    boundary_tokens = (p.stages - 1) * tokens_per_step
    metrics = {
        "final_val_loss": final_val,
        "final_train_loss": float(np.mean(train_loss[-max(1, min(20, len(train_loss))):])),
        "bytes_per_step": bytes_step,
        "bytes_fwd_per_step": float(np.mean(fwd_bytes)),
        "bytes_bwd_per_step": float(np.mean(bwd_bytes)),
        "bytes_per_token_fwd": float(np.mean(fwd_bytes)) / boundary_tokens,
        "bytes_per_token_bwd": float(np.mean(bwd_bytes)) / boundary_tokens,
        "compression_ratio": dense_bytes / bytes_step,
        "bytes_saved_frac": 1.0 - bytes_step / dense_bytes,
        "compute_step_s": float(np.median(compute_s)),
        "wall_step_s": float(np.median(wall_step)),
        "max_boundary_rel_err": max(s["max_rel_err"] for s in stats),
        "loss_rel_err": loss_err,
        "grad_rel_err": grad_err,
        "peak_rss_mb": peak_rss_mb(stats),
        "tokens": float(p.steps * tokens_per_step),
        "wall_s": time.perf_counter() - t_start,
        **actor_err,
    }
    metrics["last_eval_loss"] = float(eval_vals[-1])   # the series' own measure: what reach: targets
    series = {"train_loss": train_loss, "val_loss": (eval_steps, eval_vals),
              "val_loss_vs_tokens": (eval_tokens, eval_vals, "tokens")}
    for n in links:
        metrics[f"sim_step_s_{n}"] = float(np.mean(sim[n]))
        metrics[f"sim_time_s_{n}"] = float(np.sum(sim[n]))
        metrics[f"bandwidth_share_{n}"] = wire[n][0] / wire[n][1] if wire[n][1] > 0 else math.nan
        series[f"val_loss_vs_sim_s_{n}"] = (eval_sim[n], eval_vals, f"simulated seconds ({n})")
    info = {"schedule": "GPipe (fill-drain), backwards in micro-batch order", "execution": p.execution,
            "device": dev, "codec": p.codec, "vocab": corpus.vocab_size,
            "links": {n: {"bandwidth_bps": l.bandwidth_bps, "latency_s": l.latency_s} for n, l in links.items()},
            "stage_pids": [s["pid"] for s in stats]}
    return Result(metrics=metrics, series=series, info=info)


def peak_rss_mb(stats: list[dict]) -> float:
    """Peak RSS of the driver plus each distinct stage process: in ``in_process`` mode every stage
    reports the driver's own figure, so stages are counted once per pid."""
    per_pid = {os.getpid(): resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}
    for s in stats:
        per_pid[s["pid"]] = max(per_pid.get(s["pid"], 0.0), s["peak_rss_mb"])
    return float(sum(per_pid.values()))
