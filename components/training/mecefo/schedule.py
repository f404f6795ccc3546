"""The failure schedule and who processes which micro-batch (ring takeover).

Sheet: every step each live replica fails with probability ``p`` and stays down ``down`` steps,
then rejoins (re-synchronised from its neighbour). One replica always stays up (the job needs
one). A down replica's micro-batch goes to the next live replica in ring order, so a live replica
may carry several. The draws are seeded, identical for every variant of a seed.
"""
from __future__ import annotations

import numpy as np

from components.core.errors import require


def failure_schedule(n: int, steps: int, p: float, down: int, seed: int) -> tuple[list[frozenset], list[tuple]]:
    """(down set per step, events ``(step, replica)`` of each failure onset)."""
    require(0.0 <= p < 1.0, "failure_rate", p, "a probability in [0, 1)")
    rng = np.random.default_rng([seed, 0x4D65])
    until = [0] * n          # replica i is down while step < until[i]
    sets, events = [], []
    for t in range(steps):
        u = rng.random(n)    # n draws every step: the stream does not depend on who is down
        for i in range(n):
            live = sum(until[j] <= t for j in range(n))
            if until[i] <= t and live > 1 and u[i] < p:
                until[i] = t + down
                events.append((t, i))
        sets.append(frozenset(i for i in range(n) if until[i] > t))
    return sets, events


def fixed_schedule(n: int, steps: int, kills: list[tuple[int, int]], down: int) -> tuple[list[frozenset], list[tuple]]:
    """A schedule from explicit ``(step, replica)`` kills (tests, the actor check)."""
    until = [0] * n
    sets = []
    for t in range(steps):
        for s, i in kills:
            if s == t:
                until[i] = t + down
        sets.append(frozenset(i for i in range(n) if until[i] > t))
    return sets, sorted(kills)


def takeover(down: frozenset, n: int) -> dict[int, list[int]]:
    """Live replica -> the micro-batches it processes (its own first, then the down ones it took)."""
    live = [i for i in range(n) if i not in down]
    require(bool(live), "schedule", sorted(down), "at least one live replica")
    out = {i: [i] for i in live}
    for j in sorted(down):
        k = next((j + s) % n for s in range(1, n) if (j + s) % n not in down)
        out[k].append(j)
    return out


def recoveries(sets: list[frozenset]) -> list[tuple[int, int]]:
    """(step, replica) at which a down replica is back (first step it is live again)."""
    return [(t, i) for t in range(1, len(sets)) for i in sets[t - 1] - sets[t]]
