from dataclasses import dataclass, field
from typing import Literal

import pytest

from components.core.errors import ConfigError, require
from components.core.params import parse_params


@dataclass
class P:
    n: int = 3
    lr: float = 0.1
    mode: Literal["a", "b"] = "a"
    step: float | None = None
    opts: dict = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)

    def check(self):
        require(self.lr > 0, "lr", self.lr, "a positive learning rate")


def test_defaults_and_coercion():
    p = parse_params(P, {"lr": 1, "sizes": [1, 2]})
    assert p.lr == 1.0 and isinstance(p.lr, float) and p.sizes == [1, 2] and p.step is None


@pytest.mark.parametrize("raw, key, allowed", [
    ({"nope": 1}, "params.nope", "unknown key"),
    ({"n": "three"}, "params.n", "an integer"),
    ({"n": 2.5}, "params.n", "an integer"),
    ({"n": True}, "params.n", "an integer"),
    ({"mode": "c"}, "params.mode", "one of 'a', 'b'"),
    ({"lr": -1.0}, "params.lr", "a positive learning rate"),
    ({"sizes": [1, "x"]}, "params.sizes[1]", "an integer"),
    ({"step": "big"}, "params.step", "a number"),
])
def test_errors_name_key_value_and_allowed(raw, key, allowed):
    with pytest.raises(ConfigError) as e:
        parse_params(P, raw)
    assert e.value.key == key
    assert allowed in e.value.allowed
    assert "\n" not in str(e.value)
