"""A technique's validate hook sees the variant's input bindings (the prepare entry each input is bound
to, with its parsed params) when it takes a third argument; two-argument hooks are called as before."""
from dataclasses import dataclass

import pytest

from components.core import registry
from components.core.errors import ConfigError, require
from pipelines.experiment import build_spec


@dataclass
class ToyParams:
    turns: int = 2


def _experiment(technique: str, inputs: dict | None = None, turns: int = 2) -> dict:
    lm = lambda context: {"step": "smartcache_lm", "params": {"context": context, "max_turns": 2}}  # noqa: E731
    variant = {"technique": technique, "role": "technique", "params": {"turns": turns}}
    if inputs is not None:
        variant["inputs"] = inputs
    return {"name": "toy", "prepare": {"lm": lm(40), "lm_long": lm(90)}, "variants": {"v": variant}}


@pytest.fixture
def toy_techniques(monkeypatch):
    """Two toy techniques reading input ``lm``: one hook with bindings, one without (undone after the test)."""
    monkeypatch.setitem(registry._REGISTRY, "technique", dict(registry.entries("technique")))
    seen: dict = {}

    def with_inputs(p: ToyParams, exp: dict, inputs: dict) -> None:
        seen["inputs"] = inputs
        ctx = inputs["lm"].params.context
        require(12 * p.turns <= ctx, "turns", p.turns, f"at most {ctx // 12} turns (entry {inputs['lm'].name})")

    def without_inputs(p: ToyParams, exp: dict) -> None:
        seen["two_args"] = exp["name"]

    for name, hook in (("toy_bound", with_inputs), ("toy_plain", without_inputs)):
        registry.technique(name, family="core", summary="toy", params=ToyParams, validate=hook,
                           inputs=("lm",))(lambda p, ctx: None)
    return seen


def test_hook_with_a_third_argument_gets_the_bound_entries(toy_techniques):
    # Execute: input lm bound to the entry lm_long
    build_spec(_experiment("toy_bound", {"lm": "lm_long"}, turns=7))
    # Assert: the PrepareSpec of lm_long, params parsed with defaults filled in
    entry = toy_techniques["inputs"]["lm"]
    assert (entry.name, entry.step, entry.params.context) == ("lm_long", "smartcache_lm", 90)
    assert entry.params.n_layer == 2            # a default the YAML did not set


def test_hook_error_names_the_variant_key_and_the_bound_entry(toy_techniques):
    # Execute / Assert: the default binding (entry lm, context 40) refuses 7 turns, named under the variant
    with pytest.raises(ConfigError, match=r"^experiment.variants.v.params.turns=7: at most 3 turns \(entry lm\)$"):
        build_spec(_experiment("toy_bound", None, turns=7))


def test_two_argument_hook_is_called_as_before(toy_techniques):
    # Execute
    build_spec(_experiment("toy_plain"))
    # Assert
    assert toy_techniques == {"two_args": "toy"}
