"""components.core.timing: interleaved rounds, the noise floor, early stop, phases. A fake clock
stands in for the real one: these tests check the arithmetic and the schedule, never a timing."""
import math

import pytest

from components.core import timing
from components.core.errors import ConfigError
from components.core.timing import SELF, PhaseTimer, interleave, median_interval, noise_abs, noise_floor, timed


class FakeClock:
    """A clock that only moves when a method says how long it took."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def spend(self, s: float):
        self.t += s


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setitem(timing.CLOCKS, "thread", c)
    return c


def _methods(clock, costs: dict, log: list | None = None):
    """name -> callable that spends its next cost (a list cycles; a number is constant)."""
    calls = {n: 0 for n in costs}

    def make(n):
        def f():
            c = costs[n]
            dt = c[calls[n] % len(c)] if isinstance(c, list) else c
            calls[n] += 1
            if log is not None:
                log.append(n)
            clock.spend(dt)
            return f"{n}-result"
        return f
    return {n: make(n) for n in costs}


# ------------------------------------------------------------------------------------------ arithmetic
def test_median_interval_uses_order_statistics_and_the_whole_range_below_six_values():
    # Prepare
    twenty = list(range(20, 0, -1))          # 1..20, unsorted
    five = [3.0, 1.0, 2.0, 5.0, 4.0]
    # Execute
    med20, lo20, hi20 = median_interval(twenty)
    med5, lo5, hi5 = median_interval(five)
    # Assert: n = 20 -> [x_(6), x_(15)] (coverage 95.9%; [x_(7), x_(14)] would be 88.5%)
    assert (med20, lo20, hi20) == (10.5, 6, 15)
    assert (med5, lo5, hi5) == (3.0, 1.0, 5.0)
    assert all(math.isnan(x) for x in median_interval([]))


def test_noise_floor_is_the_largest_self_effect_at_this_precision():
    # Prepare: self ratios spread evenly around 1, and a second arm that always gains 10%
    spread = [math.exp(x) for x in (-0.04, -0.02, 0.0, 0.01, 0.03)]
    biased = [1 / 1.1] * 8
    # Execute / Assert: max(|lo|, |hi|) of the median interval of log(self ratio)
    assert noise_floor(spread) == pytest.approx(0.04)
    assert noise_floor(biased) == pytest.approx(math.log(1.1))   # a bias is a floor too
    assert math.isnan(noise_floor([]))


def test_noise_in_the_figures_units():
    # Prepare / Execute / Assert: figure * (e^h - 1); an infinite figure needs no timing
    assert noise_abs(2.0, math.log(1.05)) == pytest.approx(0.1)
    assert noise_abs(math.inf, 0.3) == 0.0
    assert math.isnan(noise_abs(2.0, math.nan))


# ------------------------------------------------------------------------------------------ schedule
def test_each_round_runs_every_method_and_the_self_arm_once_in_a_seeded_order(clock):
    # Prepare
    costs = {"full": 2.0, "reuse": 1.0, "other": 1.5}
    # Execute
    a = interleave(_methods(clock, costs), "full", seed=7, min_rounds=12, max_rounds=12, warmup=0)
    b = interleave(_methods(clock, costs), "full", seed=7, min_rounds=12, max_rounds=12, warmup=0)
    c = interleave(_methods(clock, costs), "full", seed=8, min_rounds=12, max_rounds=12, warmup=0)
    # Assert: every arm once per round; the order changes across rounds; reproducible per seed
    assert all(sorted(o) == sorted([*costs, SELF]) for o in a.orders) and a.n_rounds == 12
    assert len({tuple(o) for o in a.orders}) > 1
    assert a.orders == b.orders and a.orders != c.orders
    assert a.results == {"full": "full-result", "reuse": "reuse-result", "other": "other-result"}


def test_ratios_medians_and_metrics_on_exact_costs(clock):
    # Prepare: full compute 2 s, reuse 0.5 s, every call exactly (a noiseless machine)
    methods = _methods(clock, {"full": 2.0, "reuse": 0.5})
    # Execute
    t = interleave(methods, "full", min_rounds=3, max_rounds=20)
    m = t.metrics("speedup_wall", "reuse", speedup=True)
    # Assert: stops at min_rounds once the (zero-width) intervals meet the precision
    assert t.stopped == "precision" and t.n_rounds == 3 and t.clock == "thread"
    assert t.median("reuse") == 0.5 and t.samples(SELF) == [2.0, 2.0, 2.0]
    assert t.ratio("reuse").value == pytest.approx(0.25) and t.noise == 0.0
    assert m == {"speedup_wall": pytest.approx(4.0), "speedup_wall_noise": 0.0, "speedup_wall_lo": pytest.approx(4.0),
                 "speedup_wall_hi": pytest.approx(4.0), "speedup_wall_rounds": 3.0, "speedup_wall_thread_clock": 1.0}
    assert t.info()["median_s"] == {"full": 2.0, SELF: 2.0, "reuse": 0.5}


def test_repeats_until_the_ratio_is_settled_then_stops(clock):
    # Prepare: the baseline's time alternates by +-20% every call, so the ratios scatter
    noisy = {"full": [2.0, 2.4, 1.6], "reuse": 1.0}
    # Execute
    loose = interleave(_methods(clock, noisy), "full", min_rounds=3, max_rounds=9, rel_precision=0.01)
    wide = interleave(_methods(clock, noisy), "full", min_rounds=3, max_rounds=9, rel_precision=2.0)
    spent = interleave(_methods(clock, noisy), "full", min_rounds=3, max_rounds=9, budget_s=0.0)
    # Assert: past the precision it runs to max_rounds; a loose precision stops at min_rounds; a
    # spent budget stops after one round; the floor sees the baseline's own scatter
    assert (loose.stopped, loose.n_rounds) == ("max_rounds", 9)
    assert (wide.stopped, wide.n_rounds) == ("precision", 3)
    assert (spent.stopped, spent.n_rounds) == ("budget", 1)
    assert loose.noise > 0 and loose.metrics("r", "reuse")["r_noise"] > 0


def test_a_failing_method_is_dropped_and_the_baseline_falls_back(clock):
    # Prepare: dense exceeds its memory cap on this instance; COO is the baseline then
    methods = _methods(clock, {"dense": 1.0, "coo": 2.0, "hybrid": 1.0})

    def exceeded():
        raise MemoryError("cap")
    methods["dense"] = exceeded
    # Execute
    t = interleave(methods, ("dense", "coo"), min_rounds=2, max_rounds=2)
    # Assert
    assert t.baseline == "coo" and set(t.errors) == {"dense"} and isinstance(t.errors["dense"], MemoryError)
    assert t.samples("dense") == [] and math.isnan(t.median("dense")) and t.ratio("hybrid").value == 0.5
    with pytest.raises(RuntimeError, match="every baseline candidate failed"):
        interleave({"dense": exceeded}, "dense")


def test_a_method_too_slow_to_repeat_is_measured_by_its_one_call(clock):
    # Prepare
    log: list = []
    methods = _methods(clock, {"full": 1.0, "slow": 30.0}, log)
    # Execute
    t = interleave(methods, "full", min_rounds=3, max_rounds=3, once_over_s=10.0)
    # Assert: one (warm-up) call of slow, its ratio against every round's baseline
    assert log.count("slow") == 1 and t.samples("slow") == [30.0] and t.ratio("slow").value == pytest.approx(30.0)


def test_before_round_names_each_round_and_bad_arguments_are_config_errors(clock):
    # Prepare
    seen = []
    # Execute
    interleave(_methods(clock, {"a": 1.0}), "a", min_rounds=2, max_rounds=2, before_round=seen.append)
    # Assert
    assert seen == [-1, 0, 1]
    with pytest.raises(ConfigError):
        interleave(_methods(clock, {"a": 1.0}), "a", clock="cpu")
    with pytest.raises(ConfigError):
        interleave(_methods(clock, {"a": 1.0}), "b")


# ------------------------------------------------------------------------------------------ phases
def test_phase_timer_accumulates_phases_on_the_chosen_clock(clock):
    # Prepare
    pt = PhaseTimer("thread")
    # Execute
    for _ in range(2):
        with pt("forward"):
            clock.spend(0.25)
    with pt("comm"):
        clock.spend(1.0)
    with timed("thread") as one:
        clock.spend(0.5)
    # Assert
    assert pt.total("forward") == 0.5 and pt.count("forward") == 2 and pt.mean("forward") == 0.25
    assert pt.total("comm") == 1.0 and math.isnan(pt.mean("never")) and one.s == 0.5


def test_the_fastest_candidate_is_the_baseline_and_a_slow_first_round_call_is_one_run(clock):
    # Prepare: COO is faster than dense on this instance; without warm-up a slow first call counts once
    log: list = []
    # Execute
    fastest = interleave(_methods(clock, {"dense": 3.0, "coo": 1.0}), ("dense", "coo"), pick="fastest",
                         min_rounds=2, max_rounds=2)
    cold = interleave(_methods(clock, {"full": 1.0, "slow": 30.0}, log), "full", warmup=0, min_rounds=3,
                      max_rounds=3, once_over_s=10.0)
    # Assert
    assert fastest.baseline == "coo" and fastest.samples(SELF) == [1.0, 1.0]
    assert fastest.ratio("dense").value == pytest.approx(3.0)
    assert log.count("slow") == 1 and cold.samples("slow") == [30.0] and cold.n_rounds == 3


def test_a_slow_candidate_that_is_not_the_baseline_is_not_repeated(clock):
    # Prepare: dense takes 30 s on this instance, COO 1 s: COO is the baseline, dense one run
    log: list = []
    # Execute
    t = interleave(_methods(clock, {"dense": 30.0, "coo": 1.0, "hybrid": 1.0}, log), ("dense", "coo"),
                   pick="fastest", min_rounds=3, max_rounds=3, once_over_s=10.0)
    # Assert
    assert t.baseline == "coo" and log.count("dense") == 1 and t.samples("dense") == [30.0]
