"""Ending the MLflow runs an interrupted multirun or sweep leaves open (Ctrl-C, SIGTERM, SIGHUP).

Jobs that ran as Ray tasks die with their worker and cannot end their own runs, so the driver
ends every RUNNING run of the interrupted jobs, and every run nested under them, KILLED with the
reason. (A SIGKILLed driver cannot; `mark_stale` ends those runs FAILED at the next run or `dtlab gc`.)
"""
from __future__ import annotations

from typing import Callable, Iterable


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
