"""Helpers shared by the infra tests: free loopback ports, service binaries, dtlab subprocess runs.

These tests start real services (PostgreSQL, MLflow server, Prometheus, Ray nodes, Chromium) on
127.0.0.1 and always stop them. A test skips only when a service binary is truly absent (with the
reason and the fix: infra/install_services.sh); it never passes silently.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
BIN = Path(sys.executable).parent           # the venv's bin: dtlab, mlflow, ray


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_port_closed(port: int, timeout: float = 30.0) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if not port_open(port):
            return True
        time.sleep(0.25)
    return False


def need_binary(candidates: list[str], package: str) -> str:
    """Path of the first existing binary, else skip naming the Debian package and the fix."""
    for c in candidates:
        p = c if os.path.isabs(c) else shutil.which(c)
        if p and os.access(p, os.X_OK):
            return p
    pytest.skip(f"{package} is not installed ({' / '.join(candidates)} absent); run infra/install_services.sh")


def pg_bin() -> str:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return str(need_binary([str(p) for p in found] or ["/usr/lib/postgresql/15/bin/initdb"], "postgresql"))


def dtlab_env(**extra: str) -> dict[str, str]:
    """Environment for a dtlab subprocess: no inherited tracking/cluster overrides; Ray clients
    (``ray job submit``, the state API) authenticate with the token, as dtlab's clusters require."""
    env = os.environ.copy()
    for k in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS", "DTLAB_MLFLOW_SERVER", "DTLAB_RUNS_DIR"):
        env.pop(k, None)
    env["RAY_AUTH_MODE"] = "token"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run_logged(cmd: list[str], log: Path, env: dict | None = None, timeout: float = 600,
               check: bool = True) -> subprocess.CompletedProcess:
    """Run a command with output to ``log``; on failure the assertion shows the log's tail."""
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    if check and proc.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {proc.returncode}; log {log}:\n{tail}")
    return proc
