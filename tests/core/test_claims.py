import pytest

from components.core.claims import Claim, check, evaluate, referenced_variants
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
