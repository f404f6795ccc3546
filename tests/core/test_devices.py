"""The device request (issue "Run where researchers run: GPUs"): what an experiment may ask for, how a
task resolves it, and what a GPU task hands to the cache. All on cpu: torch here sees no CUDA."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from components.core import devices
from components.core.errors import ConfigError

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA answers")


@pytest.mark.parametrize("exp, key", [
    ({"device": "gpu"}, "experiment.device"),
    ({"resources": {"num_gpus": -1}}, "experiment.resources.num_gpus"),
    ({"resources": {"num_gpus": True}}, "experiment.resources.num_gpus"),
    ({"device": "cuda"}, "experiment.resources.num_gpus"),          # cuda without asking Ray for a GPU
])
def test_bad_request_names_the_key(exp, key):
    # Execute
    with pytest.raises(ConfigError) as e:
        devices.requested(exp)
    # Assert
    assert e.value.key == key


def test_default_request_is_auto_without_gpus():
    assert devices.requested({}) == ("auto", 0.0)


@pytest.mark.parametrize("device, ids, runs_on", [
    ("auto", None, ("cpu", "cuda")),      # outside Ray
    ("auto", [0], ("cpu", "cuda")),       # Ray gave a (logical) GPU, torch sees none
    ("auto", [0], ("cpu",)),              # a cpu-only technique
    ("cpu", [0], ("cpu", "cuda")),
])
def test_resolve_falls_back_to_cpu(device, ids, runs_on):
    assert devices.resolve(device, ids, runs_on) == "cpu"


def test_a_cpu_answer_never_imports_torch():
    """A task of a numpy technique (or one given no GPU) resolves ``auto`` without importing torch: in a
    fresh Ray worker that import took a second of the quickstart's first tasks."""
    import subprocess
    import sys

    # Execute: a fresh interpreter, as a fresh worker is
    code = ("import sys; from components.core import devices; "
            "print(devices.resolve('auto', None, ('cpu', 'cuda')), devices.resolve('auto', [0], ('cpu',)), "
            "devices.resolve('cpu', [0]), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(devices.__file__).rsplit("/components/", 1)[0]).stdout.split()
    # Assert
    assert out == ["cpu", "cpu", "cpu", "False"]


def test_resolve_cuda_without_cuda_is_an_error():
    with pytest.raises(ConfigError, match="torch sees no CUDA"):
        devices.resolve("cuda", [0])


def test_check_request_refuses_what_cannot_run():
    # Prepare
    techs = {"a": ("cpu", "cuda"), "b": ("cpu",)}
    # Execute / Assert: no GPU on offer, too many asked for, a cpu-only technique under device=cuda
    with pytest.raises(ConfigError, match="torch sees no CUDA device on this machine"):
        devices.check_request("cuda", 1, techs, 0.0, "this machine")
    with pytest.raises(ConfigError, match="at most the 1 GPU"):
        devices.check_request("auto", 2, techs, 1.0, "this machine")
    with pytest.raises(ConfigError, match="variant b's technique runs on: cpu"):
        devices.check_request("cuda", 1, techs, None, "the Ray cluster")
    devices.check_request("auto", 1, techs, 1.0, "this machine")     # auto: b runs on cpu, a where it can
    with pytest.raises(ConfigError, match="the Ray cluster offers"):
        devices.check_cluster(2, 1.0)


@dataclasses.dataclass
class _Out:
    w: torch.Tensor
    n: int


def test_to_cpu_walks_containers():
    # Prepare: on cpu the move is the identity, so check the walk keeps every shape of container
    obj = {"m": torch.nn.Linear(2, 2), "xs": [torch.ones(2), (torch.zeros(1), 3)], "d": _Out(torch.ones(1), 4), "s": "x"}
    # Execute
    out = devices.to_cpu(obj)
    # Assert
    assert isinstance(out["xs"][1], tuple) and out["xs"][1][1] == 3 and out["s"] == "x"
    assert isinstance(out["d"], _Out) and out["d"].n == 4 and out["d"].w.device.type == "cpu"
    assert isinstance(out["m"], torch.nn.Linear)


def test_timing_clock_follows_the_device():
    # a thread's CPU time does not see GPU kernels: on cuda the wall clock, to the device's sync
    assert devices.clock("cpu") == "thread" and devices.clock("cpu", "wall") == "wall"
    assert devices.clock("cuda") == "wall" and devices.clock("cuda:1") == "wall"
    devices.synchronize("cpu")   # a no-op on cpu


@pytest.mark.parametrize("declared, asked, gets", [(("cpu",), "cuda", "cpu"), (("cpu",), "auto", "cpu"),
                                                  (("cpu", "cuda"), "auto", "cpu"), (("cpu", "cuda"), "cpu", "cpu")])
def test_a_prepare_step_runs_where_it_can(monkeypatch, declared, asked, gets):
    from components.core.registry import PrepareStep
    from pipelines.stages import prepare

    # Prepare: a step that reports the device it was given (outside Ray: no GPU was given)
    step = PrepareStep("probe", "", lambda p, ctx: ctx.device, None, devices=declared)
    monkeypatch.setattr(prepare, "get_prepare_step", lambda name: step)
    # Execute: a cpu-only step under device=cuda runs on cpu (the techniques are what device=cuda checks)
    out, _ = prepare.run_step("probe", None, {"experiment": "e", "variant": "prepare:probe", "seed": 0,
                                             "workdir": "/tmp", "device": asked}, [])
    # Assert
    assert out == gets


def test_prepare_step_refuses_an_unknown_device():
    from components.core.registry import prepare_step

    with pytest.raises(ValueError, match="non-empty subset"):
        prepare_step("x", summary="", devices=("tpu",))


def test_a_measured_prepare_output_is_keyed_by_the_device_it_runs_on():
    from pipelines import config
    from pipelines.experiment import build_spec
    from pipelines.stages.prepare import entry_keys

    # Prepare: compactfusion on cpu and asking for a GPU per task (auto: cuda where it can run)
    exp = config.compose(["experiment=compactfusion"])["experiment"]
    cpu = build_spec(exp)
    gpu = build_spec({**exp, "resources": {**exp["resources"], "num_gpus": 1}})
    # Execute
    k_cpu, k_gpu = (entry_keys(s, s.needed_prepare()) for s in (cpu, gpu))
    # Assert: the calibration (a measured block time) gets another key; the trained DiT keeps its own
    assert k_cpu[("calibration", None)] != k_gpu[("calibration", None)]
    assert k_cpu[("model", None)] == k_gpu[("model", None)]


def test_a_device_keyed_step_refuses_to_run_elsewhere(monkeypatch):
    from components.core.registry import PrepareStep
    from pipelines.stages import prepare

    # Prepare: a step keyed to cuda (the experiment asked for GPUs) in a task where torch sees none
    step = PrepareStep("probe", "", lambda p, ctx: ctx.device, None, devices=("cpu", "cuda"), per_device=True)
    monkeypatch.setattr(prepare, "get_prepare_step", lambda name: step)
    fields = {"experiment": "e", "variant": "prepare:probe", "seed": 0, "workdir": "/tmp", "device": "auto",
              "keyed": "cuda"}
    # Execute / Assert: an error naming the key, never a cpu measurement cached under the cuda key
    with pytest.raises(ConfigError, match="keyed to cuda"):
        prepare.run_step("probe", None, fields, [])
    assert prepare.run_step("probe", None, {**fields, "keyed": "cpu"}, [])[0] == "cpu"
