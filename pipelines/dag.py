"""The one DAG every experiment runs through: prepare -> execute -> evaluate -> report.

Each stage lives in its own module under pipelines/stages/:

- prepare: the prepare steps the selected variants need, upstream first, cached by content.
- execute: one Ray task per (variant, seed), in parallel; a live table shows progress; each
  variant is a nested MLflow child run (its seeds nested under it).
- evaluate: aggregates over seeds, the claims (paired per seed where asked), the comparison.
- report: the parent run gets the comparison table, plots, ``claim.<name>`` and summary.json;
  the terminal gets the scoreboard.

A crash anywhere ends every open run FAILED (KILLED on Ctrl-C) with the error as a tag.
"""
from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from components.core.interrupts import Terminated, _received, terminate_as_interrupt  # noqa: F401 - re-exported
from components.core.tracker import Tracker, resolve_tracking_uri
from pipelines.experiment import ExperimentSpec, build_spec, overridden_keys, parse_only
from pipelines.flavours import flavour_of
from pipelines.inputs import HASH_ERROR_TAG
from pipelines.outcome import PARENT_TAG, RunOutcome, VariantOutcome, error_text  # noqa: F401 - re-exported
from pipelines.stages.evaluate import comparison, judge, reach
from pipelines.stages.execute import execute
from pipelines.stages.logging import to_yaml
from pipelines.stages.prepare import prepare, prepare_local  # noqa: F401 - prepare_local is public
from pipelines.stages.report import report

log = logging.getLogger("dtlab")


class _TimedTracker:
    """Wraps Tracker and adds up the seconds spent in MLflow calls (platform overhead)."""

    def __init__(self, tracker: Tracker):
        self._t = tracker
        self.seconds = 0.0

    def __getattr__(self, name):
        fn = getattr(self._t, name)
        if not callable(fn):
            return fn

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.seconds += time.perf_counter() - t0

        return timed


def validate(cfg: dict, devices: bool = True) -> ExperimentSpec:
    """Check the whole composed config; raises ConfigError. Nothing is started. ``devices=False``: the
    device request is checked for itself, not against the GPUs on offer here (:func:`check_devices`)."""
    from components.core.errors import ConfigError, require

    for key in ("experiment", "cluster", "tracking"):
        require(isinstance(cfg.get(key), dict), key, cfg.get(key), "a config group selection")
    require(bool(cfg["tracking"].get("uri")) or bool(os.environ.get("MLFLOW_TRACKING_URI")), "tracking.uri",
            cfg["tracking"].get("uri"), "a tracking URI (or set MLFLOW_TRACKING_URI)")
    flavour = flavour_of(cfg)
    from components.core.raytools import check_cluster

    check_cluster(cfg["cluster"])
    spec = build_spec(cfg["experiment"], flavour=flavour, only=parse_only(cfg.get("only")),
                      overridden=overridden_keys(cfg.get("_overrides")))
    if devices:
        check_devices(spec, cfg["cluster"])
    return spec


def check_devices(spec: ExperimentSpec, cluster: dict) -> None:
    """The experiment's device request against its techniques and the GPUs on offer: this process's Ray
    session's, else for embedded Ray the ones torch sees here (a cluster's or a running head's are
    checked once connected, :func:`components.core.devices.check_cluster`). CPU runs import nothing."""
    import sys

    from components.core import devices
    from components.core.raytools import attach_target
    from components.core.registry import get_technique

    if spec.num_gpus == 0:   # device=cuda without GPUs was refused with the spec
        return
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        offered, where = float(ray.cluster_resources().get("GPU", 0.0)), "the Ray session"
    elif cluster.get("address") or os.environ.get("RAY_ADDRESS") or attach_target(cluster)[0]:
        offered, where = None, "the Ray cluster"
    else:
        offered, where = float(devices.cuda_count()), "this machine"   # embedded Ray detects the same GPUs
    devices.check_request(spec.device, spec.num_gpus, {v.name: get_technique(v.technique).devices for v in spec.variants},
                          offered, where)


# ----------------------------------------------------------------------------------------- entry
def _tag_value(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _open_parent_run(tracker, spec: ExperimentSpec, cfg: dict) -> tuple[str, str]:
    """Create the experiment's parent run with its tags, params and config; (experiment id, run id)."""
    from components.core.provenance import mark_stale, parent_run_name, reproducibility_tags

    exp_id = tracker.experiment_id(spec.name, description=spec.summary)
    try:
        stale = mark_stale(tracker.client, [exp_id])
        if stale:
            log.warning("%d run(s) of %s left RUNNING by a driver that is gone: marked FAILED", len(stale), spec.name)
    except Exception as e:  # noqa: BLE001 - housekeeping never stops a run
        log.warning("stale-run check failed: %s", e)
    run_name = parent_run_name(spec.name + ("-paper" if spec.flavour == "paper" else ""), cfg,
                               time.strftime('%Y%m%d-%H%M%S'))  # a multirun job: by its overrides
    try:  # flavour, subset and input hash: what `dtlab reproduce` and the scoreboard compare
        from pipelines.inputs import run_tags

        input_tags, inputs = run_tags(spec, cfg)
    except Exception as e:  # noqa: BLE001 - a run without an input hash is only never "current"
        log.warning("input hash not recorded: %s", e)
        input_tags = {"dtlab.flavour": spec.flavour,
                      HASH_ERROR_TAG: f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:250]}
        inputs = None
    parent_id = tracker.start_run(exp_id, run_name, tags={**input_tags,
        PARENT_TAG: "parent", "experiment": spec.name, "family": spec.family, "debug": str(bool(cfg.get("debug"))),
        "host": socket.gethostname(), "hydra.job": str(cfg.get("_job", "")),
        "report.baseline": _tag_value(spec.report.get("baseline") or ""), **reproducibility_tags(cfg.get("_overrides")),
        **({"robustness": str(cfg["robustness"])} if cfg.get("robustness") else {}),
        **({"mlflow.parentRunId": cfg["sweep_run_id"], "dtlab.sweep_run_id": cfg["sweep_run_id"],
            "optuna.trial": str(cfg.get("sweep_trial"))} if cfg.get("sweep_run_id") else {})})
    try:
        tracker.log_params(parent_id, {"experiment": spec.raw, "debug": bool(cfg.get("debug")), "flavour": spec.flavour,
                                       "cluster": cfg["cluster"], "seeds": spec.seeds})
        tracker.log_text(parent_id, to_yaml({k: v for k, v in cfg.items() if k != "hydra"}), "config.yaml")
        if inputs is not None:
            tracker.log_json(parent_id, inputs.to_json(), "inputs.json")
    except BaseException as e:
        tracker.end(parent_id, "FAILED", error=error_text(e))
        raise
    return exp_id, parent_id


PHASES = ("startup", "ray_init", "prepare", "execute", "report", "tracking_wait", "teardown")


class Phases:
    """A run's wall clock cut into back-to-back phases (the timing line's parts): :meth:`mark`
    adds the time since the previous mark to a phase, so phases never overlap and add up to the
    span they cover; :meth:`timings` puts what follows the last mark in ``other_s`` (never
    negative). ``started_ago``: seconds the command ran before the DAG (imports, validation)."""

    def __init__(self, started_ago: float = 0.0, clock=time.perf_counter):
        self.clock = clock
        self.start = self.last = clock() - max(0.0, started_ago)
        self.parts = dict.fromkeys(PHASES, 0.0)

    def mark(self, phase: str) -> None:
        now = self.clock()
        self.parts[phase] += now - self.last
        self.last = now

    def timings(self) -> dict[str, float]:
        total = self.clock() - self.start
        out = {f"{p}_s": v for p, v in self.parts.items()}
        out["other_s"] = max(0.0, total - sum(self.parts.values()))
        out["total_s"] = total
        return out


def process_age() -> float | None:
    """Seconds since this process started (interpreter start-up and imports included), None if unknown."""
    try:
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - the start-up share is a nicety
        return None


def run(cfg: dict, console=None, started_ago: float | None = None, teardown: bool = False) -> RunOutcome:
    """Run one experiment invocation end to end. ``cfg`` is the resolved config as plain Python.

    ``started_ago``: seconds the command spent before this call (``dtlab run``'s start-up), counted
    in the timing line; ``teardown``: stop the Ray session this run started once it is done (a
    single `dtlab run`), so the line accounts for that too."""
    with terminate_as_interrupt() as reinstall:
        return _run(cfg, console, reinstall, Phases(started_ago or 0.0), teardown)


def prepare_only(cfg: dict, console=None) -> dict:
    """Build every prepare entry the experiment's selected variants need, through the same cached Ray
    tasks as a run, and nothing else: no MLflow run, no variant (`dtlab prepare`). Ray starts only when
    something is missing. What `dtlab reproduce` runs before each configuration, so that the run's wall is
    measured with a warm cache and the cold prepare is timed apart (issue "The whole board in 75 minutes").
    Returns the experiment, the entries built, how many are needed, and the pass's seconds."""
    out = prepare_many([cfg], console)
    return {"experiment": out["experiments"][0], "built": out["built"].get(out["experiments"][0], []),
            "needed": out["needed"], "seconds": out["seconds"]}


def prepare_many(cfgs: list[dict], console=None) -> dict:
    """:func:`prepare_only` for several experiments in one Ray session (`dtlab prepare
    experiment=a,b,c`): every missing entry of every experiment is one task of one batch, an entry they
    share is built once, and the steps of different experiments share the CPUs. `dtlab reproduce` runs
    it once before the runs, so that a cold board pays about its prepare steps' CPU time over the cores
    rather than the sum of each experiment's longest chain of steps. Returns the experiments, {experiment:
    the entries built for it first}, how many (entry, seed)s were needed in all, the pass's seconds, the
    compute seconds of the steps that ran, and those seconds per experiment (of the entries built for it)."""
    from components.core.errors import require
    from components.core.raytools import init_ray
    from pipelines.stages.prepare import PrepareBatch, cold_entries

    t0 = time.perf_counter()
    specs = [validate(cfg) for cfg in cfgs]
    runs_dirs = {Path(cfg.get("runs_dir") or "runs").resolve() for cfg in cfgs}
    require(len(runs_dirs) == 1, "runs_dir", sorted(map(str, runs_dirs)), "one runs_dir for every experiment of a pass")
    runs_dir = runs_dirs.pop()
    colds = [cold_entries(spec, runs_dir) for spec in specs]
    built: dict[str, list[str]] = {}
    by_experiment: dict[str, float] = {}
    if any(missing for missing, _ in colds):
        info = init_ray(cfgs[0]["cluster"])
        try:
            batch = PrepareBatch(runs_dir)
            for spec in specs:
                batch.submit(spec, load_hits=False)
            if console is not None and batch.pending:
                console.print(f"[dim]prepare: building {len(batch.pending)} entries for "
                              f"{', '.join(batch.built)}…[/dim]")
            for key, secs in batch.collect().items():
                by_experiment[batch.owner[key]] = by_experiment.get(batch.owner[key], 0.0) + secs
            built = batch.built
        finally:
            if info.get("mode") == "embedded":
                shutdown_embedded()
    return {"experiments": [spec.name for spec in specs], "built": built, "needed": sum(n for _, n in colds),
            "seconds": time.perf_counter() - t0, "compute_s": sum(by_experiment.values()),
            "compute_by_experiment": by_experiment}


def shutdown_embedded() -> None:
    """``ray.shutdown()`` of a session this process started, without Ray's one-second wait on its monitor.

    Ray stops a session it started one process after another, each given a second after SIGTERM
    before SIGKILL; the autoscaler monitor of a local session never exits on SIGTERM, so every
    shutdown waited its full second (1.0 of the 1.4 s a `dtlab run`'s teardown took here). It is
    killed at once, as Ray would a second later; the rest stops as ``ray.shutdown()`` stops it. A
    driver connected to a head it did not start owns no processes: nothing is killed there. (Here,
    not in components/core/raytools.py, which 11 experiments' recorded inputs include.)"""
    import ray

    try:
        from ray._private import ray_constants
        from ray._private import worker as ray_worker

        node = getattr(ray_worker, "_global_node", None)
        if node is not None and getattr(node, "head", False):
            node._kill_process_type(ray_constants.PROCESS_TYPE_MONITOR, check_alive=False, allow_graceful=False)
    except Exception:  # noqa: BLE001 - Ray's private API moved: the plain shutdown below still ends the session
        pass
    ray.shutdown()


def _cluster_for(cfg: dict) -> dict:
    """``cfg.cluster`` for this run. A debug run starts embedded Ray without a dashboard unless the command
    line asks for one (``cluster.include_dashboard=true``): the run lasts seconds and its dashboard dies with
    it, while starting it costs ~2.5 s of the debug run's fixed cost. A `dtlab up` head keeps its own."""
    cluster = dict(cfg["cluster"])
    if cfg.get("debug") and "include_dashboard" not in overridden_keys(cfg.get("_overrides"), below="cluster"):
        cluster["include_dashboard"] = False
    return cluster


def _run(cfg: dict, console, reinstall_signals, phases: Phases, teardown: bool = False) -> RunOutcome:
    from components.core.raytools import init_ray
    from pipelines.live import print_scoreboard, print_timing

    spec = validate(cfg)
    runs_dir = Path(cfg.get("runs_dir") or "runs").resolve()
    uri = resolve_tracking_uri(cfg["tracking"].get("uri"))
    import ray  # noqa: F401 - here, before the MLflow thread imports its own packages beside init_ray

    phases.mark("startup")

    def open_tracking():
        tracker = _TimedTracker(Tracker(uri))
        tracker.check_reachable()
        return (tracker, *_open_parent_run(tracker, spec, cfg))

    # MLflow set-up (its imports, store migration, parent run, params) overlaps Ray start-up: both take seconds.
    with ThreadPoolExecutor(1, thread_name_prefix="dtlab-mlflow") as pool:
        opening = pool.submit(open_tracking)
        try:
            ray_info = init_ray(_cluster_for(cfg))
            from components.core.devices import check_cluster as check_gpus

            check_gpus(spec.num_gpus, ray.cluster_resources().get("GPU", 0.0))
            phases.mark("ray_init")
            from pipelines.stages.execute import spawn

            spawned = spawn(spec, spec.max_parallel)   # its processes start while MLflow opens and prepare runs
        except BaseException as e:
            try:
                tracker, _, parent_id = opening.result()
                tracker.end(parent_id, "FAILED", error=error_text(e))
            except Exception:
                pass
            raise
        tracker, exp_id, parent_id = opening.result()
    reinstall_signals()
    if console is not None and ray_info.get("summary"):
        console.print(f"[dim]{ray_info['summary']}[/dim]")
    if console is not None:
        from pipelines.flavours import paper_notes

        for line in paper_notes(spec):
            console.print(line, style="yellow", markup=False, highlight=False)
    ray_tags = {**ray_info.get("tags", {}), **({"ray.dashboard": ray_info["dashboard_url"]}
                                                if ray_info.get("dashboard_url") else {})}
    if ray_tags:  # the dashboard, and the `dtlab up` head's checkout, environment and commit
        tracker.set_tags(parent_id, ray_tags)
    open_runs = {parent_id}
    phases.mark("tracking_wait")  # the parent run, if MLflow took longer than Ray
    timings: dict[str, float] = {}
    try:
        inputs, cache_status, prep_compute = prepare(spec, runs_dir, tracker, parent_id, console)
        phases.mark("prepare")
        outcomes = execute(spec, inputs, tracker, exp_id, parent_id, runs_dir, console, open_runs,
                           max_points=cfg["tracking"].get("max_series_points"),
                           keep_board_s=float(cfg["cluster"].get("metrics_linger_s") or 0.0),
                           max_parallel=spec.max_parallel, spawned=spawned)
        phases.mark("execute")
        reach(spec, outcomes, tracker)
        claims, rows = judge(spec, outcomes), comparison(spec, outcomes)
        report(spec, outcomes, claims, rows, tracker, parent_id)
        from pipelines.figures import ARTIFACT, claim_operands  # the holds operands of claims without measured:

        tracker.log_json(parent_id, claim_operands(spec.claims, {n: o.result.clean_metrics() for n, o in outcomes.items()
                                                                 if o.result is not None},
                                                   {n: o.seed_metrics() for n, o in outcomes.items() if o.result is not None}),
                         ARTIFACT)
        phases.mark("report")

        def account() -> None:  # the phases so far, and the figures that overlap them
            timings.update(phases.timings())
            timings["technique_s"] = _busy_union([(s.started, s.ended) for o in outcomes.values()
                                                  for s in o.seeds.values() if s.ended]) + prep_compute
            timings["tracking_s"] = tracker.seconds
            timings["overhead_share"] = max(0.0, 1 - timings["technique_s"] / max(timings["total_s"], 1e-9))

        account()
        tracker.log_metrics(parent_id, {f"platform.{k}": v for k, v in timings.items()})
        outcome = RunOutcome(spec.name, exp_id, parent_id, uri, outcomes, claims, rows, timings, cache_status,
                             ray_info.get("dashboard_url"))
        tracker.log_json(parent_id, {"experiment": spec.name, "claims": [c.__dict__ for c in claims],
                                     "comparison": rows, "timings": timings, "prepare_cache": cache_status,
                                     "failed": outcome.failed,
                                     "errors": {n: o.error.splitlines()[0] for n, o in outcomes.items() if o.error}},
                         "summary.json")
        if outcome.failed:
            tracker.end(parent_id, "FAILED", error="variants failed: " + ", ".join(outcome.failed))
        else:
            tracker.end(parent_id, "FINISHED")
        open_runs.discard(parent_id)
        phases.mark("tracking_wait")
        if teardown and ray_info.get("mode") == "embedded":  # this run's own Ray: stopped inside the line
            shutdown_embedded()
            phases.mark("teardown")
        if console is not None:
            print_scoreboard(console, outcome, spec, debug=bool(cfg.get("debug")), timing=False)
            phases.mark("report")
        account()   # the line printed below accounts for everything up to it
        if console is not None:
            print_timing(console, outcome)
        return outcome
    except BaseException as e:
        from pipelines.stages.execute import release

        release(spawned)   # a run that failed before or inside execute leaves no actor behind in a shared session
        status = "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED"
        reason = error_text(e)
        if status == "KILLED":
            reason = f"stopped by {_received[-1] if _received else 'Ctrl-C (SIGINT)'}\n{reason}"
        ended = 0
        for rid in dict.fromkeys([*open_runs, *tracker.open_ids()]):  # every run created, even mid-dispatch
            try:
                tracker.end(rid, status, error=reason)
                ended += 1
            except Exception:
                pass
        if status == "KILLED":  # for the CLI's one line ("interrupted: N runs ended KILLED")
            e.dtlab_runs_ended = ended
            e.dtlab_signal = _received[-1] if _received else "SIGINT"
        raise


def objective(outcome: RunOutcome, expr: str | None) -> float | list[float]:
    """The value a sweeper optimises: ``expr`` over final metrics (NaN if it cannot be computed),
    or the number of gated claims that hold. A list expression (``"[a.x, b.y]"``) gives one value
    per objective of a multi-objective study."""
    if not expr:
        return float(outcome.claims_held)
    from components.core.claims import MissingMetric, evaluate

    try:
        value = evaluate(str(expr), outcome.metrics(), "objective", outcome.seed_metrics())
        return [float(v) for v in value] if isinstance(value, (list, tuple)) else float(value)
    except (MissingMetric, ValueError, ZeroDivisionError, TypeError):
        return math.nan


def _busy_union(intervals: list[tuple[float, float]]) -> float:
    """Seconds during which at least one interval was active."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def summary_json(outcome: RunOutcome) -> str:
    return json.dumps({"claims": [c.__dict__ for c in outcome.claims], "comparison": outcome.comparison}, default=str)
