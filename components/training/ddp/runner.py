"""Launch a data-parallel job on Ray Train: TorchTrainer, workers with fractional CPUs over gloo, or
with one GPU each over NCCL when the variant runs on cuda (``device``, the task's ``ctx.device``).

A worker that dies ends the job at once (``FailureConfig(max_failures=0)``) and :func:`fit` raises
:class:`DataParallelFailed` with Ray Train's reason, so the variant's MLflow run ends FAILED.

One exception, retried once from scratch: Ray Train's placement-group cleaner asks the State API whether
the controller actor is alive and, on a machine loaded enough that the actor is not listed yet, takes it
for dead and removes the job's placement group ("Destroying worker since its placement group was
removed", seen twice in 24 jobs on this 2-core machine at load 20-30). No worker failed: the run is
started again under a new name.
"""
from __future__ import annotations

import logging

import json
import os
from pathlib import Path


class DataParallelFailed(RuntimeError):
    """The Ray Train run failed (a worker died or raised); the message carries the reason."""


PG_REMOVED = "placement group was removed"


def scaling(workers: int, worker_cpus: float, device: str = "cpu", timeout_s: int = 120):
    """(TorchConfig, ScalingConfig) for ``device``: gloo on cpu; NCCL and one GPU per worker on cuda."""
    from ray.train import ScalingConfig
    from ray.train.torch import TorchConfig

    gpu = device == "cuda"
    per_worker = {"CPU": worker_cpus, **({"GPU": 1} if gpu else {})}
    return (TorchConfig(backend="nccl" if gpu else "gloo", timeout_s=timeout_s),
            ScalingConfig(num_workers=workers, use_gpu=gpu, resources_per_worker=per_worker))


def fit(train_fn, config: dict, workers: int, worker_cpus: float, storage: Path, name: str,
        timeout_s: int = 120, retries: int = 1, device: str = "cpu") -> dict:
    """Run ``train_fn(config)`` on ``workers`` gloo workers; returns rank 0's result.json (a run whose
    placement group the cleaner removed is started again, ``retries`` times)."""
    for attempt in range(retries + 1):
        try:
            return _fit(train_fn, config, workers, worker_cpus, storage, name, timeout_s, device)
        except DataParallelFailed as e:
            if PG_REMOVED not in str(e) or attempt == retries:
                raise
            logging.getLogger(__name__).warning(f"{name}: placement group removed under load, not by a worker "
                                                f"failure; starting the run again ({attempt + 1}/{retries})")


def _fit(train_fn, config: dict, workers: int, worker_cpus: float, storage: Path, name: str,
         timeout_s: int, device: str = "cpu") -> dict:
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # standalone use: Ray Train's own ray.init authenticates too
    from ray.train import FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    import uuid

    name = f"{name}-{uuid.uuid4().hex[:8]}"  # a fresh run: never resume an old snapshot
    storage = Path(storage).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    torch_config, scaling_config = scaling(workers, worker_cpus, device, timeout_s)
    trainer = TorchTrainer(
        train_fn, train_loop_config=config, torch_config=torch_config, scaling_config=scaling_config,
        run_config=RunConfig(name=name, storage_path=str(storage), failure_config=FailureConfig(max_failures=0)))
    try:
        result = trainer.fit()
    except Exception as e:  # TrainingFailedError and friends: keep the reason, one clear type
        raise DataParallelFailed(f"Ray Train run {name!r} failed: {type(e).__name__}: {e}") from e
    if getattr(result, "error", None) is not None:
        raise DataParallelFailed(f"Ray Train run {name!r} failed: {result.error}")
    if result.checkpoint is None:
        raise DataParallelFailed(f"Ray Train run {name!r} returned no result checkpoint")
    with result.checkpoint.as_directory() as d:
        return json.loads((Path(d) / "result.json").read_text())
