"""Data-parallel training through a failure schedule, the replicas' math in one process.

Every replica holds the same weights (synchronous DP), so a step is: each live replica computes the
gradient of the micro-batches it carries (its own, plus the down ones it took over: exactly for
neighbour-do-both, under MeCeFO's rules for MeCeFO), scaled by 1/n; the all-reduce sums the replicas'
gradients in replica order; every replica takes the same AdamW step. :func:`replica_grad` is the one
piece of per-replica math: the Ray actors (:mod:`actors`) call it too, so the actor run reproduces
this loop step for step (checked per seed). Micro-batch ``j`` of step ``t`` and its projections are
drawn from (seed, t, j), whoever computes them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from components.core.errors import require
from components.data.char_corpus import sample_batch
from components.models.gpt import GPT, evaluate_loss
from components.models.knobs import GPTTrainKnobs
from components.training.ddp.optim import lr_at
from components.training.mecefo.approx import Approx, flat_grad, grad_of, microbatch_loss
from components.training.mecefo.schedule import takeover

EVAL_SEED = 54321  # the same validation windows for every variant and seed
RECOVERIES = ("fault_free", "ndb", "mecefo", "ckpt_restart", "drop")


@dataclass
class TrainSetup(GPTTrainKnobs):
    """Model, data and schedule of one run (the same for every variant of an experiment): the shared
    knobs (their defaults are this technique's; ``batch`` is sequences per replica, one micro-batch),
    the replicas and the evaluation batch size."""

    replicas: int = 4
    eval_batch: int = 32
    final_eval_batches: int = 40
    threads: int = 1

    def check_setup(self):
        self.check_knobs("replicas", "eval_batch", "final_eval_batches", "threads")
        require(self.replicas >= 2, "replicas", self.replicas, "at least 2 (a neighbour takes over)")


def build(setup: TrainSetup, vocab: int, seed: int):
    """The model (initialised from ``seed``) and its AdamW (decay on matrices only)."""
    torch.manual_seed(seed)
    model = GPT(setup.gpt(vocab))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": setup.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=setup.lr, betas=(0.9, 0.95))
    return model, opt


def draw(train, batch: int, context: int, seed: int, step: int, j: int):
    """Micro-batch ``j`` of ``step``: drawn from (seed, step, j), so it is the same whoever computes it."""
    return sample_batch(train, batch, context, np.random.default_rng([seed, step, j]))


def microbatch(train, setup: TrainSetup, seed: int, step: int, j: int):
    return draw(train, setup.batch, setup.context, seed, step, j)


def projection_gen(seed: int, step: int, j: int) -> torch.Generator:
    return torch.Generator().manual_seed(((seed * 1_000_003 + step) * 131 + j) % 2 ** 62)


def replica_grad(model, train, setup: TrainSetup, seed: int, step: int, own: int, load: list[int],
                 recovery: str, approx: Approx, approx_own: bool) -> torch.Tensor:
    """Flat gradient replica ``own`` contributes at ``step``: the sum over the micro-batches it
    carries (``load``, own first) of their gradients / n (the all-reduce then sums replicas)."""
    overloaded = len(load) > 1
    model.zero_grad(set_to_none=True)
    scale = 1.0 / (1 if recovery == "drop" else setup.replicas)
    for j in load:
        a = approx if recovery == "mecefo" and (j != own or (approx_own and overloaded)) else None
        x, y = microbatch(train, setup, seed, step, j)
        (microbatch_loss(model, x, y, a, projection_gen(seed, step, j)) * scale).backward()
    g = flat_grad(model)
    model.zero_grad(set_to_none=True)
    return g


def apply_grad(model, opt, g: torch.Tensor, lr: float) -> None:
    off = 0
    for p in model.parameters():
        p.grad = g[off:off + p.numel()].view_as(p).clone()
        off += p.numel()
    for grp in opt.param_groups:
        grp["lr"] = lr
    opt.step()
    model.zero_grad(set_to_none=True)


def loads_at(sets, step: int, n: int, recovery: str) -> dict[int, list[int]]:
    """Who carries what at ``step``: fault-free and checkpoint-restart train on every replica (a
    restarted job redoes the lost steps with the same math), ``drop`` leaves a down replica's batch out."""
    down = sets[step] if recovery in ("ndb", "mecefo", "drop") else frozenset()
    loads = takeover(down, n)
    if recovery == "drop":
        loads = {i: [i] for i in loads}
    return loads


def grouped_grad(model, train, setup, seed, step, loads, recovery, approx, approx_own) -> torch.Tensor:
    """The same step gradient with every exact micro-batch in one batched pass (faster on CPU; equal to
    :func:`step_grad` up to float summation order): exact ones batched, MeCeFO ones one by one."""
    exact, approx_mbs = [], []
    for i, load in loads.items():
        for j in load:
            use = recovery == "mecefo" and (j != i or (approx_own and len(load) > 1))
            (approx_mbs if use else exact).append(j)
    n = len(loads) if recovery == "drop" else setup.replicas
    model.zero_grad(set_to_none=True)
    if exact:
        xs, ys = zip(*(microbatch(train, setup, seed, step, j) for j in sorted(exact)))
        (microbatch_loss(model, torch.cat(xs), torch.cat(ys), None) * (len(exact) / n)).backward()
    for j in approx_mbs:
        x, y = microbatch(train, setup, seed, step, j)
        (microbatch_loss(model, x, y, approx, projection_gen(seed, step, j)) / n).backward()
    g = flat_grad(model)
    model.zero_grad(set_to_none=True)
    return g


def step_grad(model, train, setup, seed, step, loads, recovery, approx, approx_own) -> torch.Tensor:
    """The all-reduced gradient of one step: replicas' contributions summed in replica order (the
    actors' arithmetic exactly)."""
    total = None
    for i in sorted(loads):
        g = replica_grad(model, train, setup, seed, step, i, loads[i], recovery, approx, approx_own)
        total = g if total is None else total + g
    if recovery == "drop":
        total = total / len(loads)
    return total


def grad_cosines(model, train, setup: TrainSetup, seed: int, approx: Approx, n_batches: int = 2) -> dict:
    """Cosine of MeCeFO vs exact gradients on fixed micro-batches: one micro-batch, and the step
    gradient with one of n micro-batches taken over (n-1 exact + 1 approximate vs n exact)."""
    cos_mb, cos_step = [], []
    for b in range(n_batches):
        gs = [grad_of(model, *microbatch(train, setup, seed + 99_991, b, j), None) for j in range(setup.replicas)]
        ga = grad_of(model, *microbatch(train, setup, seed + 99_991, b, 0), approx, projection_gen(seed, -1 - b, 0))
        exact = sum(gs)
        step = exact - gs[0] + ga
        cos_mb.append(float(torch.nn.functional.cosine_similarity(ga, gs[0], dim=0)))
        cos_step.append(float(torch.nn.functional.cosine_similarity(step, exact, dim=0)))
    return {"grad_cosine": float(np.mean(cos_mb)), "grad_cosine_step": float(np.mean(cos_step))}


def train(setup: TrainSetup, corpus, seed: int, sets, recovery: str, approx: Approx, approx_own: bool = False,
          steps: int | None = None, evaluate: bool = True, progress=None, grouped: bool = True) -> dict:
    """Train ``steps`` (default ``setup.steps``) through schedule ``sets``; curves and the model.
    ``grouped``: exact micro-batches in one pass (:func:`grouped_grad`); False: the actors' arithmetic."""
    torch.set_num_threads(setup.threads)
    steps = setup.steps if steps is None else steps
    model, opt = build(setup, corpus.vocab_size, seed)
    n = setup.replicas
    val_steps, val_loss, cos_steps, cos = [], [], [], []

    def ev(nb):
        return evaluate_loss(model, corpus.val, setup.context, setup.eval_batch, nb, seed=EVAL_SEED)

    for step in range(steps):
        if evaluate and step % setup.eval_every == 0:
            val_steps.append(step)
            val_loss.append(ev(setup.eval_batches))
            if recovery == "mecefo":
                cos_steps.append(step)
                cos.append(grad_cosines(model, corpus.train, setup, seed, approx, 1))
        loads = loads_at(sets, step, n, recovery)
        g = (grouped_grad if grouped else step_grad)(model, corpus.train, setup, seed, step, loads, recovery, approx,
                                                     approx_own)
        apply_grad(model, opt, g, lr_at(step, setup.steps, setup.lr, setup.warmup, setup.final_lr_frac))
        if progress and step % 10 == 0:
            progress(step + 1, steps)
    out = {"model": model, "opt": opt, "n_params": sum(p.numel() for p in model.parameters())}
    if evaluate:
        val_steps.append(steps)
        val_loss.append(ev(setup.eval_batches))
        out.update(val_steps=val_steps, val_loss=val_loss, final_val_loss=ev(setup.final_eval_batches),
                   cos_steps=cos_steps, cos=cos)
    return out


def params_vector(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
