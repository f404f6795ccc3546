"""Shared helpers for benchmarks: run an experiment in-process and sample peak memory."""
from __future__ import annotations

import os
import threading
import time
from typing import Any

import psutil


class PeakMemory:
    """Peak resident memory (MB) of this process and all its children (Ray workers), sampled."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.peak_mb, self._stop = interval, 0.0, threading.Event()

    def _sample(self) -> float:
        me = psutil.Process(os.getpid())
        total = 0
        for p in [me] + me.children(recursive=True):
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20

    def _loop(self):
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, self._sample())
            time.sleep(self.interval)

    def __enter__(self):
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def run_experiment(name: str, *overrides: str, runs_dir: str | None = None):
    """Run one experiment through the real DAG with embedded Ray; returns (outcome, peak MB)."""
    from pipelines import config, dag

    ovs = [f"experiment={name}", *overrides]
    if runs_dir:
        ovs.append(f"runs_dir={runs_dir}")
    cfg = config.compose(ovs)
    with PeakMemory() as mem:
        outcome = dag.run(cfg, console=None)
    return outcome, mem.peak_mb


def run_isolated(name: str, *overrides: str):
    """A full experiment in a throw-away store (temp runs dir + SQLite MLflow), Ray shut down after.

    Returns (outcome, peak MB, wall seconds): the cold-cache, fresh-store figure a benchmark reports.
    """
    import tempfile

    import ray

    with tempfile.TemporaryDirectory() as d:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{d}/mlflow.db"
        t0 = time.perf_counter()
        try:
            out, peak = run_experiment(name, "cluster.include_dashboard=false", *overrides, runs_dir=d)
            wall = time.perf_counter() - t0
        finally:  # also on SIGTERM / Ctrl-C (KeyboardInterrupt from dag.run): the session ends here, in
            ray.shutdown()  # order, before its temp store goes, not in the interpreter's exit
    return out, peak, wall


def run_in_store(name: str, debug: bool, runs_dir: str):
    """An experiment (full or its debug flavour) into the store ``runs_dir``, whose prepare cache it
    shares with a later :func:`prepared` (a serving benchmark's load test): (outcome, peak MB, wall s),
    with the headline printed."""
    t0 = time.perf_counter()
    out, peak = run_experiment(name, f"debug={str(debug).lower()}", "cluster.include_dashboard=false",
                               runs_dir=runs_dir)
    wall = time.perf_counter() - t0
    headline(name, out, peak, wall, f"{'debug' if debug else 'full'} experiment, prepare cache {out.prepare_cache}")
    return out, peak, wall


def prepared(name: str, step: str, runs_dir: str, debug: bool):
    """The output of experiment ``name``'s prepare step ``step`` from the cache in ``runs_dir`` (built and
    cached there if absent), with the validated experiment spec."""
    from pathlib import Path

    from pipelines import config, dag

    spec = dag.validate(config.compose([f"experiment={name}", f"debug={str(debug).lower()}", f"runs_dir={runs_dir}"]))
    return dag.prepare_local(spec, step, Path(runs_dir).resolve())[0], spec


def headline(name: str, out, peak_mb: float, wall_s: float, what: str = "full experiment") -> None:
    """The benchmark's first line: wall time, peak memory and how many gated claims held."""
    print(f"## {name} {what}: {wall_s:.0f} s wall, peak memory {peak_mb:.0f} MB (driver + Ray workers), "
          f"claims held {out.claims_held}/{out.claims_judged}\n")


def claim_outcome(c) -> str:
    """A claim's outcome as the report says it: skipped, premise not met, True or False."""
    if c.skipped:
        return "skipped"
    if getattr(c, "premise_holds", None) is False:
        return "premise not met"
    return str(c.holds)


def claims_table(out) -> None:
    """Every claim of an outcome as a Markdown table: gate, outcome, measured figure (with +- SE where it is a
    mean over seeds), premise figure."""
    print("\n| claim | gate | outcome | measured | premise |\n|---|---|---|---|---|")
    for c in out.claims:
        measured = getattr(c, "measured_pm", "") or c.measured
        print(f"| {c.name} | {c.gate} | {claim_outcome(c)} | {measured} | {getattr(c, 'premise_measured', '') or ''} |")


def per_seed_table(out, metric: str) -> None:
    """``metric`` of every seed of every variant: what a mean +- SE hides (a seed stuck longer on a plateau)."""
    seeds = sorted({s for o in out.variants.values() for s in o.seeds})
    print(f"\n{metric} per seed\n\n| variant | " + " | ".join(f"seed {s}" for s in seeds) + " |")
    print("|" + "---|" * (len(seeds) + 1))
    for name, o in out.variants.items():
        cells = []
        for s in seeds:
            so = o.seeds.get(s)
            v = so.result.metrics.get(metric) if so is not None and so.result is not None else None
            cells.append("" if v is None else f"{v:.4f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


NAN = float("nan")


def fig(key: str, fmt: str = ".4f", scale: float = 1.0, unit: str = ""):
    """A variant-table cell: the variant's ``key`` (times ``scale``), NaN where it is missing."""
    return lambda r, o: f"{r.get(key, NAN) * scale:{fmt}}{unit}"


def fig_se(key: str, fmt: str = ".4f"):
    """A variant-table cell: ``key`` +- its standard error over seeds (``key_se``)."""
    return lambda r, o: f"{r.get(key, NAN):{fmt}} +- {r.get(key + '_se', NAN):{fmt}}"


def fig_ratio(base: dict, key: str, key_b: str | None = None, fmt: str = ".3f"):
    """A variant-table cell: ``key`` over ``base[key_b or key]`` (see :func:`ratio_to`)."""
    ratio = ratio_to(base)
    return lambda r, o: f"{ratio(r, key, key_b):{fmt}}"


STATUS = ("status", lambda r, o: o.status)
ROLE = ("role", lambda r, o: o.role)
WALL = ("wall_s", lambda r, o: f"{o.wall_s:.0f}")


def variant_table(out, columns: list[tuple[str, Any]]) -> None:
    """One Markdown row per variant of an outcome: its name, then each ``(header, cell(metrics, outcome))``."""
    m = variant_metrics(out)
    print("| variant | " + " | ".join(h for h, _ in columns) + " |")
    print("|" + "---|" * (len(columns) + 1))
    for name, o in out.variants.items():
        print(f"| {name} | " + " | ".join(cell(m[name], o) for _, cell in columns) + " |")


def variant_metrics(out) -> dict[str, dict]:
    """Every variant's seed-aggregated metrics (an empty dict for a variant that produced none)."""
    return {n: (o.result.metrics if o.result else {}) for n, o in out.variants.items()}


def ratio_to(base: dict):
    """``ratio(r, key, key_b=None)``: ``r[key] / base[key_b or key]``, NaN where either is missing or 0."""
    nan = float("nan")

    def ratio(r: dict, key: str, key_b: str | None = None) -> float:
        den = base.get(key_b or key, nan)
        return r.get(key, nan) / den if den else nan

    return ratio


def skip_full_main(full, *rest) -> None:
    """A benchmark's entry point: ``full()`` (the full experiment) unless ``--skip-full``, then each of ``rest``."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-full", action="store_true", help="skip the full experiment (only the micro-benchmarks)")
    if not ap.parse_args().skip_full:
        full()
    for fn in rest:
        fn()
