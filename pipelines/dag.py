"""The one DAG every experiment runs through: prepare -> execute -> evaluate -> report.

- prepare: registered prepare steps, cached by content (components.core.cache); run as Ray tasks.
- execute: one Ray task per variant, in parallel; a live table shows progress; each variant is a
  nested MLflow child run, opened when it is dispatched and closed when it ends.
- evaluate: final metrics per variant, ratios to the named baseline, the claims.
- report: the parent run gets the comparison table, plots, ``claim.<name>`` and summary.json;
  the terminal gets the scoreboard.

A crash anywhere ends every open run FAILED (KILLED on Ctrl-C) with the error as a tag.
"""
from __future__ import annotations

import json
import math
import os
import socket
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.core.cache import StageCache, cache_key, code_version
from components.core.claims import ClaimOutcome, check
from components.core.context import RunContext
from components.core.errors import require
from components.core.params import parse_params
from components.core.registry import get_prepare_step, get_technique
from components.core.result import Result
from components.core.tracker import Tracker, flatten, resolve_tracking_uri
from pipelines.experiment import ExperimentSpec, build_spec

PARENT_TAG = "dtlab.kind"


@dataclass
class VariantOutcome:
    name: str
    technique: str
    role: str
    family: str
    run_id: str = ""
    status: str = "QUEUED"
    result: Result | None = None
    error: str = ""
    started: float = 0.0
    ended: float = 0.0

    @property
    def wall_s(self) -> float:
        return max(0.0, self.ended - self.started) if self.ended else 0.0


@dataclass
class RunOutcome:
    experiment: str
    experiment_id: str
    parent_run_id: str
    tracking_uri: str
    variants: dict[str, VariantOutcome]
    claims: list[ClaimOutcome]
    comparison: list[dict[str, Any]]
    timings: dict[str, float]
    prepare_cache: dict[str, str] = field(default_factory=dict)
    dashboard_url: str | None = None

    @property
    def failed(self) -> list[str]:
        return [n for n, v in self.variants.items() if v.status != "FINISHED"]

    @property
    def claims_held(self) -> int:
        return sum(c.holds for c in self.claims if c.gate and not c.skipped)

    @property
    def claims_judged(self) -> int:
        return sum(1 for c in self.claims if c.gate and not c.skipped)


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


def _error_text(e: BaseException) -> str:
    cause = getattr(e, "cause", None)  # RayTaskError carries the original exception
    base = cause if isinstance(cause, BaseException) else e
    tb = "".join(traceback.format_exception(type(base), base, base.__traceback__))
    head = f"{type(base).__name__}: {base}".splitlines()[0]
    return f"{head}\n{tb[-3000:]}"


# ----------------------------------------------------------------------------------------- Ray tasks
def _prepare_task(step_name: str, params_raw: dict, ctx_fields: dict) -> tuple[Any, float]:
    from components.core.registry import discover

    discover()
    step = get_prepare_step(step_name)
    params = parse_params(step.params, params_raw, "prepare") if step.params is not None else params_raw
    t0 = time.perf_counter()
    out = step.fn(params, RunContext(**ctx_fields))
    return out, time.perf_counter() - t0


def _variant_task(tech_name: str, params_raw: dict, ctx_fields: dict, inputs: dict, board) -> tuple[Result, float, float, dict]:
    import ray

    from components.core.registry import discover

    discover()
    tech = get_technique(tech_name)
    params = parse_params(tech.params, params_raw, "params") if tech.params is not None else params_raw

    def reporter(variant, step, total, live):
        if board is not None:
            board.update.remote(variant, step, total, live)

    ctx = RunContext(**ctx_fields, inputs=inputs, reporter=reporter)
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    res = tech.fn(params, ctx)
    if isinstance(res, dict):
        res = Result(**res)
    if not isinstance(res, Result):
        raise TypeError(f"technique {tech_name} returned {type(res).__name__}, expected Result")
    t1 = time.time()
    reporter(ctx.variant, 1, 1, {})
    where = {"ray.node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}
    return res, t0, t1, where


# ----------------------------------------------------------------------------------------- stages
def prepare_key(p) -> str:
    """The cache key of one prepare entry: step name + params + the source of its module."""
    step = get_prepare_step(p.step)
    return cache_key(p.step, p.params_raw, code_version(step.fn, getattr(step.fn, "code_deps", ())))


def prepare_local(spec: ExperimentSpec, name: str, runs_dir: Path) -> tuple[Any, str]:
    """One prepare entry of ``spec`` in this process: from the shared cache, or built and cached.

    For tools outside a DAG run (``dtlab serve``, benchmarks). Returns (output, "hit" or "miss").
    """
    entry = next((p for p in spec.prepare if p.name == name), None)
    require(entry is not None, "prepare", name, "a prepare entry of " + spec.name + ": "
            + ", ".join(p.name for p in spec.prepare))
    cache, key = StageCache(runs_dir / "cache"), prepare_key(entry)
    if cache.has(key):
        return cache.load(key), "hit"
    out, _ = _prepare_task(entry.step, entry.params_raw, {"experiment": spec.name, "variant": f"prepare:{name}",
                                                          "seed": spec.seed, "workdir": runs_dir / "cache" / f"{key}.work"})
    cache.save(key, out)
    return out, "miss"


def prepare(spec: ExperimentSpec, runs_dir: Path, tracker, parent_id: str, console) -> tuple[dict, dict, float]:
    """Run (or load from cache) every prepare step. Returns (inputs, cache hit/miss, compute seconds)."""
    import ray

    cache = StageCache(runs_dir / "cache")
    inputs, status, compute_s = {}, {}, 0.0
    pending = {}
    for p in spec.prepare:
        key = prepare_key(p)
        if cache.has(key):
            inputs[p.name] = cache.load(key)
            status[p.name] = "hit"
            continue
        ctx = {"experiment": spec.name, "variant": f"prepare:{p.name}", "seed": spec.seed,
               "workdir": runs_dir / "cache" / f"{key}.work"}
        ref = ray.remote(num_cpus=spec.num_cpus)(_prepare_task).remote(p.step, p.params_raw, ctx)
        pending[ref] = (p.name, key)
    if pending and console is not None:
        console.print(f"[dim]prepare: building {', '.join(n for n, _ in pending.values())}…[/dim]")
    for ref, (name, key) in pending.items():
        out, secs = ray.get(ref)
        cache.save(key, out)
        inputs[name] = out
        status[name] = "miss"
        compute_s += secs
    if status:
        tracker.set_tags(parent_id, {f"prepare.{k}.cache": v for k, v in status.items()})
    return inputs, status, compute_s


def _log_child(tracker, o: VariantOutcome, v, max_points: int | None) -> None:
    """Everything a child run carries: metrics, series (thinned; full ones in series.json), tables,
    summary, plots."""
    from pipelines import plots

    res = o.result
    assert res is not None
    metrics = res.clean_metrics()
    metrics["variant_wall_s"] = o.wall_s
    metrics.setdefault("wall_s", o.wall_s)  # a technique's own wall_s (e.g. per request) wins
    tracker.log_metrics(o.run_id, metrics)
    full = {}
    for name in res.series:
        xs, ys = res.series_xy(name)
        # a series named like a final metric would overwrite it in MLflow's "latest value" view
        tracker.log_series(o.run_id, f"{name}_series" if name in metrics else name, xs, ys, max_points=max_points)
        full[name] = {"step": xs, "value": ys}
    if full:
        tracker.log_json(o.run_id, full, "series.json")
    for name, rows in res.tables.items():
        tracker.log_json(o.run_id, rows, f"tables/{name}.json")
    for name, data in res.files.items():
        if isinstance(data, str):
            tracker.log_text(o.run_id, data, name)
        else:
            tracker.log_bytes(o.run_id, data, name)
    summary = {"variant": o.name, "technique": o.technique, "role": o.role, "family": o.family,
               "params": v.params_raw, "metrics": metrics, "info": res.info}
    tracker.log_json(o.run_id, summary, "summary.json")
    if res.series:
        names = list(res.series)[:6]
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(len(names), 1, figsize=(6, 2.3 * len(names)), squeeze=False)
        for ax, name in zip(axes[:, 0], names):
            xs, ys = res.series_xy(name)
            ax.plot(xs, ys, lw=1.2)
            if ys and min(ys) > 0 and max(ys) / max(min(ys), 1e-300) > 1e3:
                ax.set_yscale("log")
            ax.set_ylabel(name, fontsize=8)
            ax.grid(alpha=0.3)
        axes[-1, 0].set_xlabel("step")
        fig.suptitle(o.name)
        fig.tight_layout()
        tracker.log_figure(o.run_id, fig, "plots/series.png")
        plots.close(fig)


def execute(spec: ExperimentSpec, inputs: dict, tracker, exp_id: str, parent_id: str, runs_dir: Path,
            console, open_runs: set[str], max_points: int | None = None,
            keep_board_s: float = 0.0, max_parallel: int | None = None) -> dict[str, VariantOutcome]:
    """Dispatch the variants as Ray tasks (at most ``max_parallel`` in flight; default: as many as
    the cluster's CPUs fit); log each child run as its result arrives."""
    import ray
    from ray.exceptions import RayError

    from pipelines.live import LiveTable

    from components.core.raytools import start_nodes

    board = ray.remote(num_cpus=0)(_Board).remote(spec.name)
    nodes = start_nodes(spec.nodes, spec.node_cpus, f"{spec.name}-node") if spec.nodes else None
    inputs_ref = ray.put(inputs)
    task = ray.remote(num_cpus=spec.num_cpus, max_retries=0)(_variant_task)
    # Ray hands a task's CPU back while it blocks in ray.get (on its actors), and would then start
    # every remaining variant at once; the driver keeps at most this many in flight instead.
    limit = max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1) // max(spec.num_cpus, 1e-9)))
    outcomes = {v.name: VariantOutcome(v.name, v.technique, v.role, v.family) for v in spec.variants}
    queue = list(spec.variants)
    pending: dict = {}

    def dispatch(v) -> None:
        o = outcomes[v.name]
        o.run_id = tracker.start_run(exp_id, v.name, parent_id=parent_id, tags={
            "technique": v.technique, "variant": v.name, "role": v.role, "family": v.family,
            "experiment": spec.name, PARENT_TAG: "variant"})
        open_runs.add(o.run_id)
        tracker.log_params(o.run_id, v.params_raw)
        tracker.log_text(o.run_id, _yaml({"technique": v.technique, "role": v.role, "params": v.params_raw}), "config.yaml")
        ctx = {"experiment": spec.name, "variant": v.name, "seed": spec.seed, "nodes": nodes,
               "workdir": runs_dir / "work" / parent_id / v.name}
        pending[task.options(name=f"{spec.name}:{v.name}").remote(v.technique, v.params_raw, ctx, inputs_ref, board)] = v
        o.status, o.started = "RUNNING", time.time()

    live = LiveTable(spec.name, outcomes, console)
    with live:
        while queue or pending:
            while queue and len(pending) < limit:
                dispatch(queue.pop(0))
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in done:
                v = pending.pop(ref)
                o = outcomes[v.name]
                try:
                    res, t0, t1, where = ray.get(ref)
                    o.result, o.started, o.ended, o.status = res, t0, t1, "FINISHED"
                    tracker.set_tags(o.run_id, where)
                    _log_child(tracker, o, v, max_points)
                    tracker.end(o.run_id, "FINISHED")
                except (RayError, Exception) as e:  # a crash inside the variant, or while logging it
                    o.ended = time.time()
                    o.status = "FAILED"
                    o.error = _error_text(e)
                    tracker.end(o.run_id, "FAILED", error=o.error)
                open_runs.discard(o.run_id)
                board.finished.remote(o.name, o.status, o.wall_s)
            try:
                live.update(ray.get(board.snapshot.remote(), timeout=5))
            except Exception:
                live.update({})
    if keep_board_s:
        time.sleep(keep_board_s)  # let Prometheus scrape the final values before the actor goes
    ray.kill(board)
    for node in nodes or []:
        ray.kill(node)
    return outcomes


class _Board:
    """Progress board actor: variants push progress, the driver polls it for the live table.

    It also exports the live figures as Ray application metrics (Prometheus names get Ray's
    ``ray_`` prefix): dtlab_variant_step, dtlab_variant_progress, dtlab_live_metric{metric=...},
    dtlab_variants_total{status=...}, dtlab_variant_wall_seconds. dashboards/ plots these.
    """

    def __init__(self, experiment: str):
        from ray.util import metrics

        self.experiment = experiment
        self.state: dict[str, dict] = {}
        keys = ("experiment", "variant")
        self.m_step = metrics.Gauge("dtlab_variant_step", "Steps a variant has completed", keys)
        self.m_progress = metrics.Gauge("dtlab_variant_progress", "Share of a variant's steps done (0..1)", keys)
        self.m_live = metrics.Gauge("dtlab_live_metric", "A technique's live figure (loss, bytes, sim time...)",
                                    keys + ("metric",))
        self.m_done = metrics.Counter("dtlab_variants_total", "Variants finished, by status", ("experiment", "status"))
        self.m_wall = metrics.Gauge("dtlab_variant_wall_seconds", "Wall time of a finished variant", keys)

    def update(self, variant: str, step: int, total: int, live: dict) -> None:
        self.state[variant] = {"step": step, "total": total, "live": live}
        tags = {"experiment": self.experiment, "variant": variant}
        self.m_step.set(step, tags)
        self.m_progress.set(step / total if total else 0.0, tags)
        for k, v in live.items():
            self.m_live.set(float(v), {**tags, "metric": k})

    def finished(self, variant: str, status: str, wall_s: float) -> None:
        self.m_done.inc(1.0, {"experiment": self.experiment, "status": status})
        self.m_wall.set(wall_s, {"experiment": self.experiment, "variant": variant})

    def snapshot(self) -> dict:
        return self.state


def evaluate(spec: ExperimentSpec, outcomes: dict[str, VariantOutcome]) -> tuple[list[ClaimOutcome], list[dict]]:
    """Claims over final metrics, and the comparison table with ratios to the baseline."""
    from components.core.claims import referenced_variants

    metrics = {n: o.result.clean_metrics() for n, o in outcomes.items() if o.result is not None}
    claims = []
    for c in spec.claims:
        absent = sorted((referenced_variants(c.holds) | (referenced_variants(c.measured) if c.measured else set()))
                        - set(outcomes))
        if absent:  # excluded by only=...: a claim about variants that did not run is not judged
            claims.append(ClaimOutcome(c.name, c.paper, "n/a", False, c.gate, f"not run: {', '.join(absent)}", skipped=True))
        else:
            claims.append(check(c, metrics))
    table_metrics = list(spec.report.get("table") or [])
    if not table_metrics:
        seen: list[str] = []
        for m in metrics.values():
            seen += [k for k in m if k not in seen]
        table_metrics = seen[:8]
    base = spec.report.get("baseline")
    rows = []
    for n, o in outcomes.items():
        row: dict[str, Any] = {"variant": n, "technique": o.technique, "role": o.role, "status": o.status,
                               "wall_s": round(o.wall_s, 3)}
        for m in table_metrics:
            val = metrics.get(n, {}).get(m)
            row[m] = val
            b = metrics.get(base, {}).get(m) if base else None
            if base and val is not None and b not in (None, 0) and not (isinstance(b, float) and math.isnan(b)):
                row[f"{m}/{base}"] = val / b
        rows.append(row)
    return claims, rows


def report(spec: ExperimentSpec, outcomes, claims, rows, tracker, parent_id: str) -> None:
    """Parent-run artifacts: comparison, plots, claim metrics, summary.json."""
    from pipelines import plots

    tracker.log_metrics(parent_id, {f"claim.{c.name}": float(c.holds) for c in claims if not c.skipped})
    gated = [c for c in claims if c.gate and not c.skipped]
    tracker.log_metrics(parent_id, {"claims_held": sum(c.holds for c in gated), "claims_total": len(gated)})
    tracker.log_json(parent_id, rows, "comparison.json")
    tracker.log_text(parent_id, _markdown_table(rows), "comparison.md")
    tracker.log_json(parent_id, [c.__dict__ for c in claims], "claims.json")
    for p in spec.report.get("plots") or []:
        fig, drawn = plots.make_plot(p, outcomes)
        if drawn:
            tracker.log_figure(parent_id, fig, f"plots/{plots.plot_name(p)}.png")
        plots.close(fig)


def _markdown_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    return "\n".join(out) + "\n"


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _yaml(obj: Any) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(obj))


def _parse_only(only: Any) -> list[str] | None:
    if only in (None, "", []):
        return None
    if isinstance(only, str):
        return [s.strip() for s in only.split(",") if s.strip()]
    return [str(s) for s in only]


def validate(cfg: dict) -> ExperimentSpec:
    """Check the whole composed config; raises ConfigError. Nothing is started."""
    from components.core.errors import ConfigError, require

    for key in ("experiment", "cluster", "tracking"):
        require(isinstance(cfg.get(key), dict), key, cfg.get(key), "a config group selection")
    require(bool(cfg["tracking"].get("uri")) or bool(os.environ.get("MLFLOW_TRACKING_URI")), "tracking.uri",
            cfg["tracking"].get("uri"), "a tracking URI (or set MLFLOW_TRACKING_URI)")
    if not isinstance(cfg.get("debug", False), bool):
        raise ConfigError("debug", cfg.get("debug"), "true or false")
    return build_spec(cfg["experiment"], debug=bool(cfg.get("debug")), only=_parse_only(cfg.get("only")))


# ----------------------------------------------------------------------------------------- entry
def _open_parent_run(tracker, spec: ExperimentSpec, cfg: dict) -> tuple[str, str]:
    """Create the experiment's parent run with its tags, params and config; (experiment id, run id)."""
    exp_id = tracker.experiment_id(spec.name)
    run_name = f"{spec.name}{'-debug' if cfg.get('debug') else ''}-{time.strftime('%Y%m%d-%H%M%S')}"
    parent_id = tracker.start_run(exp_id, run_name, tags={
        PARENT_TAG: "parent", "experiment": spec.name, "family": spec.family, "debug": str(bool(cfg.get("debug"))),
        "host": socket.gethostname(), "hydra.job": str(cfg.get("_job", "")),
        "report.baseline": spec.report.get("baseline") or "",
        **({"mlflow.parentRunId": cfg["sweep_run_id"], "dtlab.sweep_run_id": cfg["sweep_run_id"],
            "optuna.trial": str(cfg.get("sweep_trial"))} if cfg.get("sweep_run_id") else {})})
    try:
        tracker.log_params(parent_id, {"experiment": spec.raw, "debug": bool(cfg.get("debug")),
                                       "cluster": cfg["cluster"], "seed": spec.seed})
        tracker.log_text(parent_id, _yaml({k: v for k, v in cfg.items() if k != "hydra"}), "config.yaml")
    except BaseException as e:
        tracker.end(parent_id, "FAILED", error=_error_text(e))
        raise
    return exp_id, parent_id


def run(cfg: dict, console=None) -> RunOutcome:
    """Run one experiment invocation end to end. ``cfg`` is the resolved config as plain Python."""
    from components.core.raytools import init_ray
    from pipelines.live import print_scoreboard

    t_start = time.perf_counter()
    spec = validate(cfg)
    runs_dir = Path(cfg.get("runs_dir") or "runs").resolve()
    uri = resolve_tracking_uri(cfg["tracking"].get("uri"))
    tracker = _TimedTracker(Tracker(uri))
    tracker.check_reachable()
    # MLflow set-up (store migration, parent run, params) overlaps Ray start-up: both take seconds.
    with ThreadPoolExecutor(1, thread_name_prefix="dtlab-mlflow") as pool:
        opening = pool.submit(_open_parent_run, tracker, spec, cfg)
        try:
            ray_info = init_ray(cfg["cluster"])
        except BaseException as e:
            try:
                tracker.end(opening.result()[1], "FAILED", error=_error_text(e))
            except Exception:
                pass
            raise
        exp_id, parent_id = opening.result()
    if ray_info.get("dashboard_url"):
        tracker.set_tags(parent_id, {"ray.dashboard": ray_info["dashboard_url"]})
    open_runs = {parent_id}
    timings: dict[str, float] = {"ray_init_s": ray_info["ray_init_s"]}
    try:
        t0 = time.perf_counter()
        inputs, cache_status, prep_compute = prepare(spec, runs_dir, tracker, parent_id, console)
        timings["prepare_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        outcomes = execute(spec, inputs, tracker, exp_id, parent_id, runs_dir, console, open_runs,
                           max_points=cfg["tracking"].get("max_series_points"),
                           keep_board_s=float(cfg["cluster"].get("metrics_linger_s") or 0.0),
                           max_parallel=spec.max_parallel)
        timings["execute_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        claims, rows = evaluate(spec, outcomes)
        report(spec, outcomes, claims, rows, tracker, parent_id)
        timings["report_s"] = time.perf_counter() - t0
        timings["technique_s"] = _busy_union([(o.started, o.ended) for o in outcomes.values() if o.ended]) + prep_compute
        timings["tracking_s"] = tracker.seconds
        timings["total_s"] = time.perf_counter() - t_start
        timings["overhead_share"] = max(0.0, 1 - timings["technique_s"] / timings["total_s"])
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
        if console is not None:
            print_scoreboard(console, outcome, spec)
        return outcome
    except BaseException as e:
        status = "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED"
        for rid in list(open_runs):
            try:
                tracker.end(rid, status, error=_error_text(e))
            except Exception:
                pass
        raise


def objective(outcome: RunOutcome, expr: str | None) -> float:
    """The value a sweeper optimises: ``expr`` over final metrics (NaN if it cannot be computed),
    or the number of gated claims that hold."""
    if not expr:
        return float(outcome.claims_held)
    from components.core.claims import MissingMetric, evaluate

    metrics = {n: o.result.clean_metrics() for n, o in outcome.variants.items() if o.result is not None}
    try:
        return float(evaluate(str(expr), metrics, "objective"))
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
