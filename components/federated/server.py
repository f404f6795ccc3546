"""The server loop: sample participants by their probabilities, broadcast, collect uploads,
aggregate, and evaluate every client every round.

Plain Python over a strategy (server side) and a HostPool (client side); no Ray code here.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from components.federated.participation import sample_round
from components.federated.pool import HostPool
from components.federated.strategy import Strategy, n_floats


@dataclass
class History:
    """What one federation run produced. ``acc[t, i]``: client i's test accuracy entering round
    t (row ``rounds`` is after the last round); NaN where its host died during that call."""
    acc: np.ndarray
    probs: np.ndarray
    participations: np.ndarray      # completed local updates per client
    sampled: np.ndarray             # times each client was drawn
    dropped: int = 0                # drawn participants lost to a host failure
    events: list[dict] = field(default_factory=list)
    upload_floats: int = 0
    wall_s: float = 0.0
    client_report: dict[int, dict[str, float]] = field(default_factory=dict)   # Strategy.client_report per client

    @property
    def rounds(self) -> int:
        return self.acc.shape[0] - 1


def run_federation(strategy: Strategy, pool: HostPool, probs: np.ndarray, rounds: int, rng: np.random.Generator,
                   seed: int = 0, kill: dict | None = None,
                   progress: Callable[[int, float], None] | None = None) -> History:
    """Run ``rounds`` rounds. ``kill = {'host': h, 'round': r}`` kills host h's actor while round r
    is in flight (fault drill)."""
    n = len(probs)
    acc = np.full((rounds + 1, n), np.nan)
    parts_done = np.zeros(n, dtype=int)
    sampled = np.zeros(n, dtype=int)
    hist = History(acc, probs, parts_done, sampled)
    strategy.init_global(seed)
    t0 = time.perf_counter()
    for rnd in range(rounds):
        participants = sample_round(probs, rng)
        sampled[participants] += 1
        k = kill["host"] if kill and kill.get("round") == rnd else None
        out = pool.round(rnd, strategy.payload(rnd), participants.tolist(), kill=k)
        for cid, a in out.acc.items():
            acc[rnd, cid] = a
        got = [c for c in participants.tolist() if c in out.uploads]
        parts_done[got] += 1
        hist.dropped += len(out.dropped)
        hist.events += out.events
        hist.upload_floats += sum(n_floats(out.uploads[c][1]) for c in got)
        strategy.aggregate([out.uploads[c] for c in got], rnd)
        if progress is not None:
            progress(rnd + 1, float(np.nanmean(acc[rnd])))
    final = pool.evaluate(strategy.payload(rounds), rounds)
    for cid, a in final.acc.items():
        acc[rounds, cid] = a
    hist.events += final.events
    hist.client_report = pool.report()
    hist.wall_s = time.perf_counter() - t0
    return hist
