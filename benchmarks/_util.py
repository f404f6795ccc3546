"""Shared helpers for benchmarks: run an experiment in-process and sample peak memory."""
from __future__ import annotations

import os
import threading
import time

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
        out, peak = run_experiment(name, "cluster.include_dashboard=false", *overrides, runs_dir=d)
        wall = time.perf_counter() - t0
        ray.shutdown()
    return out, peak, wall
