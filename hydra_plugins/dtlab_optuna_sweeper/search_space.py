"""Hydra sweep syntax -> Optuna distributions (the mapping hydra-optuna-sweeper uses)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer

from hydra_plugins.dtlab_optuna_sweeper.lazy import optuna

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution


def to_distribution(override: Override) -> BaseDistribution | None:
    """A sweep override as an Optuna distribution; None for a plain (fixed) value."""
    if not override.is_sweep_override():
        return None
    value = override.value()
    if isinstance(value, ChoiceSweep):
        choices = [x for x in override.sweep_iterator(transformer=Transformer.encode)]
        return optuna.distributions.CategoricalDistribution(choices)
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if all(isinstance(v, int) for v in (start, stop, step)):
            return optuna.distributions.IntDistribution(int(start), int(stop) - int(step), step=int(step))
        return optuna.distributions.FloatDistribution(float(start), float(stop) - float(step), step=float(step))
    if isinstance(value, IntervalSweep):
        log = "log" in value.tags
        if "int" in value.tags or (isinstance(value.start, int) and isinstance(value.end, int) and not log):
            return optuna.distributions.IntDistribution(int(value.start), int(value.end), log=log)
        return optuna.distributions.FloatDistribution(float(value.start), float(value.end), log=log)
    raise ValueError(f"{override.input_line}: unsupported sweep for Optuna")


def fmt_value(value: Any) -> str:
    """A sampled value as an override value (floats by repr, so nothing is rounded)."""
    return repr(value) if isinstance(value, float) else str(value)


def check_distribution(key: str, text: str, override: Override) -> BaseDistribution | None:
    """to_distribution, with a bad space (reversed bounds, empty choice) as one-line ConfigError."""
    from components.core.errors import ConfigError

    try:
        return to_distribution(override)
    except Exception as e:  # noqa: BLE001 - optuna's ValueError on low > high, hydra's on bad sweeps
        raise ConfigError(key, text, f"a search space: interval(low, high) with low <= high, choice(a, b, ...), "
                                     f"range(start, stop[, step]) ({' '.join(str(e).split())})") from None


def points(space: dict[str, BaseDistribution]) -> list[dict[str, Any]]:
    """Points that put every bound and every choice of ``space`` in some trial (one at a time from
    the first point): what preflight composes and validates before any trial runs."""
    def values(d: BaseDistribution) -> list[Any]:
        if isinstance(d, optuna.distributions.CategoricalDistribution):
            return list(d.choices)
        return [d.low, d.high] if d.low != d.high else [d.low]

    per_key = {k: values(d) for k, d in space.items()}
    first = {k: v[0] for k, v in per_key.items()}
    out = [first]
    for k, vals in per_key.items():
        out += [{**first, k: v} for v in vals[1:]]
    return out


def parse_space(params: dict[str, Any] | None, cli_overrides: list[str]) -> tuple[dict[str, BaseDistribution], list[str]]:
    """Search space from the config's params and the command line's sweep overrides.

    Returns (distributions by key, fixed overrides that every trial gets).
    """
    parser = OverridesParser.create()
    space: dict[str, BaseDistribution] = {}
    fixed: list[str] = []
    lines = [f"{k}={v}" for k, v in (params or {}).items()] + list(cli_overrides)
    for o in parser.parse_overrides(lines):
        dist = check_distribution(o.get_key_element(), o.input_line.partition("=")[2], o)
        key = o.get_key_element()
        if dist is None:
            fixed.append(o.input_line)
        else:
            space[key] = dist
    return space, fixed
