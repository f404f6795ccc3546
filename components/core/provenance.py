"""Where a run came from and whether its driver still lives: written once, read by the scoreboard,
compare and the stale-run check.

Every parent run carries the code version (git commit, dirty flag), the command that runs the same
job again (:func:`replay_command`), its overrides and the dtlab version (:func:`reproducibility_tags`);
a multirun job's parent is named by its overrides (:func:`parent_run_name`). Every run the Tracker creates
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


# set by the Optuna sweeper to file a trial's parent under its sweep run: bookkeeping, not the job
SWEEP_KEYS = ("sweep_run_id", "sweep_trial")


def _key(override: str) -> str:
    return override.lstrip("+~").partition("=")[0]


def replay_command(overrides: list[str]) -> str:
    """``dtlab run <overrides>``, shell-quoted: pasted into a shell at the recorded commit, it runs
    the same job. ``overrides`` are the job's own (Hydra's task overrides: for a multirun job the
    resolved ones, ``seed=1`` and not ``seed=0,1``). The sweeper's bookkeeping is dropped, and a job
    that selects an ``hparams_search`` (whose YAML sets ``hydra.mode: MULTIRUN``) gets
    ``hydra.mode=RUN``: the trial again, not the sweep."""
    keep = [o for o in overrides if _key(o) not in SWEEP_KEYS]
    if any(_key(o) == "hparams_search" and o.partition("=")[2] not in ("", "null") for o in keep):
        keep.append("hydra.mode=RUN")
    return shlex.join(["dtlab", "run", *keep])


def reproducibility_tags(overrides: list[str] | None = None) -> dict[str, str]:
    """The tags every parent run carries: code version, the command that replays the job, its
    overrides, dtlab version. Without overrides (a DAG run called from Python, not through Hydra)
    the command is this process's command line, the only one there is."""
    command = (replay_command(overrides) if overrides is not None
               else shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    return {**git_state(), "dtlab.version": dtlab_version(), "dtlab.command": command[:5000],
            "dtlab.overrides": " ".join(overrides or [])[:5000]}


_NAME_SKIP = ("experiment", "debug", "hparams_search", *SWEEP_KEYS)   # in the name already, or not the job's own


def job_label(overrides: list[str], width: int = 80) -> str:
    """A multirun job told apart from its siblings by its overrides: ``step=0.2504,seeds=[1]``.
    Keys are cut to their last part (more parts where two would read alike), floats to 4
    significant digits, the whole to ``width`` characters."""
    items = [(_key(o), o.partition("=")[2]) for o in overrides if "=" in o and _key(o) not in _NAME_SKIP]
    parts = [k.split(".") for k, _ in items]

    def short(i: int) -> str:
        for n in range(1, len(parts[i]) + 1):
            tail = parts[i][-n:]
            if sum(p[-n:] == tail for p in parts) == 1:
                return ".".join(tail)
        return ".".join(parts[i])

    def value(v: str) -> str:
        if v in ("True", "False"):   # a multirun's sweeper writes booleans back capitalised
            return v.lower()
        try:
            f = float(v)
        except ValueError:
            return v
        return f"{f:.4g}" if any(c in v for c in ".eE") else v

    text = ",".join(f"{short(i)}={value(v)}" for i, (_, v) in enumerate(items))
    return text if len(text) <= width else text[:width - 1] + "…"


def parent_run_name(experiment: str, cfg: dict, stamp: str) -> str:
    """A single run: ``NAME[-debug]-<stamp>``. A multirun job (``cfg["_job"]`` set): ``NAME[-debug] ·
    <its overrides>`` (a sweep trial ``NAME · #7 <its params>``), so a multirun's parents can be
    told apart in the MLflow UI."""
    base = f"{experiment}{'-debug' if cfg.get('debug') else ''}"
    if cfg.get("_job") in (None, ""):
        return f"{base}-{stamp}"
    label = job_label(list(cfg.get("_overrides") or []))
    trial = f"#{cfg['sweep_trial']} " if cfg.get("sweep_trial") is not None else ""
    return f"{base} · {trial}{label or 'job ' + str(cfg['_job'])}".rstrip()


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
