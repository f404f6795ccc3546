"""A reuse policy (Foresight, Static-N) on top of the patch-parallel runner, in one sampler.

The policy decides per step which blocks run (and reuses cached block outputs for the rest), as
it does on one device; every block it runs goes through the shards' K/V exchange, so a skipped
block computes nothing and sends nothing (its streams' bases wait for the next step it runs).
The policy sees a view of the model whose blocks are the sharded ones.
"""
from __future__ import annotations

import torch

from components.diffusion.compactfusion.exchange import ExchangeSpec, InProcessRunner
from components.diffusion.sampling import BlockRunner
from components.models.dit import DiT


class _ShardedBlock:
    def __init__(self, runner: InProcessRunner, layer: int):
        self.runner, self.layer = runner, layer

    def __call__(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return self.runner.layer(self.layer, h)


class _ShardedView:
    """What a policy calls ``model``: the same config, blocks that run sharded."""

    def __init__(self, model: DiT, runner: InProcessRunner):
        self.cfg = model.cfg
        self.blocks = [_ShardedBlock(runner, layer) for layer in range(len(model.blocks))]

    def run_blocks(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            h = blk(h, c)
        return h


class ComposedRunner(InProcessRunner):
    """``policy`` deciding, the shards computing and exchanging (in-process, same worker code)."""

    name = "composed"

    def __init__(self, P: int, spec: ExchangeSpec, model: DiT, policy: BlockRunner, branches: int = 2,
                 diagnose: bool = False):
        super().__init__(P, spec, model, branches, diagnose)
        self.policy = policy
        self.view = _ShardedView(model, self)

    def start(self, steps: int, model: DiT) -> None:
        super().start(steps, model)
        self.policy.start(steps, model)

    def __call__(self, i, h, c, model):
        self.begin_step(i, h, c)
        out = self.policy(i, h, c, self.view)
        self.end_step(i)
        pol = self.policy                   # what ran is the policy's count
        self.units_total, self.units_run, self.per_step = pol.units_total, pol.units_run, pol.per_step
        return out
