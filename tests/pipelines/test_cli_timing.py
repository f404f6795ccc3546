"""The timing line adds up: the total is cut into back-to-back phases (start-up, ray init,
prepare, execute, report, tracking, teardown, other), each printed part is >= 0 and the printed
parts sum to the printed total; figures that overlap the phases (technique time, MLflow calls)
are labelled as inside them, never added."""
import re

import pytest

from pipelines.dag import Phases
from pipelines.live import timing_lines


class FakeClock:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


def _parts(line: str) -> tuple[float, dict[str, float]]:
    total, rest = re.fullmatch(r"total ([\d.]+)s = (.*)", line).groups()
    parts = {m.group(1): float(m.group(2)) for m in re.finditer(r"([a-z -]+?) (-?[\d.]+)(?: \+ |$)", rest)}
    return float(total), parts


def test_phases_are_back_to_back_and_the_tail_is_other():
    # Prepare: 2 s of start-up before the DAG, then recorded phases on a fake clock
    clock = FakeClock()
    ph = Phases(started_ago=2.0, clock=clock)
    for phase, dt in (("startup", 0.5), ("ray_init", 21.1), ("tracking_wait", 0.3), ("prepare", 1.0),
                      ("execute", 25.0), ("report", 4.1), ("tracking_wait", 0.9), ("teardown", 0.8)):
        clock.t += dt
        ph.mark(phase)
    clock.t += 0.25  # after the last mark
    # Execute
    t = ph.timings()
    # Assert
    assert t["startup_s"] == pytest.approx(2.5) and t["tracking_wait_s"] == pytest.approx(1.2)
    assert t["other_s"] == pytest.approx(0.25)
    assert t["total_s"] == pytest.approx(sum(v for k, v in t.items() if k != "total_s"))


def test_line_parts_sum_to_the_total_and_overlaps_are_labelled():
    # Prepare: the phases of a run, and the overlapping figures
    t = {"startup_s": 6.24, "ray_init_s": 21.13, "tracking_wait_s": 1.16, "prepare_s": 0.44, "execute_s": 25.03,
         "report_s": 4.12, "teardown_s": 0.81, "other_s": 4.17, "total_s": 63.1, "technique_s": 4.5,
         "tracking_s": 4.2, "overhead_share": 0.93}
    # Execute
    split, overlap = timing_lines(t, {"problems@0": "hit"})
    total, parts = _parts(split)
    # Assert
    assert total == 63.1 and round(sum(parts.values()), 1) == total
    assert set(parts) >= {"start-up", "ray init", "prepare", "execute", "report", "tracking", "teardown"}
    assert all(v >= 0 for v in parts.values())
    assert "technique computing 4.5s (inside prepare and execute)" in overlap
    assert "MLflow calls 4.2s (inside the parts)" in overlap and "problems@0=hit" in overlap


@pytest.mark.parametrize("t", [
    # the old robustness line: technique 16.4 + tracking 6.6 > total 20.9, and no phases at all
    {"total_s": 20.9, "technique_s": 16.4, "tracking_s": 6.6, "ray_init_s": 0.0, "overhead_share": 0.2},
    # rounding: three parts of 0.04 s
    {"total_s": 0.12, "startup_s": 0.04, "ray_init_s": 0.04, "execute_s": 0.04, "technique_s": 0.0},
    # parts recorded larger than the total: the total shown is never below its parts
    {"total_s": 1.0, "prepare_s": 0.7, "execute_s": 0.6, "technique_s": 0.5},
])
def test_line_never_shows_parts_beyond_the_total_or_negative(t):
    # Execute
    total, parts = _parts(timing_lines(t)[0])
    # Assert
    assert all(v >= 0 for v in parts.values())
    assert round(sum(parts.values()), 1) == total
    assert "technique" not in parts and total >= round(t["total_s"], 1)
