"""The board's cold figure counts what a fresh store pays: each experiment's newest cold prepare, even
where its latest run found the cache warm (issue "The whole board in 75 minutes")."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_reproduce", ROOT / "benchmarks" / "bench_reproduce.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(pass_s=None, built="", own_s=None, missed=False):
    metrics = {k: v for k, v in (("reproduce.prepare_s", pass_s), ("platform.prepare_s", own_s)) if v is not None}
    tags = {"reproduce.prepare_built": built} if pass_s is not None else {}
    if missed:
        tags["prepare.lms.cache"] = "miss"
    return SimpleNamespace(data=SimpleNamespace(metrics=metrics, tags=tags))


def test_cold_prepare_of_an_older_run_counts_when_the_latest_was_warm():
    # Prepare: newest first: a warm pass, a run without a pass that hit the cache, a cold pass, an older cold pass
    bench = _bench()
    runs = [_run(pass_s=1.5), _run(own_s=0.4), _run(pass_s=369.0, built="lms, large"), _run(pass_s=500.0, built="lms")]
    # Execute
    last = bench.last_cold_pass(runs)[0]
    # Assert: the newest cold one; a warm pass and a cache hit are not cold
    assert last == 369.0
    assert bench.prepare_of(runs[0]) == (False, 1.5) and bench.prepare_of(runs[1]) == (False, 0.4)


def test_a_run_that_built_inside_its_own_prepare_stage_is_cold():
    # Prepare: no reproduce pass; a prepare step missed the cache during the run
    bench = _bench()
    # Execute
    cold, secs = bench.prepare_of(_run(own_s=42.0, missed=True))
    # Assert
    assert (cold, secs) == (True, 42.0)
    assert bench.last_cold_pass([_run(own_s=0.3)]) is None


def _shared(pass_s, built, n):
    run = _run(pass_s=pass_s, built=built)
    run.data.tags.update({"reproduce.prepare_pass": "board-1", "reproduce.prepare_shared": ", ".join(f"e{i}" for i in range(n))})
    return run


def test_a_pass_the_board_shared_counts_once_in_the_cold_total():
    # Prepare: three experiments whose newest cold prepare is the board's one 20-minute pass, one its own 95 s pass
    bench = _bench()
    passes = [bench.last_cold_pass([_shared(1200.0, "lm", 3)]), bench.last_cold_pass([_shared(1200.0, "dit", 3)]),
              bench.last_cold_pass([_shared(1200.0, "data", 3)]), bench.last_cold_pass([_run(pass_s=95.0, built="x")])]
    # Execute
    total = bench.cold_total(passes)
    # Assert: 1200 once, plus 95
    assert total == 1295.0
    assert bench.prepare_of(_shared(1200.0, "lm", 3)) == (True, 1200.0)
