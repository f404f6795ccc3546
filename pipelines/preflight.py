"""The one validation pass before anything starts: every job a command would run is composed and
checked, and bad input is one line naming the key, the value and what is allowed, exit 2, before
Ray starts (a tracking store that cannot be reached: exit 1)."""
from __future__ import annotations

import sys


def _die(msg: str, code: int = 2) -> None:
    print(f"dtlab: error: {msg}", file=sys.stderr)
    raise SystemExit(code)


def preflight(overrides: list[str], multirun: bool) -> dict:
    """Compose and validate every job the command would run. Returns the first job's config."""
    from components.core.errors import ConfigError
    from pipelines import config, dag

    jobs = config.expand_sweep(overrides) if multirun else [overrides]
    first = None
    try:
        for job in jobs:
            cfg = config.compose(job)
            dag.validate(cfg)
            first = first or cfg
    except ConfigError as e:
        _die(str(e))
    if first:
        from components.core.tracker import Tracker, resolve_tracking_uri

        try:
            Tracker(resolve_tracking_uri(first["tracking"]["uri"])).check_reachable()
        except ConnectionError as e:
            _die(str(e), code=1)
    return first or {}


_VALUE_FLAGS = {"-c", "--cfg", "-p", "--package", "-cn", "--config-name", "-cp", "--config-path", "-cd",
                "--config-dir", "--experimental-rerun", "--info"}


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """Separate Hydra's flags (with their values) from config overrides."""
    flags, overrides, i = [], [], 0
    while i < len(args):
        a = args[i]
        if a in _VALUE_FLAGS and i + 1 < len(args) and "=" not in args[i + 1]:
            flags += [a, args[i + 1]]
            i += 2
            continue
        (flags if a.startswith("-") else overrides).append(a)
        i += 1
    return flags, overrides
