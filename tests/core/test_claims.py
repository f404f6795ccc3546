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
