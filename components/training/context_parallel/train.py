"""One training run of the char GPT with ``cp_ring`` blocks (the vectorised ring), one seed.

The technique's training loop; the curves it returns are what the experiment's ``reach:``
metrics (time to the uncompressed run's final loss) are read on. It runs on ``device``: the init
(cpu seed, the fixed projections' cpu generators) and the batches are drawn on cpu and moved, so a
seed trains from the same start on any device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch

from components.data.char_corpus import sample_batch
from components.models.gpt import evaluate_loss
from components.models.knobs import GPTTrainKnobs
from components.core.errors import require
from components.training.context_parallel.ring import RingSpec, build_model, layer_stats
from components.training.ddp.optim import lr_at
from components.training.on_device import InputsTo

EVAL_SEED = 54321  # the same validation windows for every variant and seed


@dataclass
class TrainSetup(GPTTrainKnobs):
    """The model, data and schedule of one run (the same for every variant of an experiment): the
    shared knobs with this technique's defaults, the router temperature and the torch threads."""

    n_layer: int = 3
    context: int = 256
    batch: int = 8
    steps: int = 250
    warmup: int = 30
    tau_start: float = 1.0        # router temperature, linear to tau_end
    tau_end: float = 0.3
    eval_every: int = 25
    eval_batches: int = 8         # every evaluation on the same windows: curves comparable to the target
    threads: int = 1


@dataclass
class CPSetup(TrainSetup):
    """A run's setup plus the ring it trains with: ``chunks`` ranks, one context chunk each."""

    chunks: int = 4

    def check(self):
        require(self.chunks >= 2, "chunks", self.chunks, "at least 2 ring ranks")
        require(self.context >= 2 * self.chunks and self.context % self.chunks == 0, "context", self.context,
                f"a multiple of chunks={self.chunks} (each rank holds context/chunks tokens)")
        self.check_knobs("threads")

    def train_setup(self) -> TrainSetup:
        return TrainSetup(**{f.name: getattr(self, f.name) for f in fields(TrainSetup)})


def train(setup: TrainSetup, spec: RingSpec, corpus, seed: int, progress=None, device: str = "cpu") -> dict:
    """Train on ``device``; returns the validation curve, per-layer payloads of a step, usage and the model."""
    torch.set_num_threads(setup.threads)
    torch.manual_seed(seed)
    model = build_model(corpus.vocab_size, setup.n_layer, setup.n_head, setup.d_model, setup.context, spec).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.endswith(("U_k", "U_v"))]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.endswith(("U_k", "U_v")))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": setup.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=setup.lr, betas=(0.9, 0.95))
    rng = np.random.default_rng(seed)
    steps, vals, train_losses, stats = [], [], [], None
    for step in range(setup.steps):
        tau = setup.tau_start + (setup.tau_end - setup.tau_start) * step / max(1, setup.steps - 1)
        for blk in model.blocks:
            blk.attn.tau = tau
        for g in opt.param_groups:
            g["lr"] = lr_at(step, setup.steps, setup.lr, setup.warmup, setup.final_lr_frac)
        x, y = sample_batch(corpus.train, setup.batch, setup.context, rng)
        _, ce = model(x.to(device), y.to(device))
        loss = ce + spec.balance * sum(blk.attn.aux for blk in model.blocks) if spec.M > 1 else ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        st = layer_stats(model)
        stats = st if stats is None else [{k: a[k] + b[k] for k in a} for a, b in zip(stats, st)]
        train_losses.append(ce.item())
        if (step + 1) % setup.eval_every == 0 or step + 1 == setup.steps:
            vals.append(evaluate_loss(InputsTo(model), corpus.val, setup.context, setup.batch, setup.eval_batches,
                                      seed=EVAL_SEED))
            steps.append(step + 1)
        if progress:
            progress(step + 1, setup.steps, loss=train_losses[-1])
    mean = [{k: v / setup.steps for k, v in s.items()} for s in stats]
    usage = [blk.attn.usage for blk in model.blocks if blk.attn.usage is not None]
    entropy = float(np.mean([-(u.clamp_min(1e-12) * u.clamp_min(1e-12).log()).sum(-1).mean().cpu() for u in usage])) \
        if usage else math.nan
    return {"steps": steps, "val_loss": vals, "train_loss": train_losses, "layers": mean,
            "final_val_loss": vals[-1], "usage_entropy": entropy, "model": model,
            "n_params": sum(p.numel() for p in model.parameters())}

