"""Prepare step ``diffusion_reference``, built per seed: the seed's initial noise and labels and
the full-compute samples from them (every policy is scored against these, from the same noise),
at one step count and resolution. Cached, so the full-compute trajectory runs once per seed and
setting instead of once per variant. Sampled on ``ctx.device``; the noise and labels are drawn on
cpu (the same on any device) and the samples handed to the cache on cpu.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from components.core.errors import require
from components.core.registry import prepare_step
from components.diffusion.prepare import load_dit
from components.diffusion.sampling import BlockRunner, draw, sample_batches


@dataclass
class ReferenceParams:
    steps: int = 50
    n_samples: int = 128
    size: int = 0             # 0: the model's training resolution
    cfg_scale: float = 2.0
    batch: int = 16

    def check(self):
        require(self.steps >= 2, "steps", self.steps, "at least 2 denoising steps")
        require(self.n_samples >= 1, "n_samples", self.n_samples, "a positive number of samples")
        require(self.size == 0 or (self.size >= 8 and self.size % 2 == 0), "size", self.size, "0 or an even size >= 8")
        require(self.cfg_scale >= 0, "cfg_scale", self.cfg_scale, "a non-negative guidance scale")
        require(self.batch >= 1, "batch", self.batch, "a positive batch size")


@prepare_step("diffusion_reference", params=ReferenceParams, inputs=("model",), seeded=True, devices=("cpu", "cuda"),
              summary="The seed's noise and labels and the full-compute DiT samples from them (steps, size, CFG).")
def prepare_reference(p: ReferenceParams, ctx) -> dict:
    torch.set_num_threads(1)
    model = load_dit(ctx.input("model"), ctx.device)
    size = p.size or model.cfg.img_size
    noise, y = draw(ctx.seed, p.n_samples, model, size)
    x, st = sample_batches(model, noise, y, p.steps, p.cfg_scale, BlockRunner, p.batch)
    return {"noise": noise, "y": y, "x": x, "steps": p.steps, "size": size, "cfg_scale": p.cfg_scale,
            "wall_s": st["wall_s"], "cpu_s": st["cpu_s"], "seed": ctx.seed}
