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

    try:
        first = check(overrides, multirun)
    except ConfigError as e:
        _die(str(e))
    from components.core.tracker import Tracker, resolve_tracking_uri

    try:
        Tracker(resolve_tracking_uri(first["tracking"]["uri"])).check_reachable()
    except ConnectionError as e:
        _die(str(e), code=1)
    return first


_OPTUNA = "hydra_plugins.dtlab_optuna_sweeper.sweeper.DtlabOptunaSweeper"
_RAY_LAUNCHER = "hydra_plugins.dtlab_ray_launcher.launcher.DtlabRayLauncher"


def jobs_of(overrides: list[str], multirun: bool) -> tuple[list[list[str]], bool]:
    """Every job the command would run (a sweep: every bound and choice of its space), and whether
    it is a multirun (``-m``, or a config such as an hparams_search that sets hydra.mode)."""
    from omegaconf import OmegaConf

    from pipelines import config

    config.parse_overrides(overrides)  # override syntax first: one line naming the bad override
    # only a _global_ hparams_search file or a hydra override can make a run without -m a multirun
    if not multirun and not any(o.lstrip("+~").startswith(("hparams_search", "hydra")) for o in overrides):
        return [list(overrides)], False
    hcfg = config.compose_hydra(overrides)
    multirun = multirun or str(OmegaConf.select(hcfg, "hydra.mode")) in ("MULTIRUN", "RunMode.MULTIRUN")
    if not multirun:
        return [list(overrides)], False
    hydra = OmegaConf.to_container(hcfg.hydra, resolve=False)
    launcher, sweeper = hydra.get("launcher") or {}, hydra.get("sweeper") or {}
    if launcher.get("_target_") == _RAY_LAUNCHER:
        from hydra_plugins.dtlab_ray_launcher.launcher import check_conf as check_launcher

        check_launcher(launcher)
    if sweeper.get("_target_") != _OPTUNA:
        return config.expand_sweep(overrides), True
    from components.core.errors import ConfigError
    from hydra_plugins.dtlab_optuna_sweeper.config import check_conf as check_sweeper
    from hydra_plugins.dtlab_optuna_sweeper.search_space import fmt_value, parse_space, points

    check_sweeper({**sweeper, "objective": OmegaConf.select(hcfg, "objective")})
    task = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
    space, fixed = parse_space(sweeper.get("params"), task)
    if not space:
        raise ConfigError("hydra.sweeper.params", sweeper.get("params"),
                          "a search space (hydra.sweeper.params or a sweep override such as x=interval(0,1))")
    return [fixed + [f"{k}={fmt_value(v)}" for k, v in pt.items()] for pt in points(space)], True


def check(overrides: list[str], multirun: bool) -> dict:
    """The validation pass (raises ConfigError): override syntax, sweeper and launcher options,
    the search space, every job composed and validated, the objective, runs_dir writable."""
    from pipelines import config, dag

    jobs, multirun = jobs_of(overrides, multirun)
    first = None
    for _job, cfg in config.compose_jobs(jobs):
        check_finite(cfg.get("cluster"), "cluster")
        spec = dag.validate(cfg)
        if first is None:
            first = cfg
            check_objective(cfg.get("objective"), spec)
    check_runs_dir(first.get("runs_dir"))
    return first


def check_finite(node, key: str) -> None:
    """No NaN or infinity anywhere under ``node`` (cluster sizes, ports, memory: never meaningful)."""
    import math

    from components.core.errors import ConfigError

    if isinstance(node, dict):
        for k, v in node.items():
            check_finite(v, f"{key}.{k}")
    elif isinstance(node, float) and not math.isfinite(node):
        raise ConfigError(key, node, "a finite number")


def check_objective(expr, spec) -> None:
    """A sweep objective parses and reads only variants this run has (before any trial runs)."""
    from components.core.claims import parse_expr, referenced_variants
    from components.core.errors import ConfigError

    if expr is None:
        return
    if not isinstance(expr, str) or not expr.strip():
        raise ConfigError("objective", expr, "null (claims held) or an expression over variant metrics, e.g. a.value")
    parse_expr(expr, "objective")
    names = [v.name for v in spec.variants]
    used = referenced_variants(expr, "objective")
    if not used:
        raise ConfigError("objective", expr, "an expression naming VARIANT.METRIC (variants: " + ", ".join(names) + ")")
    missing = sorted(used - set(names))
    if missing:
        raise ConfigError("objective", expr, f"variant {missing[0]!r} does not run here; variants: " + ", ".join(names))


def check_runs_dir(path) -> None:
    """runs_dir exists or can be created, and dtlab can write there (caches, MLflow DB, logs)."""
    import tempfile
    from pathlib import Path

    from components.core.errors import ConfigError

    try:
        p = Path(str(path or "runs")).resolve()
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=p):
            pass
    except OSError as e:
        raise ConfigError("runs_dir", str(path), f"a directory dtlab can create and write ({e.strerror or e})") from None


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
