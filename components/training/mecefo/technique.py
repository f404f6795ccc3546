"""Registered technique ``mecefo``: 4 data-parallel replicas through a seeded failure schedule, a
down replica's micro-batch carried by its ring neighbour under MeCeFO's approximations
(``recovery: mecefo``) or exactly (``ndb``), against checkpoint-restart and fault-free training.

Loss: the replicas' math vectorised in one process (:mod:`train`). Time: the virtual clock of
:mod:`simtime` on the microbenchmarked costs of the ``timing`` input, every replica also paying its
share of the svd bases' refresh (one refresh per ``refresh`` steps) under MeCeFO. Faults: with
``actor_check`` the first ``actor_steps`` steps also run on Ray actors killed and restarted by Ray,
and must give the vectorised run's weights.

Device: the vectorised run (training, saved bytes, gradient checks) runs on ``ctx.device``; the actor
check runs on cpu (the actors hold no GPU) against an in-process cpu run of the same steps. The
``timing`` input is a measured time, keyed by the device it ran on; a run refuses one from another."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from components.core.errors import ConfigError, require
from components.core.netsim import Link
from components.core.registry import technique
from components.core.result import Result
from components.training.mecefo import simtime
from components.training.mecefo.approx import (Approx, SavedBytes, check_basis, check_rank, check_refresh, grad_of,
                                                microbatch_loss)
from components.training.mecefo.schedule import failure_schedule, fixed_schedule, takeover
from components.training.mecefo.timing import mode_key
from components.training.mecefo.train import TrainSetup, microbatch, params_vector, projection_gen, train


@dataclass
class MeCeFOParams(TrainSetup):
    """Recovery under failures; the approximations (each switchable) apply to taken-over micro-batches."""

    recovery: Literal["fault_free", "ndb", "mecefo", "ckpt_restart", "drop"] = "mecefo"
    failure_rate: float = 0.05        # per step, per live replica
    down_steps: int = 50              # a failed replica is back after this many steps
    skip_attn: bool = True
    recompute_ffn: bool = True
    lowrank: bool = True
    rank: int = 0                     # FFN weight-gradient sketch rank; 0: in/8 per linear
    basis: str = "svd"                # svd: W's top-r right singular vectors (the paper); gaussian: the sheet's sketch
    refresh: int = 200                # svd: steps between basis refreshes (the sheet: every 200 steps)
    attn_mean: bool = True            # a skipped attention's gradient: mean over the micro-batches that computed it
    approx_own: bool = False          # also approximate the overloaded replica's own micro-batch
    ckpt_every: int = 50              # checkpoint-restart: steps between checkpoints
    restart_penalty_s: float = 30.0
    link: dict = field(default_factory=lambda: {"bandwidth": "1Gbps", "latency": "50us"})
    actor_check: bool = False         # also run the first actor_steps on Ray actors with real kills
    actor_steps: int = 24
    actor_kills: list = field(default_factory=lambda: [[3, 1], [9, 2]])   # [step, replica] failure onsets
    actor_down: int = 5
    crash_at: list | None = None      # [replica, step]: that actor exits outside the schedule (fault drill)
    timeout_s: float = 120.0
    # the virtual clock only, no training: checkpoint-restart's rolled-back steps replay the same batches, so its
    # trajectory is fault_free's bit for bit (tests/training/test_mecefo.py) and only its clock differs
    clock_only: bool = False

    def check(self):
        self.check_setup()
        require(isinstance(self.failure_rate, (int, float)) and 0.0 <= self.failure_rate < 1.0,
                "failure_rate", self.failure_rate, "a probability in [0, 1)")
        require(isinstance(self.down_steps, int) and self.down_steps >= 1, "down_steps", self.down_steps,
                "a positive number of steps")
        check_rank(self.rank, self.d_model)
        check_basis(self.basis)
        check_refresh(self.refresh)
        require(self.ckpt_every >= 1, "ckpt_every", self.ckpt_every, "a positive number of steps")
        require(self.restart_penalty_s >= 0, "restart_penalty_s", self.restart_penalty_s, "a non-negative duration")
        Link.from_config(self.link)
        require(1 <= self.actor_steps <= self.steps, "actor_steps", self.actor_steps, f"in [1, steps={self.steps}]")
        ok = isinstance(self.actor_kills, list) and all(
            isinstance(k, (list, tuple)) and len(k) == 2 and 0 <= k[0] < self.actor_steps and 0 <= k[1] < self.replicas
            for k in self.actor_kills)
        require(ok, "actor_kills", self.actor_kills, f"a list of [step < actor_steps, replica < {self.replicas}]")
        require(self.actor_down >= 1, "actor_down", self.actor_down, "a positive number of steps")
        require(self.crash_at is None or (len(self.crash_at) == 2 and 0 <= self.crash_at[0] < self.replicas),
                "crash_at", self.crash_at, f"null or [replica < {self.replicas}, step]")
        require(self.timeout_s >= 5, "timeout_s", self.timeout_s, "at least 5 seconds")
        require(not self.clock_only or self.recovery == "ckpt_restart", "clock_only", self.clock_only,
                "false unless recovery=ckpt_restart (the one recovery whose trajectory is fault_free's)")

    def approx(self) -> Approx:
        return Approx(self.skip_attn, self.recompute_ffn, self.lowrank, self.rank, self.basis, self.attn_mean,
                      self.refresh)


def _validate(p: MeCeFOParams, exp: dict) -> None:
    """The timing microbenchmark must have measured this variant's sketch rank."""
    step = ((exp.get("prepare") or {}).get("timing") or {})
    rank = (step.get("params") or {}).get("rank", 0)
    if rank != p.rank:
        raise ConfigError("rank", p.rank, f"the rank the timing step measured (prepare.timing.params.rank={rank})")


def actor_check(p: MeCeFOParams, corpus, seed: int, a: Approx) -> dict:
    """The first ``actor_steps`` on Ray actors with real kills vs the vectorised loop, same schedule, both
    on cpu: the actors hold no GPU, and a cuda run's rounding would differ from theirs."""
    sets, _ = fixed_schedule(p.replicas, p.actor_steps, [tuple(k) for k in p.actor_kills], p.actor_down)
    from components.training.mecefo.actors import run_on_actors

    act = run_on_actors(p, corpus, seed, sets, p.recovery, a, p.approx_own, p.actor_steps,
                        crash_at=tuple(p.crash_at) if p.crash_at else None, timeout_s=p.timeout_s)
    vec = params_vector(train(p, corpus, seed, sets, p.recovery, a, p.approx_own, steps=p.actor_steps,
                              evaluate=False, grouped=False)["model"])
    err = max(float((w - vec).abs().max()) for w in act["weights"].values())
    tn, to = act["times"]["normal"], act["times"]["overloaded"]
    med = lambda xs: float(np.median(xs)) if xs else float("nan")  # noqa: E731
    return {"actor_vs_vectorised_err": err, "actor_kills": float(act["kills"]), "actor_restarts": float(act["restarts"]),
            "actor_resyncs": float(act["resyncs"]), "actor_wall_s": act["wall_s"],
            "real_step_s_normal": med(tn), "real_step_s_overloaded": med(to),
            "real_overloaded_step_ratio": med(to) / med(tn) if tn and to else float("nan")}


@technique("mecefo", family="training", params=MeCeFOParams, validate=_validate, inputs=("corpus", "timing"),
           devices=("cpu", "cuda"),
           summary="MeCeFO (NeurIPS 2025): a failed DP replica's ring neighbour carries its micro-batch with attention "
                   "skipped in backward, FFN recomputation and low-rank FFN weight gradients; vs exact "
                   "neighbour-do-both, checkpoint-restart, fault-free; replicas as Ray actors killed and restarted.")
def run_mecefo(p: MeCeFOParams, ctx) -> Result:
    corpus, timing, dev = ctx.input("corpus"), ctx.input("timing"), ctx.device
    require(timing.get("device", "cpu") == dev, "timing.device", timing.get("device", "cpu"),
            f"{dev}, where this run trains (the virtual clock reads the micro-batch costs measured there)")
    n, a, seed = p.replicas, p.approx(), ctx.seed
    t_start = time.perf_counter()
    sets, events = failure_schedule(n, p.steps, p.failure_rate, p.down_steps, seed)
    if p.clock_only:   # the initial model: its parameter count and activation bytes are all the clock reads
        out = train(p, corpus, seed, sets, p.recovery, a, steps=0, evaluate=False, device=dev)
        out |= {"val_steps": [], "cos": []}
    else:
        out = train(p, corpus, seed, sets, p.recovery, a, p.approx_own, progress=ctx.progress, device=dev)
    model = out["model"]

    # --- virtual clock on the microbenchmarked costs
    modes = timing["modes"]
    t_exact = modes["exact"]["s"]
    t_take = {"ndb": t_exact, "mecefo": modes[mode_key(a)]["s"]}.get(p.recovery, 0.0)
    t_own = modes[mode_key(a)]["s"] if p.recovery == "mecefo" and p.approx_own else t_exact
    # every replica refreshes its svd bases once per window: its share of one refresh, on every step
    t_refresh = timing["svd_refresh_s"] / p.refresh if p.recovery == "mecefo" and a.lowrank and a.basis == "svd" else 0.0
    ar = simtime.allreduce_s(Link.from_config(p.link), out["n_params"], n)
    ff_total = p.steps * (t_exact + ar)
    if p.recovery == "ckpt_restart":
        _, cr_events = failure_schedule(n, p.steps, p.failure_rate, 1, seed)   # a spare replaces at once
        total, lost = simtime.checkpoint_restart_s(p.steps, cr_events, t_exact + ar, p.restart_penalty_s, p.ckpt_every)
        per_step = [(t_exact + ar) * total / ff_total] * p.steps
        failures = len(cr_events)
    else:
        train_sets = sets if p.recovery in ("ndb", "mecefo", "drop") else [frozenset()] * p.steps
        if p.recovery == "drop":
            per_step = [t_exact + ar] * p.steps
        else:
            per_step = [t + t_refresh for t in simtime.step_times(train_sets, n, t_exact, t_take or t_exact, t_own, ar)]
        total, lost, failures = float(sum(per_step)), 0.0, len(events) if p.recovery != "fault_free" else 0
    over = [max(sum(t_own if j == i else t_take for j in ld) for i, ld in takeover(d, n).items() if len(ld) > 1)
            for d in sets if d] if p.recovery in ("ndb", "mecefo") else []
    tokens = p.steps * n * p.batch * p.context

    # --- saved activations of one overloaded replica (own + one taken micro-batch) vs a normal one
    x, y = microbatch(corpus.train, p, seed, 0, 0)

    def saved(mode):
        with SavedBytes(model) as sb:
            microbatch_loss(model, x, y, mode, projection_gen(seed, 0, 0))
        return sb.nbytes

    b_exact = saved(None)
    b_take = {"ndb": b_exact, "mecefo": saved(a)}.get(p.recovery, 0)
    b_own = saved(a) if p.recovery == "mecefo" and p.approx_own else b_exact
    tb_exact = modes["exact"]["saved_bytes"]
    tb_take = {"ndb": tb_exact, "mecefo": modes[mode_key(a)]["saved_bytes"]}.get(p.recovery, 0)
    tb_own = modes[mode_key(a)]["saved_bytes"] if p.recovery == "mecefo" and p.approx_own else tb_exact
    has_take = p.recovery in ("ndb", "mecefo")
    m = {"sim_step_s": total / p.steps, "sim_total_s": total, "sim_lost_s": lost,
         "tokens_per_s": tokens / total, "throughput_loss": 1.0 - ff_total / total,
         "overloaded_step_ratio": (t_own + t_take + t_refresh) / t_exact if has_take else 1.0,
         "overloaded_step_ratio_sched": (float(np.mean(over)) + t_refresh) / t_exact if over else 1.0,
         "saved_activation_ratio": (b_own + b_take) / b_exact if has_take else 1.0,
         "saved_activation_ratio_timing": (tb_own + tb_take) / tb_exact if has_take else 1.0,
         "saved_bytes_exact": float(b_exact), "saved_bytes_taken": float(b_take),
         "down_frac": float(np.mean([len(d) for d in sets])) / n, "failures": float(failures),
         "t_exact_s": t_exact, "t_take_s": t_take, "allreduce_s": ar, "n_params": float(out["n_params"]),
         "refresh_share": t_refresh / t_exact, "basis_refreshes": float(out["basis_refreshes"]),
         "allreduces_per_step": 1.0, "allreduce_bytes_per_step": 4.0 * out["n_params"]}   # one fp32 ring all-reduce
    if "final_val_loss" in out:
        m["final_val_loss"] = out["final_val_loss"]
    for k, mode in modes.items():     # every ablation's cost from the same microbenchmark
        m[f"time_ratio_{k.replace('+', '_')}"] = mode["s"] / t_exact
        m[f"saved_ratio_{k.replace('+', '_')}"] = mode["saved_bytes"] / tb_exact
    if p.recovery == "mecefo":
        for k in out["cos"][0]:   # grad_cosine, _step, _skip_rest, _lowrank_ffn, attn_grad_share: means over the run
            vals = [c[k] for c in out["cos"] if np.isfinite(c[k])]
            m[k] = float(np.mean(vals)) if vals else float("nan")
        full = Approx(skip_attn=False, recompute_ffn=p.recompute_ffn, lowrank=True, rank=4 * p.d_model)
        m["exact_mode_grad_err"] = float((grad_of(model, x, y, full) - grad_of(model, x, y, None)).abs().max())
    if p.actor_check:
        m.update(actor_check(p, corpus, seed, a))
    m["wall_s"] = time.perf_counter() - t_start
    vs = out["val_steps"]
    clock = np.concatenate([[0.0], np.cumsum(per_step)])
    series = {"val_loss": (vs, out["val_loss"]),
              "val_loss_vs_sim_s": ([float(clock[s]) for s in vs], out["val_loss"], "virtual s")} if vs else {}
    if out["cos"]:
        series["grad_cosine"] = (out["cos_steps"], [c["grad_cosine"] for c in out["cos"]])
    return Result(metrics=m, series=series,
                  info={"events": events[:200], "timing": timing, "approx": {"skip_attn": a.skip_attn, "recompute_ffn": a.recompute_ffn, "lowrank": a.lowrank,
                         "rank": a.rank, "basis": a.basis, "attn_mean": a.attn_mean, "refresh": a.refresh}, "clock": "max over live replicas of own + taken micro-batch costs, "
                                                   "plus the fp32 ring all-reduce on the link"})
