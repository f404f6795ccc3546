"""The one validation pass before anything starts: every job a command would run is composed and
checked, and bad input is one line naming the key, the value and what is allowed, exit 2, before
Ray starts (a tracking store that cannot be reached: exit 1)."""
from __future__ import annotations

import contextlib
import sys


def _die(msg: str, code: int = 2) -> None:
    print(f"dtlab: error: {msg}", file=sys.stderr)
    raise SystemExit(code)


def tracking_store(args: list[str]) -> tuple[str, list[str], dict]:
    """For the commands that read the store (compare, scoreboard, reproduce, ...): the tracking URI
    (an explicit ``tracking.uri=``, else ``MLFLOW_TRACKING_URI``, else the group's default), the
    arguments that are not overrides, and the composed config; a bad override is one line, exit 2."""
    from pipelines import config

    overrides = [a for a in args if "=" in a]
    rest = [a for a in args if "=" not in a]
    try:
        cfg = config.compose(overrides)
    except Exception as e:  # noqa: BLE001 - any composition error is the user's input
        _die(str(e))
    from components.core.tracker import resolve_tracking_uri

    return resolve_tracking_uri(cfg["tracking"]["uri"]), rest, cfg


def preflight(overrides: list[str], multirun: bool) -> dict:
    """Compose and validate every job the command would run. Returns the first job's config."""
    from components.core.errors import ConfigError

    try:
        first = check(overrides, multirun)
    except ConfigError as e:
        _die(str(e))
    from components.core.tracker import resolve_tracking_uri

    try:
        check_store(resolve_tracking_uri(first["tracking"]["uri"]))
    except ConnectionError as e:
        _die(str(e), code=1)
    return first


def check_store(uri: str) -> None:
    """The tracking store can be reached (ConnectionError otherwise). A local SQLite file is
    checked without importing MLflow (seconds of imports and store set-up that the run then does
    while Ray starts): its folder can be created and written, and an existing file opens as a
    database. Any other store through MLflow's client."""
    from components.core.tracker import Tracker, sqlite_path

    path = sqlite_path(uri)
    if path is None:
        Tracker(uri).check_reachable()
        return
    import sqlite3
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
        if path.exists():
            with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)) as db:
                db.execute("select count(*) from sqlite_master").fetchone()
    except (OSError, sqlite3.Error) as e:
        raise ConnectionError(f"MLflow tracking store {uri} is unreachable: {e}") from None


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
    first = None
    for _job, cfg, _spec in checked_jobs(overrides, multirun):
        first = cfg if first is None else first
    return first


def checked_jobs(overrides: list[str], multirun: bool, devices: bool = True):
    """Every job the command would run, composed and validated, as (its overrides, its config,
    its ExperimentSpec); raises ConfigError at the first bad one. runs_dir is checked once every
    job passed (a generator: a large grid is never held in memory at once). ``devices=False``: the
    GPUs asked for are not held against this machine's (`dtlab list` describes, it runs nothing)."""
    from components.core.errors import ConfigError
    from pipelines import config, dag

    jobs, multirun = jobs_of(overrides, multirun)
    first = None
    for job, cfg in config.compose_jobs(jobs):
        check_finite(cfg.get("cluster"), "cluster")
        if not isinstance(cfg.get("verbose", False), bool):  # before the tracking store is touched
            raise ConfigError("verbose", cfg.get("verbose"), "true or false")
        try:
            spec = dag.validate(cfg, devices=devices)
        except ConfigError as e:
            raise as_typed(e, cfg, job) from None
        if first is None:
            first = cfg
            check_objective(cfg.get("objective"), spec)
        yield job, cfg, spec
    check_runs_dir(first.get("runs_dir"))


def as_typed(e, cfg: dict, job: list[str]):
    """A bad value the experiment's ``common.T`` block gave a variant is found while that
    variant's params are parsed, so it names ``experiment.variants.V.params.P``: name the key
    the user wrote instead, ``experiment.common.T.P`` (where the variant does not set P itself).
    Other errors come back unchanged."""
    import re

    from components.core.errors import ConfigError
    from pipelines.experiment import apply_debug, overridden_keys
    from pipelines.flavours import flavour_of

    m = re.fullmatch(r"experiment\.variants\.([^.]+)\.params\.(.+)", e.key)
    exp = cfg.get("experiment")
    if not m or not isinstance(exp, dict):
        return e
    variant, path = m.groups()
    try:
        flavour = flavour_of(cfg)
        if flavour != "full":
            exp = apply_debug(exp, keep=overridden_keys(job), flavour=flavour)
    except ConfigError:
        return e
    v = (exp.get("variants") or {}).get(variant)
    common = exp.get("common") or {}
    if not isinstance(v, dict) or not isinstance(common, dict):
        return e
    tech = v.get("technique")
    if _has_path(v.get("params") or {}, path) or not _has_path(common.get(tech) or {}, path):
        return e
    return ConfigError(f"experiment.common.{tech}.{path}", e.value, e.allowed)


def _has_path(node, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


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


def describe(job: list[str], cfg: dict, spec) -> list[str]:
    """What one job will run, as `dtlab run --dry-run` prints it: the flavour, seeds, resources,
    the prepare steps it needs (params with their defaults), every selected variant (technique,
    role, seeds, inputs, params with the technique's defaults filled in) and the claims, each
    with whether this selection can judge it."""
    from components.core.claims import referenced_variants
    from pipelines.experiment import resolved
    from pipelines.flavours import flavour_label, paper_notes

    res = f"num_cpus {spec.num_cpus:g} per task, nodes {spec.nodes}" + (
        f" ({spec.node_cpus:g} CPUs each)" if spec.nodes and spec.node_cpus else "") + (
        f", max_parallel {spec.max_parallel}" if spec.max_parallel else "") + (
        f", num_gpus {spec.num_gpus:g} per task" if spec.num_gpus else "") + f", device {spec.device}"
    out = [f"{spec.name} ({spec.family}){flavour_label(spec)}: {spec.summary}",
           "overrides: " + (" ".join(job) or "(none)"),
           f"seeds: {spec.seeds} · resources: {res} · runs_dir: {cfg.get('runs_dir')}", *paper_notes(spec)]
    needed = spec.needed_prepare()
    out.append(f"prepare ({len(needed)} step(s), upstream first; cached by content under runs_dir/cache):")
    for p, seeds in needed:
        ups = ", ".join(f"{k}<-{e}" for k, e in p.inputs.items())
        out.append(f"  {p.name}: step {p.step}" + (f", seeds {[s for s in seeds]}" if p.seeded else ", unseeded")
                   + (f", inputs {ups}" if ups else ""))
        out += [f"      {k} = {v}" for k, v in _flat(resolved(p.params))]
    names = {v.name for v in spec.variants}
    out.append(f"variants ({len(spec.variants)}; one task per variant x seed):")
    for v in spec.variants:
        ins = ", ".join(f"{k}<-{e}" for k, e in v.inputs.items())
        out.append(f"  {v.name}: technique {v.technique}, role {v.role}, seeds {v.seeds}"
                   + (f", inputs {ins}" if ins else ""))
        out += [f"      {k} = {val}" for k, val in _flat(v.params_resolved)]
    out.append(f"claims ({len(spec.claims)}):")
    for c in spec.claims:
        used = set()
        for _cell, holds, _measured in c.expressions():
            used |= referenced_variants(holds, f"claims.{c.name}")
        missing = sorted(used - names)
        state = "judged" if not missing else "not run (needs " + ", ".join(missing) + ")"
        out.append(f"  {c.name} [{'gated' if c.gate else 'control'}; {state}]: {c.holds}"
                   + (f" (over {', '.join(c.over)})" if c.over else ""))
    return out


def _flat(d, prefix: str = ""):
    """``{"link": {"bandwidth": "1Gbps"}}`` -> ``[("link.bandwidth", "1Gbps")]``, values as YAML would write them."""
    import json

    for k, v in (d or {}).items():
        if isinstance(v, dict) and v:
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v if isinstance(v, str) else json.dumps(v, default=str)


def dry_run(overrides: list[str], multirun: bool, out=None) -> None:
    """``dtlab run ... --dry-run``: validate every job exactly as a run would and print what each
    will run, then stop: no Ray, no MLflow run. A multirun lists every job's overrides and
    describes the first in full (the others differ by their overrides)."""
    from components.core.errors import ConfigError

    out = out or sys.stdout
    jobs = 0
    try:
        for job, cfg, spec in checked_jobs(overrides, multirun):
            if jobs == 0:
                print("\n".join(describe(job, cfg, spec)), file=out)
                if multirun:
                    print("jobs checked (an Optuna sweep: every bound and choice of its space; its trials are "
                          "sampled when it runs):", file=out)
            if multirun:
                print(f"  #{jobs}: " + " ".join(job), file=out)
            jobs += 1
    except ConfigError as e:
        _die(str(e))
    print(f"dry run: {jobs} job(s) checked; nothing started (no Ray, no MLflow run)", file=out)
