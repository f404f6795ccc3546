"""How one data-parallel step turns local gradients into a weight update (the part methods differ in).

A strategy registers its DDP comm hook (``attach``), may launch communication before the forward
(``before_forward``), applies the update after the backward (``after_backward``) and settles any
pending state at the end (``finish``). Its ``paths`` map a path name ("fast", "slow") to CommStats.
Strategies register as kind ``ddp_strategy``: ``sync`` (:class:`SyncStrategy`) covers fp32, plain
low-bit, error-feedback low-bit and PowerSGD; ``duo`` lives in :mod:`components.training.duo.fast_slow`.
"""
from __future__ import annotations

import torch

from components.compression.torch_codecs import make_torch_codec
from components.core.registry import register
from components.training.ddp import hooks
from components.training.ddp.optim import make_optimizer


def flatten_params(module: torch.nn.Module) -> torch.Tensor:
    """Make every parameter a view into one flat fp32 vector (one fused optimizer update per step)."""
    params = list(module.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    off = 0
    for p in params:
        p.data = flat[off:off + p.numel()].view_as(p)
        off += p.numel()
    return flat


class Strategy:
    """Holds the model's parameters as one flat vector; the optimizer steps that vector."""

    def __init__(self, ddp, cfg: dict, flat: torch.Tensor, group=None):
        self.ddp = ddp
        self.cfg = cfg
        self.group = group  # the collectives' group: None (the default gloo group) or an in-process rank's
        self.module_params = list(ddp.module.parameters())
        self.flat = flat  # from flatten_params(module), called before wrapping the module in DDP
        # the optimizer steps the parameters themselves (views into ``flat``), decay on tensors with ndim >= 2
        self.params = self.module_params
        self.opt = make_optimizer(cfg["optimizer"], self.params, cfg["weight_decay"])
        self.paths: dict[str, hooks.CommStats] = {}
        self.exposed_s = 0.0  # communication waited for outside the hook (slow path)

    def attach(self) -> None:
        raise NotImplementedError

    def before_forward(self, step: int) -> None:
        pass

    def after_backward(self, step: int, lr: float) -> None:
        raise NotImplementedError

    def finish(self, lr: float) -> None:
        pass

    def grads(self) -> list[torch.Tensor]:
        """The reduced gradient DDP wrote to ``.grad``, as one flat vector (in a one-element list)."""
        return [torch.cat([g.reshape(-1) for g in self.grad_list()])]

    def grad_list(self) -> list[torch.Tensor]:
        """The reduced gradient DDP wrote to ``.grad``, one tensor per parameter (no copy)."""
        return [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.module_params]


@register("ddp_strategy", "sync", summary="one synchronous gradient reduction per step through a DDP comm hook "
          "(fp32, torch PowerSGD, plain or error-feedback low-bit), then the optimizer step")
class SyncStrategy(Strategy):
    """One synchronous gradient reduction per step through a DDP hook, then an optimizer step."""

    def attach(self):
        method, cfg = self.cfg["method"], self.cfg
        if method == "fp32":
            state = hooks.AllreduceState(group=self.group)
            self.ddp.register_comm_hook(state, hooks.allreduce_hook)
        elif method == "powersgd":
            if self.group is not None:
                raise ValueError("powersgd runs on gloo processes only: torch's hook drives its own process group")
            from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

            inner = PowerSGDState(process_group=None, matrix_approximation_rank=cfg["powersgd_rank"],
                                  start_powerSGD_iter=cfg["powersgd_start"], use_error_feedback=True,
                                  warm_start=True, random_seed=cfg["seed"])
            state = hooks.PowerSGDStats(inner)
            self.ddp.register_comm_hook(state, hooks.powersgd_hook)
        elif method in ("plain", "ef"):
            state = hooks.CodecState(make_torch_codec(cfg["bits"], cfg["bucket"]), error_feedback=method == "ef",
                                       group=self.group)
            self.ddp.register_comm_hook(state, hooks.codec_hook)
        else:
            raise ValueError(f"unknown data-parallel method {method!r}")
        self.paths["fast"] = state.stats

    def after_backward(self, step, lr):
        self.opt.update(self.params, self.grad_list(), lr, self.params, write=True)

