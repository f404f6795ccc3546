"""prepare: the graph of prepare steps the selected variants need, upstream first, cached by content.

Each needed (entry, seed) is one Ray task; a step's upstream outputs reach it as Ray object
references (never copied through the driver), and the driver saves every new output to the
shared cache. A cache hit is loaded once and put in the object store.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from components.core.cache import StageCache, cache_key, code_version
from components.core.context import RunContext
from components.core.errors import require
from components.core.registry import get_prepare_step
from pipelines.experiment import ExperimentSpec, PrepareSpec


def run_step(step_name: str, params: Any, ctx_fields: dict, names: list[str], *upstream) -> tuple[Any, float]:
    """One prepare step in this process; ``upstream`` are its inputs in the order of ``names``.

    Only the step's own module is imported (the registry's index names it), not all of components/.
    ``ctx_fields["device"]`` is the experiment's request, resolved here; what a step built on a GPU is
    handed back on cpu (the cache key does not hold the device: it is the same artifact). A
    ``per_device`` step's key holds the device :func:`planned_device` expected; ``ctx_fields["keyed"]``
    says which, and running elsewhere is an error rather than a cached output under the wrong key."""
    from components.core.devices import task_device, to_cpu

    step = get_prepare_step(step_name)
    asked, keyed = ctx_fields.get("device", "cpu"), ctx_fields.get("keyed")
    # a cpu-only step runs on cpu under any request (device=cuda is checked against the techniques)
    fields = {**{k: v for k, v in ctx_fields.items() if k != "keyed"},
              "device": task_device(asked if "cuda" in step.devices else "cpu", step.devices)}
    require(keyed is None or keyed == fields["device"], "experiment.device", asked,
            f"a device this task can use: prepare step {step_name!r} is keyed to {keyed} (the experiment asked "
            f"for GPUs) but runs on {fields['device']} here; set experiment.device=cpu or install torch with CUDA")
    t0 = time.perf_counter()
    out = step.fn(params, RunContext(**fields, inputs=dict(zip(names, upstream))))
    out = to_cpu(out) if fields["device"] != "cpu" else out
    return out, time.perf_counter() - t0


def planned_device(spec: ExperimentSpec, step) -> str:
    """The device a step will run on, as the driver sees it: cuda where the step can, the experiment
    does not ask for cpu and its tasks are given GPUs; else cpu."""
    return "cuda" if "cuda" in step.devices and spec.device != "cpu" and spec.num_gpus > 0 else "cpu"


def entry_keys(spec: ExperimentSpec, needed: list[tuple[PrepareSpec, list]]) -> dict[tuple[str, Any], str]:
    """Cache key of every needed (entry, seed): step, parsed params, upstream keys, seed, code (and, for
    a ``per_device`` step, the device it will run on)."""
    keys: dict[tuple[str, Any], str] = {}
    for p, seeds in needed:  # upstream first, so their keys exist
        step = get_prepare_step(p.step)
        version = code_version(step.fn) + (f"@{planned_device(spec, step)}" if step.per_device else "")
        for seed in seeds:
            upstream = {inp: keys[(up, seed if spec.entry(up).seeded else None)] for inp, up in p.inputs.items()}
            keys[(p.name, seed)] = cache_key(p.step, p.params, version, upstream, seed)
    return keys


def _ctx(spec: ExperimentSpec, p: PrepareSpec, seed: Any, key: str, runs_dir: Path) -> dict:
    step = get_prepare_step(p.step)
    return {"experiment": spec.name, "variant": f"prepare:{p.name}" + (f"@{seed}" if seed is not None else ""),
            "seed": 0 if seed is None else seed, "workdir": runs_dir / "cache" / f"{key}.work", "device": spec.device,
            **({"keyed": planned_device(spec, step)} if step.per_device else {})}


def prepare(spec: ExperimentSpec, runs_dir: Path, tracker, parent_id: str | None, console) -> tuple[dict, dict, float]:
    """Build (or load) what the selected variants need. Returns ({(entry, seed): object ref},
    {label: hit|miss}, compute seconds of the steps that ran). ``tracker`` None: nothing is tagged."""
    batch = PrepareBatch(runs_dir)
    refs, status = batch.submit(spec)
    if batch.pending and console is not None:
        console.print(f"[dim]prepare: building {', '.join(batch.labels())}…[/dim]")
    compute_s = sum(batch.collect().values())
    if status and tracker is not None:   # None: `dtlab prepare` (no MLflow run)
        tracker.set_tags(parent_id, {f"prepare.{k}.cache": v for k, v in status.items()})
    return refs, status, compute_s


class PrepareBatch:
    """The prepare entries of one or more experiments as Ray tasks in one session, keyed by cache
    content: an entry that two experiments share (the same key: the DiT of the diffusion experiments)
    is built once, and the entries of different experiments run side by side as CPUs free up. One
    experiment's prepare stage is a batch of one; `dtlab prepare experiment=a,b,c` (what `dtlab
    reproduce` runs once before a cold board) is a batch of many, so that an experiment whose
    prepare is one long step does not leave the other cores idle for its whole length."""

    def __init__(self, runs_dir: Path):
        self.runs_dir, self.cache = runs_dir, StageCache(runs_dir / "cache")
        self.pending: dict[str, tuple[Any, Any, str]] = {}   # key -> (output ref, seconds ref, first label)
        self.built: dict[str, list[str]] = {}                 # experiment -> the labels it submitted first
        self.owner: dict[str, str] = {}                       # key -> the experiment that submitted it first

    def submit(self, spec: ExperimentSpec, load_hits: bool = True) -> tuple[dict, dict]:
        """Submit what ``spec`` needs and the cache lacks (upstream first); ({(entry, seed): object ref},
        {label: hit|miss}). An entry already submitted in this batch is a miss that shares its task.
        ``load_hits`` False (a pass that only fills the cache): a cached entry is loaded only where a
        missing one reads it, and its place in the returned refs is None otherwise."""
        import ray

        needed = spec.needed_prepare()
        keys = entry_keys(spec, needed)
        refs: dict[tuple[str, Any], Any] = {}
        status: dict[str, str] = {}
        task = ray.remote(num_cpus=spec.num_cpus, num_gpus=spec.num_gpus, num_returns=2, max_retries=0)(run_step)

        def upstream(entry: tuple[str, Any]) -> Any:
            if refs[entry] is None:   # a cache hit not loaded yet
                refs[entry] = ray.put(self.cache.load(keys[entry]))
            return refs[entry]

        for p, seeds in needed:
            for seed in seeds:
                key = keys[(p.name, seed)]
                label = p.name + (f"@{seed}" if seed is not None else "")
                if key in self.pending:
                    refs[(p.name, seed)], status[label] = self.pending[key][0], "miss"
                    continue
                if self.cache.has(key):
                    refs[(p.name, seed)] = ray.put(self.cache.load(key)) if load_hits else None
                    status[label] = "hit"
                    continue
                names = list(p.inputs)
                ups = [upstream((p.inputs[n], seed if spec.entry(p.inputs[n]).seeded else None)) for n in names]
                out_ref, secs_ref = task.options(name=f"{spec.name}:prepare:{label}").remote(
                    p.step, p.params, _ctx(spec, p, seed, key, self.runs_dir), names, *ups)
                refs[(p.name, seed)] = out_ref
                self.pending[key] = (out_ref, secs_ref, label)
                self.built.setdefault(spec.name, []).append(label)
                self.owner[key] = spec.name
                status[label] = "miss"
        return refs, status

    def labels(self) -> list[str]:
        return [label for _, _, label in self.pending.values()]

    def collect(self) -> dict[str, float]:
        """Wait for every submitted task, in the order they finish, and save each output to the cache
        as it arrives; {key: the step's compute seconds}."""
        import ray

        by_ref = {out_ref: key for key, (out_ref, _, _) in self.pending.items()}
        seconds: dict[str, float] = {}
        waiting = list(by_ref)
        while waiting:
            (done,), waiting = ray.wait(waiting, num_returns=1)
            key = by_ref[done]
            out, secs = ray.get([done, self.pending[key][1]])
            self.cache.save(key, out)
            seconds[key] = secs
        self.pending.clear()
        return seconds


def cold_entries(spec: ExperimentSpec, runs_dir: Path) -> tuple[list[str], int]:
    """The labels of the needed (entry, seed)s the shared cache does not hold yet, and how many are
    needed in all (no Ray, no step runs)."""
    cache, keys = StageCache(runs_dir / "cache"), entry_keys(spec, spec.needed_prepare())
    missing = [name + (f"@{seed}" if seed is not None else "") for (name, seed), key in keys.items() if not cache.has(key)]
    return missing, len(keys)


def prepare_local(spec: ExperimentSpec, name: str, runs_dir: Path, seed: int | None = None) -> tuple[Any, str]:
    """One prepare entry of ``spec`` (and its upstream) in this process: from the shared cache, or
    built and cached. For tools outside a DAG run (``dtlab serve``, benchmarks). Returns
    (output, "hit" or "miss" for the entry itself)."""
    require(any(p.name == name for p in spec.prepare), "prepare", name,
            f"a prepare entry of {spec.name}: " + ", ".join(p.name for p in spec.prepare))
    seed = spec.seed if seed is None else seed
    by_name = {p.name: p for p in spec.prepare}
    order: list[str] = []

    def visit(n: str) -> None:
        for up in by_name[n].inputs.values():
            visit(up)
        if n not in order:
            order.append(n)

    visit(name)
    needed = [(by_name[n], [seed if by_name[n].seeded else None]) for n in order]
    keys = entry_keys(spec, needed)
    cache, outs, state = StageCache(runs_dir / "cache"), {}, "hit"
    for p, (s,) in needed:
        key = keys[(p.name, s)]
        if cache.has(key):
            outs[p.name], state = cache.load(key), "hit"
            continue
        names = list(p.inputs)
        outs[p.name], _ = run_step(p.step, p.params, _ctx(spec, p, s, key, runs_dir), names,
                                   *[outs[p.inputs[n]] for n in names])
        cache.save(key, outs[p.name])
        state = "miss"
    return outs[name], state
