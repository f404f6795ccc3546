"""Foresight (arXiv 2506.00329) and the reuse baselines on the shared tiny DiT, one seed per
call, scored against the full-compute samples of the same seed's noise (prepare step
``diffusion_reference``, which fixes the step count, resolution and CFG scale).

- ``foresight``: the adaptive policy (prefix or per-layer mode); with ``target_skip`` > 0 its
  lambda is tuned by bisection on a calibration draw (other noise than the evaluation's) to that
  skip fraction, so it is compared with Static-N at matched compute, not matched names.
- ``reuse_baseline``: ``full``, ``static`` (Static-N), ``teacache`` (its rescaling polynomial
  fitted on a full-compute calibration draw; ``target_skip`` tunes delta the same way), ``pab``.
- ``foresight_lambda_sweep``: skip fraction and PSNR over a list of lambdas, with monotonicity.

Speedup is timed in the task itself by the one timing mechanism (components.core.timing): full
compute and the policy on the first batch, interleaved in seeded random order round after round in
this process, torch on one thread, so the clock is the thread's CPU time (the machine is shared; the
metric keeps its name ``speedup_wall``, its clock is ``speedup_wall_thread_clock``); on a GPU
(``ctx.device`` cuda) the wall clock, each timed call ending with the device synchronized. Full compute also
runs as a second arm each round: ``speedup_wall_noise`` is the noise floor (full against itself) in
the speedup's units, which the claim reads (``noise:``). Rounds stop once the ratio is settled to
``timing_precision``. The policy's timed outputs of the first batch are its evaluated samples too.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from components.core import devices
from components.core.errors import ConfigError, require
from components.core.plotting import fig_png, figure
from components.core.registry import technique
from components.core.result import Result
from components.core.timing import interleave, timed
from components.diffusion import quality
from components.diffusion.artifacts import gif_bytes, grid_png
from components.diffusion.foresight.policies import PAB, Foresight, StaticN, TeaCache
from components.diffusion.prepare import load_classifier, load_dit
from components.diffusion.sampling import BlockRunner, draw, sample, sample_batches

POLICIES = ("full", "static", "teacache", "pab", "foresight")


@dataclass
class CommonParams:
    batch: int = 16               # samples per sampling call (CFG doubles the rows)
    n_samples: int = 0            # 0: every sample of the reference
    timing_batches: int = 2       # 0: no timing; else the first batch timed, at least max(this, 3) rounds
    timing_rounds: int = 4        # at most this many interleaved rounds (full, policy, full again)
    timing_precision: float = 0.05   # stop once the speedup's 95% interval is within +-5%
    timing_budget_s: float = 30.0    # and past this much wall time (each round costs ~2.5 batches)
    target_skip: float = -1.0     # > 0: tune the policy's knob to this skip fraction first
    calib_samples: int = 16
    calib_iters: int = 8
    grid: bool = True             # full vs policy sample grid (PNG artifact)

    def check(self):
        require(self.batch >= 1, "batch", self.batch, "a positive batch size")
        require(self.n_samples >= 0, "n_samples", self.n_samples, "0 (all) or a positive number of samples")
        require(self.timing_batches >= 0, "timing_batches", self.timing_batches, "a non-negative number of batches")
        require(self.timing_rounds >= max(self.timing_batches, 3) or not self.timing_batches, "timing_rounds",
                self.timing_rounds, f"at least max(timing_batches, 3) = {max(self.timing_batches, 3)} rounds")
        require(self.timing_precision > 0, "timing_precision", self.timing_precision, "a positive relative precision")
        require(self.timing_budget_s > 0, "timing_budget_s", self.timing_budget_s, "a positive number of seconds")
        require(self.target_skip < 0 or 0 < self.target_skip < 1, "target_skip", self.target_skip,
                "-1 (off) or a skip fraction in (0, 1)")
        require(self.calib_samples >= 1, "calib_samples", self.calib_samples, "a positive number of samples")
        require(self.calib_iters >= 1, "calib_iters", self.calib_iters, "a positive number of bisection steps")


@dataclass
class ForesightParams(CommonParams):
    lam: float = 1.0              # threshold scale: theta_l = lam * delta_l at the end of warm-up
    warmup: int = 8               # W: full-compute steps; thresholds taken at step W-1
    interval: int = 2             # R: full recompute when t mod R == 0
    last_full: int = 5            # full compute in the last steps (the sheet's option)
    mode: str = "prefix"          # prefix (code-faithful) | per_layer

    def check(self):
        super().check()
        require(math.isfinite(self.lam) and self.lam >= 0, "lam", self.lam, "a non-negative threshold scale (lambda >= 0)")
        require(self.interval >= 1, "interval", self.interval, "R >= 1 (recompute every R steps)")
        require(self.warmup >= 2, "warmup", self.warmup, "W >= 2 (thresholds come from the change at step W-1)")
        require(self.last_full >= 0, "last_full", self.last_full, "a non-negative number of steps")
        require(self.mode in ("prefix", "per_layer"), "mode", self.mode, "one of prefix, per_layer")


@dataclass
class BaselineParams(CommonParams):
    policy: str = "full"          # full | static | teacache | pab
    n: int = 2                    # Static-N
    delta: float = 0.1            # TeaCache: skip while the accumulated rescaled change < delta
    fit_rescale: bool = True      # TeaCache: fit the rescaling polynomial on a full-compute draw
    coeffs: list = field(default_factory=lambda: [1.0, 0.0])   # TeaCache rescaling (np.polyval order) if not fitted
    spatial: int = 2              # PAB: attention recomputed every `spatial` steps inside the window
    temporal: int = 4
    window: list = field(default_factory=lambda: [0.1, 0.9])

    def check(self):
        super().check()
        require(self.policy in POLICIES[:-1], "policy", self.policy, "one of " + ", ".join(POLICIES[:-1]))
        require(self.n >= 1, "n", self.n, "N >= 1")
        require(self.delta >= 0, "delta", self.delta, "a non-negative threshold")
        require(self.spatial >= 1, "spatial", self.spatial, "a broadcast range >= 1")
        require(self.temporal >= 1, "temporal", self.temporal, "a broadcast range >= 1")
        require(len(self.window) == 2 and 0 <= self.window[0] <= self.window[1] <= 1, "window", self.window,
                "[lo, hi] with 0 <= lo <= hi <= 1")


@dataclass
class SweepParams(ForesightParams):
    lams: list = field(default_factory=lambda: [0.25, 0.5, 1.0, 2.0, 4.0])

    def check(self):
        super().check()
        require(len(self.lams) >= 3 and all(x >= 0 for x in self.lams), "lams", self.lams,
                "at least 3 non-negative lambdas")


# ------------------------------------------------------------------------------------------ pieces
def make_runner(policy: str, p, knob: float | None = None):
    """A fresh runner for ``policy``; ``knob`` overrides its tuned value (lambda or delta)."""
    if policy == "full":
        return BlockRunner()
    if policy == "foresight":
        return Foresight(p.lam if knob is None else knob, p.warmup, p.interval, p.last_full, p.mode)
    if policy == "static":
        return StaticN(p.n)
    if policy == "teacache":
        return TeaCache(p.delta if knob is None else knob, p.coeffs)
    if policy == "pab":
        return PAB(p.spatial, p.temporal, p.window)
    raise ConfigError("policy", policy, "one of " + ", ".join(POLICIES))


def fit_teacache_rescale(model, noise, y, steps, cfg_scale) -> tuple[float, ...]:
    """Quadratic fit of the relative L1 change of the blocks' output on that of block 0's modulated
    input, over consecutive full-compute steps (TeaCache fits this mapping offline)."""
    xs, ys, prev = [], [], {}

    class Probe(BlockRunner):
        def __call__(self, i, h, c, m):
            mod, out = m.blocks[0].modulated(h, c), super().__call__(i, h, c, m)
            if prev:
                xs.append(float((mod - prev["mod"]).abs().mean() / prev["mod"].abs().mean()))
                ys.append(float((out - prev["out"]).abs().mean() / prev["out"].abs().mean()))
            prev.update(mod=mod, out=out)
            return out

    sample(model, noise, y, steps, cfg_scale, Probe())
    return tuple(float(a) for a in np.polyfit(xs, ys, 2))


def calibrate(model, policy, p, ref, seed) -> tuple[float, float]:
    """Bisect the policy's knob (log scale) to ``p.target_skip`` on a calibration draw; (knob, skip)."""
    noise, y = draw(5_000 + seed, p.calib_samples, model, ref["size"])
    lo, hi = math.log(1e-4), math.log(1e4)
    best = (1.0, -1.0)
    for _ in range(p.calib_iters):
        mid = (lo + hi) / 2
        _, st = sample_batches(model, noise, y, ref["steps"], ref["cfg_scale"],
                               lambda: make_runner(policy, p, math.exp(mid)), p.batch)
        if abs(st["skip_fraction"] - p.target_skip) < abs(best[1] - p.target_skip):
            best = (math.exp(mid), st["skip_fraction"])
        lo, hi = (mid, hi) if st["skip_fraction"] < p.target_skip else (lo, mid)
    return best


def time_policy(model, ref, noise, y, policy: str, p, knob, seed: int, device: str = "cpu"):
    """Full compute against ``policy`` on the first batch (components.core.timing, thread CPU time:
    torch runs on one thread; on cuda wall time to the device's sync); the Timing and the policy's
    (samples, runner) of that batch."""
    sl = slice(0, p.batch)
    first: dict = {}

    def full():
        x = sample(model, noise[sl], y[sl], ref["steps"], ref["cfg_scale"], BlockRunner())
        devices.synchronize(device)
        return x

    def reuse():
        runner = make_runner(policy, p, knob)
        x = sample(model, noise[sl], y[sl], ref["steps"], ref["cfg_scale"], runner)
        devices.synchronize(device)
        first.setdefault("out", (x, runner))
        return x

    rounds = max(p.timing_batches, 3)
    t = interleave({"full": full, "policy": reuse}, "full", clock=devices.clock(device), seed=[seed, 7919], warmup=0,
                   min_rounds=rounds, max_rounds=max(p.timing_rounds, rounds), rel_precision=p.timing_precision,
                   budget_s=p.timing_budget_s)
    return t, first["out"]


def evaluate_policy(policy: str, p, ctx, knob: float | None = None, grid: bool | None = None) -> tuple[dict, dict, dict]:
    """Sample the reference's noise with ``policy`` on ``ctx.device``; (metrics, series, files)."""
    torch.set_num_threads(1)
    dev = ctx.device
    model, ref, clf = load_dit(ctx.input("model"), dev), ctx.input("reference"), load_classifier(ctx.input("classifier"), dev)
    n = p.n_samples or len(ref["noise"])
    require(n <= len(ref["noise"]), "n_samples", n, f"at most the reference's {len(ref['noise'])} samples")
    noise, y, x_ref = ref["noise"][:n].to(dev), ref["y"][:n].to(dev), ref["x"][:n].to(dev)
    outs, run, tot, per_step, walls = [], 0, 0, [], []
    timing, timed_first = None, None
    if p.timing_batches:              # warm-up (allocator, positional-embedding cache) before any timing
        sample(model, noise[:p.batch], y[:p.batch], 2, ref["cfg_scale"], BlockRunner())
        timing, timed_first = time_policy(model, ref, noise, y, policy, p, knob, ctx.seed, dev)
    for b, s in enumerate(range(0, n, p.batch)):
        sl = slice(s, s + p.batch)
        if b == 0 and timed_first is not None:   # the timed rounds sampled this batch already
            x_b, runner = timed_first
            walls.append(timing.median("policy"))
        else:
            runner = make_runner(policy, p, knob)
            with timed(devices.clock(dev)) as t_b:    # sample_ms: the same clock as the timed rounds
                x_b = sample(model, noise[sl], y[sl], ref["steps"], ref["cfg_scale"], runner)
                devices.synchronize(dev)
            walls.append(t_b.s)
        outs.append(x_b)
        run, tot = run + runner.units_run, tot + runner.units_total
        per_step.append(runner.per_step)
        ctx.progress(s + p.batch, n)
    x = torch.cat(outs)
    q = quality.summary(x, x_ref, y, clf)
    m = {"skip_fraction": 1.0 - run / max(tot, 1), **q, "class_acc_drop": q["ref_class_acc"] - q["class_acc"],
         "sample_ms": 1000 * sum(walls) / n, "steps": ref["steps"], "size": ref["size"]}
    if timing is not None:
        m.update(timing.metrics("speedup_wall", "policy", speedup=True))
    curve = np.mean(np.asarray(per_step), axis=0)
    series = {"compute_per_step": curve.tolist()}
    if isinstance(runner, Foresight):   # share of the schedule's reuse candidates actually skipped
        cand = [t for t in range(ref["steps"]) if runner.kind(t) == "candidate"]
        m["candidate_use"] = float(np.mean(1 - curve[cand])) if cand else math.nan
        if min(runner.theta) > 0:   # per-layer thresholds (last batch): their spread across blocks
            series["theta_per_block"] = (list(range(runner.depth)), list(runner.theta), "block")
            m["theta_spread"] = max(runner.theta) / min(runner.theta)
    files = {}
    if p.grid if grid is None else grid:
        files[f"grids/full_vs_{ctx.variant}.png"] = grid_png(x_ref, x, y, policy)
        if x.dim() == 5:
            files[f"grids/full_vs_{ctx.variant}.gif"] = gif_bytes(x_ref, x, y)
    if timing is not None:
        files["timing/speedup_wall.json"] = json.dumps(timing.info(), indent=1, default=str)
    return m, series, files


# ------------------------------------------------------------------------------------------ techniques
@technique("foresight", family="diffusion", params=ForesightParams, inputs=("model", "reference", "classifier"),
           devices=("cpu", "cuda"), summary="Foresight (arXiv 2506.00329): adaptive per-layer reuse across denoising steps (warm-up, "
                   "thresholds lambda x warm-up change, recompute every R steps) on the tiny DiT, vs full compute.")
def run_foresight(p: ForesightParams, ctx) -> Result:
    info = {"lam": p.lam}
    lam = p.lam
    if p.target_skip > 0:
        torch.set_num_threads(1)
        lam, cal_skip = calibrate(load_dit(ctx.input("model"), ctx.device), "foresight", p, ctx.input("reference"),
                                  ctx.seed)
        info.update(lam=lam, calib_skip=cal_skip)
    m, series, files = evaluate_policy("foresight", p, ctx, knob=lam)
    m["lam"] = lam
    return Result(metrics=m, series=series, info=info, files=files)


@technique("reuse_baseline", family="diffusion", params=BaselineParams, inputs=("model", "reference", "classifier"),
           devices=("cpu", "cuda"), summary="Reuse baselines on the tiny DiT: full compute, Static-N (reuse the last output between "
                   "every N-th step), TeaCache-like whole-model skip, PAB-like attention broadcast.")
def run_baseline(p: BaselineParams, ctx) -> Result:
    info: dict = {"policy": p.policy}
    knob = None
    if p.policy == "teacache":
        torch.set_num_threads(1)
        model, ref = load_dit(ctx.input("model"), ctx.device), ctx.input("reference")
        if p.fit_rescale:
            noise, y = draw(6_000 + ctx.seed, min(p.calib_samples, p.batch), model, ref["size"])
            p.coeffs = list(fit_teacache_rescale(model, noise, y, ref["steps"], ref["cfg_scale"]))
        info["coeffs"] = list(p.coeffs)
        if p.target_skip > 0:
            knob, info["calib_skip"] = calibrate(model, "teacache", p, ref, ctx.seed)
            info["delta"] = knob
    m, series, files = evaluate_policy(p.policy, p, ctx, knob=knob)
    if knob is not None:
        m["delta"] = knob
    return Result(metrics=m, series=series, info=info, files=files)


def is_monotone(xs: list[float], increasing: bool, tol: float = 0.0) -> bool:
    """Non-decreasing (or non-increasing) up to ``tol``."""
    d = np.diff(np.asarray(xs, dtype=float))
    return bool(np.all(d >= -tol)) if increasing else bool(np.all(d <= tol))


@technique("foresight_lambda_sweep", family="diffusion", params=SweepParams,
           inputs=("model", "reference", "classifier"), devices=("cpu", "cuda"),
           summary="Foresight's lambda sweep: skip fraction and PSNR against full compute per lambda, monotonicity.")
def run_sweep(p: SweepParams, ctx) -> Result:
    lams = sorted(float(x) for x in p.lams)
    rows = []
    for lam in lams:
        m, _, _ = evaluate_policy("foresight", p, ctx, knob=lam, grid=False)
        rows.append({"lam": lam, **{k: m[k] for k in ("skip_fraction", "psnr_db", "ssim", "class_acc")}})
    skips, psnrs = [r["skip_fraction"] for r in rows], [r["psnr_db"] for r in rows]
    metrics = {"monotone_skip": float(is_monotone(skips, True)), "monotone_psnr": float(is_monotone(psnrs, False)),
               "skip_range": skips[-1] - skips[0], "psnr_range_db": psnrs[0] - psnrs[-1],
               "skip_fraction": skips[len(skips) // 2], "psnr_db": psnrs[len(psnrs) // 2]}
    metrics["monotone"] = float(metrics["monotone_skip"] and metrics["monotone_psnr"])
    fig, axes = figure(5, 3.5)
    ax = axes[0, 0]
    ax.plot(skips, psnrs, "o-")
    for r in rows:
        ax.annotate(f"{r['lam']:g}", (r["skip_fraction"], r["psnr_db"]), fontsize=7)
    ax.set_xlabel("skip fraction")
    ax.set_ylabel("PSNR vs full (dB)")
    ax.set_title("Foresight lambda sweep", fontsize=9)
    return Result(metrics=metrics, tables={"lambda_sweep": rows},
                  series={"skip_vs_lambda": (lams, skips, "lambda"), "psnr_vs_lambda": (lams, psnrs, "lambda")},
                  files={"plots/lambda_sweep.png": fig_png(fig, dpi=90)})
