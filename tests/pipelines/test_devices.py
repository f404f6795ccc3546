"""Devices on the spine: bad requests are one line and exit 2 before Ray starts, and a task that asks
for a GPU is scheduled on one (a logical GPU declared to Ray: this machine has none)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PROBE = ["experiment=platform_probe", "debug=true"]

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA answers")


@pytest.mark.parametrize("args, must_name", [
    (["++experiment.device=tpu"], "experiment.device='tpu'"),
    (["++experiment.device=cuda"], "experiment.resources.num_gpus=0"),
    (["++experiment.device=cuda", "++experiment.resources.num_gpus=1"], "torch sees no CUDA device on this machine"),
    (["++experiment.resources.num_gpus=1"], "at most the 0 GPU(s) this machine offers"),
])
def test_bad_device_request_is_one_line_exit_2(args, must_name, tmp_path):
    # Execute
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", *PROBE, f"runs_dir={tmp_path}", *args],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**os.environ, "RAY_ADDRESS": "", "MLFLOW_TRACKING_URI": ""})
    # Assert
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("dtlab: error: ") and must_name in lines[0], lines[0]
    assert not (tmp_path / "mlflow.db").exists()   # nothing started


_LOGICAL_GPU = """
import json, sys
import ray
from mlflow.tracking import MlflowClient
from pipelines import config, dag

ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, log_to_driver=False)
runs = sys.argv[1]
cfg = config.compose(["experiment=platform_probe", "debug=true", "only=[a]", f"runs_dir={runs}", "++experiment.resources.num_gpus=1",
                      f"tracking.uri=sqlite:///{runs}/mlflow.db"])
out = dag.run(cfg)
client = MlflowClient(f"sqlite:///{runs}/mlflow.db")
kids = client.search_runs([out.experiment_id], f"tags.mlflow.parentRunId = '{out.parent_run_id}'")
print(json.dumps({"failed": out.failed, "tags": [{k: r.data.tags.get(k) for k in ("ray.gpu_ids", "device")} for r in kids]}))
"""


def test_task_asking_for_a_gpu_is_scheduled_on_one(tmp_path):
    # Prepare: Ray told it has one GPU; the probe's task asks for it
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled", "MLFLOW_TRACKING_URI": ""}
    # Execute
    r = subprocess.run([sys.executable, "-c", _LOGICAL_GPU, str(tmp_path)], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=env)
    # Assert: the variant ran on GPU 0, and on cpu, since torch sees no CUDA (device auto)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["failed"] == [] and len(got["tags"]) == 1
    assert all(t == {"ray.gpu_ids": "0", "device": "cpu"} for t in got["tags"]), got
