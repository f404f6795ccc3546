"""Rectified-flow Euler sampling with classifier-free guidance over the shared DiT, with a
pluggable ``block_runner`` so a policy (Foresight, Static-N, ...) or a parallel runner
(CompactFusion) replaces how the blocks run at each step.

``block_runner(step_index, h, c, model) -> h_out`` sees the CFG branches batched together
([cond; uncond], 2B rows), as the reference implementations do. A runner with a
``start(steps, model)`` method is told the step count before the first step.

Compute is counted in *units*: a block's attention and MLP sub-layers (plus temporal attention
for clips) are one unit each, so a skipped block skips all its units and a PAB-like attention
reuse skips one. ``skip_fraction = 1 - units_run / units_total`` is platform-independent.
"""
from __future__ import annotations

import time

import torch

from components.models.dit import DiT


def units_per_block(model: DiT) -> int:
    return 3 if model.cfg.frames > 1 else 2


class BlockRunner:
    """Full compute: every block at every step. Policies subclass it and count what they run."""

    name = "full"

    def start(self, steps: int, model: DiT) -> None:
        self.steps, self.depth, self.upb = steps, len(model.blocks), units_per_block(model)
        self.units_total = self.units_run = 0
        self.per_step: list[float] = []      # fraction of units run at each step

    def count(self, units: int) -> None:
        """Record the units run at the current step (``units_total`` grows by a full step)."""
        full = self.depth * self.upb
        self.units_total += full
        self.units_run += units
        self.per_step.append(units / full)

    @property
    def skip_fraction(self) -> float:
        return 1.0 - self.units_run / max(self.units_total, 1)

    def __call__(self, i: int, h: torch.Tensor, c: torch.Tensor, model: DiT) -> torch.Tensor:
        self.count(self.depth * self.upb)
        return model.run_blocks(h, c)


def timesteps(steps: int) -> torch.Tensor:
    """t from 1 (noise) to 0 (data), steps + 1 points."""
    return torch.linspace(1.0, 0.0, steps + 1)


@torch.no_grad()
def sample(model: DiT, noise: torch.Tensor, y: torch.Tensor, steps: int, cfg_scale: float = 2.0,
           runner: BlockRunner | None = None) -> torch.Tensor:
    """Euler steps of dx/dt = v from t=1 to 0 with CFG ``v_u + s (v_c - v_u)``."""
    runner = runner if runner is not None else BlockRunner()
    if hasattr(runner, "start"):
        runner.start(steps, model)
    b = noise.shape[0]
    x = noise
    y2 = torch.cat([y, torch.full_like(y, model.null_class)])
    ts = timesteps(steps).to(noise.device)
    for i in range(steps):
        t = ts[i].expand(2 * b)
        h, c = model.embed(torch.cat([x, x]), t, y2)
        v2 = model.final(runner(i, h, c, model), c)
        v_c, v_u = v2[:b], v2[b:]
        x = x + (ts[i + 1] - ts[i]) * (v_u + cfg_scale * (v_c - v_u))
    return x


def sample_batches(model: DiT, noise: torch.Tensor, y: torch.Tensor, steps: int, cfg_scale: float,
                   make_runner, batch: int = 16) -> tuple[torch.Tensor, dict]:
    """Sample in batches of ``batch`` with a fresh runner each; outputs, skip fraction, times, per-step curve."""
    outs, run_units, tot_units, wall, cpu, per_step = [], 0, 0, 0.0, 0.0, None
    for s in range(0, len(noise), batch):
        runner = make_runner()
        w0, c0 = time.perf_counter(), time.process_time()
        outs.append(sample(model, noise[s:s + batch], y[s:s + batch], steps, cfg_scale, runner))
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
        run_units += runner.units_run
        tot_units += runner.units_total
        ps = torch.tensor(runner.per_step)
        per_step = ps if per_step is None else per_step + ps
    n_batches = -(-len(noise) // batch)
    return torch.cat(outs), {"skip_fraction": 1.0 - run_units / max(tot_units, 1), "wall_s": wall, "cpu_s": cpu,
                             "run_per_step": (per_step / n_batches).tolist()}


def draw(seed: int, n: int, model: DiT, size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed's initial noise and class labels (balanced over classes), on the model's device: drawn
    on cpu, so a seed gives the same noise on any device."""
    cfg = model.cfg
    size = size or cfg.img_size
    g = torch.Generator().manual_seed(10_000 + seed)
    shape = (n, cfg.channels, size, size) if cfg.frames == 1 else (n, cfg.frames, cfg.channels, size, size)
    y = torch.arange(n) % cfg.num_classes
    device = next(model.parameters()).device
    return torch.randn(shape, generator=g).to(device), y[torch.randperm(n, generator=g)].to(device)
