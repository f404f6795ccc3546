"""Simulated step time on the spine's alpha-beta link, from the bytes each path really produced.

Fast path: fp32 and PowerSGD are ring all-reduces (PowerSGD: three per step), codecs are ring
all-gathers of the packed payloads. Slow path (DUO): one fp32 ring all-reduce. The spec sheet's
overlap rule: ``T_step = max(T_fwd, T_slow) + max(T_bwd, T_fast) + T_opt`` - the slow path hides only
while it fits inside the forward. ``serial`` is the same with the fast path after the backward
(``T_bwd + T_fast``), which is what DDP does when the whole model fits in one bucket, as here.
"""
from __future__ import annotations

from components.core.netsim import Link


def allreduce_s(link: Link, nbytes: float, world: int, collectives: float = 1.0) -> float:
    """``collectives`` ring all-reduces carrying ``nbytes`` in total (the spine's ring cost each)."""
    if world <= 1 or collectives <= 0:
        return 0.0
    return collectives * link.ring_allreduce_s(nbytes / collectives, world)


def allgather_s(link: Link, nbytes_each: float, world: int, collectives: float = 1.0) -> float:
    """``collectives`` ring all-gathers, every worker contributing ``nbytes_each`` in total."""
    if world <= 1 or collectives <= 0:
        return 0.0
    return collectives * link.allgather_s(nbytes_each / collectives, world)


def fast_path_s(link: Link, method: str, bytes_per_step: float, collectives_per_step: float, world: int) -> float:
    if method in ("fp32", "powersgd"):
        return allreduce_s(link, bytes_per_step, world, collectives_per_step)
    return allgather_s(link, bytes_per_step, world, collectives_per_step)


def step_s(fwd: float, bwd: float, opt: float, fast: float, slow: float, serial: bool = False) -> float:
    back = bwd + fast if serial else max(bwd, fast)
    return max(fwd, slow) + back + opt
