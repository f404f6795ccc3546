"""One timing mechanism for every timed figure a claim reads (DESIGN.md "Timing").

:func:`interleave` times named methods by interleaved repetitions in one process: each round runs
every method once, in a fresh order drawn from a seeded generator (a fixed rotation makes each method
always follow the same neighbour, whose cache and allocator state shifts short timings by several
percent). Ratios are paired per round, so two methods always share the machine's state of that round.

Clock: ``"thread"`` (``time.thread_time``, the calling thread's CPU time) where the work is
single-threaded (torch and BLAS on one thread): other processes on a shared machine are then not
charged to the method that happens to run; ``"wall"`` (``time.perf_counter``) where the work spans
threads or processes. The caller says which; the result records it.

Noise floor: the baseline runs twice per round, as itself and as a second arm (``SELF``) at its own
random place in the order. With ``s_i`` the self ratio of round ``i`` (second arm over first), the floor
is ``h = max(|lo|, |hi|)`` where ``[lo, hi]`` is the distribution-free 95% interval of the median of
``log s_i`` (order statistics of the rounds; below 6 rounds the interval is their whole range). It is
the largest effect the same work shows against itself at this number of rounds, bias included (a
second arm that always gains from the first one's cache shows up as a floor away from 0). A ratio
whose log lies within ``h`` of a threshold cannot be told from it by this measurement.

Early stop: after ``min_rounds``, repeating stops once every ratio's interval (and the self ratio's)
has a half-width of at most ``log(1 + rel_precision)``, or at ``max_rounds``, or once ``budget_s`` of
wall time is spent (after at least one round): budgets do not keep going after the answer is known.

Figures for claims (:meth:`Timing.metrics`): ``<name>`` (a time ratio, or its inverse, a speedup),
``<name>_noise`` in the figure's own units (``figure * (e^h - 1)``: the claim is judged at
``figure -/+ noise``, components.core.claims), ``<name>_lo``/``_hi`` (the ratio's interval),
``<name>_rounds`` and ``<name>_thread_clock`` (1 thread CPU time, 0 wall).

Simulated times built from measured compute phases (``sim_step_s`` and the like) take their phases
from :class:`PhaseTimer` (or :func:`timed`), with the same clock choice.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from components.core.errors import require

CLOCKS: dict[str, Callable[[], float]] = {"thread": time.thread_time, "wall": time.perf_counter}
SELF = "~self"          # the baseline's second arm (its name in the per-round samples)
LEVEL = 0.95            # coverage of every interval


def clock_of(clock: str) -> Callable[[], float]:
    """The clock function for ``"thread"`` or ``"wall"``."""
    require(clock in CLOCKS, "clock", clock, "one of " + ", ".join(CLOCKS) + " (thread: single-threaded work)")
    return CLOCKS[clock]


def median_interval(xs: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(median, lo, hi): the distribution-free interval of the median from order statistics.

    ``[x_(j), x_(n+1-j)]`` (sorted, 1-based) covers the median with probability
    ``1 - 2 P(Binomial(n, 1/2) <= j - 1)``; the largest ``j`` reaching ``level`` is taken, and below
    6 values (where even the whole range falls short of 95%) the whole range."""
    v = sorted(float(x) for x in xs)
    n = len(v)
    if n == 0:
        return math.nan, math.nan, math.nan
    med = float(np.median(v))
    j, cdf = 1, 0.0                      # cdf = P(B <= j - 1)
    while True:
        nxt = cdf + math.comb(n, j) / 2 ** n          # P(B <= j)
        if j + 1 > (n + 1) // 2 or 1 - 2 * nxt < level:
            break
        j, cdf = j + 1, nxt
    return med, v[j - 1], v[n - j]


@dataclass(frozen=True)
class Ratio:
    """A time ratio (method over baseline): the median of the per-round ratios and its interval."""
    value: float
    lo: float
    hi: float
    n: int                     # rounds it pairs

    @property
    def half_width(self) -> float:
        """Half the interval's width on the log scale (relative precision)."""
        if not (self.lo > 0 and self.hi > 0 and math.isfinite(self.lo) and math.isfinite(self.hi)):
            return math.inf
        return (math.log(self.hi) - math.log(self.lo)) / 2

    def inverse(self) -> "Ratio":
        """The same figure as a speedup (baseline over method)."""
        inv = (lambda x: 1 / x if x else math.inf)
        return Ratio(inv(self.value), inv(self.hi), inv(self.lo), self.n)


def paired_ratio(num: Sequence[float], den: Sequence[float]) -> Ratio:
    """Median and interval of ``num[i] / den[i]`` over pairs, on the log scale."""
    logs = [math.log(a / b) for a, b in zip(num, den) if a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)]
    if not logs:
        return Ratio(math.nan, math.nan, math.nan, 0)
    med, lo, hi = median_interval(logs)
    return Ratio(math.exp(med), math.exp(lo), math.exp(hi), len(logs))


def noise_floor(self_ratios: Sequence[float]) -> float:
    """The log-scale floor ``h`` from the self ratios (second arm over first) of the rounds:
    ``max(|lo|, |hi|)`` of the median interval of their logs (module docstring); NaN without any."""
    logs = [math.log(s) for s in self_ratios if s > 0 and math.isfinite(s)]
    if not logs:
        return math.nan
    _, lo, hi = median_interval(logs)
    return max(abs(lo), abs(hi))


@dataclass
class Timing:
    """What :func:`interleave` measured: per-round seconds of every method (and the self arm)."""
    clock: str
    baseline: str
    rounds: list[dict[str, float]] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)        # each method's first return value
    errors: dict[str, BaseException] = field(default_factory=dict)   # methods that raised (dropped)
    once: dict[str, float] = field(default_factory=dict)         # too slow to repeat: one call's seconds
    orders: list[list[str]] = field(default_factory=list)        # the order each round ran in
    stopped: str = ""                                            # precision | max_rounds | budget
    elapsed_s: float = 0.0

    @property
    def n_rounds(self) -> int:
        return len(self.rounds)

    def samples(self, name: str) -> list[float]:
        """Every timed call of ``name`` (``SELF``: the baseline's second arm)."""
        if name in self.once:
            return [self.once[name]]
        return [r[name] for r in self.rounds if name in r]

    def median(self, name: str) -> float:
        """Median seconds of ``name``: inf never (a failed method is NaN: its error says why)."""
        s = self.samples(name)
        return float(np.median(s)) if s else math.nan

    def ratio(self, name: str) -> Ratio:
        """``name``'s time over the baseline's, paired per round (a method timed once: over every
        round's baseline)."""
        if name in self.once:
            base = self.samples(self.baseline)
            return paired_ratio([self.once[name]] * len(base), base)
        pairs = [(r[name], r[self.baseline]) for r in self.rounds if name in r and self.baseline in r]
        return paired_ratio([a for a, _ in pairs], [b for _, b in pairs])

    @property
    def self_ratio(self) -> Ratio:
        """The baseline against itself (second arm over first)."""
        return self.ratio(SELF)

    @property
    def noise(self) -> float:
        """The log-scale noise floor ``h`` (module docstring)."""
        return noise_floor([r[SELF] / r[self.baseline] for r in self.rounds
                            if SELF in r and self.baseline in r and r[self.baseline] > 0])

    @property
    def noise_rel(self) -> float:
        """The floor as a relative figure, ``e^h - 1`` (0.03: 3%)."""
        return math.expm1(self.noise)

    def metrics(self, name: str, method: str, speedup: bool = False) -> dict[str, float]:
        """Result metrics for ``method`` against the baseline under ``name``: the ratio (its time over
        the baseline's) or, with ``speedup``, the baseline's over its; ``_noise`` in the figure's units."""
        r = self.ratio(method)
        r = r.inverse() if speedup else r
        return {name: r.value, f"{name}_noise": noise_abs(r.value, self.noise),
                f"{name}_lo": r.lo, f"{name}_hi": r.hi, f"{name}_rounds": float(self.n_rounds),
                f"{name}_thread_clock": float(self.clock == "thread")}

    def info(self) -> dict[str, Any]:
        """A JSON-able record (for ``Result.info``): clock, rounds, stop reason, medians, samples."""
        names = [n for n in dict.fromkeys([self.baseline, SELF, *self.once, *(k for r in self.rounds for k in r)])]
        return {"clock": self.clock, "baseline": self.baseline, "rounds": self.n_rounds, "stopped": self.stopped,
                "elapsed_s": round(self.elapsed_s, 4), "noise_rel": self.noise_rel,
                "median_s": {n: self.median(n) for n in names},
                "samples_s": {n: self.samples(n) for n in names},
                "errors": {n: f"{type(e).__name__}: {e}" for n, e in self.errors.items()}}


def noise_abs(figure: float, h: float) -> float:
    """A floor ``h`` (log scale) in the units of ``figure``: ``|figure| * (e^h - 1)``; 0 for an
    infinite figure (no timing decides it), NaN when either is unknown."""
    if isinstance(figure, float) and math.isinf(figure):
        return 0.0
    if not (math.isfinite(figure) and math.isfinite(h)):
        return math.nan
    return abs(figure) * math.expm1(h)


def interleave(methods: Mapping[str, Callable[[], Any]], baseline: str | Sequence[str], *, clock: str = "thread",
               seed: int | Sequence[int] = 0, min_rounds: int = 5, max_rounds: int = 50,
               rel_precision: float = 0.02, budget_s: float = math.inf, warmup: int = 1,
               once_over_s: float = math.inf, pick: str = "first",
               before_round: Callable[[int], None] | None = None) -> Timing:
    """Time ``methods`` (name -> callable without arguments) by interleaved rounds (module docstring).

    ``baseline``: the method every ratio is taken against and whose second arm gives the noise floor;
    a sequence names candidates: with ``pick="first"`` the first that does not raise on its first
    call, with ``pick="fastest"`` the fastest of them on the warm-up call (the denominator of a
    "best of" ratio; without warm-up, the first). ``warmup``: untimed calls per method before round 1.
    A method that raises is dropped (its exception in ``errors``); one whose first call (warm-up, or
    round 1 without) took over ``once_over_s`` is measured by that call alone. ``before_round`` is
    called with the round index before each round (e.g. to pick that round's batch)."""
    now = clock_of(clock)
    require(min_rounds >= 1, "min_rounds", min_rounds, "at least 1 round")
    require(max_rounds >= min_rounds, "max_rounds", max_rounds, f">= min_rounds ({min_rounds})")
    require(rel_precision > 0, "rel_precision", rel_precision, "a positive relative precision")
    require(warmup >= 0, "warmup", warmup, "a non-negative number of calls")
    require(pick in ("first", "fastest"), "pick", pick, "one of first, fastest")
    candidates = [baseline] if isinstance(baseline, str) else list(baseline)
    missing = [b for b in candidates if b not in methods]
    require(bool(candidates) and not missing, "baseline", baseline, "names of the timed methods: " + ", ".join(methods))
    out = Timing(clock, candidates[0])
    t_start = time.perf_counter()

    def call(name: str) -> float | None:
        """One timed call; None when it raised (the method is then dropped)."""
        try:
            t0 = now()
            res = methods[name]()
            dt = now() - t0
        except Exception as e:  # noqa: BLE001 - a method's failure is a result to report, not a crash
            out.errors[name] = e
            return None
        out.results.setdefault(name, res)
        return dt

    if before_round is not None and warmup:
        before_round(-1)
    first_s: dict[str, float] = {}
    for name in methods:
        for _ in range(warmup):
            dt = call(name)
            if dt is None:
                break
            first_s.setdefault(name, dt)
            if dt > once_over_s:          # too slow to repeat (unless it becomes the baseline)
                break
    alive = [b for b in candidates if b not in out.errors]
    if pick == "fastest" and warmup:
        alive.sort(key=lambda b: first_s.get(b, math.inf))
    while not warmup and len(alive) > 1 and call(alive[0]) is None:   # no warm-up: probe the fallbacks
        alive = alive[1:]
    if not alive:
        raise RuntimeError("every baseline candidate failed: " + "; ".join(
            f"{b}: {type(out.errors[b]).__name__}: {out.errors[b]}" for b in candidates))
    out.baseline = alive[0]
    out.once.update({n: dt for n, dt in first_s.items() if dt > once_over_s and n != out.baseline})
    rng = np.random.default_rng(seed)
    limit = math.log1p(rel_precision)
    while True:
        active = [n for n in methods if n not in out.errors and n not in out.once]
        arms = active + [SELF]
        order = [arms[i] for i in rng.permutation(len(arms))]
        if before_round is not None:
            before_round(len(out.rounds))
        row: dict[str, float] = {}
        for name in order:
            dt = call(out.baseline if name == SELF else name)
            if dt is None:
                if name in (out.baseline, SELF):
                    raise RuntimeError(f"baseline {out.baseline!r} failed in round {len(out.rounds)}: "
                                       f"{out.errors[out.baseline]}")
                continue
            if not out.rounds and not warmup and dt > once_over_s and name not in (out.baseline, SELF):
                out.once[name] = dt           # too slow to repeat: this call is its measurement
                continue
            row[name] = dt
        # a method that failed in this round: none of its samples stand
        out.rounds = [{k: v for k, v in r.items() if k not in out.errors} for r in out.rounds] + [row]
        out.orders.append(order)
        out.elapsed_s = time.perf_counter() - t_start
        n = len(out.rounds)
        if n >= max_rounds:
            out.stopped = "max_rounds"
            break
        if out.elapsed_s >= budget_s:
            out.stopped = "budget"
            break
        if n >= min_rounds and all(out.ratio(m).half_width <= limit for m in arms if m != out.baseline):
            out.stopped = "precision"
            break
    return out


# ------------------------------------------------------------------------------------------ phases
@dataclass
class Elapsed:
    """Seconds a :func:`timed` block took (set when the block ends)."""
    clock: str
    s: float = 0.0


@contextlib.contextmanager
def timed(clock: str = "thread") -> Iterator[Elapsed]:
    """``with timed("thread") as t: ...`` then ``t.s``: one measured phase on the chosen clock."""
    now = clock_of(clock)
    e = Elapsed(clock)
    t0 = now()
    try:
        yield e
    finally:
        e.s = now() - t0


class PhaseTimer:
    """Accumulates measured compute phases by name, for simulated times built from them::

        pt = PhaseTimer("thread")
        with pt("forward"): ...
        sim_step_s = pt.total("forward") / pt.count("forward") + link.seconds(nbytes)
    """

    def __init__(self, clock: str = "thread"):
        self.clock, self._now = clock, clock_of(clock)
        self.totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = self._now()
        try:
            yield
        finally:
            self.totals[name] += self._now() - t0
            self.counts[name] += 1

    def total(self, name: str) -> float:
        return self.totals.get(name, 0.0)

    def count(self, name: str) -> int:
        return self.counts.get(name, 0)

    def mean(self, name: str) -> float:
        """Mean seconds per entry of phase ``name`` (NaN if never entered)."""
        return self.total(name) / self.count(name) if self.count(name) else math.nan
