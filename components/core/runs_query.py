"""The one query for "the latest run of each experiment", shared by compare, plots, reports and the
scoreboard, and its history form (every ended parent, newest first).

dtlab's parent runs carry ``dtlab.kind=parent``; a run still RUNNING (in progress, or left by a
driver that died) is never "latest": the newest ended parent is, and the skipped ones are named.
A robustness run's parent carries ``robustness=<perturbation>`` (``tuned`` for the base one).
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


@dataclass
class History:
    experiment: Any              # mlflow Experiment
    runs: list[Any]              # its ended parent runs, newest first
    skipped: list[Any] = field(default_factory=list)   # parents not ended (RUNNING, SCHEDULED)


def robustness_label(run) -> str:
    """The perturbation a parent ran under: its ``robustness`` tag, else a ``robustness=NAME``
    override in ``dtlab.overrides``; "" for a plain run."""
    tags = run.data.tags
    if tags.get("robustness"):
        return tags["robustness"]
    for ov in (tags.get("dtlab.overrides") or "").split():
        key, _, value = ov.lstrip("+").partition("=")
        if key == "robustness" and value not in ("", "null"):
            return value
    return ""


def off_board(run, flavour: str = "full") -> str:
    """Why a parent run cannot be a scoreboard row ("" when it can): a debug run, an ``only=`` subset,
    a sweep trial, or (outside robustness, whose perturbations are overrides) ``experiment.*``
    overrides. Reads ``dtlab.flavour`` / ``dtlab.subset``, else the older ``debug`` / ``dtlab.overrides``.
    ``flavour="debug"``: the same question for a board of debug runs (`dtlab reproduce --flavour debug`)."""
    tags = run.data.tags
    ran = tags.get("dtlab.flavour") or ("debug" if str(tags.get("debug", "")).lower() == "true" else "full")
    if ran != flavour:
        return ran
    pairs = [o.lstrip("+~").partition("=") for o in (tags.get("dtlab.overrides") or "").split()]
    subset = tags.get("dtlab.subset") or next((v for k, _, v in pairs if k == "only" and v not in ("", "null")), "")
    if subset:
        return f"only={subset.strip('[]')}"
    if tags.get("dtlab.sweep_run_id") or any(k == "hparams_search" and v not in ("", "null") for k, _, v in pairs):
        return "sweep trial"
    changed = [f"{k}={v}" for k, _, v in pairs if k.startswith("experiment.")]
    if changed and robustness_label(run) in ("", "tuned"):
        return "overrides " + " ".join(changed)
    return ""


def latest_parents(client, names: list[str] | None = None, statuses: tuple[str, ...] = ENDED,
                   extra_filter: str = "", search_depth: int = 50) -> list[Latest]:
    """For each named experiment (all, when ``names`` is empty) the newest parent run whose status
    is in ``statuses``; ValueError naming the experiments that have no runs at all."""
    out = []
    for h in parent_history(client, names, statuses, extra_filter, search_depth, stop_at_first=True):
        if h.runs:
            out.append(Latest(h.experiment, h.runs[0], h.skipped))
    return out


def parent_history(client, names: list[str] | None = None, statuses: tuple[str, ...] = ENDED,
                   extra_filter: str = "", search_depth: int = 200, stop_at_first: bool = False) -> list[History]:
    """For each named experiment (all, when ``names`` is empty) its parent runs whose status is in
    ``statuses``, newest first (the newest ``search_depth`` parents are read); the parents not
    ended that are newer than the newest ended one are named in ``skipped``."""
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
        ended, skipped = [], []
        for r in runs:
            if r.info.status in statuses:
                ended.append(r)
                if stop_at_first:
                    break
            elif not ended:
                skipped.append(r)
        if ended:
            out.append(History(e, ended, skipped))
    return out
