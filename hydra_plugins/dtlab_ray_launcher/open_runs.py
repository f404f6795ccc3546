"""Ending the MLflow runs an interrupted multirun or sweep leaves open (Ctrl-C, SIGTERM, SIGHUP).

Jobs that ran as Ray tasks die with their worker and cannot end their own runs, so the driver
ends every RUNNING run of the interrupted jobs, and every run nested under them, KILLED with the
reason. (A SIGKILLed driver cannot; `mark_stale` ends those runs FAILED at the next run or `dtlab gc`.)

It does so only once the cancelled jobs' processes have gone (:func:`wait_gone`): Ray answers a
forced cancel before the worker has exited, and a job still running in that window can create a
run after the driver looked.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable


def _running(tag: str) -> bool:
    """The process named by a ``host:pid:start`` driver tag still runs on this host (a zombie has
    ended; a process on another host cannot be told from here and counts as gone)."""
    from components.core.provenance import driver_alive

    if not driver_alive(tag):
        return False
    try:
        state = Path(f"/proc/{int(tag.rsplit(':', 2)[1])}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return True   # no procfs: driver_alive's word
    return state not in ("Z", "X")


def wait_gone(tags: Iterable[str], timeout: float = 30.0) -> list[str]:
    """Wait until no process named by ``tags`` (driver tags) runs; the tags still running at ``timeout``."""
    left = [t for t in dict.fromkeys(tags) if t]
    deadline = time.monotonic() + timeout
    while True:
        left = [t for t in left if _running(t)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def end_open_runs(client, experiment_ids: Iterable[str], is_root: Callable, reason: str,
                  status: str = "KILLED") -> list[str]:
    """End ``status`` every RUNNING run for which ``is_root(run)`` holds, and every RUNNING run
    nested under one (at any depth); the ids ended."""
    ids = list(dict.fromkeys(experiment_ids))
    if not ids:
        return []
    running = client.search_runs(ids, filter_string="attributes.status = 'RUNNING'", max_results=5000)
    parent = {r.info.run_id: r.data.tags.get("mlflow.parentRunId") for r in running}
    roots = {r.info.run_id for r in running if is_root(r)}

    def under(rid: str | None, depth: int = 0) -> bool:
        while rid is not None and depth < 32:
            if rid in roots:
                return True
            rid, depth = parent.get(rid), depth + 1
        return False

    ended = []
    for r in running:
        rid = r.info.run_id
        if rid in roots or under(parent.get(rid)):
            client.set_tag(rid, "error", reason)
            client.set_terminated(rid, status=status)
            ended.append(rid)
    return ended
