"""Composed training benchmark: the full `training_composed` experiment (one Ray Train DDP job per variant and
seed: fp32 pre-LN, FAL, DUO-1bit, MeCeFO alone and the three composed, all through the same seeded failure
schedule) with every variant's loss, critical-path bytes, simulated step and throughput loss as ratios to
fp32 DDP of the same run, per-seed losses, wall time and peak memory.

Run: .venv/bin/python benchmarks/bench_training_composed.py [overrides ...]   (debug=true: the tiny flavour)

``--duo-mecefo [SEEDS]`` (issue 32 item 3) is the minimal reproduction of DUO-1bit x MeCeFO's loss under the
frequent_failures schedule (p = 0.05, down 50: ~65% of replica-steps down), on pre-LN blocks (no FAL), with one
approximation at a time switched off: ``duo_mecefo_exact`` (MeCeFO's takeover path, every approximation off:
the no_sync accumulation under DUO), ``duo_mecefo_noskip`` (attention differentiated), ``duo_mecefo_nolowrank``
(full-rank FFN weight gradients), each beside MeCeFO alone under the same approximations, and fp32 and DUO; per
seed, with the excess of each DUO x MeCeFO loss gap to fp32 over the sum of the two alone.

``--duo-mecefo-error [SEEDS]`` (issue 32 item 3, the cause) runs the same schedule's fp32, MeCeFO, DUO and DUO x
MeCeFO in process (no Ray), and DUO and DUO x MeCeFO again with the fast path's error shuffled: the tentative
update uses the exact mean gradient plus the 1-bit error permuted within each tensor, so the error keeps its size
and values but no longer follows each coordinate's own gradient. Per seed, the excess over additive with the
real error and with the shuffled one.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import (STATUS, WALL, claims_table, fig, fig_ratio, fig_se, headline, per_seed_table,  # noqa: E402
                              run_isolated, variant_metrics, variant_table)


FREQUENT = {"failure_rate": 0.05, "down_steps": 50, "kills": "[]"}
# name: (sync, the MeCeFO approximations switched off), pre-LN blocks; each DUO x MeCeFO variant is paired with
# MeCeFO alone on fp32 sync under the same approximations (mecefo itself for the full set)
PROBE = {
    "duo_mecefo": ("duo", {}),
    "duo_mecefo_exact": ("duo", {"skip_attn": "false", "recompute_ffn": "false", "lowrank": "false"}),
    "duo_mecefo_noskip": ("duo", {"skip_attn": "false"}),
    "mecefo_noskip": ("fp32", {"skip_attn": "false"}),
    "duo_mecefo_nolowrank": ("duo", {"lowrank": "false"}),
    "mecefo_nolowrank": ("fp32", {"lowrank": "false"}),
}
PAIRS = {"duo_mecefo": "mecefo", "duo_mecefo_exact": "duo", "duo_mecefo_noskip": "mecefo_noskip",
         "duo_mecefo_nolowrank": "mecefo_nolowrank"}


def probe_overrides(seeds: str) -> list[str]:
    """The frequent_failures schedule (drawn, also in the debug flavour) on fp32 / duo / mecefo and the
    variants of :data:`PROBE`."""
    out = [f"experiment.seeds={seeds}"]
    for v in ("fp32", "duo", "mecefo"):
        out += [f"experiment.variants.{v}.params.takeover.{k}={x}" for k, x in FREQUENT.items()]
    sched = ",".join(f"{k}:{x}" for k, x in FREQUENT.items())
    for name, (sync, off) in PROBE.items():
        extra = "".join(f",{k}:{x}" for k, x in off.items())
        tech = "technique:duo,role:technique,params:{bits:1," if sync == "duo" else \
            "technique:ddp_train,role:technique,params:{method:fp32,"
        out.append(f"+experiment.variants.{name}={{{tech}block:pre_ln,takeover:{{recovery:mecefo,{sched}{extra}}}}}}}")
    return out + [f"only=[fp32,duo,mecefo,{','.join(PROBE)}]"]


def probe(seeds: str, overrides: list[str]) -> None:
    out, peak, wall = run_isolated("training_composed", *probe_overrides(seeds), *overrides)
    headline("training_composed: DUO x MeCeFO probe (frequent failures)", out, peak, wall, what="probe")
    per_seed_table(out, "final_val_loss")
    loss = {n: {s: so.result.metrics["final_val_loss"] for s, so in o.seeds.items() if so.result is not None}
            for n, o in out.variants.items()}
    print("\nexcess over additive, per seed: (X - fp32) - (duo - fp32) - (X's MeCeFO on fp32 sync - fp32); for "
          "duo_mecefo_exact the pair is duo itself (0 when the takeover's no_sync accumulation is exact under DUO)")
    for s in sorted(loss.get("fp32", {})):
        f, d = loss["fp32"][s], loss.get("duo", {}).get(s)
        cells = []
        for x, alone in PAIRS.items():
            a, m = loss.get(x, {}).get(s), loss.get(alone, {}).get(s)
            if None in (d, a, m):
                continue
            excess = a - m if x == "duo_mecefo_exact" else (a - f) - (d - f) - (m - f)
            cells.append(f"{x} {excess:+.4f}")
        print(f"seed {s}: " + " · ".join(cells))


SHUFFLED = "duo_shuffled_error"


def register_shuffled_error_duo() -> str:
    """Register (once, at run time: a benchmark-only strategy) and name :data:`SHUFFLED`: DUO whose tentative
    update uses the exact mean gradient plus its own 1-bit error permuted within each tensor, the same
    permutation on every rank (one generator per seed and step). torch is imported here, not at module import."""
    import torch

    from components.core import registry
    from components.training.ddp import world as comm
    from components.training.duo.fast_slow import DuoStrategy

    if SHUFFLED in registry.names("ddp_strategy"):
        return SHUFFLED

    class ShuffledErrorDuo(DuoStrategy):
        def after_backward(self, step, lr):
            gen = torch.Generator().manual_seed(1_000_003 * self.cfg["seed"] + step)
            for p in self.module_params:   # p.grad holds the decoded fast-path mean (qbar)
                exact = self.cached[id(p)].clone()
                comm.all_reduce(exact, group=self.group)
                exact.div_(self.world)
                err = (p.grad - exact).reshape(-1)
                p.grad = exact + err[torch.randperm(err.numel(), generator=gen)].view_as(exact)
            super().after_backward(step, lr)

    registry.add("ddp_strategy", SHUFFLED, ShuffledErrorDuo,
                 "DUO with its fast-path error shuffled within each tensor (bench_training_composed.py control)")
    return SHUFFLED


def error_probe(seeds: str, overrides: list[str]) -> None:
    """fp32, MeCeFO, DUO and DUO x MeCeFO under the frequent schedule, in process, with DUO's real fast-path
    error and with it shuffled (:func:`register_shuffled_error_duo`); final val loss per seed and the excess over additive."""
    import ast
    import time

    from components.core.context import RunContext
    from components.data.char_corpus import prepare_char_corpus
    from components.training.ddp.technique import run_data_parallel
    from pipelines import config, dag

    spec = dag.validate(config.compose(["experiment=training_composed", *probe_overrides(seeds), *overrides]))
    params = {v.name: v.params for v in spec.variants}
    corpus = prepare_char_corpus(spec.entry("corpus").params, None)   # the experiment's own prepare step
    shuffled = register_shuffled_error_duo()
    runs = {"fp32": ("fp32", "fp32", "sync"), "mecefo": ("mecefo", "fp32", "sync"), "duo": ("duo", "duo", "duo"),
            "duo_mecefo": ("duo_mecefo", "duo", "duo"), "duo shuffled": ("duo", "duo", shuffled),
            "duo_mecefo shuffled": ("duo_mecefo", "duo", shuffled)}
    print(f"## DUO x MeCeFO: the fast path's error, real and shuffled (frequent failures, {len(runs)} runs per seed)\n")
    print("| seed | " + " | ".join(runs) + " | excess, real error | excess, shuffled error |")
    print("|---|" + "---:|" * (len(runs) + 2))
    for seed in ast.literal_eval(seeds):
        loss = {}
        for label, (variant, method, strategy) in runs.items():
            t0 = time.perf_counter()
            res = run_data_parallel(params[variant], RunContext(seed=seed, inputs={"corpus": corpus}), method, strategy)
            loss[label] = res.metrics["final_val_loss"]
            print(f"  seed {seed} {label}: {loss[label]:.4f} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        real = loss["duo_mecefo"] - loss["duo"] - loss["mecefo"] + loss["fp32"]
        shuf = loss["duo_mecefo shuffled"] - loss["duo shuffled"] - loss["mecefo"] + loss["fp32"]
        print(f"| {seed} | " + " | ".join(f"{loss[k]:.4f}" for k in runs) + f" | {real:+.4f} | {shuf:+.4f} |", flush=True)


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("training_composed", *overrides)
    base = variant_metrics(out).get("fp32", {})

    headline("training_composed", out, peak, wall)
    variant_table(out, [
        STATUS, ("final_val_loss (+-se)", fig_se("final_val_loss")), ("/ fp32", fig_ratio(base, "final_val_loss", fmt=".4f")),
        ("fast bytes / fp32", fig_ratio(base, "bytes_fast_per_step", fmt=".4f")),
        ("all bytes / fp32", fig_ratio(base, "bytes_per_step", fmt=".4f")), ("sim step / fp32", fig_ratio(base, "sim_step_s")),
        ("sim step fault-free / fp32", fig_ratio(base, "sim_step_s_fault_free", "sim_step_s")),
        ("throughput loss", fig("throughput_loss", ".3f")), ("overloaded step", fig("overloaded_step_ratio", ".2f")),
        ("down frac", fig("down_frac", ".3f")), ("taken micro-batches", fig("takeover_microbatches", ".0f")), WALL])
    per_seed_table(out, "final_val_loss")
    claims_table(out)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--duo-mecefo-error":
        seeds = args[1] if len(args) > 1 and args[1].startswith("[") else "[2]"
        error_probe(seeds, [a for a in args[1:] if a != seeds])
    elif args and args[0] == "--duo-mecefo":
        seeds = args[1] if len(args) > 1 and args[1].startswith("[") else "[0,1,2]"
        probe(seeds, [a for a in args[1:] if a != seeds])
    else:
        main(args)
