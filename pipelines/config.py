"""Config plumbing: where conf/ lives, the resolvers, and composing without running (preflight).

Every error here is a :class:`ConfigError` (one line: key, value, what is allowed): Hydra's
override syntax, a YAML file that does not parse (file and line), a key that is not in the config.
"""
from __future__ import annotations

import copy
import itertools
import os
from pathlib import Path
from typing import Any, Iterator

from omegaconf import OmegaConf, open_dict

from components.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = Path(os.environ.get("DTLAB_CONF_DIR", ROOT / "conf")).resolve()
MAX_MULTIRUN_JOBS = 10_000   # a grid larger than this is refused: an Optuna sweep samples such spaces
GROUPS = ("experiment", "cluster", "tracking", "hparams_search")

if not OmegaConf.has_resolver("dtlab_root"):
    OmegaConf.register_new_resolver("dtlab_root", lambda: str(ROOT))
if not OmegaConf.has_resolver("dtlab_env"):
    # ${dtlab_env:VAR,default}: VAR when set and not empty, else the default. Unlike oc.env an empty
    # variable counts as unset (a test or CI clears MLFLOW_TRACKING_URI by setting it to "").
    # A group default written this way loses to an explicit override (tracking.uri=...).
    OmegaConf.register_new_resolver("dtlab_env", lambda var, default: os.environ.get(var) or default)


def experiment_names() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


_RAW: dict[tuple, dict] = {}


def _raw_loader():
    """A YAML loader that reads what OmegaConf.load reads (its float and no-timestamp rules), on
    libyaml's parser where PyYAML has it: 23 experiment files in about 0.5 s instead of about 5 s."""
    import yaml
    from omegaconf._utils import get_yaml_loader

    omega = get_yaml_loader()
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return type("RawLoader", (base,), {"yaml_implicit_resolvers": omega.yaml_implicit_resolvers})


def raw_experiments() -> dict[str, dict]:
    """Every conf/experiment/NAME.yaml as written (no defaults, no interpolation resolved), keyed by
    NAME: what the scoreboard and reproduce read besides the composed config. Cached per file while
    its size and mtime stay; each call gets its own copy."""
    import yaml

    out = {}
    loader = None
    for path in sorted((CONF_DIR / "experiment").glob("*.yaml")):
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
        if key not in _RAW:
            loader = loader or _raw_loader()
            _RAW[key] = yaml.load(path.read_text(), Loader=loader) or {}
        out[path.stem] = copy.deepcopy(_RAW[key])
    return out


def _group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:  # DTLAB_CONF_DIR outside the repository
        return str(path)


_YAML_OK: dict[tuple[str, float], bool] = {}


def check_yaml(path: Path, key: str, value: str) -> None:
    """Parse ``path`` as YAML; a syntax error is one line with the file, line and column."""
    import yaml

    try:
        stamp = (str(path), path.stat().st_mtime)
    except OSError:
        return
    if stamp in _YAML_OK:
        return
    try:
        yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{_rel(path)}:{mark.line + 1}:{mark.column + 1}" if mark else _rel(path)
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        if "\\t" in problem or "tab" in problem.lower():
            problem += " (indent with spaces, not tabs)"
        raise ConfigError(key, value, f"YAML syntax error at {where}: {problem}") from None
    _YAML_OK[stamp] = True


def _check_files(overrides: list[str]) -> None:
    """Known group options, and every YAML file the composition reads parses."""
    chosen = {"experiment": "error_feedback", "cluster": "local", "tracking": "local"}
    for ov in overrides:
        key, _, value = ov.lstrip("+~").partition("=")
        if key in GROUPS:
            if value in ("null", "") and key == "hparams_search":
                chosen.pop(key, None)
                continue
            names = value.split(",") if "(" not in value else []   # a sweep: each job is checked again alone
            for name in names:
                if name not in _group_options(key):
                    raise ConfigError(key, name, f"unknown {key}; known: " + ", ".join(_group_options(key)))
            if len(names) == 1:
                chosen[key] = value
    check_yaml(CONF_DIR / "config.yaml", "config", str(CONF_DIR / "config.yaml"))
    for group, name in chosen.items():
        check_yaml(CONF_DIR / group / f"{name}.yaml", group, name)


def missing_key_hint(cfg, dotted: str) -> str:
    """Why ``dotted`` is not in ``cfg`` (a DictConfig or plain mapping): the first part that is
    missing, and the keys at that level closest to it (difflib) -> "did you mean `link`?"; no
    close key: the ++ hint for a key that is new on purpose. ``""`` when the path is there."""
    import difflib

    from omegaconf import DictConfig

    node, seen = cfg, []
    for part in dotted.lstrip("+~").split("."):
        if not isinstance(node, (DictConfig, dict)):
            return ""
        if part not in node:
            keys = [str(k) for k in node.keys()]
            where = ".".join(seen) or "the root config"
            close = difflib.get_close_matches(part, keys, n=3, cutoff=0.6)
            if close:
                return (f"'{part}' is not a key of {where}; did you mean " + " or ".join(f"`{c}`" for c in close)
                        + "? (a new key on purpose: ++KEY=VALUE)")
            shown = ", ".join(sorted(keys)[:12]) + (", ..." if len(keys) > 12 else "")
            return (f"'{part}' is not a key of {where} (keys: {shown or 'none'}); "
                    "a new key: add it with ++KEY=VALUE (or +KEY=VALUE)")
        seen.append(part)
        node = node._get_node(part) if isinstance(node, DictConfig) else node[part]
    return ""


def _hydra_error(e: Exception, overrides: list[str], cfg=None) -> ConfigError:
    """One ConfigError for a failed Hydra composition or override. ``cfg``: the config the override
    did not fit, for a "did you mean" hint on a key that is not there."""
    msg = " ".join(str(e).strip().splitlines()[:1]) if str(e).strip() else type(e).__name__
    if msg.startswith("Could not override"):
        missing = msg.partition("'")[2].rpartition("'")[0]
        hint = missing_key_hint(cfg, missing) if cfg is not None and missing else ""
        msg += " " + (hint or "The key is not in the config: add it with ++KEY=VALUE (or +KEY=VALUE).")
    elif msg.startswith("Ambiguous value"):
        msg += " Commas sweep values: use -m for a multirun, or [a,b] for a list."
    key = overrides[0] if overrides else "config"
    for ov in overrides:
        if ov.split("=")[0].lstrip("+~") in msg:
            key = ov
    return ConfigError(key.split("=")[0], key.partition("=")[2], msg)


def _compose_raw(overrides: list[str], multirun: bool = False, with_hydra: bool = False):
    """Hydra's composition of conf/ with ``overrides`` (unresolved DictConfig); ConfigError on failure.

    ``multirun``: compose as Hydra's multirun does (sweep overrides skipped, hydra/sweeper and
    hydra/launcher options and their typed fields checked); ``with_hydra`` keeps the hydra node.
    """
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    _check_files(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            loader = GlobalHydra.instance().config_loader()
            cfg = loader.load_configuration("config", list(overrides),
                                            run_mode=RunMode.MULTIRUN if multirun else RunMode.RUN)
            if not with_hydra:
                with open_dict(cfg):
                    del cfg["hydra"]
            return cfg
    except (HydraException, OmegaConfBaseException) as e:
        raise _hydra_error(e, overrides, _without_failed(e, overrides, multirun)) from None
    finally:
        GlobalHydra.instance().clear()


def _without_failed(e: Exception, overrides: list[str], multirun: bool):
    """On "Could not override 'KEY'": the config composed without that override (where a
    "did you mean" hint looks for KEY's neighbours); None otherwise or if that fails too."""
    missing = str(e).partition("'")[2].partition("'")[0]
    if not str(e).startswith("Could not override") or not missing:
        return None
    rest = [o for o in overrides if o.lstrip("+~").partition("=")[0] != missing]
    if len(rest) == len(overrides):
        return None
    try:
        return _compose_raw(rest, multirun=multirun, with_hydra=missing.startswith("hydra."))
    except ConfigError:
        return None


def _resolved(cfg, overrides: list[str]) -> dict[str, Any]:
    from omegaconf.errors import OmegaConfBaseException

    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        raise _hydra_error(e, overrides) from None
    plain["_overrides"] = list(overrides)  # so debug=true lets these win over its own values
    from pipelines.flavours import normalise_flavour

    return normalise_flavour(plain)  # type: ignore[return-value]


def compose(overrides: list[str]) -> dict[str, Any]:
    """Compose conf/ with ``overrides`` (no sweeps) and return it resolved, as plain Python."""
    return _resolved(_compose_raw(overrides), overrides)


def compose_hydra(overrides: list[str]):
    """The multirun's composed config with its ``hydra`` node (sweeper, launcher), unresolved."""
    return _compose_raw(overrides, multirun=True, with_hydra=True)


def parse_overrides(overrides: list[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except Exception as e:  # noqa: BLE001 - hydra raises its own parse errors
        bad = next((o for o in overrides if _parses_alone(o) is False), " ".join(overrides))
        detail = " ".join(str(e).split("\n")[:1]).strip()
        raise ConfigError(bad.split("=")[0] or "overrides", bad.partition("=")[2],
                          f"Hydra override syntax: KEY=VALUE, a sweep a,b / range(start,stop[,step]) / choice(a,b) / "
                          f"interval(lo,hi), or a list [a,b] ({detail})") from None


def _parses_alone(line: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        OverridesParser.create().parse_overrides([line])
        return True
    except Exception:  # noqa: BLE001
        return False


def _value_key(o) -> bool:
    """A plain ``key=value`` / ``++key=value`` on a config value (not a group, not hydra, not a dict):
    jobs that differ only in these share one Hydra composition."""
    from hydra.core.override_parser.types import OverrideType

    key = o.key_or_group
    return (o.type in (OverrideType.CHANGE, OverrideType.FORCE_ADD) and o.package is None and "/" not in key
            and not o.is_sweep_override()
            and key not in GROUPS and not key.startswith("hydra") and not isinstance(o.value(), dict))


_BASES: dict[tuple, Any] = {}


def _conf_stamp() -> tuple:
    """What the cached compositions depend on: conf/'s location and every file's mtime."""
    return (str(CONF_DIR), tuple(sorted((str(p), p.stat().st_mtime_ns) for p in CONF_DIR.rglob("*.yaml"))))


def compose_jobs(jobs: list[list[str]]) -> Iterator[tuple[list[str], dict[str, Any]]]:
    """Compose every job of a multirun fast: one Hydra composition per distinct set of group and
    structural overrides (cached while conf/ is unchanged), each job's plain ``key=value`` /
    ``++key=value`` overrides then applied to a copy exactly as Hydra applies them."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    stamp = _conf_stamp()
    for job in jobs:
        parsed = parse_overrides(job)
        structural = [o.input_line for o in parsed if not _value_key(o)]
        key = (stamp, tuple(structural))
        if key not in _BASES:
            if len(_BASES) > 64:
                _BASES.clear()
            _BASES[key] = _compose_raw(structural)
        cfg = copy.deepcopy(_BASES[key])
        for o in parsed:
            if not _value_key(o):
                continue
            try:
                OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True, force_add=o.type.name == "FORCE_ADD")
            except (ConfigAttributeError, ConfigKeyError):
                raise _hydra_error(ValueError(f"Could not override '{o.key_or_group}'."), job, cfg) from None
            except OmegaConfBaseException as e:
                raise _hydra_error(e, job) from None
        yield job, _resolved(cfg, job)


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """Turn multirun overrides (``a=1,2 b=x``) into the job override lists Hydra's basic sweeper
    would run: every job, not a sample (a grid above MAX_MULTIRUN_JOBS is refused)."""
    choices = []
    for o in parse_overrides(overrides):
        if o.is_hydra_override():
            continue
        if o.is_sweep_override():
            key = o.get_key_element()
            try:
                vals = [str(v) if not isinstance(v, str) else v for v in o.sweep_string_iterator()]
            except Exception as e:  # noqa: BLE001 - interval()/tag(): Optuna's, not a grid's
                if type(o.value()).__name__ != "IntervalSweep":
                    raise ConfigError(key, o.input_line.partition("=")[2], f"a sweep Hydra can enumerate ({e})") from None
                raise ConfigError(key, o.input_line.partition("=")[2],
                                  "interval()/tag() need an Optuna sweep (hparams_search=NAME or "
                                  "hydra/sweeper=dtlab_optuna); a grid multirun takes a,b / range() / choice()") from None
            if not vals:
                raise ConfigError(key, o.input_line.partition("=")[2], "a sweep with at least one value")
            choices.append([f"{key}={v}" for v in vals])
        else:
            choices.append([o.input_line])
    n = 1
    for c in choices:
        n *= len(c)
    if n > MAX_MULTIRUN_JOBS:
        raise ConfigError("multirun", f"{n} jobs", f"at most {MAX_MULTIRUN_JOBS} jobs (use an Optuna sweep for larger spaces)")
    return [list(combo) for combo in itertools.product(*choices)] or [[]]
