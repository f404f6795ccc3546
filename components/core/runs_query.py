"""The one query for "the latest run of each experiment", shared by compare, plots and reports.

dtlab's parent runs carry ``dtlab.kind=parent``; a run still RUNNING (in progress, or left by a
driver that died) is never "latest": the newest ended parent is, and the skipped ones are named.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PARENT_FILTER = "tags.`dtlab.kind` = 'parent'"
ENDED = ("FINISHED", "FAILED", "KILLED")


@dataclass
class Latest:
    experiment: Any              # mlflow Experiment
    run: Any                     # the newest ended parent run
    skipped: list[Any] = field(default_factory=list)   # newer parents not ended (RUNNING, SCHEDULED)


def latest_parents(client, names: list[str] | None = None, statuses: tuple[str, ...] = ENDED,
                   extra_filter: str = "", search_depth: int = 50) -> list[Latest]:
    """For each named experiment (all, when ``names`` is empty) the newest parent run whose status
    is in ``statuses``; ValueError naming the experiments that have no runs at all."""
    exps = client.search_experiments()
    if names:
        known = {e.name: e for e in exps}
        missing = [n for n in names if n not in known]
        if missing:
            raise ValueError(f"no runs of experiment(s) {', '.join(missing)}; tracked: {', '.join(sorted(known)) or 'none'}")
        exps = [known[n] for n in names]
    query = PARENT_FILTER + (f" and {extra_filter}" if extra_filter else "")
    out = []
    for e in sorted(exps, key=lambda e: e.name):
        runs = client.search_runs([e.experiment_id], filter_string=query, order_by=["attributes.start_time DESC"],
                                  max_results=search_depth)
        skipped = []
        for r in runs:
            if r.info.status in statuses:
                out.append(Latest(e, r, skipped))
                break
            skipped.append(r)
    return out
