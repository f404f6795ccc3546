"""Block runners (see :mod:`components.diffusion.sampling`) that reuse computation across
denoising steps: Foresight (code-faithful prefix skip, and the per-layer reading), and the
baselines a user would pick instead: Static-N, a TeaCache-like whole-model skip and a PAB-like
attention broadcast.

Foresight, as in STAR-Laboratory/foresight ``videosys/core/foresight_mgr.py`` (t counts
transformer calls; CFG branches batched, so one decision per batch; change = MSE over the
whole block output):

- t < W-2: compute all.  t = W-2: compute all, store c_l.
- t = W-1: compute all; delta_l = MSE(out_l, c_l); theta_l = lambda * delta_l; c_l <- out_l.
- t >= W and t mod R == 0: compute all; delta_l, c_l updated (mandatory recompute).
- otherwise L* = the largest l with delta_l <= theta_l: -1 computes all, the last block takes
  c_last as the output (all skipped), else start from c_{L*} and compute L*+1.. (updating their
  delta and c); blocks <= L* keep stale deltas until the next recompute.
- ours (the sheet's option): full compute in the last ``last_full`` steps.

Semantics picked where the code is ambiguous (the sheet's "quirks"): every block's change is
measured against its own cache (the OpenSora file compares temporal blocks with the spatial
cache); images have one block kind, so there is no spatial/temporal max.
"""
from __future__ import annotations

import torch

from components.core.registry import add
from components.diffusion.sampling import BlockRunner


def _mse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).pow(2).mean())


class Foresight(BlockRunner):
    """Adaptive reuse with per-layer thresholds lambda x (change at the end of warm-up)."""

    name = "foresight"

    def __init__(self, lam: float = 1.0, warmup: int = 8, interval: int = 2, last_full: int = 5,
                 mode: str = "prefix"):
        self.lam, self.warmup, self.interval, self.last_full, self.mode = lam, warmup, interval, last_full, mode

    def start(self, steps, model):
        super().start(steps, model)
        self.cache: list[torch.Tensor | None] = [None] * self.depth
        self.delta = [float("inf")] * self.depth
        self.theta = [0.0] * self.depth
        self.decisions: list[str] = []          # per step: "warmup", "recompute", "last", "reuse:<L*>" ...

    # the schedule: which steps may reuse at all
    def kind(self, t: int) -> str:
        if t < self.warmup:
            return "warmup"
        if t >= self.steps - self.last_full:
            return "last"
        if t % self.interval == 0:
            return "recompute"
        return "candidate"

    def _compute(self, h, c, model, first: int, t: int):
        """Run blocks first.. updating caches; at t = W-1 also set thresholds."""
        for l in range(first, self.depth):
            h = model.blocks[l](h, c)
            if self.cache[l] is not None and t >= self.warmup - 1:
                self.delta[l] = _mse(h, self.cache[l])
                if t == self.warmup - 1:
                    self.theta[l] = self.lam * self.delta[l]
            if t >= self.warmup - 2:
                self.cache[l] = h
        return h

    def __call__(self, t, h, c, model):
        k = self.kind(t)
        if k != "candidate":
            self.decisions.append(k)
            self.count(self.depth * self.upb)
            return self._compute(h, c, model, 0, t)
        if self.mode == "per_layer":
            return self._per_layer(t, h, c, model)
        ok = [l for l in range(self.depth) if self.delta[l] <= self.theta[l]]
        star = max(ok) if ok else -1
        self.decisions.append(f"reuse:{star}")
        self.count((self.depth - 1 - star) * self.upb)
        if star == self.depth - 1:
            return self.cache[star]
        if star >= 0:
            h = self.cache[star]
        return self._compute(h, c, model, star + 1, t)

    def _per_layer(self, t, h, c, model):
        """Block l outputs c_l when delta_l <= theta_l, else recomputes from its current input."""
        run = 0
        for l, blk in enumerate(model.blocks):
            if self.delta[l] <= self.theta[l]:
                h = self.cache[l]
                continue
            h = blk(h, c)
            self.delta[l] = _mse(h, self.cache[l])
            self.cache[l] = h
            run += 1
        self.decisions.append(f"layers:{run}")
        self.count(run * self.upb)
        return h


class StaticN(BlockRunner):
    """Full compute every N-th step; otherwise the last computed block output is reused (every
    block skipped; the final layer still runs with the current timestep)."""

    name = "static"

    def __init__(self, n: int = 2):
        self.n = n

    def start(self, steps, model):
        super().start(steps, model)
        self.cached = None

    def __call__(self, t, h, c, model):
        if t % self.n == 0 or self.cached is None:
            self.count(self.depth * self.upb)
            self.cached = model.run_blocks(h, c)
            return self.cached
        self.count(0)
        return self.cached


class TeaCache(BlockRunner):
    """TeaCache-like: accumulate the rescaled relative L1 change of block 0's modulated input;
    while the sum stays under ``delta`` skip the whole model, adding the last residual
    (out - in) to the current input. First and last steps always compute. ``coeffs`` is the
    rescaling polynomial (highest power first, np.polyval order), fitted on full-compute runs."""

    name = "teacache"

    def __init__(self, delta: float = 0.1, coeffs: tuple[float, ...] = (1.0, 0.0)):
        self.delta, self.coeffs = delta, tuple(coeffs)

    def start(self, steps, model):
        super().start(steps, model)
        self.prev_mod, self.residual, self.acc = None, None, 0.0

    def rescale(self, x: float) -> float:
        y = 0.0
        for a in self.coeffs:
            y = y * x + a
        return y

    def __call__(self, t, h, c, model):
        mod = model.blocks[0].modulated(h, c)
        compute = t == 0 or t == self.steps - 1 or self.prev_mod is None
        if not compute:
            rel = float((mod - self.prev_mod).abs().mean() / self.prev_mod.abs().mean().clamp_min(1e-12))
            self.acc += self.rescale(rel)
            compute = self.acc >= self.delta
        self.prev_mod = mod
        if not compute:
            self.count(0)
            return h + self.residual
        self.acc = 0.0
        out = model.run_blocks(h, c)
        self.residual = out - h
        self.count(self.depth * self.upb)
        return out


class PAB(BlockRunner):
    """PAB-like pyramid attention broadcast: inside the middle window of the trajectory
    (fractions ``window`` of the steps) the spatial attention increment of every block is
    recomputed every ``spatial`` steps and reused otherwise (temporal: every ``temporal``
    steps, clips only); the MLP always runs."""

    name = "pab"

    def __init__(self, spatial: int = 2, temporal: int = 4, window: tuple[float, float] = (0.1, 0.9)):
        self.spatial, self.temporal, self.window = spatial, temporal, tuple(window)

    def start(self, steps, model):
        super().start(steps, model)
        self.sa = [None] * self.depth
        self.ta = [None] * self.depth
        self.lo, self.hi = int(self.window[0] * steps), int(self.window[1] * steps)
        self.since = 0

    def __call__(self, t, h, c, model):
        inside = self.lo <= t < self.hi
        reuse_s = inside and self.sa[0] is not None and (t - self.lo) % self.spatial != 0
        reuse_t = inside and self.ta[0] is not None and (t - self.lo) % self.temporal != 0 and self.upb == 3
        units = 0
        for l, blk in enumerate(model.blocks):
            h, s, tt = blk.forward_parts(h, c, self.sa[l] if reuse_s else None, self.ta[l] if reuse_t else None)
            self.sa[l], self.ta[l] = s, tt
            units += self.upb - int(reuse_s) - int(reuse_t)
        self.count(units)
        return h


for _name, _cls in {"foresight": Foresight, "static": StaticN, "teacache": TeaCache, "pab": PAB}.items():
    add("reuse_policy", _name, _cls)      # listed by `dtlab list reuse_policy`
