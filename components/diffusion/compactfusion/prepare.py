"""CompactFusion's prepare step ``compactfusion_calibration`` (in its own module, so editing the
runner leaves it cached): measured seconds of one DiT block on one token shard (and on all
tokens) at the sampling batch, 1 thread, on the device the experiment's tasks run on (a measured
time: the device is in its cache key): the compute the link presets are calibrated against.
The single-device samples every system is scored against are Foresight's seeded
``diffusion_reference`` step (the same noise, labels and full-compute trajectory).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from components.core import devices
from components.core.errors import require
from components.core.registry import prepare_step
from components.diffusion.prepare import load_dit
from components.models.dit import attend


@dataclass
class CalibrationParams:
    batch: int = 64           # samples (x2 CFG rows) per block call, as sampled
    shards: int = 4
    reps: int = 15

    def check(self):
        require(self.batch >= 1, "batch", self.batch, "a positive batch size")
        require(self.shards >= 1, "shards", self.shards, "a positive number of shards")
        require(self.reps >= 3, "reps", self.reps, "at least 3 timed repetitions")


def time_blocks(model, h: torch.Tensor, c: torch.Tensor, sizes: list[int], reps: int) -> list[float]:
    """Seconds of one block (qkv of the first n tokens, attention over all, finish) for each n in
    ``sizes``, timed interleaved and taking the fastest repetition: another process on the core
    only ever adds time, so the minimum is the least disturbed measure. On a GPU each block ends with
    the device synchronized, so its kernels are inside the measured span."""
    dev = str(h.device)
    blk = model.blocks[0]
    best = [float("inf")] * len(sizes)
    with torch.no_grad():
        _, k, v, _ = blk.qkv(h, c)
        owns = [h[:, :n].contiguous() for n in sizes]
        for rep in range(reps + 2):
            for i, own in enumerate(owns):
                t0 = time.perf_counter()
                q, _, _, st = blk.qkv(own, c)
                blk.finish(own, c, attend(q, k, v), st)
                devices.synchronize(dev)
                if rep >= 2:
                    best[i] = min(best[i], time.perf_counter() - t0)
    return best


@prepare_step("compactfusion_calibration", params=CalibrationParams, inputs=("model",), seeded=False,
              devices=("cpu", "cuda"), per_device=True, summary="Measured compute of one DiT block on one token shard and on all tokens (1 thread): "
                      "what CompactFusion's link presets are calibrated against.")
def prepare_calibration(p: CalibrationParams, ctx) -> dict:
    torch.set_num_threads(1)
    model = load_dit(ctx.input("model"), ctx.device)
    cfg = model.cfg
    n = (cfg.img_size // cfg.patch) ** 2 * cfg.frames
    require(n % p.shards == 0, "shards", p.shards, f"a divisor of the {n} tokens")
    g = torch.Generator().manual_seed(0)
    h = torch.randn(2 * p.batch, n, cfg.d, generator=g).to(ctx.device)
    c = torch.randn(2 * p.batch, cfg.d, generator=g).to(ctx.device)
    shard, full = time_blocks(model, h, c, [n // p.shards, n], p.reps)
    return {"block_s_shard": shard, "block_s_full": full, "tokens": n, "shards": p.shards,
            "batch": p.batch, "threads": 1, "device": ctx.device}
