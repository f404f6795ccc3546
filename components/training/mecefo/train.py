"""Data-parallel training through a failure schedule, the replicas' math in one process.

Every replica holds the same weights (synchronous DP), so a step is: each live replica computes the
gradient of the micro-batches it carries (its own, plus the down ones it took over: exactly for
neighbour-do-both, under MeCeFO's rules for MeCeFO), scaled by 1/n; the all-reduce sums the replicas'
gradients in replica order; every replica takes the same AdamW step. :func:`replica_grad` is the one
piece of per-replica math: the Ray actors (:mod:`actors`) call it too, so the actor run reproduces
this loop step for step (checked per seed). Micro-batch ``j`` of step ``t`` and its gaussian projections
are drawn from (seed, t, j), whoever computes them; the svd bases come from the weights at the start of
their refresh window (:class:`~components.training.mecefo.approx.Bases`), the same on every replica.
The loop runs on ``device`` (the technique's ``ctx.device``): model, optimizer state and gradients live
there, micro-batches and evaluation windows are drawn on cpu and moved, so a seed trains on the same data
on any device; the actors build their replicas on cpu.
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
from components.training.mecefo.approx import (Approx, Bases, ffn_linears, flat_grad, grad_of, microbatch_loss,
                                               skipped_mask)
from components.training.mecefo.schedule import takeover
from components.training.on_device import InputsTo

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


def build(setup: TrainSetup, vocab: int, seed: int, device: str = "cpu"):
    """The model (initialised from ``seed`` on cpu, then moved to ``device``: the same initial weights
    on any device) and its AdamW (decay on matrices only)."""
    torch.manual_seed(seed)
    model = GPT(setup.gpt(vocab)).to(device)
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


def is_approximated(recovery: str, own: int, load: list[int], j: int, approx_own: bool) -> bool:
    """Whether replica ``own`` computes micro-batch ``j`` of its ``load`` under MeCeFO's rules: a taken-over
    one always, its own only with ``approx_own`` while it is overloaded."""
    return recovery == "mecefo" and (j != own or (approx_own and len(load) > 1))


def finish_grad(g: torch.Tensor, mask: torch.Tensor, loads: dict, recovery: str, approx: Approx,
                approx_own: bool, n: int) -> torch.Tensor:
    """The all-reduced step gradient (sum over micro-batches / n) with the skipped attention's part
    (``mask``: :func:`~components.training.mecefo.approx.skipped_mask`) made the mean over the micro-batches
    that computed it (``approx.attn_mean``); ``g`` itself when no micro-batch skipped it. A masked select
    rather than boolean indexing, which would wait for the device to count the mask."""
    if recovery != "mecefo" or not (approx.skip_attn and approx.attn_mean):
        return g
    carried = sum(len(ld) for ld in loads.values())
    skipped = sum(is_approximated(recovery, i, ld, j, approx_own) for i, ld in loads.items() for j in ld)
    if skipped and carried > skipped:
        return torch.where(mask, g * (n / (carried - skipped)), g)
    return g


def replica_grad(model, train, setup: TrainSetup, seed: int, step: int, own: int, load: list[int],
                 recovery: str, approx: Approx, approx_own: bool, bases: Bases | None = None) -> torch.Tensor:
    """Flat gradient replica ``own`` contributes at ``step``: the sum over the micro-batches it
    carries (``load``, own first) of their gradients / n (the all-reduce then sums replicas).
    ``bases``: the replica's svd projections for this step (refreshed by the caller)."""
    model.zero_grad(set_to_none=True)
    scale = 1.0 / (1 if recovery == "drop" else setup.replicas)
    for j in load:
        a = approx if is_approximated(recovery, own, load, j, approx_own) else None
        x, y = microbatch(train, setup, seed, step, j)
        (microbatch_loss(model, x, y, a, projection_gen(seed, step, j), bases) * scale).backward()
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


def grouped_grad(model, train, setup, seed, step, loads, recovery, approx, approx_own, bases=None) -> torch.Tensor:
    """The same step gradient with every exact micro-batch in one batched pass (faster on CPU; equal to
    :func:`step_grad` up to float summation order): exact ones batched, MeCeFO ones one by one."""
    exact, approx_mbs = [], []
    for i, load in loads.items():
        for j in load:
            (approx_mbs if is_approximated(recovery, i, load, j, approx_own) else exact).append(j)
    n = len(loads) if recovery == "drop" else setup.replicas
    model.zero_grad(set_to_none=True)
    if exact:
        xs, ys = zip(*(microbatch(train, setup, seed, step, j) for j in sorted(exact)))
        (microbatch_loss(model, torch.cat(xs), torch.cat(ys), None) * (len(exact) / n)).backward()
    for j in approx_mbs:
        x, y = microbatch(train, setup, seed, step, j)
        (microbatch_loss(model, x, y, approx, projection_gen(seed, step, j), bases) / n).backward()
    g = flat_grad(model)
    model.zero_grad(set_to_none=True)
    return finish_grad(g, skipped_mask(model), loads, recovery, approx, approx_own, n)


def step_grad(model, train, setup, seed, step, loads, recovery, approx, approx_own, bases=None) -> torch.Tensor:
    """The all-reduced gradient of one step: replicas' contributions summed in replica order (the
    actors' arithmetic exactly)."""
    total = None
    for i in sorted(loads):
        g = replica_grad(model, train, setup, seed, step, i, loads[i], recovery, approx, approx_own, bases)
        total = g if total is None else total + g
    if recovery == "drop":
        total = total / len(loads)
    return finish_grad(total, skipped_mask(model), loads, recovery, approx, approx_own, setup.replicas)


def grad_cosines(model, train, setup: TrainSetup, seed: int, approx: Approx, n_batches: int = 2,
                 bases: Bases | None = None) -> dict:
    """Cosines of MeCeFO vs exact gradients on fixed micro-batches, and per approximation:

    - ``grad_cosine``: one micro-batch under all of ``approx`` vs exact;
    - ``grad_cosine_step``: the step gradient with one of n micro-batches taken over (n-1 exact + 1
      approximate, skipped attention averaged as in training) vs n exact;
    - ``grad_cosine_skip_rest``: the attention skip alone, on the parameters it still differentiates (the
      skipped ones get no gradient by design; their share of the exact gradient's squared norm is
      ``attn_grad_share``);
    - ``grad_cosine_lowrank_ffn``: the low-rank sketch alone, on the FFN weights it approximates."""
    from dataclasses import replace

    mask = skipped_mask(model)
    ffn_ids = {id(lin.weight) for lin in ffn_linears(model)}
    ffn = torch.cat([torch.full((p.numel(),), id(p) in ffn_ids, device=p.device) for p in model.parameters()])
    cos = lambda a, b: float(torch.nn.functional.cosine_similarity(a, b, dim=0))  # noqa: E731
    out = {k: [] for k in ("grad_cosine", "grad_cosine_step", "grad_cosine_skip_rest", "grad_cosine_lowrank_ffn",
                           "attn_grad_share")}
    for b in range(n_batches):
        gs = [grad_of(model, *microbatch(train, setup, seed + 99_991, b, j), None) for j in range(setup.replicas)]
        x, y = microbatch(train, setup, seed + 99_991, b, 0)
        gen = lambda: projection_gen(seed, -1 - b, 0)  # noqa: E731
        ga = grad_of(model, x, y, approx, gen(), bases=bases)
        exact = sum(gs)
        # replica 0 down, replica 1 carries its micro-batch: the step's reduction as in training
        loads = {1: [1, 0], **{i: [i] for i in range(2, setup.replicas)}}
        step = finish_grad((exact - gs[0] + ga) / setup.replicas, mask, loads, "mecefo", approx, False, setup.replicas)
        out["grad_cosine"].append(cos(ga, gs[0]))
        out["grad_cosine_step"].append(cos(step, exact))
        out["attn_grad_share"].append(float(gs[0][mask].pow(2).sum() / gs[0].pow(2).sum()))
        if approx.skip_attn:
            g_skip = grad_of(model, x, y, replace(approx, lowrank=False), gen(), bases=bases)
            out["grad_cosine_skip_rest"].append(cos(g_skip[~mask], gs[0][~mask]))
        if approx.lowrank:
            g_low = grad_of(model, x, y, replace(approx, skip_attn=False), gen(), bases=bases)
            out["grad_cosine_lowrank_ffn"].append(cos(g_low[ffn], gs[0][ffn]))
    return {k: float(np.mean(v)) if v else float("nan") for k, v in out.items()}


def train(setup: TrainSetup, corpus, seed: int, sets, recovery: str, approx: Approx, approx_own: bool = False,
          steps: int | None = None, evaluate: bool = True, progress=None, grouped: bool = True,
          device: str = "cpu") -> dict:
    """Train ``steps`` (default ``setup.steps``) through schedule ``sets`` on ``device``; curves, the model
    and the svd bases' refresh count. ``grouped``: exact micro-batches in one pass (:func:`grouped_grad`);
    False: the actors' arithmetic."""
    torch.set_num_threads(setup.threads)
    steps = setup.steps if steps is None else steps
    model, opt = build(setup, corpus.vocab_size, seed, device)
    n = setup.replicas
    val_steps, val_loss, cos_steps, cos = [], [], [], []
    bases = Bases(approx) if recovery == "mecefo" else None

    def ev(nb):
        return evaluate_loss(InputsTo(model), corpus.val, setup.context, setup.eval_batch, nb, seed=EVAL_SEED)

    for step in range(steps):
        if bases is not None:
            bases.at(model, step)
        if evaluate and step % setup.eval_every == 0:
            val_steps.append(step)
            val_loss.append(ev(setup.eval_batches))
            if recovery == "mecefo":
                cos_steps.append(step)
                cos.append(grad_cosines(model, corpus.train, setup, seed, approx, 1, bases))
        loads = loads_at(sets, step, n, recovery)
        g = (grouped_grad if grouped else step_grad)(model, corpus.train, setup, seed, step, loads, recovery, approx,
                                                     approx_own, bases)
        apply_grad(model, opt, g, lr_at(step, setup.steps, setup.lr, setup.warmup, setup.final_lr_frac))
        if progress and step % 10 == 0:
            progress(step + 1, steps)
    out = {"model": model, "opt": opt, "n_params": sum(p.numel() for p in model.parameters()),
           "basis_refreshes": bases.refreshes if bases is not None else 0}
    if evaluate:
        val_steps.append(steps)
        val_loss.append(ev(setup.eval_batches))
        out.update(val_steps=val_steps, val_loss=val_loss, final_val_loss=ev(setup.final_eval_batches),
                   cos_steps=cos_steps, cos=cos)
    return out


def params_vector(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
