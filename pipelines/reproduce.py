"""`dtlab reproduce`: every experiment's full configuration into one store, skipping what is current.

An experiment is current when its latest FINISHED full run in the store (full variant set, no
overrides) came from the same inputs as this checkout's: its resolved config, the source of every
components/ module its techniques and prepare steps import, and dtlab's version (pipelines.inputs).
So an edit re-runs exactly the experiments it touches, like `dvc repro`. The experiments run one
after another, each as its own `dtlab run` process (its output in RUNS_DIR/reproduce/logs/), under
one progress view with an ETA from each experiment's last wall time; Ctrl-C stops the running one
cleanly (its runs KILLED) and the next call resumes. Before the runs, one prepare pass builds what
every experiment's own configuration lacks in the shared cache (:func:`board_prepare`), so a cold
board's prepare steps share the cores; each run's wall is then measured with a warm cache. Then RESULTS.md is written from the store, the
same content goes to RUNS_DIR/reports/scoreboard.html and onto a `scoreboard` run in MLflow.

    dtlab reproduce                                  every experiment (full flavour) + RESULTS.md at the root
    dtlab reproduce experiment=duo,fal               a chosen set; --family training: one family
    dtlab reproduce --dry-run                        what would run and why (the files that changed)
    dtlab reproduce --force                          run even what is current
    dtlab reproduce --robustness                     also each experiment's declared perturbations
    dtlab reproduce --robustness=P1,P2               only these perturbations (of every chosen experiment that declares them)
    dtlab reproduce --check [RESULTS.md]             is the file current for this checkout? (exit 1: stale)
    dtlab reproduce --flavour debug                  the tiny debug configurations (tests the mechanism;
                                                     RESULTS.md then goes to RUNS_DIR, marked DEBUG)
    dtlab reproduce --flavour paper                  the papers' sizes of the experiments with a paper block,
                                                     on a GPU node (README "On GPUs"); RESULTS.md to RUNS_DIR
    dtlab reproduce --results PATH                   write RESULTS.md there instead (what it carries: PATH's own file)
    dtlab reproduce --results PATH --from RESULTS.md carry from the committed board, e.g. to render it elsewhere
    dtlab reproduce cluster=remote tracking=server   each one a Ray job on the cluster (RAY_ADDRESS: its dashboard)

Bad input (an unknown experiment or family, --robustness on an experiment without a robustness:
block) is one line and exit 2, before anything runs.

On a Ray cluster (``cluster=remote``, ``RAY_ADDRESS=http://HEAD:8265``) each configuration to run is a
Ray job, all submitted at once, so the cluster runs them side by side (pipelines/reproduce_cluster.py).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.core.provenance import ROOT
from pipelines.flavours import FLAVOURS
from pipelines.preflight import _die

USAGE = __doc__.split("\n\n", 1)[1]
_FLAGS = ("--force", "--dry-run", "--robustness")


@dataclass
class Job:
    """One configuration to bring up to date: an experiment's own, or one of its perturbations."""
    experiment: str
    label: str                     # "" for the experiment's configuration; else the perturbation
    overrides: list[str]           # what `dtlab run` gets
    inputs: Any                    # pipelines.inputs.Inputs of this checkout
    latest: Any = None             # its latest finished run in the store (this flavour, same kind)
    why: list[str] = field(default_factory=list)   # why it runs; [] = current
    last_wall_s: float | None = None
    state: str = "queued"
    started: float = 0.0
    wall_s: float | None = None
    peak_mb: float | None = None
    run_id: str = ""
    returncode: int | None = None
    note: str = ""                 # e.g. variants whose own seeds a seed perturbation cannot move
    prepare_s: float | None = None  # its prepare pass (`dtlab prepare`), before the run and not in wall_s
    prepare_built: list[str] = field(default_factory=list)   # what that pass built (empty: the cache was warm)
    prepare_pass: str = ""         # the board's shared pass that built for it (its id), "" for its own pass
    prepare_shared: list[str] = field(default_factory=list)  # the experiments that shared that pass
    prepare_compute_s: float | None = None   # in that pass, the compute seconds of the steps built for it

    @property
    def key(self) -> str:
        return self.experiment + (f"/{self.label}" if self.label else "")


def parse_args(args: list[str]) -> dict[str, Any]:
    """Flags, ``experiment=a,b``, ``--family F`` and config overrides (runs_dir=, tracking=, ...);
    bad input exits 2."""
    opts: dict[str, Any] = {"experiments": [], "family": None, "force": False, "dry_run": False, "robustness": False,
                            "perturbations": [], "check": None, "flavour": "full", "results": None, "from": None, "overrides": []}
    i = 0
    while i < len(args):
        a = args[i]
        flag, eq, inline = a.partition("=") if a.startswith("--") else (a, "", "")
        if a in _FLAGS:
            opts[a[2:].replace("-", "_")] = True
        elif flag == "--robustness" and eq:
            opts["robustness"], opts["perturbations"] = True, [p for p in inline.split(",") if p]
            if not opts["perturbations"]:
                _die("--robustness=: one or more perturbation names (e.g. --robustness=other_seeds)")
        elif flag in ("--family", "--flavour", "--results", "--from"):
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            i += 0 if eq else 1
            if not value:
                _die(f"{flag}: a value (e.g. {flag} NAME)")
            opts[flag[2:]] = value
        elif flag == "--check":
            nxt = args[i + 1] if i + 1 < len(args) else ""
            if inline:
                opts["check"] = inline
            elif nxt and not nxt.startswith("-") and "=" not in nxt:
                opts["check"], i = nxt, i + 1
            else:
                opts["check"] = str(ROOT / "RESULTS.md")
        elif a.startswith("experiment="):
            opts["experiments"] += [e for e in a.partition("=")[2].strip("[]").split(",") if e]
        elif "=" in a and not a.startswith("-"):
            opts["overrides"].append(a)
        else:
            _die(f"reproduce: unknown argument {a!r}; see dtlab reproduce --help")
        i += 1
    if opts["flavour"] not in FLAVOURS:
        _die(f"--flavour={opts['flavour']!r}: one of {', '.join(FLAVOURS)}")
    if opts["from"] is not None:
        from pipelines.results_md import read_inputs

        try:
            board_flavour, _ = read_inputs(Path(opts["from"]).read_text())
        except (OSError, ValueError) as e:
            _die(f"--from={opts['from']!r}: a RESULTS.md written by dtlab reproduce ({e})")
        if board_flavour != opts["flavour"]:
            _die(f"--from={opts['from']!r}: a {board_flavour} board; --flavour {opts['flavour']} carries only from a "
                 f"{opts['flavour']} one")
    return opts


def select(opts: dict[str, Any]) -> list[str]:
    """The experiments to bring up to date (exit 2 on an unknown name or family, a missing
    ``robustness:`` block with --robustness, or ``cluster.address``)."""
    from pipelines.config import experiment_names, raw_experiments

    names = experiment_names()
    for ov in opts["overrides"]:
        key, _, value = ov.lstrip("+~").partition("=")
        if key == "cluster.address":
            _die(f"{key}={value!r}: reproduce finds the cluster by RAY_ADDRESS (cluster=remote: its dashboard, "
                 "http://HEAD:8265, where Ray's job API listens)")
        if key in ("debug", "flavour", "only", "robustness") or key.startswith("experiment.") or key == "hparams_search":
            _die(f"{key}={value!r}: reproduce runs each experiment's own configuration; allowed: runs_dir=, "
                 "tracking=, tracking.*, cluster.* (use --flavour debug|paper for another flavour)")
    unknown = [e for e in opts["experiments"] if e not in names]
    if unknown:
        _die(f"experiment={unknown[0]!r}: one of " + ", ".join(names))
    raw = raw_experiments()
    chosen = opts["experiments"] or names
    if opts["flavour"] == "paper":
        with_paper = [n for n in names if raw[n].get("paper")]
        bare = [n for n in opts["experiments"] if n not in with_paper]
        if bare:
            _die(f"--flavour paper: experiment {bare[0]!r} has no paper block; the ones that do: " + ", ".join(with_paper))
        chosen = opts["experiments"] or with_paper
    if opts["family"]:
        families = sorted({str(r.get("family", "")) for r in raw.values()})
        if opts["family"] not in families:
            _die(f"--family={opts['family']!r}: one of " + ", ".join(families))
        chosen = [n for n in chosen if raw[n].get("family") == opts["family"]]
        if not chosen:
            _die(f"--family={opts['family']!r}: none of experiment={','.join(opts['experiments'])} is in it")
    if opts["robustness"]:
        bare = [n for n in chosen if not raw[n].get("robustness")]
        if bare:
            _die(f"--robustness: experiment {bare[0]!r} declares no robustness: block (conf/experiment/{bare[0]}.yaml)")
        declared = sorted({p for n in chosen for p in raw[n]["robustness"]})
        unknown = [p for p in opts["perturbations"] if p not in declared]
        if unknown:
            _die(f"--robustness={unknown[0]!r}: one of " + ", ".join(declared) + f" (declared by {', '.join(chosen)})")
    return chosen


def plan_jobs(experiments: list[str], opts: dict[str, Any]) -> list[Job]:
    """One job per experiment (and per declared perturbation with --robustness), with this checkout's
    inputs; ConfigError on a config that does not validate."""
    from pipelines import config
    from pipelines.inputs import of_config

    from pipelines.flavours import flavour_overrides

    flavour = flavour_overrides(opts["flavour"])
    jobs = []
    for exp in experiments:
        own = [f"experiment={exp}", *flavour]
        jobs.append(Job(exp, "", own, of_config(config.compose(own))))
        if opts["robustness"]:
            from pipelines.robustness import plan_with_notes

            _, perturbed, _, unmoved = plan_with_notes(own)
            for label, job in perturbed[1:]:   # [0] is the tuned configuration: the experiment's own run
                if opts.get("perturbations") and label not in opts["perturbations"]:
                    continue
                note = f"seeds not moved: {', '.join(unmoved[label])}" if unmoved.get(label) else ""
                jobs.append(Job(exp, label, job, of_config(config.compose(job)), note=note))
    return jobs


def _matches(run, job: Job, flavour: str) -> bool:
    """Whether a parent run is a run of this job's kind (its flavour, full variant set, its label)."""
    from components.core.runs_query import off_board, robustness_label

    label = robustness_label(run)
    same = label in ("", "tuned") if not job.label else label == job.label
    return same and not off_board(run, flavour)


def judge(jobs: list[Job], client, flavour: str, force: bool, recorded: dict | None = None,
          rekey_runs: bool = False) -> None:
    """Fill each job's latest run, last wall time and why it runs ([] = current). ``recorded``: the
    inputs the RESULTS.md being written records ({experiment: inputs}); an experiment with no run in
    the store is current when they are this checkout's (RESULTS.md carries its section: a fresh clone
    re-runs what changed, not the whole board). ``rekey_runs``: a current run recorded with the
    legacy config hash gets this checkout's (:func:`pipelines.inputs.rekey`)."""
    from components.core.runs_query import parent_history
    from pipelines.inputs import ARTIFACT, HASH_TAG, Inputs, changed, rekey, unrecorded
    from pipelines.results_md import run_wall, recorded_changes
    from pipelines.scoreboard import _Artifacts

    known = {e.name for e in client.search_experiments()}
    names = sorted({j.experiment for j in jobs} & known)
    hist = {h.experiment.name: h.runs for h in parent_history(client, names, statuses=("FINISHED",))} if names else {}
    art = _Artifacts(client)
    for job in jobs:
        runs = [r for r in hist.get(job.experiment, []) if _matches(r, job, flavour)]
        job.latest = runs[0] if runs else None
        job.last_wall_s = run_wall(runs[0]) if runs else None
        if job.latest is None:
            rec = (recorded or {}).get(job.experiment) if not job.label else None
            job.why = ["never run"] if rec is None else recorded_changes(rec, job.inputs)   # what changed since
            if not job.why:
                job.note = "recorded in RESULTS.md; the run is not in this store"
        elif job.latest.data.tags.get(HASH_TAG) == job.inputs.digest:
            job.why = []
        elif not job.latest.data.tags.get(HASH_TAG):
            job.why = [unrecorded(job.latest.data.tags)]
        else:
            rec = art.json(job.latest.info.run_id, ARTIFACT)
            job.why = changed(Inputs.from_json(rec) if rec else Inputs(job.latest.data.tags[HASH_TAG], "", ""), job.inputs)
            if not job.why and rekey_runs and rekey(client, job.latest, rec, job.inputs):
                job.note = "re-keyed: recorded under the legacy config hash, its inputs agree with this checkout's"
        if force and not job.why:
            job.why = ["--force"]
        job.state = "queued" if job.why else "current"
    # a perturbation whose tuned run is only recorded in RESULTS.md (current, carried) is judged against
    # that record's statuses when the file is written (results_md._merge_robustness): the tuned run is not re-run


# ------------------------------------------------------------------------------------------ progress
def _eta(jobs: list[Job], now: float, parallel: bool = False) -> tuple[float, bool]:
    """Seconds left (from each job's last wall time) and whether every remaining job has one; the sum
    one after another, the longest with ``parallel`` (a cluster runs them side by side)."""
    lefts, known = [], True
    for j in jobs:
        if j.state in ("queued", "submitted", "preparing"):
            known &= j.last_wall_s is not None
            lefts.append(j.last_wall_s or 0.0)
        elif j.state == "running":
            known &= j.last_wall_s is not None
            lefts.append(max(0.0, (j.last_wall_s or 0.0) - (now - j.started)))
    return (max(lefts, default=0.0) if parallel else sum(lefts)), known


def render(jobs: list[Job], now: float, parallel: bool = False):
    """The progress view: every job, its state, last and current wall time, and the ETA."""
    from rich.table import Table

    from pipelines.results_md import duration

    left, known = _eta(jobs, now, parallel)
    todo = sum(j.state in ("queued", "submitted", "preparing", "running") for j in jobs)
    t = Table(title=f"dtlab reproduce: {todo} to run, {sum(j.state == 'current' for j in jobs)} current · ETA "
                    f"{'≥ ' if not known else ''}{duration(left)}", title_justify="left")
    for c in ("experiment", "state", "last wall", "wall", "why"):
        t.add_column(c, overflow="fold")
    style = {"current": "dim", "queued": "", "submitted": "", "preparing": "yellow", "running": "yellow", "done": "green", "failed": "red", "killed": "red"}
    for j in jobs:
        wall = now - j.started if j.state in ("preparing", "running") else j.wall_s
        why = ", ".join(j.why[:3]) + (f" (+{len(j.why) - 3} more)" if len(j.why) > 3 else "")
        t.add_row(j.key, f"[{style.get(j.state, '')}]{j.state}[/]" if style.get(j.state) else j.state,
                  duration(j.last_wall_s), duration(wall) if wall is not None else "–", why)
    return t


def _tree_rss_mb(proc) -> float:
    """RSS of a process and its descendants (MB); 0 when it is gone."""
    import psutil

    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2 ** 20


def job_command(job: Job, passthrough: list[str]) -> list[str]:
    """The child's command line: `dtlab run` with the job's overrides."""
    return [sys.executable, "-m", "pipelines.cli", "run", *job.overrides, *passthrough]


STOP_GRACE_S = 120.0


def stop_child(child: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """End a running `dtlab run` child as Ctrl-C ends a run (its MLflow runs KILLED, with the reason) and
    wait for it; SIGKILL only after ``grace_s``. It gets SIGTERM, which its DAG takes like Ctrl-C, not
    SIGINT: a reproduce started in the background by a non-interactive shell (`... &`, nohup) runs with
    SIGINT ignored, its children inherit that across exec, and a SIGINT would leave the child training
    on. A second Ctrl-C during the grace period does not cut the wait short: the child is never left
    running behind a reproduce that has exited."""
    child.send_signal(signal.SIGTERM)   # its own session: the terminal's Ctrl-C reached us only
    deadline = time.monotonic() + grace_s
    while True:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
            return
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            return
        except KeyboardInterrupt:
            continue


def prepare_command(job: Job, passthrough: list[str]) -> list[str]:
    """The prepare pass's command line: `dtlab prepare` with the job's overrides (one JSON line out)."""
    return [sys.executable, "-m", "pipelines.cli", "prepare", *job.overrides, *passthrough, "--json"]


def _child(cmd: list[str], log: Path, job: Job | None, tick, sample: bool) -> tuple[int, float]:
    """Run ``cmd`` in a child process (output to ``log``); (exit code, wall seconds). ``sample``: keep the
    peak memory of its process tree in ``job.peak_mb``. Ctrl-C is passed on to the child
    (:func:`stop_child`) and raised again once it has ended."""
    import psutil

    started = time.time()
    with open(log, "w") as out:
        child = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                 env={**os.environ, "COLUMNS": "160"})
        proc = psutil.Process(child.pid)
        try:
            while child.poll() is None:
                if sample:
                    job.peak_mb = max(job.peak_mb or 0.0, _tree_rss_mb(proc))
                tick()
                time.sleep(0.5)
        except KeyboardInterrupt:
            stop_child(child)
            if job is not None:
                job.returncode = child.returncode
            raise
    return child.returncode, time.time() - started


def run_job(job: Job, passthrough: list[str], log_dir: Path, tick) -> int:
    """Run one job in two child processes (output to its logs); its exit code. First the prepare pass
    (`dtlab prepare`): whatever the job's prepare steps need and the shared cache lacks is built there and
    timed apart (``prepare_s``, ``prepare_built``), so that the run (`dtlab run`, ``wall_s``) is measured
    with a warm cache. Samples the run's process tree's memory; Ctrl-C is passed on to the running child
    (:func:`stop_child`), which ends its runs KILLED."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{job.key.replace('/', '--')}.log"
    job.state, job.started, job.peak_mb = "preparing", time.time(), 0.0
    if job.prepare_s is None:   # not covered by the board's shared pass (board_prepare)
        try:
            rc, job.prepare_s = _child(prepare_command(job, passthrough), log.with_suffix(".prepare.log"), job, tick,
                                       False)
        except KeyboardInterrupt:
            job.state, job.wall_s = "killed", None
            raise
        if rc != 0:
            job.state, job.returncode = "failed", rc
            job.note = f"its prepare pass failed (exit {rc}; {log.with_suffix('.prepare.log')})"
            return rc
        job.prepare_built = _pass_report(log.with_suffix(".prepare.log")).get("built", [])
    job.state, job.started = "running", time.time()
    try:
        rc, job.wall_s = _child(job_command(job, passthrough), log, job, tick, True)
    except KeyboardInterrupt:
        job.state, job.wall_s = "killed", time.time() - job.started
        raise
    job.returncode = rc
    job.state = "done" if rc == 0 else "failed"
    return rc


def board_prepare_command(tuned: list[Job], passthrough: list[str]) -> list[str]:
    """The board's one prepare pass: `dtlab prepare experiment=a,b,...` with the flavour's overrides."""
    return [sys.executable, "-m", "pipelines.cli", "prepare", "experiment=" + ",".join(j.experiment for j in tuned),
            *tuned[0].overrides[1:], *passthrough, "--json"]


def board_prepare(jobs: list[Job], passthrough: list[str], log_dir: Path, tick) -> int:
    """One prepare pass (`dtlab prepare experiment=a,b,...`) for every experiment's own configuration
    among ``jobs``, before any of them runs; its exit code. On a cold store each experiment's own pass
    runs its steps alone: specreason's one LM step keeps one core busy for minutes and leaves the other
    idle. In one pass the steps of all experiments share the cores and an entry two experiments share
    is built once. Each covered job then skips its own pass and records this one: its seconds (the
    pass's wall, shared), what it built first for that job, and the experiments that shared it. A failed
    pass changes nothing: each job runs its own pass as before (and fails there, with its own log)."""
    tuned = [j for j in jobs if not j.label]
    if len(tuned) < 2:
        return 0
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "board.prepare.log"
    cmd = board_prepare_command(tuned, passthrough)
    for j in tuned:
        j.state, j.started = "preparing", time.time()
    try:
        rc, secs = _child(cmd, log, None, tick, False)
    finally:
        for j in tuned:
            j.state = "queued"
    out = _pass_report(log) if rc == 0 else {}
    if rc != 0 or not isinstance(out.get("built"), dict):
        return rc or 1
    built = {exp: labels for exp, labels in out["built"].items() if labels}
    compute = out.get("compute_by_experiment") or {}
    pass_id = f"board-{int(time.time())}"
    for j in tuned:
        j.prepare_s, j.prepare_built = (secs, built[j.experiment]) if j.experiment in built else (0.0, [])
        if j.experiment in built:
            j.prepare_pass, j.prepare_shared = pass_id, sorted(built)
            j.prepare_compute_s = compute.get(j.experiment)
    return 0


def _pass_report(log: Path) -> dict:
    """The prepare pass's JSON line (its log's last line that parses), {} if none."""
    import json

    for line in reversed(log.read_text().splitlines()):
        try:
            out = json.loads(line)
        except ValueError:
            continue
        if isinstance(out, dict):
            return out
    return {}


def _record(client, job: Job, flavour: str, machine: str) -> None:
    """Find the run the job made (newest of its kind, started after it) and put wall, peak memory and
    the machine on it: RESULTS.md reads them from the store."""
    from components.core.runs_query import parent_history

    try:
        (h,) = parent_history(client, [job.experiment], statuses=("FINISHED", "FAILED"), search_depth=20)
    except ValueError:
        return
    run = next((r for r in h.runs if _matches(r, job, flavour) and r.info.start_time >= job.started * 1000 - 5000), None)
    if run is None:
        return
    job.run_id = run.info.run_id
    client.log_metric(run.info.run_id, "reproduce.wall_s", float(job.wall_s or 0.0))
    if job.peak_mb is not None:   # None: a cluster's job, whose processes are not sampled here
        client.log_metric(run.info.run_id, "reproduce.peak_rss_mb", float(job.peak_mb))
    if job.prepare_s is not None:   # None: a cluster's job (no prepare pass: the run builds what it needs)
        client.log_metric(run.info.run_id, "reproduce.prepare_s", float(job.prepare_s))
        client.set_tag(run.info.run_id, "reproduce.prepare_built", ", ".join(job.prepare_built))
        if job.prepare_pass:   # the board's shared pass: its seconds are the whole pass's, counted once
            client.set_tag(run.info.run_id, "reproduce.prepare_pass", job.prepare_pass)
            client.set_tag(run.info.run_id, "reproduce.prepare_shared", ", ".join(job.prepare_shared))
            if job.prepare_compute_s is not None:   # what its own steps cost inside the shared pass
                client.log_metric(run.info.run_id, "reproduce.prepare_compute_s", float(job.prepare_compute_s))
    client.set_tag(run.info.run_id, "dtlab.machine", machine)


# ------------------------------------------------------------------------------------------ commands
def check(path: str, console) -> int:
    """`--check`: compare the inputs RESULTS.md records with this checkout's; 0 current, 1 stale."""
    from components.core.errors import ConfigError
    from pipelines import config
    from pipelines.inputs import of_config
    from pipelines.results_md import read_inputs, recorded_changes

    try:
        text = Path(path).read_text()
        flavour, recorded = read_inputs(text)
    except (OSError, ValueError) as e:
        _die(f"--check {path}: {e}")
    names = config.experiment_names()
    stale: dict[str, list[str]] = {}
    for exp, rec in sorted(recorded.items()):
        name = exp.split("/")[0]
        if name not in names:
            stale[exp] = ["experiment no longer exists"]
            continue
        try:
            now = of_config(config.compose(rec.get("overrides") or [f"experiment={name}"]))
        except ConfigError as e:
            stale[exp] = [f"config no longer validates: {e}"]
            continue
        why = recorded_changes(rec, now)
        if why:
            stale[exp] = why
    missing = [n for n in names if n not in {k.split("/")[0] for k in recorded}]
    for exp, why in stale.items():
        console.print(f"[yellow]stale[/] {exp}: " + ", ".join(why))
    if missing:
        console.print(f"[dim]not in {path}: {', '.join(missing)}[/]")
    n_current = len(recorded) - len(stale)
    console.print(f"{path}: {n_current}/{len(recorded)} recorded experiment(s) current"
                  + (f", {len(stale)} stale" if stale else "") + f" (flavour {flavour})")
    return 1 if stale else 0


def _recorded(path: Path, flavour: str) -> dict:
    """{experiment: inputs} that the RESULTS.md at ``path`` records for this flavour ({} without one)."""
    from pipelines.results_md import read_inputs

    try:
        file_flavour, recorded = read_inputs(path.read_text())
    except (OSError, ValueError):
        return {}
    return recorded if file_flavour == flavour else {}


def _file_current(path: Path, jobs: list[Job]) -> bool:
    """Whether RESULTS.md at ``path`` already records every one of these experiments' current inputs, and
    shows the store's latest run of each where the store has one (not an older, carried one)."""
    from pipelines.results_md import read_inputs, recorded_changes

    try:
        text = path.read_text()
        _, recorded = read_inputs(text)
    except (OSError, ValueError):
        return False
    return all(j.experiment in recorded and not recorded_changes(recorded[j.experiment], j.inputs)
               and recorded[j.experiment].get("config") == j.inputs.config   # a legacy record: re-keyed on writing
               and (j.latest is None or f"(`{j.latest.info.run_id}`)" in text)
               for j in jobs if not j.label)


def previous_path(opts: dict[str, Any], runs_dir: str) -> Path:
    """The board what is current is carried from: --from, else the file being overwritten. Judging
    against an empty --results PATH would re-run every experiment the committed board carries."""
    return Path(opts["from"]).resolve() if opts["from"] else results_path(opts, runs_dir)


def results_path(opts: dict[str, Any], runs_dir: str) -> Path:
    """Where RESULTS.md goes: --results, else the root for the full flavour, RUNS_DIR for debug
    (a debug board never overwrites the committed file)."""
    if opts["results"]:
        return Path(opts["results"]).resolve()
    return ROOT / "RESULTS.md" if opts["flavour"] == "full" else Path(runs_dir).resolve() / "RESULTS.md"


def cmd_reproduce(args: list[str]) -> None:
    if any(a in ("-h", "--help") for a in args):
        print(USAGE)
        return
    from rich.console import Console

    console = Console()
    opts = parse_args(args)
    if opts["check"] is not None:
        raise SystemExit(check(opts["check"], console))
    experiments = select(opts)
    from components.core.errors import ConfigError
    from components.core.tracker import tracking_client
    from pipelines.preflight import tracking_store

    uri, _, cfg = tracking_store(opts["overrides"])
    remote = "cluster=remote" in opts["overrides"]
    if remote:
        from pipelines import reproduce_cluster

        address = reproduce_cluster.jobs_address()
        reproduce_cluster.check_store(uri, address)
    if opts["results"] and opts["flavour"] != "full" and Path(opts["results"]).resolve() == ROOT / "RESULTS.md":
        _die(f"--results: a {opts['flavour']} board is never written to the repository's RESULTS.md; give another path")
    t0 = time.time()
    try:
        jobs = plan_jobs(experiments, opts)
    except ConfigError as e:
        _die(str(e))
    client = tracking_client(uri)
    judge(jobs, client, opts["flavour"], opts["force"], _recorded(previous_path(opts, cfg["runs_dir"]), opts["flavour"]),
          rekey_runs=not opts["dry_run"])
    todo = [j for j in jobs if j.why]
    console.print(f"dtlab reproduce: {len(jobs)} configuration(s) · {len(todo)} to run · "
                  f"{len(jobs) - len(todo)} current (checked in {time.time() - t0:.1f}s) · store {uri}")
    from components.core.provenance import git_state

    if todo and git_state()["git.dirty"] == "true":
        console.print("[yellow]warning: the checkout has uncommitted changes to tracked files: these runs record "
                      "git.dirty=true, and RESULTS.md would name a commit that does not hold the code that made "
                      "them (commit first for a board anyone can reproduce)[/]")
    if opts["dry_run"]:
        for j in jobs:
            console.print(("[green]current[/] " if not j.why else "[yellow]run[/]     ") + j.key
                          + (f" ({j.latest.info.run_id[:8]}, {_date(j.latest)})" if not j.why and j.latest else "")
                          + (": " + ", ".join(j.why) if j.why else "") + (f" [yellow]({j.note})[/]" if j.note else ""))
        return
    from pipelines.results_md import machine_speed, machine_text

    # the speed: measured before the first full job, on the idle machine (a cluster's jobs run elsewhere)
    if remote:
        machine = reproduce_cluster.machine(address, machine_text())
    else:
        machine = machine_text(machine_speed() if todo and opts["flavour"] == "full" else None)
    passthrough = [o for o in opts["overrides"]]
    log_dir = Path(cfg["runs_dir"]) / "reproduce" / "logs"
    interrupted, failed = False, []
    live = None
    if console.is_terminal and todo:
        from rich.live import Live

        live = Live(render(jobs, time.time(), remote), console=console, refresh_per_second=2)
        live.__enter__()

    def tick() -> None:
        if live is not None:
            live.update(render(jobs, time.time(), remote))

    from components.core.interrupts import terminate_as_interrupt

    stop = terminate_as_interrupt()  # SIGTERM / SIGHUP end the running job like Ctrl-C
    stop.__enter__()
    try:
        if remote:
            console.print(f"submitting {len(todo)} Ray job(s) to {address}", highlight=False)
            interrupted, failed = reproduce_cluster.run_on_cluster(todo, passthrough, log_dir, tick, uri, address)
            for job in todo:
                _record(client, job, opts["flavour"], machine)
                if live is None and job.state != "queued":
                    console.print(f"{job.key}: {job.state}" + (f" in {job.wall_s:.0f}s" if job.wall_s else ""),
                                  highlight=False)
        if not remote and sum(not j.label for j in todo) > 1:
            t_pass = time.time()
            try:
                rc = board_prepare(todo, passthrough, log_dir, tick)
            except KeyboardInterrupt:
                interrupted = True
            if live is None and not interrupted:
                covered = [j for j in todo if j.prepare_pass]
                console.print(f"prepare: one pass for {sum(not j.label for j in todo)} experiments' own configurations"
                              + (f" built {sum(len(j.prepare_built) for j in covered)} entries for "
                                 f"{', '.join(j.experiment for j in covered)}" if covered else " found every entry cached")
                              + f" in {time.time() - t_pass:.0f}s" + (f" (exit {rc}: each runs its own pass; log "
                                                                      f"{log_dir / 'board.prepare.log'})" if rc else ""),
                              highlight=False)
        for i, job in enumerate([] if remote or interrupted else todo):
            if live is None:
                console.print(f"[{i + 1}/{len(todo)}] {job.key}: running ({', '.join(job.why[:3])})"
                              + (f" ({job.note})" if job.note else ""), highlight=False)
            try:
                rc = run_job(job, passthrough, log_dir, tick)
            except KeyboardInterrupt:
                interrupted = True
                _record(client, job, opts["flavour"], machine)
                break
            _record(client, job, opts["flavour"], machine)
            if rc != 0:
                failed.append(job.key)
            if live is None:
                console.print(f"[{i + 1}/{len(todo)}] {job.key}: {job.state}"
                              + (f" in {job.wall_s:.0f}s" if job.wall_s is not None else "")
                              + (f" (exit {rc}; log {log_dir})" if rc else "")
                              + (f"; the board's prepare pass built {', '.join(job.prepare_built)} for it"
                                 if job.prepare_pass else
                                 f"; its prepare pass built {', '.join(job.prepare_built)} in {job.prepare_s:.0f}s, "
                                 "before the run" if job.prepare_built else ""), highlight=False)
            tick()
    finally:
        stop.__exit__(None, None, None)
        if live is not None:
            live.update(render(jobs, time.time(), remote))
            live.__exit__(None, None, None)
    if interrupted:
        console.print("[yellow]interrupted: the next `dtlab reproduce` resumes (what finished is current)[/]")
        raise SystemExit(130)
    if failed:
        console.print(f"[red]{len(failed)} configuration(s) exited non-zero: {', '.join(failed)} (logs: {log_dir})[/]")
    path = results_path(opts, cfg["runs_dir"])
    if not todo and _file_current(path, jobs):
        console.print(f"nothing ran and {path} records these inputs: left as it is")
    else:
        write_outputs(client, uri, cfg, opts, jobs, console)
    console.print(f"dtlab reproduce: done in {time.time() - t0:.0f}s")
    if any(j.state == "failed" and not j.run_id for j in jobs):
        raise SystemExit(1)


def write_outputs(client, uri: str, cfg: dict, opts: dict[str, Any], jobs: list[Job], console) -> Path:
    """RESULTS.md, runs/reports/scoreboard.html (with the same summary) and the MLflow scoreboard run."""
    from pipelines import results_md
    from pipelines.scoreboard import current_inputs, scoreboard

    planned = {j.experiment: j.inputs for j in jobs if not j.label}

    def current(exp: str):
        return planned[exp] if exp in planned else current_inputs(exp, opts["flavour"])

    path = results_path(opts, cfg["runs_dir"])
    model = results_md.write(client, path, opts["flavour"], current=current, previous=previous_path(opts, cfg["runs_dir"]))
    out = scoreboard(uri, os.path.join(cfg["runs_dir"], "reports"), console=None, mlflow_run=True,
                     summary_html=results_md.summary_html(model), extra=[path], current=current,
                     flavour=opts["flavour"])
    console.print(f"RESULTS.md: {path} · HTML: {out['html']} · MLflow run {out['mlflow_run_id']}")
    return path


def _date(run) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(run.info.start_time / 1000))
