"""`probe`: a technique of known behaviour for checking the platform itself.

It sleeps or spins for a set time, reports a few metrics and steps, and can fail on purpose at a
given step or seed. Uses: the platform-overhead benchmark (technique time is known exactly),
tests of failure handling (a crashed variant must end FAILED with the error as a tag), of the
seed axis (``noise`` draws from ``ctx.seed``) and of the prepare graph (``probe_reader`` reads
the probe prepare steps of components/core/probe_prepare.py), smoke tests of a new cluster or
tracking server.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import numpy as np

from components.core.errors import require
from components.core.registry import technique
from components.core.result import Result


class InjectedFailure(RuntimeError):
    """Raised by the probe when asked to fail."""


@dataclass
class ProbeParams:
    seconds: float = 1.0
    steps: int = 10
    mode: Literal["sleep", "spin"] = "sleep"  # spin: burn CPU instead of sleeping
    fail_at_step: int = -1                    # >= 0: raise InjectedFailure at that step
    value: float = 1.0                        # reported as metric `value` (claims can test it)
    noise: float = 0.0                        # `value` + noise * N(0, 1), drawn from ctx.seed
    fail_on_seed: int = -1                    # >= 0: raise InjectedFailure when ctx.seed is this

    def check(self):
        require(self.seconds >= 0, "seconds", self.seconds, "a non-negative duration")
        require(self.steps >= 1, "steps", self.steps, "a positive number of steps")


@technique("probe", family="core", params=ProbeParams,
           summary="Platform self-check: known duration and metrics, optional injected failure.")
def run_probe(p: ProbeParams, ctx) -> Result:
    if ctx.seed == p.fail_on_seed:
        raise InjectedFailure(f"probe failed on purpose on seed {ctx.seed}")
    value = p.value + p.noise * float(np.random.default_rng(ctx.seed).standard_normal()) if p.noise else p.value
    per = p.seconds / p.steps
    losses = []
    for step in range(p.steps):
        if step == p.fail_at_step:
            raise InjectedFailure(f"probe failed on purpose at step {step}")
        end = time.perf_counter() + per
        if p.mode == "sleep":
            time.sleep(per)
        else:
            while time.perf_counter() < end:
                pass
        losses.append(value / (step + 1))
        ctx.progress(step + 1, p.steps, loss=losses[-1])
    return Result(metrics={"value": value, "final_loss": losses[-1], "steps": p.steps, "seed": ctx.seed},
                  series={"loss": losses})


@dataclass
class ReaderParams:
    scale: float = 1.0


@technique("probe_reader", family="core", params=ReaderParams, inputs=("table", "draw"),
           summary="Platform self-check of the prepare graph: reports what its two prepared inputs hold.")
def run_probe_reader(p: ReaderParams, ctx) -> Result:
    table, draw = ctx.input("table"), ctx.input("draw")
    return Result(metrics={"table_sum": p.scale * float(sum(table["values"])), "draw": draw["draw"],
                           "draw_seed": draw["seed"], "seed": ctx.seed, "n_inputs": len(ctx.inputs),
                           "draw_table_sum": draw["table_sum"]})
