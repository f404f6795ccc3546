import pytest

from components.core.claims import Claim, ClaimOutcome, check, evaluate, outcome_status, referenced_variants
from components.core.errors import ConfigError

M = {"a": {"loss": 1.0, "bytes": 100.0}, "b": {"loss": 1.5, "bytes": 400.0}}


def test_expressions():
    assert evaluate("a.loss <= 1.02 * b.loss", M) is True
    assert evaluate("a.bytes / b.bytes", M) == 0.25
    assert evaluate("min(a.loss, b.loss) < 1 or a.bytes < 200", M) is True
    assert evaluate("a.loss < b.loss < 2", M) is True
    assert referenced_variants("a.loss < b.loss") == {"a", "b"}


@pytest.mark.parametrize("expr", ["__import__('os')", "a.loss.__class__", "open('x')", "[x for x in a]", "lambda: 1"])
def test_unsafe_expressions_rejected(expr):
    with pytest.raises(ConfigError):
        evaluate(expr, M)


def test_missing_metric_fails_the_claim_never_passes():
    out = check(Claim("c", "a.accuracy > 0.5 or True"), M)
    assert out.holds is False and "accuracy" in out.error
    out = check(Claim("c", "z.loss < 1"), M)
    assert out.holds is False


def test_nan_fails():
    out = check(Claim("c", "a.loss * 0 + x.loss"), {"a": {"loss": 1.0}, "x": {"loss": float("nan")}})
    assert out.holds is False


def test_measured_is_reported():
    out = check(Claim("c", "a.loss < b.loss", measured="a.loss / b.loss"), M)
    assert out.holds and out.measured == "0.6667"


def test_paired_pairs_seed_by_seed_and_its_se_needs_two_seeds():
    # Prepare: a constant gain of 0.1 per seed under large between-seed noise
    seed_metrics = {"a": {0: {"m": 1.1}, 1: {"m": 2.1}, 2: {"m": 0.6}},
                    "b": {0: {"m": 1.0}, 1: {"m": 2.0}, 2: {"m": 0.5}}}
    agg = {"a": {"m": 1.2667, "m_se": 0.44}, "b": {"m": 1.1667, "m_se": 0.44}}
    claim = Claim("gain", "paired(a.m - b.m) >= 0.05 and paired(a.m - b.m) > 2 * paired_se(a.m - b.m)")
    unpaired = Claim("gain_unpaired", "a.m - b.m >= 0.05 and a.m - b.m > 2 * a.m_se")
    # Execute
    paired_out = check(claim, agg, seed_metrics)
    unpaired_out = check(unpaired, agg, seed_metrics)
    one_seed = check(claim, agg, {v: {0: s[0]} for v, s in seed_metrics.items()})
    # Assert: pairing sees the gain the noise hides; one seed cannot pass a claim about noise
    assert paired_out.holds and not unpaired_out.holds
    assert not one_seed.holds and "standard error of one seed" in one_seed.error


def test_claim_over_an_axis_counts_its_cells():
    # Prepare
    metrics = {"php_x": {"acc": 0.9}, "php_y": {"acc": 0.5}, "fml_x": {"acc": 0.8}, "fml_y": {"acc": 0.6}}
    axes = (("pattern", ("x", "y")),)
    # Execute
    every = check(Claim("c", "php_{pattern}.acc > fml_{pattern}.acc", over=("pattern",), axes=axes), metrics)
    one = check(Claim("c", "php_{pattern}.acc > fml_{pattern}.acc", over=("pattern",), axes=axes, at_least=1,
                      measured="php_{pattern}.acc - fml_{pattern}.acc"), metrics)
    # Assert
    assert not every.holds and one.holds
    assert one.measured.startswith("1/2 cells hold (need 1)") and [c["holds"] for c in one.cells] == [True, False]


# ------------------------------------------------------------------------------------------ premises
def test_premise_outcome_separates_setting_from_technique():
    # Prepare: the claim "a beats b by 1", stated for a setting where b is weak (b.loss >= 1.2)
    claim = Claim("c", "b.loss - a.loss >= 1", premise="b.loss >= 1.2", premise_measured="b.loss")
    strong_b = {"a": {"loss": 1.0}, "b": {"loss": 1.1}}
    # Execute
    setting = check(claim, strong_b)                       # fails, and its premise fails
    technique = check(claim, M)                             # fails under its premise
    vacuous = check(Claim("c", "a.loss < 2", premise="b.loss >= 1.2"), strong_b)
    # Assert
    assert (setting.holds, setting.premise_holds, setting.status) == (False, False, "premise not met")
    assert setting.premise_measured == "1.1"
    assert (technique.premise_holds, technique.status) == (True, "fails")
    assert (vacuous.holds, vacuous.status) == (True, "premise not met")  # a pass in the wrong setting is no pass


def test_a_premise_that_cannot_be_computed_never_excuses_a_failure():
    # Execute: the premise reads a metric no run reported, or a NaN
    missing = check(Claim("c", "a.loss > 5", premise="z.loss > 0"), M)
    nan = check(Claim("c", "a.loss > 5", premise="x.v > 0"), {**M, "x": {"v": float("nan")}})
    # Assert
    assert missing.premise_holds is None and missing.status == "fails" and "'z'" in missing.premise_error
    assert nan.premise_holds is None and nan.status == "fails"


def test_premise_over_an_axis_must_hold_on_every_cell():
    # Prepare
    axes = (("p", ("x", "y")),)
    metrics = {"php_x": {"acc": 0.5, "gap": 0.3}, "php_y": {"acc": 0.5, "gap": 0.0}}
    claim = Claim("c", "php_{p}.acc > 0.9", over=("p",), axes=axes, premise="php_{p}.gap > 0.1")
    # Execute
    out = check(claim, metrics)
    # Assert
    assert out.premise_holds is False and out.status == "premise not met"


def test_stored_outcome_without_premise_fields_reads_back():
    # Prepare: claims.json as written before premises (compare reads ClaimOutcome(**c))
    old = {"name": "c", "paper": "p", "measured": "1", "holds": False, "gate": True, "error": "", "skipped": False,
           "cells": []}
    # Execute
    out = ClaimOutcome(**old)
    # Assert
    assert out.premise_holds is None and out.status == "fails" and outcome_status(old) == "fails"
    assert outcome_status({**old, "skipped": True}) == "not run"


def test_measured_figure_carries_its_standard_error_over_seeds():
    # Prepare: a paired gain over three seeds and a mean with its SE
    seed_metrics = {"a": {0: {"m": 1.1}, 1: {"m": 2.1}, 2: {"m": 0.7}}, "b": {0: {"m": 1.0}, 1: {"m": 2.0}, 2: {"m": 0.5}}}
    agg = {"a": {"m": 1.3, "m_se": 0.4}, "b": {"m": 1.1667, "m_se": 0.44}}
    claim = Claim("g", "paired(a.m - b.m) > 0", measured="[paired(a.m - b.m), a.m, a.m / b.m]")
    # Execute
    out = check(claim, agg, seed_metrics)
    plain = check(Claim("g", "a.loss < b.loss", measured="a.loss"), M)
    # Assert: SE where the term is a mean over seeds, none on a derived ratio or a one-seed figure
    assert out.measured_pm == "[0.1333 ± 0.03333, 1.3 ± 0.4, 1.114]"
    assert plain.measured_pm == ""
