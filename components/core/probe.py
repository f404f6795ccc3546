"""`probe`: a technique of known behaviour for checking the platform itself.

It sleeps or spins for a set time, reports a few metrics and steps, and can fail on purpose at a
given step. Uses: the platform-overhead benchmark (technique time is known exactly), tests of
failure handling (a crashed variant must end FAILED with the error as a tag), smoke tests of a
new cluster or tracking server.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

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

    def check(self):
        require(self.seconds >= 0, "seconds", self.seconds, "a non-negative duration")
        require(self.steps >= 1, "steps", self.steps, "a positive number of steps")


@technique("probe", family="core", params=ProbeParams,
           summary="Platform self-check: known duration and metrics, optional injected failure.")
def run_probe(p: ProbeParams, ctx) -> Result:
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
        losses.append(p.value / (step + 1))
        ctx.progress(step + 1, p.steps, loss=losses[-1])
    return Result(metrics={"value": p.value, "final_loss": losses[-1], "steps": p.steps},
                  series={"loss": losses})
