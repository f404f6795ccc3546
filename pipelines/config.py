"""Config plumbing: where conf/ lives, the resolvers, and composing without running (preflight)."""
from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from components.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = Path(os.environ.get("DTLAB_CONF_DIR", ROOT / "conf")).resolve()
MAX_PREFLIGHT_JOBS = 256

if not OmegaConf.has_resolver("dtlab_root"):
    OmegaConf.register_new_resolver("dtlab_root", lambda: str(ROOT))


def experiment_names() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def _group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def compose(overrides: list[str]) -> dict[str, Any]:
    """Compose conf/ with ``overrides`` (no sweeps) and return it resolved, as plain Python."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    for ov in overrides:
        key, _, value = ov.lstrip("+~").partition("=")
        if key in ("experiment", "cluster", "tracking") and value not in _group_options(key):
            raise ConfigError(key, value, f"unknown {key}; known: " + ", ".join(_group_options(key)))
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose("config", overrides=list(overrides))
            plain = OmegaConf.to_container(cfg, resolve=True)
            plain["_overrides"] = list(overrides)  # so debug=true lets these win over its own values
            return plain  # type: ignore[return-value]
    except (HydraException, OmegaConfBaseException) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if msg.startswith("Could not override"):
            msg += " The key is not in the config: add it with ++KEY=VALUE (or +KEY=VALUE)."
        elif msg.startswith("Ambiguous value"):
            msg += " Commas sweep values: use -m for a multirun, or [a,b] for a list."
        key = overrides[0] if overrides else "config"
        for ov in overrides:
            if ov.split("=")[0].lstrip("+~") in msg:
                key = ov
        raise ConfigError(key.split("=")[0], key.partition("=")[2], msg) from None
    finally:
        GlobalHydra.instance().clear()


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """Turn multirun overrides (``a=1,2 b=x``) into the job override lists Hydra would run."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(overrides)
    except Exception as e:  # noqa: BLE001 - hydra raises its own parse errors
        raise ConfigError("overrides", " ".join(overrides), str(e).splitlines()[0]) from None
    choices = []
    for o in parsed:
        if o.is_sweep_override() and not o.is_hydra_override():
            try:
                vals = [str(v) if not isinstance(v, str) else v for v in o.sweep_string_iterator()]
            except Exception:  # interval()/tag() sweeps belong to the Optuna sweeper: check one point
                vals = [None]
            key = o.get_key_element()
            choices.append([f"{key}={v}" if v is not None else None for v in vals])
        elif not o.is_hydra_override():
            choices.append([o.input_line])
    jobs = []
    for combo in itertools.islice(itertools.product(*choices), MAX_PREFLIGHT_JOBS):
        jobs.append([c for c in combo if c is not None])
    return jobs or [[]]
