"""Registered technique `ddp_train`: data-parallel GPT training on Ray Train (gloo) with the gradient
sync as a DDP comm hook - fp32 all-reduce, torch's PowerSGD hook, plain low-bit codecs, and
error-feedback low-bit codecs. The shared parameters and the run/metrics code are reused by `duo`.
One call trains one seed (``ctx.seed``); the DAG runs the seeds.

``execution``: ``ray_train`` runs the ranks as Ray Train workers (one gloo process each);
``in_process`` runs them as threads of the variant's task with the same DDP, hooks and strategies
(:mod:`components.training.ddp.world`), and with ``ray_check_steps: K`` the first K steps also run
on the Ray Train workers, whose weights after them are compared with the in-process ranks'
(``ray_check_bitwise``, ``ray_check_max_abs_diff``): the distributed path stays exercised on every
run while the bulk of the steps stop paying for 4 processes in lock-step on 2 cores.

Device: the ranks train on ``ctx.device``. On cuda the Ray Train workers take one GPU each over NCCL
(:mod:`components.training.ddp.runner`) and the in-process ranks share the task's GPU. The check's
bitwise equality is a cpu property: the in-process ranks add in gloo's ring order
(:func:`components.training.ddp.world.ring_sum`), which NCCL's reductions do not follow, so on cuda
``ray_check_max_abs_diff`` is the figure to read."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from components.compression.torch_codecs import check_codec, make_torch_codec
from components.core.errors import ConfigError, require
from components.core.netsim import Link
from components.core.registry import lookup, technique
from components.core.result import Result
from components.training.ddp import simtime, strategies  # noqa: F401  (strategies: ddp_strategy "sync")


@dataclass
class DPParams:
    """Everything a data-parallel variant may set (shared by ddp_train and duo)."""

    model: str = "small"                 # a size in components.models.gpt.SIZES
    block: str = "pre_ln"                # a registered GPT block (pre_ln, parallel, fal, fal_plus)
    workers: int = 4                     # Ray Train workers (gloo ranks)
    worker_cpus: float = 0.5             # CPUs each worker reserves (fractional: 4 x 0.5 on 2 cores)
    batch: int = 16                      # sequences per worker per step
    steps: int = 1000
    lr: float = 3e-3
    warmup: int = 50
    final_lr_frac: float = 0.1           # cosine decay to this fraction of lr
    optimizer: Literal["adamw", "sgd"] = "adamw"
    weight_decay: float = 0.1
    bits: int = 4                        # low-bit codec: 0, 1, 2, 4, 8
    bucket: int = 128                    # values per scale
    eval_every: int = 100                # validation loss every this many steps (0: only final)
    eval_batches: int = 4
    eval_batch: int = 32
    final_eval_batches: int = 40
    link: dict = field(default_factory=lambda: {"bandwidth": "1Gbps", "latency": "50us"})
    slow_link: dict = field(default_factory=lambda: {"bandwidth": "100Mbps", "latency": "1ms"})  # 2nd what-if
    ddp_bucket_mb: float = 25.0
    powersgd_rank: int = 2
    powersgd_start: int = 10
    timeout_s: int = 120                 # gloo collective timeout
    fail_at: list[int] | None = None     # [rank, step]: that worker exits there (failure tests)
    takeover: dict | None = None         # MeCeFO neighbour takeover (components.training.ddp.takeover)
    execution: Literal["ray_train", "in_process"] = "ray_train"   # gloo worker processes, or rank threads
    ray_check_steps: int = 0             # in_process: these first steps also run on Ray Train, compared

    def check(self):
        from components.models.gpt import SIZES

        from components.models.gpt import GPTConfig
        from components.training.ddp.takeover import TakeoverSpec
        from components.training.mecefo.approx import BLOCKS

        require(self.model in SIZES, "model", self.model, "one of " + ", ".join(SIZES))
        GPTConfig(vocab_size=2, block=self.block, **SIZES[self.model]).check()   # unknown block: one line
        spec = TakeoverSpec.parse(self.takeover, self.workers, SIZES[self.model]["d_model"])
        if spec.recovery == "mecefo":
            require(self.block in BLOCKS, "block", self.block, "one of " + ", ".join(BLOCKS) + " under MeCeFO")
        require(self.workers >= 1, "workers", self.workers, "a positive number of workers")
        require(self.worker_cpus > 0, "worker_cpus", self.worker_cpus, "a positive number of CPUs")
        require(self.batch >= 1 and self.steps >= 1, "steps", self.steps, "positive steps and batch")
        require(self.lr > 0, "lr", self.lr, "a positive learning rate")
        require(0 <= self.warmup < self.steps or self.steps == 1, "warmup", self.warmup, f"in [0, steps={self.steps})")
        require(0 <= self.final_lr_frac <= 1, "final_lr_frac", self.final_lr_frac, "a fraction in [0, 1]")
        check_codec(self.bits, self.bucket)
        require(self.eval_every >= 0, "eval_every", self.eval_every, "0 or a positive interval")
        require(self.eval_batches >= 1, "eval_batches", self.eval_batches, "a positive number of batches")
        require(self.final_eval_batches >= 1, "final_eval_batches", self.final_eval_batches, "a positive number of batches")
        require(self.powersgd_rank >= 1, "powersgd_rank", self.powersgd_rank, "a positive rank")
        require(self.timeout_s >= 5, "timeout_s", self.timeout_s, "at least 5 seconds")
        require(self.execution in ("ray_train", "in_process"), "execution", self.execution, "ray_train or in_process")
        require(isinstance(self.ray_check_steps, int) and 0 <= self.ray_check_steps < self.steps, "ray_check_steps",
                self.ray_check_steps, f"an integer in [0, steps={self.steps})")
        require(self.ray_check_steps == 0 or self.execution == "in_process", "ray_check_steps", self.ray_check_steps,
                "0 unless execution is in_process (it checks the in-process ranks against Ray Train)")
        require(self.fail_at is None or (len(self.fail_at) == 2 and 0 <= self.fail_at[0] < self.workers),
                "fail_at", self.fail_at, "null or [rank < workers, step]")
        Link.from_config(self.link)
        Link.from_config(self.slow_link, "slow_link")
        cap = machine_cpus()
        require(self.workers * self.worker_cpus <= cap, "workers", self.workers,
                f"workers x worker_cpus ({self.workers} x {self.worker_cpus}) within the {cap:g} CPUs this machine holds")


@dataclass
class DDPParams(DPParams):
    method: Literal["fp32", "powersgd", "plain", "ef"] = "fp32"

    def check(self):
        super().check()
        if self.method in ("plain", "ef"):
            require(self.bits >= 1, "bits", self.bits, f"1, 2, 4 or 8 for method={self.method} (0 bits sends nothing)")
        require(self.method != "powersgd" or self.execution == "ray_train", "execution", self.execution,
                "ray_train for method=powersgd (torch's PowerSGD hook drives its own process group)")


def machine_cpus() -> float:
    """CPUs the workers can get: the Ray cluster's if one is up, else this machine's."""
    try:
        import ray

        if ray.is_initialized():
            return float(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
    except Exception:
        pass
    return float(os.cpu_count() or 1)


def _validate(p: DPParams, exp: dict) -> None:
    res = exp.get("resources") or {}
    if res.get("num_cpus", 1):
        raise ConfigError("experiment.resources.num_cpus", res.get("num_cpus", 1),
                          "0 for data-parallel variants (the Ray Train workers reserve the CPUs; in-process ranks "
                          "are bounded by max_parallel)")
    if res.get("max_parallel") is None:
        raise ConfigError("experiment.resources.max_parallel", None,
                          "a positive integer (how many Ray Train jobs may share the CPUs; 1 on a small machine)")


def run_data_parallel(p: DPParams, ctx, method: str, strategy: str = "sync") -> Result:
    """Train one seed of a variant as one Ray Train job and turn the workers' reports into a Result.

    ``strategy`` names a registered ``ddp_strategy``; its class travels to the workers in the config
    (pickled by reference, so they import its module and nothing else)."""
    from components.models.gpt import SIZES
    from components.training.ddp.loop import train_in_process, train_worker
    from components.training.ddp.runner import fit

    corpus = ctx.input("corpus")
    cfg = {k: v for k, v in asdict(p).items() if k not in ("link", "slow_link", "model")}
    cfg.update(method=method, strategy=lookup("ddp_strategy", strategy, key="strategy"), seed=ctx.seed,
               device=ctx.device,
               model=dict(SIZES[p.model]), vocab_size=corpus.vocab_size, train=corpus.train, val=corpus.val)
    name = f"{ctx.variant}-s{ctx.seed}"
    ctx.progress(0, 1, phase=0)
    if p.execution == "ray_train":
        return summarize(p, method, fit(train_worker, cfg, p.workers, p.worker_cpus, ctx.workdir / "ray_train",
                                        name, p.timeout_s, device=ctx.device))
    check = None
    if p.ray_check_steps:   # the prefix on the real workers first: a broken gloo path fails fast
        check = fit(train_worker, {**cfg, "stop_after": p.ray_check_steps}, p.workers, p.worker_cpus,
                    ctx.workdir / "ray_train", f"{name}-check", p.timeout_s, device=ctx.device)
    out = train_in_process({**cfg, "check_steps": p.ray_check_steps})
    res = summarize(p, method, out)
    res.info["execution"] = "in_process: the ranks are threads (collective seconds are thread waits)"
    if check is not None:
        res.metrics.update(ray_check(check, out, p.ray_check_steps))
    return res


def ray_check(real: dict, in_process: dict, steps: int) -> dict:
    """The in-process ranks against the Ray Train workers over the first ``steps`` steps: rank 0's
    weights at the start of step ``steps`` and its per-step training losses."""
    a = np.asarray(real["ranks"][0]["check_weights"])
    b = np.asarray(in_process["ranks"][0]["check_weights"])
    same_loss = real["ranks"][0]["check_train_loss"] == in_process["ranks"][0]["check_train_loss"]
    return {"ray_check_steps": float(steps), "ray_check_max_abs_diff": float(np.abs(a - b).max()),
            "ray_check_bitwise": float(bool(np.array_equal(a, b)) and same_loss)}


def summarize(p: DPParams, method: str, out: dict) -> Result:
    """Metrics and curves of one seed from every rank's report (rank 0 evaluates)."""
    link, slow_link = Link.from_config(p.link), Link.from_config(p.slow_link)
    world = out["world"]
    ranks = out["ranks"]
    r0 = ranks[0]
    steps = r0["steps"]
    fast = r0["paths"]["fast"]
    slow = r0["paths"].get("slow", {"bytes": 0, "seconds": 0.0, "calls": 0, "collectives": 0})
    fwd = float(np.mean([r["fwd_s"] for r in ranks]))
    bwd = float(np.mean([r["bwd_s"] for r in ranks]))
    opt = float(np.mean([r["opt_s"] for r in ranks]))
    wall = {k: float(np.mean([r.get(k, float("nan")) for r in ranks])) for k in ("fwd_wall_s", "bwd_wall_s", "opt_wall_s")}
    fast_b, slow_b = fast["bytes"] / steps, slow["bytes"] / steps
    t_fast = simtime.fast_path_s(link, method, fast_b, fast["collectives"] / steps, world)
    t_slow = simtime.allreduce_s(link, slow_b, world, slow["collectives"] / steps)
    s_fast = simtime.fast_path_s(slow_link, method, fast_b, fast["collectives"] / steps, world)
    s_slow = simtime.allreduce_s(slow_link, slow_b, world, slow["collectives"] / steps)
    metrics = {
        "final_val_loss": r0["final_val_loss"],
        "bytes_fast_per_step": fast_b, "bytes_slow_per_step": slow_b, "bytes_per_step": fast_b + slow_b,
        "allreduces_per_step": (fast["collectives"] + slow["collectives"]) / steps,   # collectives of both paths
        "allreduce_bytes_per_step": fast_b + slow_b,
        "fwd_s": fwd, "bwd_s": bwd, "opt_s": opt, **wall, "sim_fast_s": t_fast, "sim_slow_s": t_slow,
        "sim_step_s": simtime.step_s(fwd, bwd, opt, t_fast, t_slow),
        "sim_step_s_serial": simtime.step_s(fwd, bwd, opt, t_fast, t_slow, serial=True),
        "slow_fwd_ratio": t_slow / fwd if fwd > 0 else float("nan"),
        "sim_step_s_slow_link": simtime.step_s(fwd, bwd, opt, s_fast, s_slow),
        "slow_fwd_ratio_slow_link": s_slow / fwd if fwd > 0 else float("nan"),
        "gloo_fast_s_per_step": fast["seconds"] / steps, "gloo_slow_s_per_step": slow["seconds"] / steps,
        "exposed_slow_s_per_step": r0["exposed_slow_s"] / steps,
        "tokens_per_s": world * p.batch * r0_context(p) * steps / r0["train_s"],
        "ranks_agree": float(max(abs(r["param_checksum"] - r0["param_checksum"]) for r in ranks)
                             <= 1e-6 * max(1.0, abs(r0["param_checksum"]))),
        "n_params": r0["n_params"], "workers": world,
    }
    metrics.update(takeover_metrics(p, ranks, world, steps, fwd + bwd, metrics["sim_step_s"]))
    metrics["tokens_per_s_sim"] = world * p.batch * r0_context(p) / metrics["sim_step_s"]
    series = {}
    if r0.get("val_steps"):
        series["val_loss"] = (r0["val_steps"], r0["val_loss"])
    tl = r0["train_loss"]
    k = max(1, len(tl) // 200)
    series["train_loss"] = (list(range(0, len(tl) - k + 1, k)),
                            [float(np.mean(tl[i:i + k])) for i in range(0, len(tl) - k + 1, k)])
    codec = "fp32" if method == "fp32" else ("powersgd" if method == "powersgd" else repr(make_torch_codec(p.bits, p.bucket)))
    return Result(metrics=metrics, series=series,
                  info={"method": method, "codec": codec, "link": p.link, "world": world, "block": p.block,
                        "takeover": p.takeover,
                        "sim_rule": "max(T_fwd, T_slow) + max(T_bwd, T_fast) + T_opt; serial: T_bwd + T_fast",
                        "phase_clock": "median thread CPU seconds per phase (wall medians: *_wall_s)"})


def takeover_metrics(p: DPParams, ranks: list[dict], world: int, steps: int, t_exact: float, step_s: float) -> dict:
    """The takeover on the virtual clock: at each step the most loaded live rank first computes the
    micro-batches it took over (each at ``take_cost_ratio`` x the exact micro-batch), then the step as usual; the
    fault-free step is the same without them. Under MeCeFO's svd basis every rank also refreshes its bases once
    per ``refresh`` steps (``refresh_cost_ratio`` x the exact micro-batch), charged to every step as its share.
    ``overloaded_step_ratio``: a rank's compute carrying one extra micro-batch over its normal compute (the
    MeCeFO sheet's measure), the refresh's share included."""
    from components.training.ddp.takeover import TakeoverSpec
    from components.training.mecefo.schedule import takeover

    if p.takeover is None:
        return {"down_frac": 0.0, "sim_step_s_fault_free": step_s, "throughput_loss": 0.0}
    spec = TakeoverSpec.parse(p.takeover, world, _d_model(p))
    seed = ranks[0]["seed"]
    sets, events = spec.schedule(world, steps, seed)
    # a taken micro-batch's CPU cost relative to an exact one (each rank's interleaved microbenchmark after
    # training, median over ranks), applied to the measured exact micro-batch
    rel = float(np.median([r["take_cost_ratio"] for r in ranks]))
    t_take = rel * t_exact
    refresh_rel = float(np.median([r.get("refresh_cost_ratio", 0.0) for r in ranks])) / spec.refresh
    extra = [max(len(ld) - 1 for ld in takeover(down, world).values()) * t_take for down in sets]
    sim = step_s + float(np.mean(extra)) + refresh_rel * t_exact
    return {"down_frac": float(np.mean([len(d) for d in sets])) / world, "failures": float(len(events)),
            "takeover_microbatches": float(sum(r["takes"] for r in ranks)), "take_s": t_take,
            "take_cost_ratio": rel, "refresh_share": refresh_rel,
            "overloaded_step_ratio": 1.0 + rel + refresh_rel if spec.active else float("nan"),
            "sim_step_s_fault_free": step_s, "sim_step_s": sim, "throughput_loss": 1.0 - step_s / sim}


def _d_model(p: DPParams) -> int:
    from components.models.gpt import SIZES

    return SIZES[p.model]["d_model"]


def r0_context(p: DPParams) -> int:
    from components.models.gpt import SIZES

    return SIZES[p.model]["context"]


@technique("ddp_train", family="training", params=DDPParams, validate=_validate, inputs=("corpus",),
           devices=("cpu", "cuda"),
           summary="Data-parallel GPT on Ray Train (gloo) with the gradient sync as a DDP comm hook: "
                   "fp32, torch PowerSGD, plain or error-feedback 8/4/2/1-bit codecs.")
def run_ddp_train(p: DDPParams, ctx) -> Result:
    return run_data_parallel(p, ctx, p.method)
