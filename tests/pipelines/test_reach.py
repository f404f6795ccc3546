"""``reach:``: the x at which a variant's curve first reaches another variant's figure, per seed."""
import math

import pytest

from components.core.errors import ConfigError
from components.core.result import Result
from pipelines.experiment import build_spec
from pipelines.outcome import SeedOutcome, VariantOutcome
from pipelines.stages.evaluate import first_reach, judge, reach

EXP = {"name": "x", "variants": {v: {"technique": "probe", "params": {}} for v in ("dense", "ours")},
       "reach": {"time_to_dense_s": {"series": "loss_vs_time", "target": "dense.final_loss"}},
       "claims": {"faster": {"holds": "paired(ours.time_to_dense_s / dense.time_to_dense_s) <= 0.5"}}}


def _variant(name: str, curves: dict[int, tuple[list[float], list[float]]]) -> VariantOutcome:
    o = VariantOutcome(name, "probe", "technique", "core")
    for s, (xs, ys) in curves.items():
        o.seeds[s] = SeedOutcome(s, result=Result(metrics={"final_loss": ys[-1]}, series={"loss_vs_time": (xs, ys, "sim_s")}))
    o.result = Result(metrics={"final_loss": sum(c[1][-1] for c in curves.values()) / len(curves)},
                      series={"loss_vs_time": next(iter(curves.values())) + ("sim_s",)})
    return o


def test_reach_reads_each_seed_against_the_same_seed_of_the_target_and_claims_pair_it():
    # Prepare: dense ends at 2.0 (seed 0) and 1.8 (seed 1) at t=10; ours falls faster, seed 1 never gets to 1.8
    spec = build_spec(EXP)
    dense = _variant("dense", {0: ([2, 6, 10], [3.0, 2.5, 2.0]), 1: ([2, 6, 10], [3.0, 2.4, 1.8])})
    ours = _variant("ours", {0: ([1, 3, 5], [2.6, 1.9, 1.7]), 1: ([1, 3, 5], [2.6, 1.9, 1.85])})

    # Execute
    reach(spec, {"dense": dense, "ours": ours})
    (claim,) = judge(spec, {"dense": dense, "ours": ours})

    # Assert: seed 0 reaches 2.0 at t=3 (the first logged point at or below it), seed 1 never reaches 1.8
    assert ours.seeds[0].result.metrics["time_to_dense_s"] == 3.0
    assert ours.seeds[1].result.metrics["time_to_dense_s"] == math.inf
    assert dense.seeds[0].result.metrics["time_to_dense_s"] == 10.0 and dense.result.metrics["time_to_dense_s"] == 10.0
    assert ours.result.metrics["time_to_dense_s"] == math.inf and ours.result.metrics["time_to_dense_s_n"] == 2
    assert claim.status == "fails"      # the inf seed makes the paired mean inf: never faster


def test_first_reach_above_for_accuracies_and_bad_blocks_are_one_line_errors():
    # Prepare / Execute / Assert
    assert first_reach([1, 2, 3], [0.5, 0.9, 0.95], 0.9, below=False) == 2.0
    assert first_reach([1, 2], [0.5, 0.6], 0.9, below=False) == math.inf
    for block, key in (({"t": {"series": "c", "target": "nope.final_loss"}}, "experiment.reach.t.target"),
                       ({"t": {"series": "c", "target": "dense.final_loss", "upto": 3}}, "experiment.reach.t.upto"),
                       ({"t": {"target": "dense.final_loss"}}, "experiment.reach.t.series")):
        with pytest.raises(ConfigError) as e:
            build_spec({**EXP, "reach": block})
        assert e.value.key == key
