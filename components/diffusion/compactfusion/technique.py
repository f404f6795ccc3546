"""Registered technique ``compactfusion``: patch-parallel sampling of the shared DiT over P token
shards exchanging K/V every block: single device, synchronous exact exchange, DistriFusion-like
stale K/V, naive / residual / error-feedback compression (CompactFusion), scored against the
single-device samples from the same noise; bytes counted from the payloads, latency on
calibrated link presets. Quality runs in-process on ``ctx.device``; the same noise on P Ray actors
must give the same bits (per seed), checked on cpu (the node actors hold no GPU), against an
in-process cpu run of the same samples."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from components.core.errors import require
from components.core.registry import technique
from components.core.result import Result
from components.diffusion import quality
from components.diffusion.compactfusion import simtime
from components.diffusion.compactfusion.exchange import SYSTEMS, ActorRunner, ExchangeSpec, InProcessRunner
from components.diffusion.prepare import load_classifier, load_dit
from components.diffusion.sampling import BlockRunner, sample

POLICIES = ("none", "foresight", "static")


@dataclass
class CFParams:
    """The system and its stream (see :class:`ExchangeSpec`), shards, link presets, checks."""

    system: str = "compressed"
    codec: str = "binary"            # fp32 / fp16 (sync, stale); binary / int2 / lowrank / sign / int8 (compressed)
    order: int = 1                   # 0: compress K/V itself (naive); 1: the residual against the base
    ef: bool = True                  # error feedback: the sender's base tracks the receiver's
    warmup: int = 1                  # uncompressed (compressed) / synchronous (stale) first steps
    rank: int = 8                    # lowrank
    scale: str = "rank1"             # binary / int2 magnitude: rank1 (m_c u_n) or channel (m_c)
    shards: int = 4
    batch: int = 16                  # samples per sampling batch: the reference entry's batch (same bits)
    presets: dict = field(default_factory=lambda: {k: dict(v) for k, v in simtime.DEFAULT_PRESETS.items()})
    actor_check: bool = True         # the same noise on P Ray actors, compared bit for bit
    actor_samples: int = 2
    fail_rank: int = -1              # fault injection: this shard's actor dies at fail_step
    fail_step: int = 1
    grid_samples: int = 16           # 0: no sample grid
    timeout_s: float = 300.0
    policy: str = "none"             # none | foresight | static: a reuse policy deciding which blocks run
    policy_params: dict = field(default_factory=dict)   # Foresight's (lam, warmup, interval, last_full, mode) or n

    def make_policy(self):
        """A fresh reuse policy (hforesight's runners), or None."""
        if self.policy == "none":
            return None
        from components.diffusion.foresight.technique import BaselineParams, ForesightParams, make_runner

        cls = ForesightParams if self.policy == "foresight" else BaselineParams
        return make_runner(self.policy, cls(**self.policy_params))

    def spec(self) -> ExchangeSpec:
        return ExchangeSpec(self.system, self.codec, self.order, self.ef, self.warmup, self.rank, self.scale)

    def check(self):
        require(self.system in SYSTEMS, "system", self.system, "one of " + ", ".join(SYSTEMS))
        if self.system != "single":
            self.spec().check()
        require(isinstance(self.shards, int) and self.shards >= 2, "shards", self.shards, "an integer >= 2 (devices)")
        simtime.check_presets(self.presets)
        require(isinstance(self.batch, int) and self.batch >= 1, "batch", self.batch, "a positive batch size")
        require(self.actor_samples >= 1, "actor_samples", self.actor_samples, "a positive number of samples")
        require(isinstance(self.fail_rank, int) and -1 <= self.fail_rank < self.shards, "fail_rank", self.fail_rank,
                f"-1 (none) or a shard in [0, {self.shards - 1}]")
        require(self.grid_samples >= 0, "grid_samples", self.grid_samples, "a non-negative number of samples")
        require(self.timeout_s > 0, "timeout_s", self.timeout_s, "a positive number of seconds")
        require(self.policy in POLICIES, "policy", self.policy, "one of " + ", ".join(POLICIES))
        if self.policy != "none":
            from components.core.errors import ConfigError
            from components.diffusion.foresight.technique import BaselineParams, ForesightParams

            cls = ForesightParams if self.policy == "foresight" else BaselineParams
            allowed = {"foresight": {"lam", "warmup", "interval", "last_full", "mode"}, "static": {"n"}}[self.policy]
            bad = sorted(set(self.policy_params) - allowed)
            require(not bad, f"policy_params.{bad[0] if bad else ''}", self.policy_params.get(bad[0]) if bad else None,
                    f"unknown key for policy={self.policy}; allowed: " + ", ".join(sorted(allowed)))
            extra = {"policy": "static"} if self.policy == "static" else {}
            try:
                cls(**self.policy_params, **extra).check()
            except ConfigError as e:
                raise ConfigError(f"policy_params.{e.key}", e.value, e.allowed) from None


def validate(p: CFParams, exp: dict) -> None:
    """Shards divide the DiT's tokens ((size / patch)^2 from the data and model entries); the actor
    check has a node actor per shard; the calibration was measured at these shards and at this batch,
    the reference sampled in it."""
    from components.core.errors import ConfigError

    prep = exp.get("prepare") or {}
    entry = lambda name: (prep.get(name) or {}).get("params") or {}   # noqa: E731
    ref = entry("reference")
    size = ref.get("size") or entry("data").get("size", 16)
    patch = entry("model").get("patch", 2)
    if size % patch == 0:
        n = (size // patch) ** 2
        if n % p.shards:
            raise ConfigError("shards", p.shards, f"a divisor of the {n} tokens ({size}x{size} images, patch {patch})")
    nodes = (exp.get("resources") or {}).get("nodes", 0)
    if p.actor_check and p.system != "single" and nodes and p.shards > nodes:
        # the actor check hosts one shard per node actor of the experiment's pool (resources.nodes); with
        # no pool (nodes 0) the runner starts its own P actors
        raise ConfigError("shards", p.shards, f"at most experiment.resources.nodes={nodes}: the actor check "
                          f"hosts one shard per node actor (set experiment.resources.nodes={p.shards})")
    cal = entry("calibration")
    if cal.get("shards", 4) != p.shards:
        raise ConfigError("shards", p.shards, f"the calibration entry's shards ({cal.get('shards', 4)}): "
                          "the link presets are calibrated per shard size")
    for name, b in (("reference", ref.get("batch", 16)), ("calibration", cal.get("batch", 64))):
        if b != p.batch:
            raise ConfigError("batch", p.batch, f"the {name} entry's batch ({b}): every system samples in the "
                              "reference's batches, at the batch the compute was measured")


def trend_z(ys: list[float]) -> float:
    """OLS slope of ys over their index, in standard errors (> 2: a significant upward trend)."""
    y = np.asarray(ys, dtype=float)
    if len(y) < 3:
        return float("nan")
    x = np.arange(len(y), dtype=float)
    x -= x.mean()
    slope = float((x * (y - y.mean())).sum() / (x * x).sum())
    resid = y - y.mean() - slope * x
    se = math.sqrt(float((resid ** 2).sum()) / (len(y) - 2) / float((x * x).sum()))
    return slope / se if se > 0 else (math.inf if slope > 0 else (-math.inf if slope < 0 else 0.0))


def growth(ys: list[float]) -> float:
    """Fitted value at the last point over the fitted value at the first (linear fit)."""
    y = np.asarray(ys, dtype=float)
    if len(y) < 2:
        return float("nan")
    b, a = np.polyfit(np.arange(len(y)), y, 1)
    first, last = a, a + b * (len(y) - 1)
    return float(last / first) if first > 0 else float("nan")


def _base_mismatch(reports: list[dict]) -> float:
    """Max |sender's base - receiver's base| over every stream and receiver (0: bit-identical)."""
    worst = 0.0
    sends = {(l, k, r): b for r, rep in enumerate(reports) for (l, k), b in rep["send_base"].items()}
    for dst, rep in enumerate(reports):
        for (l, k, s), rb in rep["recv_base"].items():
            sb = sends[(l, k, s)]
            if sb is not None and rb is not None:
                worst = max(worst, float((sb - rb).abs().max()))
    return worst


def _sample_in_process(model, ref_in: dict, spec: ExchangeSpec, P: int, batch: int, make_policy=lambda: None,
                       idx: slice | None = None):
    noise, y = ref_in["noise"], ref_in["y"]
    if idx is not None:
        noise, y = noise[idx], y[idx]
    outs, runners = [], []
    bs = batch
    for s in range(0, len(noise), bs):
        policy = make_policy()
        if spec.system == "single":
            r = policy or BlockRunner()
        elif policy is not None:
            from components.diffusion.compactfusion.composed import ComposedRunner

            r = ComposedRunner(P, spec, model, policy, diagnose=idx is None)
        else:
            r = InProcessRunner(P, spec, model, diagnose=idx is None)
        outs.append(sample(model, noise[s:s + bs], y[s:s + bs], ref_in["steps"], ref_in["cfg_scale"], r))
        runners.append(r)
    return torch.cat(outs), runners


def _actor_check(p: CFParams, prepared: dict, model, ref_in: dict, ctx) -> dict:
    """The first ``actor_samples`` samples on P Ray actors vs in-process: max |diff|, bytes, bases."""
    k = min(p.actor_samples, len(ref_in["noise"]))
    spec = p.spec()
    local, lrun = _sample_in_process(model, ref_in, spec, p.shards, p.batch, idx=slice(0, k))
    key = ctx.host_key()
    runner = ActorRunner(p.shards, spec, prepared, nodes=ctx.nodes, key=key, fail_rank=p.fail_rank,
                         fail_step=p.fail_step, timeout_s=p.timeout_s)
    t0 = time.perf_counter()
    try:
        out = sample(model, ref_in["noise"][:k], ref_in["y"][:k], ref_in["steps"], ref_in["cfg_scale"], runner)
        reports = runner.reports()
    finally:
        runner.close()
    wall = time.perf_counter() - t0
    lb = [r["bytes_steps"] for r in lrun[0].reports()]
    return {"actor_vs_inproc_max_abs": float((out - local).abs().max()),
            "actor_bits_equal": float(torch.equal(out, local)),
            "actor_bytes_match": float([r["bytes_steps"] for r in reports] == lb),
            "actor_base_mismatch": _base_mismatch(reports), "actor_wall_s": wall}


@technique("compactfusion", family="diffusion", params=CFParams, validate=validate,
           inputs=("model", "classifier", "reference", "calibration"), devices=("cpu", "cuda"),
           summary="Patch-parallel DiT sampling over 4 token shards (Ray actors) exchanging K/V every block: "
                   "synchronous, DistriFusion-like stale, naive / residual / error-feedback 1-bit, INT2 and "
                   "low-rank (CompactFusion); PSNR/SSIM/class accuracy vs single device, bytes, simulated latency.")
def run_compactfusion(p: CFParams, ctx) -> Result:
    torch.set_num_threads(1)
    dev = ctx.device
    prepared, ref_cpu, cal = ctx.input("model"), ctx.input("reference"), ctx.input("calibration")
    model = load_dit(prepared, dev)
    classifier = load_classifier(ctx.input("classifier"), dev)
    ref_in = {**ref_cpu, **{k: ref_cpu[k].to(dev) for k in ("noise", "y", "x")}}
    cfg = model.cfg
    require(cfg.frames == 1, "model.frames", cfg.frames, "1: the patch-parallel runner shards image tokens (clips not built)")
    n_tok = (cfg.img_size // cfg.patch) ** 2
    require(n_tok % p.shards == 0, "shards", p.shards, f"a divisor of the {n_tok} tokens")
    require(cal["shards"] == p.shards and cal["batch"] == p.batch, "calibration", cal,
            f"calibrated at shards={p.shards} and batch={p.batch}")
    require(cal.get("device", "cpu") == dev, "calibration.device", cal.get("device", "cpu"),
            f"{dev}, where this run samples (the link presets are calibrated against its block time)")
    require(ref_in["size"] == cfg.img_size, "reference.size", ref_in["size"],
            f"the model's resolution {cfg.img_size} (patch-parallel runs at the trained size)")
    steps, depth, P, spec = ref_in["steps"], cfg.depth, p.shards, p.spec()
    ref, y = ref_in["x"], ref_in["y"]
    t0 = time.perf_counter()
    if p.system == "single" and p.policy == "none":
        out, runs = ref, []
    else:
        out, runs = _sample_in_process(model, ref_in, spec, P, p.batch, p.make_policy)
    wall = time.perf_counter() - t0
    runners = [r for r in runs if isinstance(r, InProcessRunner)]
    m = dict(quality.summary(out, ref, y, classifier))
    m["max_abs_err_vs_ref"] = float((out - ref).abs().max())
    m["wall_s_sampling"] = wall
    series: dict = {}

    # bytes: every receiver counts what it got; per step, summed over batches and devices
    n_batches = max(len(runners), 1)
    per_step = [0.0] * steps
    codec_s = 0.0
    base_mm = 0.0
    for r in runners:
        reps = r.reports()
        codec_s += sum(x["codec_s"] for x in reps)
        base_mm = max(base_mm, _base_mismatch(reps))
        for rep in reps:
            for t, b in enumerate(rep["bytes_steps"]):
                per_step[t] += b / n_batches
    warm = p.warmup if p.system in ("compressed", "stale") else 0
    steady = per_step[warm:] if p.system == "compressed" else per_step
    m["bytes_per_step"] = float(np.mean(per_step))
    m["bytes_per_step_steady"] = float(np.mean(steady)) if steady else 0.0
    m["bytes_per_sample"] = float(sum(per_step) * n_batches / len(ref)) if runners else 0.0
    m["codec_s_per_step"] = codec_s / (steps * n_batches)
    # blocks run per step (a reuse policy skips some; mean over batches)
    run_frac = np.mean([r.per_step for r in runs], axis=0).tolist() if runs else [1.0] * steps
    m["skip_fraction"] = 1.0 - float(np.mean(run_frac))
    blocks_run = [depth * f for f in run_frac]
    if runners:
        m["base_mismatch"] = base_mm
        series["bytes_per_step"] = per_step

    # latency on each preset: one batch of p.batch samples, all steps
    sync_rank_block = 2 * (2 * p.batch) * (n_tok // P) * cfg.d * 2     # K and V, 2B CFG rows, fp16
    for name, pre in p.presets.items():
        link = simtime.calibrated_link(pre, cal["block_s_shard"], sync_rank_block, P)
        if p.system == "single":
            lat = sum(blocks_run) * cal["block_s_full"]
        else:
            lat = sum(simtime.step_latency_s(p.system, t, p.warmup, blocks_run[t], cal["block_s_shard"], link,
                                             per_step[t] / (blocks_run[t] * P * (P - 1)) if blocks_run[t] else 0.0, P)
                      for t in range(steps))
        m[f"sim_latency_s_{name}"] = lat
        m[f"link_gbps_{name}"] = link.bandwidth_bps / 1e9
    m["block_compute_s"] = cal["block_s_shard"]
    m["block_compute_s_full"] = cal["block_s_full"]

    # reconstruction error of the K/V the receivers attended over, per step (mean over batches)
    if runners:
        err = np.mean([r.recon_rel_err for r in runners], axis=0).tolist()
        chg = np.mean([r.kv_step_change for r in runners], axis=0).tolist()     # steps 1.. (vs the previous)
        series["recon_rel_err"] = err
        series["kv_step_change"] = (list(range(1, steps)), chg)
        post = err[max(warm, 1):]
        rel = [e / c for e, c in zip(err[1:], chg)][max(warm, 1) - 1:]
        series["recon_err_over_change"] = (list(range(max(warm, 1), steps)), rel)
        m.update({"recon_rel_err_last": err[-1], "recon_rel_err_mean": float(np.mean(post)),
                  "recon_err_trend_z": trend_z(post), "recon_err_growth": growth(post),
                  "recon_err_over_change_mean": float(np.mean(rel)), "recon_err_over_change_trend_z": trend_z(rel),
                  "recon_err_over_change_growth": growth(rel),
                  "kv_step_change_mean": float(np.mean(chg)), "kv_step_change_last": chg[-1]})
        if p.actor_check:   # on cpu: the node actors hold no GPU
            m.update(_actor_check(p, prepared, model if dev == "cpu" else load_dit(prepared), ref_cpu, ctx))
    files = {}
    if p.grid_samples:
        from components.diffusion.artifacts import grid_png

        g = p.grid_samples
        files["plots/samples.png"] = grid_png(ref[:g], out[:g], y[:g], ctx.variant)
    info = {"spec": spec.__dict__, "policy": p.policy, "policy_params": p.policy_params, "calibration": cal,
            "steps": steps, "samples": len(ref), "latency_model": simtime.__doc__.split("\n\n")[1].replace("\n", " ")}
    return Result(metrics=m, series=series, info=info, files=files)
