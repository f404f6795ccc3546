"""`dtlab reproduce cluster=remote`: every configuration a Ray job, submitted at once and followed to
its end; bad addresses and stores refused before anything is submitted; Ctrl-C stops what runs. The
job client is a fake here (no Ray); the slow test submits real jobs to a `dtlab up` head."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from ray.job_submission import JobStatus

from pipelines import reproduce_cluster
from pipelines.reproduce import Job
from tests.infra.svc import ROOT, free_port


class FakeJobs:
    """A job API whose jobs run for ``polls`` status calls and end with ``ends[key]``."""

    def __init__(self, ends: dict[str, JobStatus], polls: int = 2, interrupt_after: int | None = None):
        self.ends, self.polls, self.interrupt_after = ends, polls, interrupt_after
        self.jobs: dict[str, dict] = {}
        self.stopped: list[str] = []
        self.calls = 0

    def submit_job(self, *, entrypoint, submission_id, runtime_env, metadata):
        self.jobs[submission_id] = {"key": metadata["dtlab.reproduce"], "entrypoint": entrypoint, "env": runtime_env,
                                    "seen": 0, "status": JobStatus.PENDING}
        return submission_id

    def get_job_info(self, sid):
        self.calls += 1
        if self.interrupt_after is not None and self.calls > self.interrupt_after:
            self.interrupt_after = None
            raise KeyboardInterrupt
        j = self.jobs[sid]
        j["seen"] += 1
        if j["status"] not in (JobStatus.STOPPED,):
            j["status"] = JobStatus.RUNNING if j["seen"] < self.polls else self.ends[j["key"]]
        return SimpleNamespace(status=j["status"], start_time=1_000, end_time=4_000 if j["seen"] >= self.polls else None,
                               message="")

    def get_job_logs(self, sid):
        return f"log of {self.jobs[sid]['key']}\n"

    def stop_job(self, sid):
        self.stopped.append(self.jobs[sid]["key"])
        self.jobs[sid]["status"] = JobStatus.STOPPED


def _jobs(*keys: str) -> list[Job]:
    return [Job(k, "", [f"experiment={k}"], None, why=["never run"]) for k in keys]


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch):
    monkeypatch.setattr(reproduce_cluster, "POLL_S", 0.0)


def test_every_job_is_submitted_at_once_and_followed_to_its_end(tmp_path):
    # Prepare
    todo = _jobs("a", "b")
    fake = FakeJobs({"a": JobStatus.SUCCEEDED, "b": JobStatus.FAILED})
    # Execute
    interrupted, failed = reproduce_cluster.run_on_cluster(todo, ["cluster=remote"], tmp_path, lambda: None,
                                                           "sqlite:////x/mlflow.db", "http://127.0.0.1:8265", fake)
    # Assert: both submitted before either ended, each with its overrides, the store and this checkout
    assert not interrupted and failed == ["b"]
    assert [j.state for j in todo] == ["done", "failed"] and [j.wall_s for j in todo] == [3.0, 3.0]
    first = next(iter(fake.jobs.values()))
    assert first["entrypoint"].startswith(f"cd {ROOT} && exec {sys.executable} -m pipelines.cli run experiment=a cluster=remote")
    assert first["env"]["env_vars"]["MLFLOW_TRACKING_URI"] == "sqlite:////x/mlflow.db"
    assert (tmp_path / "a.log").read_text().endswith("log of a\n") and "FAILED" in (tmp_path / "b.log").read_text()


def test_ctrl_c_stops_every_job_still_running(tmp_path):
    # Prepare: the interrupt comes while both run
    todo = _jobs("a", "b")
    fake = FakeJobs({"a": JobStatus.SUCCEEDED, "b": JobStatus.SUCCEEDED}, polls=5, interrupt_after=2)
    # Execute
    interrupted, _ = reproduce_cluster.run_on_cluster(todo, [], tmp_path, lambda: None, "sqlite:////x.db",
                                                      "http://127.0.0.1:8265", fake)
    # Assert
    assert interrupted and sorted(fake.stopped) == ["a", "b"]
    assert [j.state for j in todo] == ["killed", "killed"]


@pytest.mark.parametrize("env, message", [
    ({"RAY_ADDRESS": ""}, "cluster=remote: RAY_ADDRESS='': the cluster's dashboard"),
    ({"RAY_ADDRESS": "10.0.0.5:6379"}, "RAY_ADDRESS='10.0.0.5:6379'"),
    ({"RAY_ADDRESS": "http://10.0.0.5:8265"}, "which the jobs on http://10.0.0.5:8265 cannot write; use tracking=server"),
])
def test_an_address_or_store_the_jobs_cannot_use_is_one_line_exit_2(env, message, tmp_path):
    # Execute
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "reproduce", "experiment=platform_probe", "cluster=remote",
                        f"runs_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**_env(), "MLFLOW_TRACKING_URI": "", **env})
    # Assert
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}


@pytest.mark.slow
def test_jobs_on_a_real_head_make_the_board(tmp_path):
    """A `dtlab up` head on private ports; two debug configurations as two Ray jobs side by side."""
    # Prepare
    ports = {k: free_port() for k in ("port", "dashboard_port", "metrics_export_port", "dashboard_agent_listen_port",
                                      "ray_client_server_port")}
    short = tempfile.mkdtemp(prefix="dtl-", dir="/tmp")  # Ray's socket paths must stay under 107 characters
    env = {**_env(), "RAY_TMPDIR": short, "RAY_AUTH_MODE": "token"}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, env=env, text=True,
                              capture_output=True, timeout=600, stdin=subprocess.DEVNULL)

    up = cli("up", *(f"cluster.head.{k}={v}" for k, v in ports.items()), "cluster.head.num_cpus=2")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        env["RAY_ADDRESS"] = f"http://127.0.0.1:{ports['dashboard_port']}"
        # Execute
        r = cli("reproduce", "experiment=platform_probe,mozart", "--flavour", "debug", "--results",
                str(tmp_path / "RESULTS.md"), "cluster=remote", f"runs_dir={tmp_path}")
    finally:
        cli("down", "--force")
        shutil.rmtree(short, ignore_errors=True)
    # Assert: both ran as jobs, the board has both, each job's log was fetched
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "submitting 2 Ray job(s)" in r.stdout
    text = (tmp_path / "RESULTS.md").read_text()
    assert "[platform_probe](#platform_probe)" in text and "[mozart](#mozart)" in text
    logs = tmp_path / "reproduce" / "logs"
    assert {p.name for p in logs.iterdir()} == {"platform_probe.log", "mozart.log"}
