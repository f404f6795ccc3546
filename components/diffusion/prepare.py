"""Prepare steps shared by the diffusion techniques (corpus -> model, cached by the prepare graph):

- ``diffusion_data``: digits upscaled to ``size`` (images) or moving-shapes clips;
- ``dit_model``: the tiny DiT trained with rectified flow (velocity target, 10% label dropout for
  CFG), AdamW, EMA weights returned;
- ``diffusion_classifier``: a tiny CNN on the same data, to score the class of generated samples.

Kept apart from sampling and the policies, so editing those leaves the trained models cached.
The two trainings run on ``ctx.device`` (a GPU where the experiment's tasks are given one); their
random draws come from a cpu generator and are moved, so a device changes the arithmetic only.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from components.core.errors import require
from components.core.registry import prepare_step
from components.data.diffusion_sets import digits_images, moving_shapes
from components.models.dit import DiT, DiTConfig
from components.models.knobs import Steps


@dataclass
class DataParams:
    kind: Literal["digits", "shapes"] = "digits"
    size: int = 16
    frames: int = 8          # shapes only
    n_clips: int = 2000      # shapes only

    def check(self):
        require(self.size >= 8 and self.size % 2 == 0, "size", self.size, "an even size >= 8")
        require(self.frames >= 2, "frames", self.frames, "at least 2 frames")
        require(self.n_clips >= 10, "n_clips", self.n_clips, "at least 10 clips")


@prepare_step("diffusion_data", params=DataParams, seeded=False,
              summary="Digits upscaled to size x size (1,797 images) or moving-shapes clips (frames x size x size), in [-1, 1].")
def prepare_data(p: DataParams, ctx) -> dict:
    if p.kind == "digits":
        x, y = digits_images(p.size)
        classes = 10
    else:
        x, y = moving_shapes(p.n_clips, p.frames, p.size, seed=0)
        classes = 3
    return {"x": x, "y": y, "kind": p.kind, "size": p.size, "num_classes": classes,
            "frames": 1 if p.kind == "digits" else p.frames}


@dataclass
class DiTTrainParams(Steps):
    """The DiT's size and its rectified-flow training: ``batch``, ``steps``, ``lr`` are the shared
    :class:`Steps` knobs (this step's defaults below)."""

    patch: int = 2
    d: int = 64
    heads: int = 4
    depth: int = 6
    steps: int = 1200
    batch: int = 64
    lr: float = 2e-3
    ema: float = 0.999
    label_dropout: float = 0.1
    seed: int = 0

    def check(self):
        require(self.patch >= 1, "patch", self.patch, "a positive patch size")
        require(self.d >= 1, "d", self.d, "a positive width")
        require(self.heads >= 1 and self.d % self.heads == 0, "heads", self.heads, f"a positive divisor of d={self.d}")
        require(self.depth >= 1, "depth", self.depth, "a positive number of blocks")
        self.check_steps()
        require(0 <= self.ema < 1, "ema", self.ema, "a decay in [0, 1)")
        require(0 <= self.label_dropout < 1, "label_dropout", self.label_dropout, "a probability in [0, 1)")


def rf_loss(model: DiT, x0: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Rectified flow: x_t = (1 - t) x0 + t eps, the model predicts v = eps - x0 (``g``: a cpu
    generator; the draws move to x0's device)."""
    t = torch.rand(x0.shape[0], generator=g).to(x0.device)
    eps = torch.randn(x0.shape, generator=g).to(x0.device)
    tt = t.view(-1, *([1] * (x0.dim() - 1)))
    return F.mse_loss(model((1 - tt) * x0 + tt * eps, t, y), eps - x0)


def _start(ctx, seed: int) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Generator]:
    """One thread, the data as tensors on ``ctx.device``, torch and a cpu generator seeded: the start
    of both trainings."""
    torch.set_num_threads(1)
    data = ctx.input("data")
    torch.manual_seed(seed)
    return (data, torch.tensor(data["x"]).to(ctx.device), torch.tensor(data["y"]).to(ctx.device),
            torch.Generator().manual_seed(seed))


@prepare_step("dit_model", params=DiTTrainParams, inputs=("data",), seeded=False, devices=("cpu", "cuda"),
              summary="Tiny class-conditional DiT (adaLN-zero) trained with rectified flow + EMA on the diffusion data.")
def prepare_dit(p: DiTTrainParams, ctx) -> dict:
    data, x, y, g = _start(ctx, p.seed)
    cfg = DiTConfig(img_size=data["size"], channels=1, patch=p.patch, d=p.d, heads=p.heads, depth=p.depth,
                    num_classes=data["num_classes"], frames=data["frames"]).check()
    model = DiT(cfg).to(ctx.device)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))   # short warm-up
    t0, losses = time.perf_counter(), []
    for step in range(p.steps):
        idx = torch.randint(0, len(x), (p.batch,), generator=g).to(ctx.device)
        yb = y[idx].clone()
        yb[(torch.rand(p.batch, generator=g) < p.label_dropout).to(ctx.device)] = cfg.num_classes   # null class for CFG
        loss = rf_loss(model, x[idx], yb, g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        decay = min(p.ema, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.lerp_(pm, 1 - decay)
        losses.append(loss.item())
        if step % 50 == 0:
            ctx.progress(step + 1, p.steps, loss=float(np.mean(losses[-50:])))
    return {"config": cfg.to_dict(), "state": ema.state_dict(), "train_s": time.perf_counter() - t0,
            "final_loss": float(np.mean(losses[-100:])), "n_params": model.num_params()}


class SmallCNN(nn.Module):
    """Two conv layers + linear head; inputs are resized to 16x16 (any sample resolution)."""

    def __init__(self, classes: int, in_ch: int = 1):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(in_ch, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Flatten(), nn.Linear(32 * 16, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 5:                       # clips: frames as channels
            x = x.flatten(1, 2)
        if x.shape[-1] != 16:
            x = F.interpolate(x, size=(16, 16), mode="bilinear", align_corners=False)
        return self.net(x)


@dataclass
class ClassifierParams:
    epochs: int = 15
    lr: float = 2e-3
    batch: int = 64
    seed: int = 0

    def check(self):
        require(self.epochs >= 1, "epochs", self.epochs, "a positive number of epochs")
        require(self.lr > 0, "lr", self.lr, "a positive learning rate")
        require(self.batch >= 1, "batch", self.batch, "a positive batch size")


@prepare_step("diffusion_classifier", params=ClassifierParams, inputs=("data",), seeded=False,
              devices=("cpu", "cuda"), summary="Tiny CNN classifier of the diffusion data (scores the class of generated samples), held-out acc.")
def prepare_classifier(p: ClassifierParams, ctx) -> dict:
    data, x, y, g = _start(ctx, p.seed)
    perm = torch.randperm(len(x), generator=g).to(ctx.device)
    n_test = len(x) // 5
    te, tr = perm[:n_test], perm[n_test:]
    in_ch = data["frames"] if data["frames"] > 1 else 1
    net = SmallCNN(data["num_classes"], in_ch).to(ctx.device)
    opt = torch.optim.Adam(net.parameters(), lr=p.lr)
    for ep in range(p.epochs):
        order = tr[torch.randperm(len(tr), generator=g).to(ctx.device)]
        for i in range(0, len(order), p.batch):
            b = order[i:i + p.batch]
            xb = x[b] + 0.1 * torch.randn(x[b].shape, generator=g).to(ctx.device)   # a little noise: samples are not pristine
            loss = F.cross_entropy(net(xb), y[b])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        ctx.progress(ep + 1, p.epochs)
    net.eval()
    with torch.no_grad():
        acc = float((net(x[te]).argmax(1) == y[te]).float().mean())
    return {"state": net.state_dict(), "classes": data["num_classes"], "in_ch": in_ch, "test_acc": acc}


def load_dit(prepared: dict, device: str = "cpu") -> DiT:
    """The EMA DiT of a ``dit_model`` output, in eval mode, on ``device``."""
    model = DiT(DiTConfig(**prepared["config"]))
    model.load_state_dict(prepared["state"])
    return model.eval().requires_grad_(False).to(device)


def load_classifier(prepared: dict, device: str = "cpu") -> SmallCNN:
    net = SmallCNN(prepared["classes"], prepared["in_ch"])
    net.load_state_dict(prepared["state"])
    return net.eval().requires_grad_(False).to(device)
