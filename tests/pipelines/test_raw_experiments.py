"""The experiment files as written (scoreboard, reproduce, RESULTS.md read them): libyaml with
OmegaConf's rules gives exactly what OmegaConf.load gives, types included, about 10x faster."""
from __future__ import annotations

from omegaconf import OmegaConf

from pipelines import config


def _typed(x):
    """``x`` with every leaf paired with its type name (1 == 1.0 == True would hide a change)."""
    if isinstance(x, dict):
        return {k: _typed(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_typed(v) for v in x]
    return (type(x).__name__, x)


def test_raw_experiments_read_what_omegaconf_reads():
    # Prepare
    want = {p.stem: OmegaConf.to_container(OmegaConf.load(p), resolve=False)
            for p in sorted((config.CONF_DIR / "experiment").glob("*.yaml"))}
    # Execute
    got = config.raw_experiments()
    # Assert
    assert list(got) == config.experiment_names() and _typed(got) == _typed(want)


def test_each_call_gets_its_own_copy():
    # Execute
    first = config.raw_experiments()
    first["duo"]["seeds"].append(99)
    # Assert
    assert 99 not in config.raw_experiments()["duo"]["seeds"]
