"""Where a run came from and whether its driver still lives: written once, read by the scoreboard,
compare and the stale-run check.

Every parent run carries the code version (git commit, dirty flag), the command line and its
overrides and the dtlab version (:func:`reproducibility_tags`). Every run the Tracker creates
carries its driver (host, PID and the PID's start time, so a recycled PID is not taken for the
driver): a run found RUNNING whose driver is gone was left by a SIGKILL or a crash the driver could
not report, and :func:`mark_stale` ends it FAILED ("driver gone").
"""
from __future__ import annotations

import functools
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

DRIVER_TAG = "dtlab.driver"
ROOT = Path(__file__).resolve().parents[2]


def _proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        if not Path("/proc/self/stat").exists():  # no procfs: existence only
            try:
                os.kill(pid, 0)
                return "?"
            except ProcessLookupError:
                return None
            except PermissionError:
                return "?"
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 (starttime); the name may hold spaces


@functools.lru_cache(maxsize=1)
def driver_id() -> str:
    """``host:pid:start`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{_proc_start(os.getpid()) or '?'}"


def driver_alive(tag: str) -> bool | None:
    """True/False for a driver on this host; None when it ran elsewhere (cannot be told here)."""
    try:
        host, pid, start = tag.rsplit(":", 2)
        pid_i = int(pid)
    except ValueError:
        return None
    if host != socket.gethostname():
        return None
    now = _proc_start(pid_i)
    return now is not None and (start in ("?", now) or now == "?")


@functools.lru_cache(maxsize=1)
def git_state() -> dict[str, str]:
    """Commit and dirty flag of the checkout the code runs from ("unknown" outside a git checkout)."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git.commit": "unknown", "git.dirty": "unknown"}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git.commit": commit, "git.dirty": "unknown" if status is None else str(bool(status)).lower()}


def dtlab_version() -> str:
    try:
        from importlib.metadata import version

        return version("dtlab")
    except Exception:  # noqa: BLE001 - not installed: running from the tree
        return "unknown"


def reproducibility_tags(overrides: list[str] | None = None) -> dict[str, str]:
    """The tags every parent run carries: code version, command line, overrides, dtlab version."""
    return {**git_state(), "dtlab.version": dtlab_version(),
            "dtlab.command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])[:5000],
            "dtlab.overrides": " ".join(overrides or [])[:5000]}


def mark_stale(client, experiment_ids: list[str] | None = None) -> list[str]:
    """End FAILED every RUNNING run whose driver (on this host) is gone; the ids ended.

    Runs from another host, or from before drivers were recorded, are left alone: whether their
    driver lives cannot be told from here.
    """
    if experiment_ids is None:
        experiment_ids = [e.experiment_id for e in client.search_experiments()]
    ended = []
    for i in range(0, len(experiment_ids), 100):
        runs = client.search_runs(experiment_ids[i:i + 100], filter_string="attributes.status = 'RUNNING'",
                                  max_results=5000)
        for r in runs:
            tag = r.data.tags.get(DRIVER_TAG)
            if tag and driver_alive(tag) is False:
                host, pid, _ = tag.rsplit(":", 2)
                client.set_tag(r.info.run_id, "error", f"driver gone: process {pid} on {host} ended "
                               "without ending this run (SIGKILL, out of memory or a crash)")
                client.set_terminated(r.info.run_id, status="FAILED")
                ended.append(r.info.run_id)
    return ended
