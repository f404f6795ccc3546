"""Shared serving cost accounting."""
import pytest

from components.core.errors import ConfigError
from components.serving.cost import TokenCost, Usage


def test_usage_prices_each_model_and_merges():
    u = Usage()
    u.charge("small", prefill=10, decode=4)
    u.charge("base", prefill=3, decode=1)
    v = Usage(wall_s=0.5)
    v.charge("small", decode=2)
    u.merge(v)
    costs = {"small": TokenCost(0.1, 1.0, 0.01), "base": TokenCost(1.0, 8.0)}
    assert u.decode["small"] == 6 and u.calls["small"] == 2 and u.wall_s == 0.5
    assert u.sim_latency_s(costs) == pytest.approx(10 * 0.1 + 6 * 1.0 + 2 * 0.01 + 3 * 1.0 + 8.0)
    assert Usage.from_dict(u.to_dict()).to_dict() == u.to_dict()
    assert u.metrics()["base_tokens"] == 1.0


def test_cost_from_params_scales_with_size_and_rejects_bad_input():
    small, big = TokenCost.from_params(1_000), TokenCost.from_params(8_000)
    assert big.decode_s == pytest.approx(8 * small.decode_s)
    assert small.prefill_s == pytest.approx(0.1 * small.decode_s)
    with pytest.raises(ConfigError, match="n_params"):
        TokenCost.from_params(0)
    with pytest.raises(ConfigError, match="costs"):
        Usage(calls={"x": 1}).sim_latency_s({})
