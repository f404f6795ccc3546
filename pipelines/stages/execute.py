"""execute: one Ray task per (variant, seed), in parallel under a concurrency limit.

MLflow layout: each variant is a child run of the parent, opened when its first seed is
dispatched; with several seeds every seed is a run nested under the variant's run (its metrics,
series, artifacts), and the variant's run gets the aggregates (``m``, ``m_se``, ``m_n``) once its
last seed is in. With one seed the variant's run holds that seed's output itself.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from components.core.context import RunContext
from components.core.registry import get_technique
from components.core.result import Result
from components.core.seeds import aggregate_results
from pipelines.experiment import ExperimentSpec, VariantSpec
from pipelines.outcome import PARENT_TAG, SeedOutcome, VariantOutcome, error_text
from pipelines.stages.logging import log_result, to_yaml


def run_variant_seed(tech_name: str, module: str, params: Any, ctx_fields: dict, board, names: list[str],
                     *inputs) -> tuple:
    """The Ray task: one technique call for one seed. Returns (Result, start, end, where).

    Only the technique's own module is imported (not all of components/: seconds per worker);
    other kinds load on demand through the registry. ``ctx_fields["device"]`` is the experiment's
    request (auto, cpu, cuda), resolved here against the GPUs Ray gave this task."""
    import importlib

    import ray

    from components.core.devices import gpu_ids, task_device

    importlib.import_module(module)
    tech = get_technique(tech_name)
    key = f"{ctx_fields['variant']}#{ctx_fields['seed']}"

    def reporter(variant, step, total, live):
        if board is not None:
            board.update.remote(key, step, total, live)

    ctx = RunContext(**{**ctx_fields, "device": task_device(ctx_fields.get("device", "cpu"), tech.devices)},
                     inputs=dict(zip(names, inputs)), reporter=reporter)
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    res = tech.fn(params, ctx)
    if isinstance(res, dict):
        res = Result(**res)
    if not isinstance(res, Result):
        raise TypeError(f"technique {tech_name} returned {type(res).__name__}, expected Result")
    t1 = time.time()
    reporter(ctx.variant, 1, 1, {})
    where = {"ray.node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid(),
             "device": ctx.device, **({"ray.gpu_ids": ",".join(map(str, ids))} if (ids := gpu_ids()) else {})}
    return res, t0, t1, where


class Board:
    """Progress board actor: (variant, seed) tasks push progress, the driver polls it.

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

    def update(self, key: str, step: int, total: int, live: dict) -> None:
        self.state[key] = {"step": step, "total": total, "live": live}
        tags = {"experiment": self.experiment, "variant": key}
        self.m_step.set(step, tags)
        self.m_progress.set(step / total if total else 0.0, tags)
        for k, v in live.items():
            self.m_live.set(float(v), {**tags, "metric": k})

    def finished(self, variant: str, status: str, wall_s: float) -> None:
        self.m_done.inc(1.0, {"experiment": self.experiment, "status": status})
        self.m_wall.set(wall_s, {"experiment": self.experiment, "variant": variant})

    def snapshot(self) -> dict:
        return self.state


def per_variant(snapshot: dict, outcomes: dict[str, VariantOutcome]) -> dict:
    """Board state keyed ``variant#seed`` -> per variant: progress summed over its seeds."""
    out: dict[str, dict] = {}
    for key, st in snapshot.items():
        name, _, _ = key.rpartition("#")
        n_seeds = max(1, len(outcomes[name].seeds)) if name in outcomes else 1
        frac = st["step"] / st["total"] if st.get("total") else 0.0
        agg = out.setdefault(name, {"step": 0.0, "total": n_seeds, "live": {}})
        agg["step"] += frac
        agg["live"] = st.get("live") or agg["live"]
    return out


def _variant_tags(spec: ExperimentSpec, v: VariantSpec) -> dict:
    tags = {"technique": v.technique, "variant": v.name, "role": v.role, "family": v.family,
            "experiment": spec.name, PARENT_TAG: "variant", "seeds": ",".join(map(str, v.seeds))}
    if v.cell:
        tags |= {"grid.base": v.base, **{f"grid.{k}": str(val) for k, val in v.cell.items()}}
    return tags


def _import_modules(modules: list[str]) -> int:
    """A task worker started ahead of the run's first tasks, with their techniques' modules imported."""
    import importlib

    for m in modules:
        importlib.import_module(m)
    return os.getpid()


def in_flight(spec: ExperimentSpec, max_parallel: int | None = None) -> int:
    """How many (variant, seed) tasks the driver keeps in flight: ``max_parallel``, else as many as the
    cluster's CPUs fit. Ray hands a task's CPU back while it blocks in ray.get (on its actors), and would
    then start every remaining task at once."""
    import ray

    return max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1) // max(spec.num_cpus, 1e-9)))


def spawn(spec: ExperimentSpec, max_parallel: int | None = None) -> dict:
    """Start the processes :func:`execute` will use, without waiting for any: the progress board, the node
    actors, and one task worker per slot in flight with the first tasks' modules imported. Called right
    after Ray is up, their start-up (about half a CPU-second each, plus torch's import) overlaps the
    MLflow parent run and the prepare stage instead of following them."""
    import ray

    from components.core.raytools import start_nodes

    board = ray.remote(num_cpus=0)(Board).options(name=f"{spec.name}-board-{os.getpid()}-{time.time_ns() % 10**6}"
                                                  ).remote(spec.name)   # named for the Ray dashboard
    nodes = start_nodes(spec.nodes, spec.node_cpus, f"{spec.name}-node") if spec.nodes else None
    slots = min(in_flight(spec, max_parallel), sum(len(v.seeds) for v in spec.variants))
    first = [v for v in spec.variants for _ in v.seeds][:slots]
    warm = ray.remote(num_cpus=spec.num_cpus, num_gpus=spec.num_gpus, max_retries=0)(_import_modules)
    workers = [warm.options(name=f"{spec.name}:start-up").remote([get_technique(v.technique).fn.__module__])
               for v in first]
    return {"board": board, "nodes": nodes, "workers": workers}


def execute(spec: ExperimentSpec, inputs: dict, tracker, exp_id: str, parent_id: str, runs_dir: Path,
            console, open_runs: set[str], max_points: int | None = None,
            keep_board_s: float = 0.0, max_parallel: int | None = None,
            spawned: dict | None = None) -> dict[str, VariantOutcome]:
    """Dispatch every (variant, seed) task (at most ``max_parallel`` in flight; default: as many as
    the cluster's CPUs fit); log each run as its result arrives. ``spawned``: what :func:`spawn`
    started for this run (else it is started here)."""
    import ray
    from ray.exceptions import RayError

    from pipelines.live import LiveTable

    spawned = spawned or spawn(spec, max_parallel)
    board, nodes = spawned["board"], spawned["nodes"]
    task = ray.remote(num_cpus=spec.num_cpus, num_gpus=spec.num_gpus, max_retries=0)(run_variant_seed)
    limit = in_flight(spec, max_parallel)
    outcomes = {v.name: VariantOutcome(v.name, v.technique, v.role, v.family,
                                       seeds={s: SeedOutcome(s) for s in v.seeds}) for v in spec.variants}
    queue = [(v, s) for v in spec.variants for s in v.seeds]
    pending: dict = {}

    def open_variant(v: VariantSpec) -> None:
        o = outcomes[v.name]
        o.run_id = tracker.start_run(exp_id, v.name, parent_id=parent_id, tags=_variant_tags(spec, v))
        open_runs.add(o.run_id)
        tracker.log_params(o.run_id, v.params_resolved)
        tracker.log_text(o.run_id, to_yaml({"technique": v.technique, "role": v.role, "seeds": v.seeds,
                                               "inputs": v.inputs, "params": v.params_resolved}), "config.yaml")
        o.status, o.started = "RUNNING", time.time()

    def dispatch(v: VariantSpec, seed: int) -> None:
        """Submit the task first (it starts computing), then create its MLflow runs."""
        o = outcomes[v.name]
        so = o.seeds[seed]
        ctx = {"experiment": spec.name, "variant": v.name, "seed": seed, "run": parent_id, "nodes": nodes,
               "workdir": runs_dir / "work" / parent_id / v.name / str(seed), "device": spec.device}
        names = list(v.inputs)
        refs = [inputs[(v.inputs[n], seed if spec.entry(v.inputs[n]).seeded else None)] for n in names]
        module = get_technique(v.technique).fn.__module__
        ref = task.options(name=f"{spec.name}:{v.name}@{seed}").remote(v.technique, module, v.params, ctx, board,
                                                                          names, *refs)
        pending[ref] = (v, seed)
        so.status, so.started = "RUNNING", time.time()
        if not o.run_id:
            open_variant(v)
        if len(v.seeds) > 1:
            so.run_id = tracker.start_run(exp_id, f"{v.name}@{seed}", parent_id=o.run_id,
                                          tags={**_variant_tags(spec, v), PARENT_TAG: "seed", "seed": str(seed)})
            open_runs.add(so.run_id)
        else:
            so.run_id = o.run_id

    def seed_done(v: VariantSpec, so: SeedOutcome) -> None:
        if so.run_id != outcomes[v.name].run_id:
            tracker.set_tags(so.run_id, so.where)
            if so.status == "FINISHED":
                log_result(tracker, so.run_id, so.result, f"{v.name} @ seed {so.seed}", max_points,
                           {"variant": v.name, "seed": so.seed, "params": v.params_resolved}, wall_s=so.ended - so.started)
            tracker.end(so.run_id, so.status, error=so.error or None)
            open_runs.discard(so.run_id)

    def variant_done(v: VariantSpec) -> None:
        o = outcomes[v.name]
        seeds = list(o.seeds.values())
        o.started, o.ended = min(s.started for s in seeds), max(s.ended for s in seeds)
        failed = [s for s in seeds if s.status != "FINISHED"]
        try:
            if failed:
                o.status = "FAILED"
                o.error = "; ".join(f"seed {s.seed}: {s.error.splitlines()[0]}" for s in failed) + "\n" + failed[0].error
            else:
                o.result = aggregate_results({s.seed: s.result for s in seeds})
                if len(seeds) == 1:
                    tracker.set_tags(o.run_id, seeds[0].where)
                log_result(tracker, o.run_id, o.result, v.name, max_points,
                           {"variant": v.name, "technique": v.technique, "role": v.role, "family": v.family,
                            "seeds": v.seeds, "params": v.params_resolved},
                           wall_s=o.wall_s, files=len(seeds) == 1, n_seeds=len(seeds))
                o.status = "FINISHED"
        except Exception as e:  # noqa: BLE001 - a crash while aggregating or logging fails the variant
            o.status, o.error, o.result = "FAILED", error_text(e), None
        tracker.end(o.run_id, o.status, error=o.error or None)
        open_runs.discard(o.run_id)
        board.finished.remote(o.name, o.status, o.wall_s)

    live = LiveTable(spec.name, outcomes, console)
    with live:
        while queue or pending:
            while queue and len(pending) < limit:
                dispatch(*queue.pop(0))
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            finished = []
            for ref in done:
                v, seed = pending.pop(ref)
                so = outcomes[v.name].seeds[seed]
                try:
                    so.result, so.started, so.ended, so.where = ray.get(ref)
                    so.status = "FINISHED"
                except (RayError, Exception) as e:  # a crash inside the variant
                    so.ended, so.status, so.error = time.time(), "FAILED", error_text(e)
                finished.append((v, so))
            while queue and len(pending) < limit:  # the freed slots compute while the driver logs
                dispatch(*queue.pop(0))
            for v, so in finished:
                try:
                    seed_done(v, so)
                except Exception as e:  # noqa: BLE001 - logging the seed failed: the seed fails
                    so.status, so.error = "FAILED", error_text(e)
                    tracker.end(so.run_id, "FAILED", error=so.error)
                    open_runs.discard(so.run_id)
                if all(s.status in ("FINISHED", "FAILED") for s in outcomes[v.name].seeds.values()):
                    variant_done(v)
            try:
                live.update(per_variant(ray.get(board.snapshot.remote(), timeout=5), outcomes))
            except Exception:  # noqa: BLE001 - the live table is best effort
                live.update({})
    # the runs' plots are drawn on the tracker's writer: done before the report draws in this thread
    tracker.flush()
    if keep_board_s:
        time.sleep(keep_board_s)  # let Prometheus scrape the final values before the actor goes
    release(spawned)
    return outcomes


def release(spawned: dict | None) -> None:
    """End what :func:`spawn` started: the board and node actors killed, the start-up tasks read (so that
    an error of one, which the real task had too, is not logged again) or cancelled. Best effort: also
    called on a run's way out after a failure, where Ray may be gone."""
    if not spawned:
        return
    import ray

    for ref in spawned["workers"]:
        try:
            ray.get(ref, timeout=0)
        except Exception:  # noqa: BLE001 - still starting (cancelled below), or it failed
            try:
                ray.cancel(ref, force=False)
            except Exception:  # noqa: BLE001
                pass
    for actor in [spawned["board"], *(spawned["nodes"] or [])]:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001
            pass
