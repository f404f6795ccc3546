"""The virtual clock: per-step time of synchronous data parallelism under failures.

Sheet: the compute of a micro-batch is its measured median fwd+bwd (exact, or under MeCeFO's
rules) on the timing model; a step takes the slowest live replica's compute plus the gradient
all-reduce on the shared ``Link``. Neighbour-do-both charges the taken-over micro-batch at the
exact cost, MeCeFO at its approximate cost. Checkpoint-restart (a spare replaces the failed
replica): every failure costs the restart penalty plus redoing the steps since the last
checkpoint (every ``ckpt_every`` steps) at the fault-free step time; failures during the replay
are not charged, so this is a lower bound on its time.
"""
from __future__ import annotations

from components.core.netsim import Link
from components.training.mecefo.schedule import takeover


def replica_compute_s(load: list[int], own: int, t_exact: float, t_take: float, t_own: float | None = None) -> float:
    """Compute of a replica processing ``load`` (its own micro-batch first) for the recovery mode."""
    return sum((t_own if t_own is not None else t_exact) if j == own else t_take for j in load)


def step_times(sets, n: int, t_exact: float, t_take: float, t_own: float, allreduce_s: float) -> list[float]:
    """Seconds of every step: max over live replicas of their compute, plus the all-reduce."""
    out = []
    for down in sets:
        if not down:
            out.append(t_exact + allreduce_s)
            continue
        loads = takeover(down, n)
        out.append(max(replica_compute_s(ld, i, t_exact, t_take, t_own if len(ld) > 1 else t_exact)
                       for i, ld in loads.items()) + allreduce_s)
    return out


def checkpoint_restart_s(steps: int, events: list[tuple], step_s: float, penalty_s: float, ckpt_every: int) -> tuple[float, float]:
    """(total seconds, lost seconds) of checkpoint-restart over ``steps`` fault-free steps of ``step_s``."""
    lost = sum(penalty_s + (t - (t // ckpt_every) * ckpt_every) * step_s for t, _ in events)
    return steps * step_s + lost, lost


def allreduce_s(link: Link, n_params: int, n: int) -> float:
    """fp32 ring all-reduce of the gradient over the ``n`` replicas."""
    return link.ring_allreduce_s(4 * n_params, n)
