"""One single-process training run of the shared GPT with ``GPTConfig.block`` set, one seed.

Single process is the same math as TP-``tp`` (the technique checks it on rank actors after
training); the same init, batches and validation windows for every block at a given seed. It runs
on ``device``: the init (cpu seed) and the batches (cpu generator) are drawn on cpu and moved, so a seed
trains from the same start on any device.
"""
from __future__ import annotations

import numpy as np
import torch

from components.core import devices
from components.core.timing import timed
from components.data.char_corpus import sample_batch
from components.models.gpt import GPT, GPTConfig, evaluate_loss
from components.training.ddp.optim import lr_at
from components.training.on_device import InputsTo

EVAL_SEED = 54321   # the same validation windows for every variant and seed


def train(cfg: GPTConfig, corpus, seed: int, steps: int, batch: int, lr: float, warmup: int,
          final_lr_frac: float, weight_decay: float, eval_every: int, eval_batches: int,
          final_eval_batches: int, threads: int = 1, progress=None, on_eval=None, device: str = "cpu") -> dict:
    """AdamW (decay on matrices), warmup + cosine; validation curve and the trained model (on ``device``).
    ``on_eval(model)`` runs at every evaluation (the technique samples a TP rank's compute there)."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    model = GPT(cfg).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95))
    rng = np.random.default_rng(seed)
    steps_at, vals, train_losses = [], [], []
    with timed(devices.clock(device, "wall")) as trained:     # train_s_per_step: the whole loop's wall clock
        for step in range(steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, steps, lr, warmup, final_lr_frac)
            x, y = sample_batch(corpus.train, batch, cfg.context, rng)
            _, loss = model(x.to(device), y.to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            train_losses.append(loss.item())
            if eval_every and (step + 1) % eval_every == 0 and step + 1 < steps:
                vals.append(evaluate_loss(InputsTo(model), corpus.val, cfg.context, batch, eval_batches,
                                          seed=EVAL_SEED))
                steps_at.append(step + 1)
                if on_eval:
                    on_eval(model)
            if progress:
                progress(step + 1, steps, loss=train_losses[-1])
        devices.synchronize(device)
    if on_eval:
        on_eval(model)
    final = evaluate_loss(InputsTo(model), corpus.val, cfg.context, batch, final_eval_batches, seed=EVAL_SEED)
    steps_at.append(steps)
    vals.append(final)
    return {"model": model, "steps": steps_at, "val_loss": vals, "train_loss": train_losses,
            "final_val_loss": final, "train_s_per_step": trained.s / steps}
