"""`dtlab robustness`: re-check an experiment's claims off its tuned configuration.

An experiment YAML declares named perturbations (other seeds, data sizes, data sets, link presets,
model sizes), each a list of Hydra overrides::

    robustness:
      other_seeds: {why: "the claim is not one seed's luck", overrides: ["experiment.seeds=[3,4,5]"]}
      slow_link:   ["experiment.common.error_feedback.link.bandwidth=10Mbps"]

`dtlab robustness experiment=NAME [debug=true] [only=P1,P2] [KEY=VALUE ...]` validates every job
first (the preflight of `dtlab run -m`), then runs the tuned configuration and each perturbation as
a Hydra multirun job on the Ray launcher through that same entry (pipelines.cli.cmd_run), each
MLflow parent tagged ``robustness=<perturbation>`` (``tuned`` for the base), and reports per claim
on how many perturbations it holds. A job that fails still reports the claims it judged (exit 0:
claims failing off-tune are results); a job that left no parent run exits 1, Ctrl-C 130.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from components.core.claims import outcome_status
from pipelines.experiment import TUNED, perturbations
from pipelines.preflight import _die

USAGE = __doc__.split("\n\n", 1)[1]


def plan(args: list[str]) -> tuple[str, list[tuple[str, list[str]]], dict]:
    """(experiment, [(label, job overrides)], the tuned job's config): tuned first, then the
    selected perturbations; bad input is a ConfigError."""
    exp, jobs, tuned_cfg, _ = plan_with_notes(args)
    return exp, jobs, tuned_cfg


def plan_with_notes(args: list[str]) -> tuple[str, list[tuple[str, list[str]]], dict, dict[str, list[str]]]:
    """:func:`plan`, and per perturbation the variants whose own ``seeds`` it could not move."""
    from components.core.errors import ConfigError
    from pipelines import config

    overrides = [a for a in args if not a.startswith("only=")]
    only = [v for a in args if a.startswith("only=") for v in a[5:].strip("[]").split(",") if v]
    exp = next((a.partition("=")[2] for a in overrides if a.startswith("experiment=")), None)
    if not exp:
        raise ConfigError("experiment", None, "experiment=NAME: one of " + ", ".join(config.experiment_names()))
    bad = [a for a in overrides if "=" not in a or a.lstrip("+~").startswith(("robustness=", "hydra/"))]
    if bad:
        raise ConfigError(bad[0].partition("=")[0], bad[0].partition("=")[2] or None,
                          "KEY=VALUE overrides (robustness= is set per job; the launcher is Ray's)")
    tuned_cfg = config.compose([*overrides, f"robustness={TUNED}"])
    declared = perturbations(tuned_cfg["experiment"])
    if not declared:
        raise ConfigError("experiment.robustness", None, f"perturbations declared in conf/experiment/{exp}.yaml")
    unknown = [o for o in only if o not in declared]
    if unknown:
        raise ConfigError("only", unknown[0], "a perturbation of this experiment: " + ", ".join(declared))
    chosen = [p for p in declared if not only or p in only]
    base = [a for a in overrides if not a.startswith("experiment=")]
    jobs = [(TUNED, [f"experiment={exp}", f"robustness={TUNED}", *base])]
    unmoved: dict[str, list[str]] = {}
    for p in chosen:
        job = [f"experiment={exp}", f"robustness={p}", *base, *declared[p]["overrides"]]
        moves, unmoved[p] = seed_moves(tuned_cfg, config.compose(job))
        jobs.append((p, job + moves))
    return exp, jobs, tuned_cfg, {p: v for p, v in unmoved.items() if v}


def seed_moves(tuned: dict, perturbed: dict) -> tuple[list[str], list[str]]:
    """When a perturbation moves the experiment's seeds, the overrides that move the variants that
    declare their own ``seeds`` too (each seed to the perturbed seed at its position in the
    experiment's list: [0] of [0,1,2] -> [3] of [3,4,5]), and the variants it cannot move (a seed
    not in the experiment's list, or a position the new list lacks)."""
    from pipelines.dag import validate
    from pipelines.experiment import overridden_keys

    t_spec, p_spec = validate(tuned), validate(perturbed)
    if t_spec.seeds == p_spec.seeds:
        return [], []
    raw = perturbed["experiment"].get("variants") or {}
    set_here = overridden_keys(perturbed.get("_overrides"))
    moves, unmoved = [], []
    for base in dict.fromkeys(v.base for v in p_spec.variants):
        if (raw.get(base) or {}).get("seeds") is None or f"variants.{base}.seeds" in set_here:
            continue  # it follows the experiment's seeds, or the perturbation sets its seeds itself
        own = next(v.seeds for v in p_spec.variants if v.base == base)
        pos = [t_spec.seeds.index(s) if s in t_spec.seeds else None for s in own]
        if any(i is None or i >= len(p_spec.seeds) for i in pos):
            unmoved.append(base)
            continue
        moves.append(f"experiment.variants.{base}.seeds=[{','.join(str(p_spec.seeds[i]) for i in pos)}]")
    return moves, unmoved


def report(client, experiment: str, labels: list[str], since_ms: int) -> dict[str, Any]:
    """Per claim: the tuned outcome, each perturbation's, and on how many judged perturbations it
    holds; read from this session's parent runs (the newest per label started at or after ``since_ms``)."""
    from components.core.runs_query import parent_history, robustness_label
    from pipelines.scoreboard import _Artifacts

    art = _Artifacts(client)
    runs: dict[str, Any] = {}
    for h in parent_history(client, [experiment]):
        for r in h.runs:
            label = robustness_label(r)
            if label in labels and r.info.start_time >= since_ms:
                runs.setdefault(label, r)
    claims: dict[str, dict[str, Any]] = {}
    for label in labels:
        for c in (art.claims(runs[label].info.run_id) if label in runs else []):
            entry = claims.setdefault(c.name, {"gate": c.gate, "outcomes": {}})
            entry["outcomes"][label] = {"status": outcome_status(c), "measured": c.measured}
    for entry in claims.values():
        # judged off-tuned: a verdict (not "not run", not "inconclusive": inside its noise floor)
        off = {k: v for k, v in entry["outcomes"].items() if k != TUNED and v["status"] not in ("not run", "inconclusive")}
        entry["tuned"] = entry["outcomes"].get(TUNED, {}).get("status", "not run")
        entry["held_off_tuned"], entry["judged_off_tuned"] = sum(v["status"] == "holds" for v in off.values()), len(off)
    return {"experiment": experiment, "perturbations": [lb for lb in labels if lb != TUNED],
            "runs": {lb: {"run_id": r.info.run_id, "status": r.info.status} for lb, r in runs.items()},
            "missing": [lb for lb in labels if lb not in runs], "claims": claims}


_SHORT = {"holds": "✓", "fails": "✗", "inconclusive": "~", "premise not met": "P✗", "not run": "–"}
LEGEND = "✓ holds · ✗ fails · ~ inconclusive (inside the noise floor) · P✗ premise not met · – not run"


def print_report(rep: dict, console, why: dict[str, str] | None = None) -> None:
    """Claims x (tuned, perturbations): the status of each (figures are in the JSON report)."""
    from rich.table import Table

    from pipelines.scoreboard import _STYLE

    labels = [TUNED, *rep["perturbations"]]
    t = Table(title=f"{rep['experiment']}: robustness (tuned vs {len(rep['perturbations'])} perturbation(s))")
    t.add_column("claim", no_wrap=True)
    for lb in labels:
        t.add_column(lb, overflow="fold")
    t.add_column("off-tuned", overflow="fold")
    for name, e in rep["claims"].items():
        cells = [f"[{_STYLE[o['status']]}]{_SHORT[o['status']]}[/]" if (o := e["outcomes"].get(lb)) else "[dim]–[/]"
                 for lb in labels]
        unmet = sum(o["status"] == "premise not met" for k, o in e["outcomes"].items() if k != TUNED)
        noisy = sum(o["status"] == "inconclusive" for k, o in e["outcomes"].items() if k != TUNED)
        t.add_row(name + ("" if e["gate"] else " [dim](control)[/]"), *cells,
                  f"{e['held_off_tuned']}/{e['judged_off_tuned']}" + (f" ({unmet} P✗)" if unmet else "")
                  + (f" ({noisy} ~)" if noisy else ""))
    console.print(t)
    console.print(f"[dim]{LEGEND}[/]")
    for lb, text in (why or {}).items():
        console.print(f"[dim]{lb}: {text}[/]")
    for lb in rep["missing"]:
        console.print(f"[red]{lb}: no parent run was recorded (the job did not start or crashed before its run)[/]")


def cmd_robustness(args: list[str]) -> None:
    if not args or any(a in ("-h", "--help") for a in args):
        print(USAGE)
        return
    from hydra.core.global_hydra import GlobalHydra
    from rich.console import Console

    from components.core.errors import ConfigError
    from components.core.tracker import resolve_tracking_uri, tracking_client
    from pipelines.cli import cmd_run
    from pipelines.preflight import preflight

    try:
        exp, jobs, cfg, unmoved = plan_with_notes(args)
    except ConfigError as e:
        _die(str(e))
    for _, job in jobs:  # every job validated before the first one starts
        preflight(job, multirun=True)
    console = Console()
    since = int(time.time() * 1000) - 1000
    failed, interrupted = [], False
    for label, job in jobs:
        console.print(f"[bold]robustness {exp}: {label}[/] ({' '.join(job[2:]) or 'the tuned configuration'})")
        if unmoved.get(label):
            console.print(f"[yellow]{label}: the seeds of {', '.join(unmoved[label])} are not moved (their own "
                          "seeds are not positions of the experiment's seed list)[/]")
        GlobalHydra.instance().clear()
        argv = sys.argv
        try:
            cmd_run(["-m", *job])
        except SystemExit as e:  # a job whose variants failed: its claims are still reported
            if e.code not in (0, None):
                failed.append(label)
        except KeyboardInterrupt:  # Ctrl-C / SIGTERM: no further job; report what ran
            interrupted = True
            console.print(f"[yellow]interrupted during {label}: the remaining perturbations are not run[/]")
            break
        finally:
            sys.argv = argv
    uri = resolve_tracking_uri(cfg["tracking"]["uri"])
    rep = report(tracking_client(uri), exp, [lb for lb, _ in jobs], since)
    rep["failed_jobs"] = failed
    rep["unmoved_variants"] = unmoved
    declared = perturbations(cfg["experiment"])
    print_report(rep, console, {lb: declared[lb]["why"] for lb in rep["perturbations"] if declared[lb]["why"]})
    out = Path(cfg["runs_dir"]) / "reports" / f"robustness-{exp}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rep, indent=1))
    console.print(f"robustness report: {out}" + (f" · jobs that failed: {', '.join(failed)}" if failed else ""))
    if interrupted:
        raise SystemExit(130)
    if rep["missing"]:
        raise SystemExit(1)
