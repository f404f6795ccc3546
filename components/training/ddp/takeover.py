"""MeCeFO's neighbour takeover inside the Ray Train DDP job (MeCeFO, NeurIPS 2025; composed training).

The DDP loop's side of the failure schedule of :mod:`components.training.mecefo.schedule`: every rank
derives the same schedule from the seed; at a step where replica ``j`` is down, the next live rank in
ring order also carries ``j``'s micro-batch. It runs that micro-batch first, under ``ddp.no_sync()``
(gradients accumulate locally, nothing is sent), exactly (``ndb``) or under MeCeFO's approximations
(``mecefo``), then its own micro-batch with the synchronising backward, so the step's one reduction
(whatever the strategy: fp32, low-bit, DUO) carries the sum. A down rank keeps its place in the
collectives with a zero gradient (its loss times 0), so the all-reduce's mean over the ranks equals the
fault-free mean gradient for ``ndb``. The down replica's process stays alive: here the failure is the
schedule's, not a killed process (the ``mecefo`` experiment kills and restarts real actors).

Every micro-batch, whoever computes it, is drawn from (seed, step, j) and its gaussian projections from
the same triple, so variants with and without failures see the same data. The svd bases are every
rank's own, refreshed at the same steps from the same weights (:class:`~components.training.mecefo.approx.Bases`).
Micro-batches are drawn on cpu and moved to the rank's device; the cost ratios' clock is the thread's CPU
time on cpu and the wall clock to the device's sync on cuda (``components.core.devices.clock``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from components.core import devices
from components.core.errors import require
from components.core.timing import clock_of
from components.training.mecefo.approx import Approx, Bases, approximated, check_basis, check_rank, check_refresh
from components.training.mecefo.schedule import failure_schedule, fixed_schedule, takeover
from components.training.mecefo.train import draw, projection_gen

RECOVERIES = ("none", "ndb", "mecefo")


@dataclass
class TakeoverSpec:
    """What a data-parallel variant sets under ``takeover:``; ``recovery: none`` trains fault-free on
    the same draws (a variant without ``takeover`` keeps each rank's own batch stream)."""

    recovery: str = "none"
    failure_rate: float = 0.05          # per live replica per step (the sheet's p)
    down_steps: int = 50                # steps a failed replica stays down
    kills: list = field(default_factory=list)   # explicit [[step, replica], ...] instead of the random draw
    skip_attn: bool = True
    recompute_ffn: bool = True
    lowrank: bool = True
    rank: int = 0                       # 0: in/8 per FFN linear
    basis: str = "svd"                  # the low-rank projection: svd (the paper) or gaussian (the sheet)
    refresh: int = 200                  # svd: steps between basis refreshes (the sheet: 200)

    @classmethod
    def parse(cls, d: dict | None, workers: int, d_model: int) -> "TakeoverSpec":
        d = dict(d or {})
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        require(not unknown, "takeover", unknown[0] if unknown else None,
                "keys among " + ", ".join(cls.__dataclass_fields__))
        spec = cls(**d)
        require(spec.recovery in RECOVERIES, "takeover.recovery", spec.recovery, "one of " + ", ".join(RECOVERIES))
        require(isinstance(spec.failure_rate, (int, float)) and 0.0 <= spec.failure_rate < 1.0,
                "takeover.failure_rate", spec.failure_rate, "a probability in [0, 1)")
        require(isinstance(spec.down_steps, int) and spec.down_steps >= 1, "takeover.down_steps", spec.down_steps,
                "a positive number of steps")
        require(all(isinstance(k, (list, tuple)) and len(k) == 2 and 0 <= k[1] < workers for k in spec.kills),
                "takeover.kills", spec.kills, f"a list of [step, replica < workers={workers}]")
        check_rank(spec.rank, d_model, "takeover.rank")
        check_basis(spec.basis, "takeover.basis")
        check_refresh(spec.refresh, "takeover.refresh")
        if spec.recovery != "none":
            require(workers >= 2, "workers", workers, "at least 2 for a takeover (a neighbour carries the batch)")
        return spec

    @property
    def active(self) -> bool:
        return self.recovery != "none"

    def approx(self) -> Approx | None:
        if self.recovery != "mecefo":
            return None
        # attn_mean=False: the DDP reduction averages every rank's bucket over the world, so a skipped
        # attention's gradient is the computing micro-batches' sum / n here (the mecefo experiment takes
        # their mean; doing so in DDP needs the strategies to rescale after the hook, DUO's slow path too)
        return Approx(skip_attn=self.skip_attn, recompute_ffn=self.recompute_ffn, lowrank=self.lowrank, rank=self.rank,
                      basis=self.basis, attn_mean=False, refresh=self.refresh)

    def schedule(self, world: int, steps: int, seed: int):
        """(down set per step, failure onsets): the same on every rank and in the driver; none for
        ``recovery: none`` (fault-free, with the same per-(step, j) draws as the variants that fail)."""
        if not self.active:
            return [frozenset()] * steps, []
        if self.kills:
            return fixed_schedule(world, steps, [tuple(k) for k in self.kills], self.down_steps)
        return failure_schedule(world, steps, self.failure_rate, self.down_steps, seed)


class Takeover:
    """One rank's view of the schedule in the DDP loop."""

    def __init__(self, spec: TakeoverSpec, world: int, steps: int, seed: int, rank: int, device: str = "cpu"):
        self.spec, self.seed, self.rank, self.world, self.device = spec, seed, rank, world, device
        self.sets, self.events = spec.schedule(world, steps, seed)
        self.approx = spec.approx()
        self.bases = Bases(self.approx) if self.approx is not None else None
        self.takes = 0

    def is_down(self, step: int) -> bool:
        return self.rank in self.sets[step]

    def extras(self, step: int) -> list[int]:
        """Micro-batches of down replicas this rank carries at ``step``."""
        loads = takeover(self.sets[step], self.world)
        return loads.get(self.rank, [self.rank])[1:]

    def batch(self, train, batch: int, context: int, step: int, j: int):
        """Micro-batch ``j`` of ``step`` on this rank's device."""
        x, y = draw(train, batch, context, self.seed, step, j)
        return x.to(self.device), y.to(self.device)

    def run_extras(self, ddp, train, batch: int, context: int, step: int) -> float:
        """Forward and backward of the taken-over micro-batches, gradients accumulated without a sync;
        returns their wall seconds (charged to the takeover, not to the rank's own phases), the svd
        bases' refresh included (every rank, every ``refresh`` steps, down or not)."""
        t0 = time.perf_counter()
        if self.bases is not None:
            self.bases.at(ddp.module, step)
        t_all = time.perf_counter() - t0
        for j in self.extras(step):
            x, y = self.batch(train, batch, context, step, j)
            t0 = time.perf_counter()
            with ddp.no_sync(), approximated(ddp.module, self.approx, projection_gen(self.seed, step, j), self.bases):
                ddp(x, y)[1].backward()
            self.takes += 1
            t_all += time.perf_counter() - t0
        return t_all

    def cost_ratio(self, ddp, train, batch: int, context: int, reps: int = 9) -> float:
        """CPU cost of a taken micro-batch over an exact one (forward + backward, no sync), timed after
        training on one fixed micro-batch, exact and taken interleaved, medians of this thread's CPU time:
        the wall time of a rank's steps depends on what the other ranks on the same cores do meanwhile.
        The taken one uses the svd bases held (their refresh is :meth:`refresh_cost_ratio`'s).
        Neighbour-do-both computes the exact micro-batch: 1 by definition."""
        import statistics

        if self.approx is None:
            return 1.0
        x, y = self.batch(train, batch, context, len(self.sets), self.rank)   # a step past training
        clock = clock_of(devices.clock(self.device))

        def cpu(a) -> float:
            c0 = clock()
            with ddp.no_sync(), approximated(ddp.module, a, projection_gen(self.seed, -1, self.rank), self.bases):
                ddp(x, y)[1].backward()
            ddp.module.zero_grad(set_to_none=True)
            devices.synchronize(self.device)
            return clock() - c0

        cpu(None), cpu(self.approx)            # warm-up
        exact, taken = zip(*((cpu(None), cpu(self.approx)) for _ in range(reps)))
        self._exact_cpu = statistics.median(exact)
        return statistics.median(taken) / self._exact_cpu

    def refresh_cost_ratio(self, ddp, reps: int = 5) -> float:
        """CPU cost of one refresh of the svd bases (every FFN linear's SVD) over an exact micro-batch,
        median of ``reps`` refreshes after :meth:`cost_ratio` (0 without svd bases)."""
        import statistics

        if self.bases is None or not self.bases.active or not getattr(self, "_exact_cpu", 0.0):
            return 0.0
        probe = Bases(self.approx)
        secs = []
        for _ in range(reps):
            probe.refresh(ddp.module)
            secs.append(probe.seconds)
        return statistics.median(secs) / self._exact_cpu
