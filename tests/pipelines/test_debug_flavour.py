"""The debug flavour: dotted overrides, and ``variants.X: null`` drops a variant like ``only=``."""
import pytest

from components.core.errors import ConfigError
from pipelines.experiment import build_spec

EXP = {
    "name": "t", "family": "core",
    "variants": {
        "a": {"technique": "probe", "role": "baseline", "params": {"seconds": 1.0}},
        "b": {"technique": "probe", "role": "technique", "params": {"seconds": 1.0}},
    },
    "claims": {"b_vs_a": {"holds": "b.steps >= a.steps"}},
    "debug": {"variants.a.params.seconds": 0.1, "variants.b": None},
}


def test_debug_drops_variants_and_overrides_params():
    full = build_spec(EXP)
    assert [v.name for v in full.variants] == ["a", "b"]
    dbg = build_spec(EXP, debug=True)
    assert [v.name for v in dbg.variants] == ["a"]
    assert dbg.variants[0].params_raw["seconds"] == 0.1
    assert [c.name for c in dbg.claims] == ["b_vs_a"]  # kept; the DAG reports it as "not run"


def test_dropping_an_unknown_variant_is_an_error():
    bad = {**EXP, "debug": {"variants.zzz": None}}
    with pytest.raises(ConfigError, match="variants.zzz"):
        build_spec(bad, debug=True)
