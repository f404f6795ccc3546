"""Aggregates over the seed axis: mean, standard error, count; series and tables kept per seed."""
import math

from components.core.result import Result
from components.core.seeds import aggregate_metrics, aggregate_results, mean_se


def test_mean_and_standard_error():
    # Execute
    mean, se = mean_se([1.0, 2.0, 3.0])
    one_mean, one_se = mean_se([5.0])
    # Assert: SE = sample std / sqrt(n); undefined (NaN) for one seed
    assert mean == 2.0 and math.isclose(se, 1.0 / math.sqrt(3))
    assert one_mean == 5.0 and math.isnan(one_se)


def test_every_metric_gets_mean_se_and_count_even_when_a_seed_lacks_it():
    # Prepare
    per_seed = {0: {"acc": 0.5, "extra": 1.0}, 1: {"acc": 0.7}}
    # Execute
    m = aggregate_metrics(per_seed)
    # Assert
    assert math.isclose(m["acc"], 0.6) and math.isclose(m["acc_se"], 0.1) and m["acc_n"] == 2
    assert m["extra"] == 1.0 and m["extra_n"] == 1 and math.isnan(m["extra_se"])


def test_results_aggregate_curves_tables_and_files_per_seed():
    # Prepare
    r0 = Result(metrics={"loss": 1.0}, series={"loss": [3.0, 1.0]}, tables={"t": [{"a": 1}]}, files={"x.txt": "0"})
    r1 = Result(metrics={"loss": 3.0}, series={"loss": [5.0, 3.0]}, tables={"t": [{"a": 2}]}, files={"x.txt": "1"})
    # Execute
    agg = aggregate_results({1: r1, 0: r0})
    # Assert
    assert agg.metrics["loss"] == 2.0 and agg.metrics["loss_n"] == 2
    assert agg.series_xy("loss") == ([0.0, 1.0], [4.0, 2.0])
    assert agg.tables["t"] == [{"seed": 0, "a": 1}, {"seed": 1, "a": 2}]
    assert [row["seed"] for row in agg.tables["per_seed"]] == [0, 1]
    assert agg.files == {"seed0/x.txt": "0", "seed1/x.txt": "1"}
