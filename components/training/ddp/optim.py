"""Functional SGD / AdamW whose step can be *committed* (state advances) or only *previewed*.

DUO needs both on the same optimizer state: the committed weights take a real step with the exact
(full-precision, one step late) gradient, while the working weights are a preview from the committed
ones with the low-bit gradient, which must not advance Adam's moments or step counter. Plain data
parallel training uses ``update(..., write=True)`` in place, which equals ``torch.optim.AdamW``
(decoupled weight decay, bias-corrected moments).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from components.core.errors import require


class FunctionalOptimizer:
    """``update(base, grads, lr, out, write)``: out <- one step from ``base``; ``write`` keeps the state."""

    def update(self, base: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], lr: float,
               out: Sequence[torch.Tensor], write: bool = True) -> None:
        raise NotImplementedError


class SGD(FunctionalOptimizer):
    """Plain SGD (no state): out = base - lr * g."""

    @torch.no_grad()
    def update(self, base, grads, lr, out, write=True):
        for b, g, o in zip(base, grads, out):
            o.copy_(b - lr * g)


class AdamW(FunctionalOptimizer):
    """AdamW as in torch.optim.AdamW. ``weight_decay``: a number (applied to tensors with ``ndim >= 2``
    only) or one per-element tensor per parameter (a flat parameter vector carries its own mask)."""

    def __init__(self, params: Sequence[torch.Tensor], betas=(0.9, 0.95), eps: float = 1e-8,
                 weight_decay: float | Sequence[torch.Tensor] = 0.1):
        require(0 <= betas[0] < 1 and 0 <= betas[1] < 1, "betas", list(betas), "two numbers in [0, 1)")
        self.b1, self.b2 = betas
        self.eps = eps
        if isinstance(weight_decay, (int, float)):
            require(weight_decay >= 0, "weight_decay", weight_decay, "a non-negative number")
            self.wd = [weight_decay if p.dim() >= 2 else 0.0 for p in params]
        else:
            self.wd = list(weight_decay)
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.k = 0

    @torch.no_grad()
    def update(self, base, grads, lr, out, write=True):
        k = self.k + 1
        c1, c2 = 1 - self.b1 ** k, 1 - self.b2 ** k
        for i, (b, g, o) in enumerate(zip(base, grads, out)):
            m = self.m[i] * self.b1 + (1 - self.b1) * g
            v = self.v[i] * self.b2 + (1 - self.b2) * g * g
            if write:
                self.m[i].copy_(m)
                self.v[i].copy_(v)
            step = (m / c1) / ((v / c2).sqrt() + self.eps)
            o.copy_(b * (1 - lr * self.wd[i]) - lr * step)
        if write:
            self.k = k


def make_optimizer(name: str, params, weight_decay=0.1, betas=(0.9, 0.95)) -> FunctionalOptimizer:
    require(name in ("adamw", "sgd"), "optimizer", name, "adamw or sgd")
    return AdamW(params, betas=betas, weight_decay=weight_decay) if name == "adamw" else SGD()


def lr_at(step: int, total: int, lr: float, warmup: int, final_frac: float) -> float:
    """Linear warmup for ``warmup`` steps, then cosine decay to ``final_frac * lr`` at ``total``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return lr * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))
