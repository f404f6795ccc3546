"""`dtlab reproduce cluster=remote`: each configuration to run is a Ray job on the cluster, all submitted
at once, so the cluster runs them side by side as its resources allow (issue "One command reproduces
the board"). Each job is the same `dtlab run ... cluster=remote` the local mode starts as a child
process, writing to the same tracking store; reproduce then writes RESULTS.md from that store.

Where: ``RAY_ADDRESS`` names the cluster's job API, its dashboard (``http://HEAD:8265``), as for
`ray job submit`. A job's driver runs on the head, in this checkout (``cd ROOT``) with this
interpreter: the head must see the checkout at the same path (this machine, a shared filesystem, or
an image built from the same commit). The tracking store must be one every job can write: an MLflow
server (``tracking=server``), or a SQLite file only when the head is this machine.

Ctrl-C stops every job still running (their runs end KILLED) and the next call resumes. A job's
output is fetched into RUNS_DIR/reproduce/logs/ when it ends. Peak memory is not sampled (the
processes are the cluster's); the wall time is the job's, from start to end.
"""
from __future__ import annotations

import os
import shlex
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from components.core.provenance import ROOT
from pipelines.preflight import _die

LOOPBACK = ("127.0.0.1", "localhost", "::1")
POLL_S = 1.0


def jobs_address() -> str:
    """The cluster's job API from ``RAY_ADDRESS``; exit 2 when it is not an http(s) address."""
    address = os.environ.get("RAY_ADDRESS", "")
    if urlparse(address).scheme not in ("http", "https"):
        _die(f"cluster=remote: RAY_ADDRESS={address!r}: the cluster's dashboard, where Ray's job API listens "
             "(e.g. http://HEAD:8265), as for `ray job submit`")
    return address


def check_store(uri: str, address: str) -> None:
    """Exit 2 when the cluster's jobs cannot write the tracking store: a SQLite file on another machine."""
    if uri.startswith("sqlite:") and urlparse(address).hostname not in LOOPBACK:
        _die(f"tracking.uri={uri!r}: a SQLite file on this machine, which the jobs on {address} cannot write; "
             "use tracking=server (an MLflow server both can reach)")


def machine(address: str, here: str) -> str:
    """What RESULTS.md names as the machine: this one's description for a head on this machine."""
    return here if urlparse(address).hostname in LOOPBACK else f"Ray cluster at {address}"


def entrypoint(overrides: list[str]) -> str:
    """The job's command: `dtlab run` with the job's overrides, in this checkout, with this interpreter."""
    cmd = [sys.executable, "-m", "pipelines.cli", "run", *overrides]
    return f"cd {shlex.quote(str(ROOT))} && exec " + " ".join(map(shlex.quote, cmd))


def run_on_cluster(todo: list, passthrough: list[str], log_dir: Path, tick, uri: str, address: str,
                   client=None) -> tuple[bool, list[str]]:
    """Submit every job, follow them until each ends; (interrupted, keys of the jobs that failed).
    ``client``: a JobSubmissionClient (tests pass one; default: one for ``address``)."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = client or JobSubmissionClient(address)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {"MLFLOW_TRACKING_URI": uri, "COLUMNS": "160"}
    ids: dict[str, Any] = {}
    for job in todo:
        sid = f"dtlab-reproduce-{job.key.replace('/', '--')}-{uuid.uuid4().hex[:6]}"
        ids[sid] = job
        job.started = time.time()   # the run this job makes starts after this (reproduce._record)
        client.submit_job(entrypoint=entrypoint([*job.overrides, *passthrough]), submission_id=sid,
                          runtime_env={"env_vars": env}, metadata={"dtlab.reproduce": job.key})
        job.state, job.peak_mb = "submitted", None
    tick()
    done = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    failed: list[str] = []
    try:
        while any(j.state in ("submitted", "running") for j in ids.values()):
            for sid, job in ids.items():
                if job.state not in ("submitted", "running"):
                    continue
                info = client.get_job_info(sid)
                if info.status == JobStatus.RUNNING and job.state == "submitted":
                    job.state, job.started = "running", (info.start_time or time.time() * 1000) / 1000
                if info.status in done:
                    _finish(client, sid, job, info, log_dir)
                    if job.state != "done":
                        failed.append(job.key)
            tick()
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        for sid, job in ids.items():
            if job.state in ("submitted", "running"):
                client.stop_job(sid)   # SIGTERM to the driver: its runs end KILLED
        _wait_stopped(client, ids, log_dir)
        return True, failed
    return False, failed


def _finish(client, sid: str, job, info, log_dir: Path) -> None:
    from ray.job_submission import JobStatus

    start, end = info.start_time or 0, info.end_time or 0
    job.wall_s = (end - start) / 1000 if start and end else time.time() - job.started
    job.returncode = 0 if info.status == JobStatus.SUCCEEDED else 1
    job.state = {JobStatus.SUCCEEDED: "done", JobStatus.STOPPED: "killed"}.get(info.status, "failed")
    try:
        logs = client.get_job_logs(sid)
    except Exception as e:  # noqa: BLE001 - the log is a nicety; the status is the answer
        logs = f"(no log: {type(e).__name__}: {e})\n"
    (log_dir / f"{job.key.replace('/', '--')}.log").write_text(
        f"# Ray job {sid}: {info.status} {info.message or ''}\n{logs}")


def _wait_stopped(client, ids: dict, log_dir: Path, timeout_s: float = 120.0) -> None:
    from ray.job_submission import JobStatus

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        busy = False
        for sid, job in ids.items():
            if job.state not in ("submitted", "running"):
                continue
            info = client.get_job_info(sid)
            if info.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
                _finish(client, sid, job, info, log_dir)
            else:
                busy = True
        if not busy:
            return
        time.sleep(POLL_S)
