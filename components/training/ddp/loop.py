"""The data-parallel rank loop: a char-level GPT trained with DDP, one strategy per method, any
registered block (``cfg["block"]``), and optionally MeCeFO's neighbour takeover through a failure
schedule (``cfg["takeover"]``, :mod:`components.training.ddp.takeover`). The same loop runs on a Ray
Train gloo worker (:func:`train_worker`) or as an in-process rank thread (:func:`train_in_process`,
:mod:`components.training.ddp.world`).

One TorchTrainer run trains one seed of a variant (``cfg["seed"]``; the DAG runs the seeds). Each
rank samples its own batches (seeded by seed and rank, identical across methods); rank 0 evaluates
on fixed validation windows and returns per-step series, bytes per path, gloo seconds per path and
median compute phase times (forward, backward with the hook's codec work, optimizer) through a
small checkpoint (Ray Train V2 returns metrics only with one).

Device: the model, its flat parameter vector, the optimizer's moments and every batch live on
``cfg["device"]`` (the task's ``ctx.device``; cpu by default). Batches are drawn on cpu from the seeded
generators and then moved, so a seed trains on the same windows on any device.

Phase clock (the one place every data-parallel experiment's simulated step gets its compute from):
the calling thread's CPU time (``time.thread_time``) on cpu, medians over the steps; on cuda the wall
clock, each phase ending with the device synchronized (a thread's CPU time does not see GPU kernels;
``components.core.devices.clock``). Wall time on this
2-core machine shared by 4 workers (and other jobs) measures the scheduler as much as the model: a
variant run while other jobs load the machine gets slower phases than one run on an idle machine,
and DUO's forward shares its worker's half core with its own slow all-reduce (gloo's thread), which
a link with its own NIC would not take from compute. The thread's CPU time counts the forward,
backward (with the comm hook's encode/decode, not its collective) and optimizer work alone. The wall
medians stay beside them (``*_wall_s``); takeover's cost ratio is measured on the same clock.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import threading
import time

import numpy as np

_BUILD = threading.Lock()   # in-process ranks build their replicas one at a time (torch's global seed)


class RankCrashed(RuntimeError):
    """``fail_at`` on an in-process rank: the thread's stand-in for a worker process exiting."""


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def run_seed(cfg: dict, seed: int, train, val, rank: int, world: int, group=None, process_group=None) -> dict:
    """One rank's training run. ``group``/``process_group``: an in-process rank's collective handle and
    its one-rank DDP group (:func:`components.training.ddp.world.run_ranks`); None on a gloo worker.
    ``check_steps`` (K): rank 0 also returns the weights at the start of step K (``check_weights``) and
    its first K losses; ``stop_after`` (K): the run ends there (the real-worker prefix of a check)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from components.core import devices
    from components.core.timing import clock_of
    from components.data.char_corpus import sample_batch
    from components.models.gpt import GPT, GPTConfig, evaluate_loss
    from components.training.ddp.optim import lr_at
    from components.training.ddp.strategies import flatten_params
    from components.training.ddp.takeover import Takeover, TakeoverSpec
    from components.training.on_device import InputsTo

    dev = cfg.get("device", "cpu")
    with _BUILD:   # initialised on cpu (the same weights on any device), then moved
        torch.manual_seed(seed)
        model = GPT(GPTConfig(vocab_size=cfg["vocab_size"], block=cfg.get("block", "pre_ln"), **cfg["model"]))
    model.to(dev)
    flat = flatten_params(model)
    ctx_len = cfg["model"]["context"]
    ddp = DDP(model, bucket_cap_mb=cfg["ddp_bucket_mb"], process_group=process_group)
    strat = cfg["strategy"](ddp, {**cfg, "seed": seed}, flat, group)  # a registered ddp_strategy class
    strat.attach()
    rng = np.random.default_rng(seed * 10_007 + rank)
    steps, fail = cfg["steps"], cfg.get("fail_at")
    spec = TakeoverSpec.parse(cfg.get("takeover"), world, cfg["model"]["d_model"])
    tk = Takeover(spec, world, steps, seed, rank, dev) if cfg.get("takeover") is not None else None
    fwd, bwd, opt, hook_s = [], [], [], []            # thread CPU seconds per phase
    fwd_w, bwd_w, opt_w = [], [], []                  # wall seconds per phase (collectives and waits out)
    val_steps, val_loss, train_loss = [], [], []
    train_s = 0.0
    check_at = cfg.get("stop_after") or cfg.get("check_steps") or 0
    check_weights = None

    phase_clock = clock_of(devices.clock(dev))

    def clk() -> float:   # the phase clock, read after the device's queued work is done
        devices.synchronize(dev)
        return phase_clock()

    def evaluate():
        return evaluate_loss(InputsTo(model), val, ctx_len, cfg["eval_batch"], cfg["eval_batches"], seed=12345)

    for step in range(steps):
        if fail and rank == fail[0] and step == fail[1]:
            if group is not None:
                raise RankCrashed(f"simulated crash of rank {rank} at step {step} (fail_at)")
            os._exit(3)  # simulated worker crash (tests): the run must end FAILED, not hang
        if check_at and step == check_at:
            check_weights = flat.detach().clone()
            if cfg.get("stop_after"):
                break
        if rank == 0 and cfg["eval_every"] and step % cfg["eval_every"] == 0:
            val_steps.append(step)
            val_loss.append(evaluate())
        lr = lr_at(step, steps, cfg["lr"], cfg["warmup"], cfg["final_lr_frac"])
        if tk:   # every micro-batch from (seed, step, j), whoever carries it
            x, y = tk.batch(train, cfg["batch"], ctx_len, step, rank)
        else:
            x, y = sample_batch(train, cfg["batch"], ctx_len, rng)
        x, y = x.to(dev), y.to(dev)
        fast_before = strat.paths["fast"].seconds
        exposed_before = strat.exposed_s
        c0, t0 = clk(), time.perf_counter()
        strat.before_forward(step)
        c0b = clk()
        take_s = tk.run_extras(ddp, train, cfg["batch"], ctx_len, step) if tk else 0.0
        c1, t1 = clk(), time.perf_counter()
        _, loss = ddp(x, y)
        c2, t2 = clk(), time.perf_counter()
        (loss * 0.0 if tk and tk.is_down(step) else loss).backward()   # a down replica sends a zero gradient
        c3, t3 = clk(), time.perf_counter()
        strat.after_backward(step, lr)
        c4, t4 = clk(), time.perf_counter()
        coll = strat.paths["fast"].seconds - fast_before
        fwd.append(c2 - c1)
        bwd.append(c3 - c2)
        opt.append((c0b - c0) + (c4 - c3))
        fwd_w.append(t2 - t1)
        bwd_w.append(t3 - t2 - coll)
        opt_w.append(t4 - t3 - (strat.exposed_s - exposed_before) + (t1 - t0 - take_s))
        hook_s.append(coll)
        train_s += t4 - t0
        train_loss.append(loss.item())
        for p in ddp.parameters():
            p.grad = None
    t0 = time.perf_counter()
    strat.finish(lr_at(steps - 1, steps, cfg["lr"], cfg["warmup"], cfg["final_lr_frac"]))
    train_s += time.perf_counter() - t0
    out = {"seed": seed, "train_s": train_s, "steps": steps,
           "fwd_s": _median(fwd), "bwd_s": _median(bwd), "opt_s": _median(opt),
           "fwd_wall_s": _median(fwd_w), "bwd_wall_s": _median(bwd_w), "opt_wall_s": _median(opt_w),
           "n_params": sum(p.numel() for p in model.parameters()),
           "paths": {k: vars(v).copy() for k, v in strat.paths.items()},
           "exposed_slow_s": strat.exposed_s, "takes": tk.takes if tk else 0,
           "take_cost_ratio": tk.cost_ratio(ddp, train, cfg["batch"], ctx_len) if tk and not cfg.get("stop_after") else 1.0}
    out["refresh_cost_ratio"] = tk.refresh_cost_ratio(ddp) if tk and not cfg.get("stop_after") else 0.0
    if rank == 0 and check_weights is not None:
        out.update(check_weights=check_weights.cpu().tolist(), check_train_loss=train_loss[:check_at])
    if rank == 0 and cfg.get("stop_after"):
        out.update(train_loss=train_loss)
    elif rank == 0:
        if cfg["eval_every"]:
            val_steps.append(steps)
            val_loss.append(evaluate())
        out.update(val_steps=val_steps, val_loss=val_loss, train_loss=train_loss,
                   final_val_loss=evaluate_loss(InputsTo(model), val, ctx_len, cfg["eval_batch"],
                                                cfg["final_eval_batches"],
                                                seed=54321))
    # every rank holds the same weights after the last update (checked by the tests)
    out["param_checksum"] = float(sum(float(p.detach().double().sum()) for p in model.parameters()))
    return out


def train_in_process(cfg: dict) -> dict:
    """The same run with the ranks as threads of this process (:mod:`components.training.ddp.world`):
    what :func:`train_worker` returns through its checkpoint, ``{"ranks": [...], "world": W}``."""
    from components.training.ddp.world import run_ranks

    train, val, world = np.asarray(cfg["train"]), np.asarray(cfg["val"]), cfg["workers"]
    ranks = run_ranks(lambda rank, group, pg: run_seed(cfg, cfg["seed"], train, val, rank, world, group, pg), world)
    return {"ranks": ranks, "world": world}


def train_worker(cfg: dict) -> None:
    """Ray Train entry point (one call per worker)."""
    import ray.train
    import ray.train.torch
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if cfg.get("device", "cpu") != "cpu":   # the GPU Ray Train gave this worker (one each, NCCL)
        dev = ray.train.torch.get_device()
        torch.cuda.set_device(dev)
        cfg = {**cfg, "device": str(dev)}
    rank, world = dist.get_rank(), dist.get_world_size()
    train = np.asarray(cfg["train"])
    val = np.asarray(cfg["val"])
    run = run_seed(cfg, cfg["seed"], train, val, rank, world)
    gathered = [None] * world
    dist.all_gather_object(gathered, run)
    with tempfile.TemporaryDirectory() as d:
        ckpt = None
        if rank == 0:
            with open(os.path.join(d, "result.json"), "w") as f:
                json.dump({"ranks": gathered, "world": world}, f)
            ckpt = ray.train.Checkpoint.from_directory(d)
        ray.train.report({"done": 1}, checkpoint=ckpt)
