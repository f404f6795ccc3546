"""The simulated TP training step on the shared ``Link``: one rank's measured compute plus every
all-reduce it issued, each a blocking ring all-reduce over the ``tp`` ranks (no overlap: Megatron's
f/g wait for their collective). ``sizes`` are the byte sizes the rank's Comm logged in one step.
"""
from __future__ import annotations

from components.core.netsim import Link


def comm_s(sizes: list[int], link: Link, tp: int) -> float:
    return sum(link.ring_allreduce_s(n, tp) for n in sizes)


def sim_step(compute_s: float, sizes: list[int], link: Link, tp: int) -> dict:
    c = comm_s(sizes, link, tp)
    return {"sim_step_s": compute_s + c, "comm_s": c, "compute_s": compute_s}
