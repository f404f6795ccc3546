"""Devices: where an experiment's torch work runs (issue "Run where researchers run: GPUs").

An experiment may set ``device: auto | cpu | cuda`` and ``resources.num_gpus`` (per Ray task, node
actor and Ray Train worker). The driver checks the request before Ray starts (:func:`check_request`);
inside a task :func:`resolve` turns it into the torch device the technique gets as ``ctx.device``:
``auto`` is cuda when the task was given a GPU, torch sees one and the technique runs there, else cpu.
CPU stays the default and changes nothing: an experiment that sets neither key runs, and hashes, as
before.

A technique declares the devices it runs on (``@technique(..., devices=("cpu", "cuda"))``; default
cpu only): ``device=cuda`` for one that cannot is one line before Ray starts, never a silent cpu run.
"""
from __future__ import annotations

from typing import Any

from components.core.errors import ConfigError, require

DEVICES = ("auto", "cpu", "cuda")


def requested(exp: dict) -> tuple[str, float]:
    """The experiment's ``device`` and ``resources.num_gpus``, checked (ConfigError otherwise)."""
    device = exp.get("device", "auto")
    require(device in DEVICES, "experiment.device", device, "one of " + ", ".join(DEVICES))
    num_gpus = (exp.get("resources") or {}).get("num_gpus", 0)
    require(isinstance(num_gpus, (int, float)) and not isinstance(num_gpus, bool) and 0 <= num_gpus <= 64,
            "experiment.resources.num_gpus", num_gpus, "a number in [0, 64] (GPUs per task, actor and worker)")
    require(not (device == "cuda" and num_gpus == 0), "experiment.resources.num_gpus", num_gpus,
            "a positive number with device=cuda (a task is given a GPU only when it asks for one)")
    return device, float(num_gpus)


def cuda_count() -> int:
    """GPUs torch sees in this process (0 without a CUDA build or driver)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_request(device: str, num_gpus: float, techniques: dict[str, tuple[str, ...]],
                  gpus_offered: float | None, where: str) -> None:
    """Bad device requests, each one ConfigError (the driver, before Ray starts).

    ``techniques``: variant -> the devices its technique runs on. ``gpus_offered``: the GPUs of the
    cluster the run will use (this machine's for embedded Ray), None when they cannot be known yet
    (a remote cluster: checked once connected, :func:`check_cluster`)."""
    if gpus_offered is not None:
        if device == "cuda" and gpus_offered == 0:
            raise ConfigError("experiment.device", device, f"cpu or auto: torch sees no CUDA device on {where}")
        if num_gpus > gpus_offered:
            raise ConfigError("experiment.resources.num_gpus", num_gpus,
                              f"at most the {gpus_offered:g} GPU(s) {where} offers")
    if device == "cuda":
        for variant, devs in techniques.items():
            if "cuda" not in devs:
                raise ConfigError("experiment.device", device, f"a device variant {variant}'s technique runs on: "
                                  + ", ".join(devs) + " (device=auto runs each technique where it can)")


def check_cluster(num_gpus: float, cluster_gpus: float) -> None:
    """Once Ray is up: a per-task GPU request the cluster cannot meet would wait forever."""
    if num_gpus > cluster_gpus:
        raise ConfigError("experiment.resources.num_gpus", num_gpus,
                          f"at most the {cluster_gpus:g} GPU(s) the Ray cluster offers")


def resolve(device: str, gpu_ids: list[Any] | None = None, runs_on: tuple[str, ...] = DEVICES[1:]) -> str:
    """The torch device a task runs on: cpu, or cuda when asked for (``cuda``) or given (``auto``:
    Ray gave the task a GPU, torch sees one, and ``runs_on``, the technique's devices, has cuda).

    ``gpu_ids``: the GPUs Ray gave this task (``ray.get_gpu_ids()``; None outside Ray)."""
    require(device in DEVICES, "device", device, "one of " + ", ".join(DEVICES))
    if device == "cpu" or (device == "auto" and not (gpu_ids and "cuda" in runs_on)):
        return "cpu"   # without asking torch: a task of a cpu-only (or numpy) technique never imports it for this
    have = cuda_count() > 0
    if device == "cuda":
        if not have:
            raise ConfigError("device", device, "cpu or auto: torch sees no CUDA device in this task")
        return "cuda"
    return "cuda" if have else "cpu"   # auto, given a GPU, for a technique that runs on cuda


def gpu_ids() -> list[Any] | None:
    """The GPUs Ray gave this task or actor; None outside a Ray worker."""
    try:
        import ray

        return ray.get_gpu_ids() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - no Ray here: a plain process has no GPU assignment
        return None


def task_device(device: str, runs_on: tuple[str, ...] = DEVICES[1:]) -> str:
    """:func:`resolve` inside a Ray task or actor (the GPUs Ray gave it), or in a plain process."""
    return resolve(device, gpu_ids(), runs_on)


def to_cpu(obj: Any) -> Any:
    """``obj`` with every torch tensor and module in it moved to cpu (dicts, lists, tuples and
    dataclass fields walked; other values as they are): what a GPU task hands to the cache."""
    import dataclasses

    import torch

    if isinstance(obj, (torch.Tensor, torch.nn.Module)):
        return obj.cpu() if isinstance(obj, torch.Tensor) else obj.to("cpu")
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(to_cpu(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: to_cpu(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                                           if f.init})
    return obj


def clock(device: str, cpu_clock: str = "thread") -> str:
    """The components.core.timing clock for work on ``device``: ``cpu_clock`` on cpu; on cuda the wall
    clock (a thread's CPU time does not see kernels running on the GPU), the timed work ending with
    :func:`synchronize` so its kernels are inside the measured span."""
    return cpu_clock if str(device) == "cpu" else "wall"


def synchronize(device: str) -> None:
    """Wait for the work queued on ``device`` (a no-op on cpu, where torch is not asked)."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)
