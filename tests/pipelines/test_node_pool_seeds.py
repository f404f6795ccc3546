"""Several seeds of one variant on the experiment's shared NodeActor pool (issue: seeds overwrote each
other's hosted agents, because the host key had no seed). Every experiment that sets ``resources.nodes``
runs its debug flavour on two seeds at once; each (variant, seed) must finish."""
from pathlib import Path

import pytest
import yaml

from components.core.context import RunContext

CONF = Path(__file__).resolve().parents[2] / "conf" / "experiment"


def _node_experiments() -> list[str]:
    out = []
    for f in sorted(CONF.glob("*.yaml")):
        res = (yaml.safe_load(f.read_text()) or {}).get("resources") or {}
        if int(res.get("nodes", 0) or 0) > 0:
            out.append(f.stem)
    return out


NODE_EXPERIMENTS = _node_experiments()
# the reported reproduction, on the two variants it named; the others' debug runs take longer and run in make bench
FAST = {"error_feedback": ["only=[dist_ef21,dist_cgd]"]}


def test_host_keys_differ_per_run_variant_and_seed():
    # Prepare
    ctxs = [RunContext(experiment="e", variant=v, seed=s, run=r) for r in ("r1", "r2") for v in ("a", "b") for s in (0, 1)]
    # Execute
    keys = {c.host_key() for c in ctxs}
    # Assert
    assert len(keys) == len(ctxs)
    assert ctxs[0].host_key(3) != ctxs[0].host_key(4)


def test_node_experiments_are_found():
    assert {"error_feedback", "php_fl", "compactfusion"} <= set(NODE_EXPERIMENTS)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in NODE_EXPERIMENTS])
def test_two_seeds_share_the_node_pool(run_experiment, name):
    # Prepare / Execute: both seeds of every variant dispatched together onto one pool
    outcome = run_experiment(name, "experiment.seeds=[0,1]", *FAST.get(name, []))
    # Assert
    failed = {f"{n}#{s}": so.error[-300:] for n, v in outcome.variants.items()
              for s, so in v.seeds.items() if so.status != "FINISHED"}
    assert not failed, failed
    assert any(set(v.seeds) == {0, 1} for v in outcome.variants.values())   # some variants pin their own seeds
