"""Prepare step ``mecefo_timing``: per-micro-batch fwd+bwd time and saved-activation bytes of the
exact pass and of every combination of MeCeFO's three approximations, on the timing model (the
sheet's planned 4L/d128/ctx128 GPT, batch 16), measured once and cached. The low-rank modes use svd
bases held across micro-batches, as training does; one refresh of the bases (every FFN linear's SVD,
paid once per ``refresh`` steps) is timed on its own (``svd_refresh_s``).

CPU timing on a shared machine is noisy: the modes are timed round-robin (each repetition runs
every mode once, so load drifts hit them alike) and the virtual clock uses medians.

It runs on ``ctx.device`` (wall time, each timed span ending with the device synchronized, so a GPU's
kernels are inside it): a measured time, so the device is in its cache key (``per_device``) and in its
output, and the technique refuses a timing from another device than its own.
"""
from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

import torch

from components.core import devices
from components.core.registry import prepare_step
from components.core.timing import timed
from components.models.gpt import GPT
from components.models.knobs import GPTShape, require_positive_ints
from components.training.mecefo.approx import Approx, Bases, SavedBytes, check_rank, microbatch_loss


def mode_key(a: Approx | None) -> str:
    """'exact', or e.g. 'skip+recompute+lowrank' (rank 0: in/8) for a MeCeFO micro-batch."""
    if a is None:
        return "exact"
    on = [n for n, f in (("skip", a.skip_attn), ("recompute", a.recompute_ffn), ("lowrank", a.lowrank)) if f]
    return "+".join(on) or "none"


def all_modes(rank: int) -> dict[str, Approx | None]:
    modes: dict[str, Approx | None] = {"exact": None}
    for s, r, lr in itertools.product((True, False), repeat=3):
        a = Approx(skip_attn=s, recompute_ffn=r, lowrank=lr, rank=rank)
        modes[mode_key(a)] = a
    return modes


@dataclass
class TimingParams(GPTShape):
    """The GPT's size (the shared :class:`GPTShape`, this step's defaults below) and the repetitions."""

    n_layer: int = 4
    d_model: int = 128
    context: int = 128
    batch: int = 16
    rank: int = 0            # the FFN sketch rank (0: in/8); variants must use the same
    reps: int = 25
    warmup: int = 2          # untimed repetitions first
    threads: int = 1

    def check(self):
        self.check_shape()
        require_positive_ints(self, "batch", "reps", "threads")
        check_rank(self.rank, self.d_model)


def measure(p: TimingParams, vocab: int, seed: int = 0, device: str = "cpu") -> dict:
    """{mode: {"s": median seconds fwd+bwd, "saved_bytes": ...}}, the median seconds of one refresh of the
    svd bases, the model's size and the ``device`` it was measured on (model and batch initialised on cpu
    from ``seed``, then moved)."""
    torch.set_num_threads(p.threads)
    torch.manual_seed(seed)
    model = GPT(p.gpt(vocab)).to(device)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (p.batch, p.context), generator=g).to(device)
    y = torch.randint(0, vocab, (p.batch, p.context), generator=g).to(device)
    clock = devices.clock(device, cpu_clock="wall")
    modes = all_modes(p.rank)
    bases = Bases(Approx(rank=p.rank)).at(model, 0)     # held, as in training (the weights do not move here)
    times: dict[str, list[float]] = {k: [] for k in modes}
    refresh_s: list[float] = []
    out: dict[str, dict] = {}
    for k, a in modes.items():
        with SavedBytes(model) as sb:
            microbatch_loss(model, x, y, a, torch.Generator().manual_seed(1), bases)
        out[k] = {"saved_bytes": sb.nbytes}
    for rep in range(p.warmup + p.reps):
        for k, a in modes.items():
            model.zero_grad(set_to_none=True)
            with timed(clock) as t:
                microbatch_loss(model, x, y, a, torch.Generator().manual_seed(rep), bases).backward()
                devices.synchronize(device)
            if rep >= p.warmup:
                times[k].append(t.s)
        with timed(clock) as t:
            bases.refresh(model)
        if rep >= p.warmup:
            refresh_s.append(t.s)
    for k in modes:
        out[k]["s"] = statistics.median(times[k])
    return {"modes": out, "svd_refresh_s": statistics.median(refresh_s),
            "n_params": sum(q.numel() for q in model.parameters()), "params": vars(p).copy(), "device": device}


@prepare_step("mecefo_timing", params=TimingParams, inputs=("corpus",), devices=("cpu", "cuda"), per_device=True,
              summary="MeCeFO step-time microbenchmark: median fwd+bwd per micro-batch and saved-activation bytes, "
                      "exact and under every combination of the three approximations (4L/d128 GPT, batch 16).")
def prepare_mecefo_timing(p: TimingParams, ctx) -> dict:
    return measure(p, ctx.input("corpus").vocab_size, device=ctx.device)
