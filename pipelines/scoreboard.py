"""`dtlab scoreboard`: every experiment's claims in one table, read from MLflow.

One row per claim of every experiment (conf/experiment/*.yaml): the paper's figure, the measured
figure labelled by name (with ± SE where it is a mean over seeds; a claim without ``measured:``
shows its ``holds`` operands), holds / fails / premise not met / inconclusive / not run, the code
version (``git.commit`` + ``git.dirty``) and date of the board run, and the off-tuned outcome (the
newest run of each robustness perturbation) beside it.

The board run of an experiment is its latest FINISHED full-flavour parent of the full variant set
(runs_query.off_board): a debug run, an ``only=`` subset, a sweep trial or a run with
``experiment.*`` overrides never replaces it; ``--include-debug`` shows the newest such run too,
marked. A board run whose inputs (pipelines.inputs: config, imported components/ source, dtlab
version) differ from this checkout's is marked stale, with the files that changed. Claims of
``kind: accounting`` (true by construction) are counted apart from the headline.

The same table goes to runs/reports/scoreboard.html (with each experiment's plots and a
per-claim history sparkline over code versions) and, as an MLflow table artifact, to a
``scoreboard`` run in the ``dtlab-scoreboard`` experiment.

    dtlab scoreboard [--family F] [--experiment E] [--status S] [--include-debug] [--json] [--no-mlflow] [KEY=VALUE ...]
"""
from __future__ import annotations

import base64
import dataclasses
import html
import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

from components.core.claims import STATUSES, ClaimOutcome, outcome_status
from components.core.runs_query import off_board, parent_history, robustness_label
from pipelines.preflight import _die

SCOREBOARD_EXPERIMENT = "dtlab-scoreboard"
TUNED = "tuned"
HISTORY_VERSIONS = 12          # code versions a sparkline shows (the newest)
USAGE = __doc__.split("\n\n", 1)[1]
_FIELDS = {f.name for f in dataclasses.fields(ClaimOutcome)}
# the order statuses are counted and shown in; a status another version adds is counted after these
SHOWN = ("holds", "fails", "premise not met", "inconclusive")
JUDGED_RUNS = ("FINISHED", "FAILED")  # a perturbation's run counts once its report judged claims (a FAILED run's too)
_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf")


def claim_outcomes(raw: list[dict]) -> list[ClaimOutcome]:
    """claims.json back into outcomes; keys a newer or older version wrote are tolerated."""
    return [ClaimOutcome(**{k: v for k, v in c.items() if k in _FIELDS}) for c in raw]


def code_version(run) -> str:
    """Short commit, ``+dirty`` for a checkout with uncommitted changes; "unknown" without tags."""
    tags = run.data.tags
    commit = tags.get("git.commit") or "unknown"
    short = commit[:10] if commit != "unknown" else commit
    return short + ("+dirty" if tags.get("git.dirty") == "true" else "")


def first_number(text: str) -> float | None:
    """The first figure in a measured text (what a sparkline plots), None when there is none."""
    for m in _NUM.finditer(text or ""):
        try:
            v = float(m.group(0))
        except ValueError:
            continue
        if math.isfinite(v):
            return v
    return None


def _experiment_configs() -> dict[str, dict]:
    from pipelines.config import raw_experiments

    return raw_experiments()


class _Artifacts:
    """claims.json, claim_operands.json and inputs.json per run, each read once."""

    def __init__(self, client):
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        self.client, self._claims, self._json = client, {}, {}

    def claims(self, run_id: str) -> list[ClaimOutcome]:
        if run_id not in self._claims:
            self._claims[run_id] = claim_outcomes(self.json(run_id, "claims.json") or [])
        return self._claims[run_id]

    def json(self, run_id: str, path: str) -> Any:
        """A JSON artifact of the run, None when it has none."""
        if (run_id, path) not in self._json:
            from pipelines.artifacts import read_artifact as _read_artifact

            raw = _read_artifact(self.client, run_id, path)
            self._json[run_id, path] = json.loads(raw) if raw else None
        return self._json[run_id, path]


def _history(runs: list, name: str, art: _Artifacts) -> list[dict]:
    """One point per code version (its newest run), oldest first: status and first measured figure."""
    newest_per_version: dict[str, Any] = {}
    for r in runs:  # newest first; a run without claims.json (killed before its report) is no point
        if art.claims(r.info.run_id):
            newest_per_version.setdefault(code_version(r), r)
        if len(newest_per_version) >= HISTORY_VERSIONS:
            break
    points = []
    for version, r in reversed(list(newest_per_version.items())):
        c = next((c for c in art.claims(r.info.run_id) if c.name == name), None)
        points.append({"version": version, "date": _date(r), "status": outcome_status(c) if c else "not run",
                       "measured": c.measured if c else "", "value": first_number(c.measured) if c else None,
                       "debug": bool(off_board(r))})
    return points


def _date(run) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(run.info.start_time / 1000))


def board_run(runs: list, art: _Artifacts, flavour: str = "full") -> Any:
    """The newest FINISHED board run (the flavour, full variant set, no experiment overrides) of
    the tuned configuration that judged its claims; None when there is none."""
    return next((r for r in runs if r.info.status == "FINISHED" and robustness_label(r) in ("", TUNED)
                 and not off_board(r, flavour) and art.claims(r.info.run_id)), None)


def current_inputs(experiment: str, flavour: str = "full"):
    """This checkout's inputs of the experiment's configuration in ``flavour``; None for an
    experiment with no config here (or one that no longer validates)."""
    from components.core.errors import ConfigError
    from pipelines import config
    from pipelines.flavours import flavour_overrides
    from pipelines.inputs import of_config

    if experiment not in config.experiment_names():
        return None
    try:
        return of_config(config.compose([f"experiment={experiment}"] + flavour_overrides(flavour)))
    except ConfigError:
        return None


def staleness(run, art: _Artifacts, current) -> list[str] | None:
    """Why the run's inputs are not this checkout's ([] when they are; None when it cannot be told)."""
    from pipelines.inputs import HASH_TAG, Inputs, changed, unrecorded

    if current is None:
        return None
    digest = run.data.tags.get(HASH_TAG)
    if not digest:
        return [unrecorded(run.data.tags)]
    if digest == current.digest:
        return []
    recorded = art.json(run.info.run_id, "inputs.json")
    return changed(Inputs.from_json(recorded) if recorded else Inputs(digest, "", ""), current)


def perturbation_staleness(run, art: _Artifacts, current) -> list[str] | None:
    """The code a perturbation's run ran on against this checkout's (:func:`pipelines.inputs.code_changed`:
    files and dtlab's version; its config differs from the tuned one by design). [] when it is this
    checkout's code; None when it cannot be told."""
    from pipelines.inputs import HASH_TAG, Inputs, code_changed, unrecorded

    if current is None:
        return None
    if not run.data.tags.get(HASH_TAG):
        return [unrecorded(run.data.tags)]
    recorded = art.json(run.info.run_id, "inputs.json")
    return code_changed(Inputs.from_json(recorded) if recorded else Inputs("", "", ""), current)


def claim_rows(exp: str, fam: str, cfg: dict, run, art: _Artifacts, perturbed: dict[str, Any], history_runs: list,
               stale: list[str] | None, board: bool, flavour: str = "full",
               perturbed_stale: dict[str, list[str] | None] | None = None) -> list[dict]:
    """One row per claim (the YAML's order, then claims only the run judged) of one run (None: not run)."""
    from pipelines.figures import ARTIFACT, operands_text
    from pipelines.live import claim_defs, measured_text

    claims = art.claims(run.info.run_id) if run else []
    by_name = {c.name: c for c in claims}
    from pipelines.experiment import claim_block

    yaml_claims = claim_block(cfg)   # repeated claims expanded, each by its own name
    defs = claim_defs(yaml_claims)
    ops = (art.json(run.info.run_id, ARTIFACT) or {}) if run else {}
    rows = []
    for name in dict.fromkeys([*yaml_claims, *by_name]):
        c, y = by_name.get(name), yaml_claims.get(name) or {}
        labelled = ""
        if c is not None and not c.skipped:
            labelled = measured_text(c, defs.get(name)) if y.get("measured") else operands_text(ops.get(name))
            labelled = labelled or c.measured_pm or c.measured
        pdef = defs.get(f"{name}.premise")
        premise_measured = c.premise_measured if c else ""
        if c is not None and premise_measured and pdef is not None and pdef.measured and not c.cells:
            from pipelines.live import labelled as _lab

            premise_measured = _lab(pdef.measured, premise_measured).replace("\n", "; ")
        rows.append({
            "experiment": exp, "family": fam, "claim": name, "gate": bool(c.gate if c else y.get("gate", True)),
            "kind": str(y.get("kind", "empirical")),
            "paper": (c.paper if c and c.paper else str(y.get("paper", ""))),
            "measured_label": str(y.get("measured") or y.get("holds") or ""),
            "holds_expr": str(y.get("holds") or ""),
            "measured": (c.measured_pm or c.measured) if c else "",
            "measured_labelled": labelled,
            "status": outcome_status(c) if c else "not run",
            "premise": c.premise if c and c.premise else str(y.get("premise") or ""),
            "premise_holds": c.premise_holds if c else None,
            "premise_measured": premise_measured,
            "error": c.error if c else "",
            "code_version": code_version(run) if run else "",
            "git_commit": run.data.tags.get("git.commit", "") if run else "",
            "git_dirty": run.data.tags.get("git.dirty", "") if run else "",
            "date": _date(run) if run else "", "debug": bool(run and off_board(run) == "debug"),
            "board": board, "off_board": off_board(run, flavour) if run else "", "stale": stale,
            "run_id": run.info.run_id if run else "", "run_name": run.info.run_name if run else "",
            "off_tuned": _off_tuned(name, perturbed, art, perturbed_stale),
            "history": _history(history_runs, name, art) if history_runs else [],
        })
    return rows


def collect(client, experiments: list[str] | None = None, family: str | None = None,
            status: str | None = None, include_debug: bool = False, current=None,
            flavour: str = "full") -> tuple[list[dict], dict[str, Any]]:
    """(rows, board run per experiment). A claim the YAML names but no board run judged is "not run";
    an experiment never run shows every claim "not run". ``include_debug`` adds the rows of each
    experiment's newest run that cannot be a board run (debug, ``only=``, overrides), marked
    ``board: False``. ``current(experiment)`` gives this checkout's inputs (stale marking; default
    :func:`current_inputs`). ``flavour="debug"``: a board of debug runs (reproduce's test flavour)."""
    if current is None:
        def current(e: str):
            return current_inputs(e, flavour)
    configs = _experiment_configs()
    histories = {h.experiment.name: h for h in parent_history(client)}
    names = sorted(set(configs) | set(histories))
    if experiments:
        unknown = [e for e in experiments if e not in names]
        if unknown:
            raise ValueError(f"--experiment {unknown[0]!r}: one of " + ", ".join(names))
        names = [n for n in names if n in experiments]
    art = _Artifacts(client)
    rows, latest = [], {}
    for exp in names:
        cfg = configs.get(exp, {})
        hist = histories.get(exp)
        runs = hist.runs if hist else []
        run = board_run(runs, art, flavour)
        fam = (run.data.tags.get("family") if run else None) or str(cfg.get("family", ""))
        if family and fam != family:
            continue
        perturbed: dict[str, Any] = {}
        for r in runs:
            label = robustness_label(r)
            if label not in ("", TUNED) and r.info.status in JUDGED_RUNS and (include_debug or not off_board(r, flavour)):
                perturbed.setdefault(label, r)
        eligible = [r for r in runs if robustness_label(r) in ("", TUNED) and not off_board(r, flavour)]
        cur = current(exp) if run is not None or perturbed else None
        stale = staleness(run, art, cur) if run is not None else None
        if run is not None:
            latest[exp] = run
        pstale = {label: perturbation_staleness(r, art, cur) for label, r in perturbed.items()}
        rows += claim_rows(exp, fam, cfg, run, art, perturbed, eligible, stale, board=True, flavour=flavour,
                           perturbed_stale=pstale)
        if include_debug:
            other = next((r for r in runs if robustness_label(r) in ("", TUNED) and off_board(r, flavour)
                          and art.claims(r.info.run_id) and (run is None or r.info.start_time > run.info.start_time)), None)
            if other is not None:
                rows += claim_rows(exp, fam, cfg, other, art, {}, [], None, board=False, flavour=flavour)
    if status:
        rows = [r for r in rows if r["status"] == status]
    return rows, latest


def _off_tuned(name: str, perturbed: dict[str, Any], art: _Artifacts,
               stale: dict[str, list[str] | None] | None = None) -> dict:
    """Per perturbation (its newest run) the claim's status, and how many of the judged ones hold. A
    perturbation whose run ended FAILED (a variant crashed) counts with the claims its report judged,
    marked ``run_failed``: dropping it would hide the perturbations that break a technique hardest. One
    whose code is not this checkout's (``stale``: what changed) is shown, marked, and not counted: it
    says nothing about the code the tuned run now shows."""
    per = {}
    for label, r in sorted(perturbed.items()):
        c = next((c for c in art.claims(r.info.run_id) if c.name == name), None)
        per[label] = {"status": outcome_status(c) if c else "not run", "measured": c.measured if c else "",
                      "code_version": code_version(r), "debug": bool(off_board(r)),
                      "run_failed": r.info.status == "FAILED", "date": _date(r),
                      "stale": list((stale or {}).get(label) or [])}
    judged = [p for p in per.values() if p["status"] not in ("not run", "inconclusive") and not p["stale"]]
    return {"perturbations": per, "held": sum(p["status"] == "holds" for p in judged), "judged": len(judged)}


def off_tuned_text(off: dict) -> str:
    """"2/3 hold · slow_link: fails": the count, then each perturbation where it does not hold."""
    if not off["perturbations"]:
        return ""
    return f"{off['held']}/{off['judged']} hold" + "".join(
        f" · {k}: {perturbation_status(v)}" for k, v in off["perturbations"].items()
        if v["status"] != "holds" or v.get("stale"))


def perturbation_status(p: dict) -> str:
    """A claim's status under one perturbation, "(run FAILED)" added where that run crashed, "(stale)"
    where its code is not this checkout's."""
    return p["status"] + (" (run FAILED)" if p.get("run_failed") else "") + (" (stale)" if p.get("stale") else "")


def counts(rows: list[dict]) -> dict[str, Any]:
    """Gated claims of board rows by status, empirical and accounting apart (every status counted,
    one another version adds too)."""
    judged = [r for r in rows if r["gate"] and r["board"] and r["status"] != "not run"]
    out: dict[str, Any] = {}
    for kind in ("empirical", "accounting"):
        mine = [r for r in judged if r["kind"] == kind]
        seen = list(dict.fromkeys([*SHOWN, *(r["status"] for r in mine)]))
        out[kind] = {"judged": len(mine), **{s: sum(r["status"] == s for r in mine) for s in seen}}
    return out


def counts_text(c: dict[str, Any]) -> str:
    e, a = c["empirical"], c["accounting"]
    parts = " · ".join(f"{e[s]} {s}" for s in e if s != "judged")
    text = f"{e['judged']} gated claims judged: {parts}"
    if a["judged"]:
        text += f"; accounting checks (true by construction): {a.get('holds', 0)}/{a['judged']} hold"
    return text


# ----------------------------------------------------------------------------------------- output
_STYLE = {"holds": "green", "fails": "red", "premise not met": "yellow", "inconclusive": "cyan", "not run": "dim"}
_COLOR = {"holds": "#1a7f37", "fails": "#c62828", "premise not met": "#b26a00", "inconclusive": "#0b6e99",
          "not run": "#999"}


def _style(status: str) -> str:
    return _STYLE.get(status, "magenta")


def print_table(rows: list[dict], console) -> None:
    """One table per experiment run (titled with its code version, date, STALE / DEBUG markers),
    then a line naming the experiments never run; the totals count gated claims of board runs."""
    from rich.markup import escape
    from rich.table import Table

    console.print(f"[bold]dtlab scoreboard[/]: {counts_text(counts(rows))}")
    never = []
    groups = dict.fromkeys((r["experiment"], r["run_id"], r["board"]) for r in rows)
    for exp, run_id, board in groups:
        mine = [r for r in rows if (r["experiment"], r["run_id"], r["board"]) == (exp, run_id, board)]
        if not run_id:
            never.append(f"{exp} ({len(mine)})")
            continue
        r0 = mine[0]
        title = f"{exp} · {r0['code_version']} · {r0['date']} UTC"
        if not board:
            title += f" · [bold magenta]NOT ON THE BOARD ({escape(r0['off_board'])})[/]"
        elif r0["stale"]:
            title += " · [bold yellow]STALE[/] (changed since: " + escape(", ".join(r0["stale"][:6])) + \
                     (f", +{len(r0['stale']) - 6} more" if len(r0["stale"]) > 6 else "") + ")"
        t = Table(title=title, show_lines=True, title_justify="left")
        t.add_column("claim", no_wrap=True)
        t.add_column("status", no_wrap=True)
        t.add_column("measured", ratio=2)
        t.add_column("paper", ratio=2)
        if any(r["off_tuned"]["perturbations"] for r in mine):
            t.add_column("off-tuned", ratio=1)
        for r in mine:
            mark = f"[{_style(r['status'])}]{r['status']}[/]" + ("" if r["gate"] else "\n[dim](control)[/]")
            if r["kind"] == "accounting":
                mark += "\n[dim](accounting)[/]"
            measured = escape(r["measured_labelled"]) if r["measured_labelled"] else "[dim]–[/]"
            if r["premise"]:
                p = {True: "met", False: "NOT MET", None: "unknown"}[r["premise_holds"]]
                measured += (f"\n[dim]premise {p}: {escape(r['premise'])}"
                             + (f" = {escape(r['premise_measured'])}" if r["premise_measured"] else "") + "[/]")
            cells = [r["claim"], mark, measured, escape(r["paper"])]
            if len(t.columns) > 4:
                cells.append(off_tuned_text(r["off_tuned"]))
            t.add_row(*cells)
        console.print(t)
    if never:
        console.print("[dim]not run (claims): " + ", ".join(never) + "[/]")


def sparkline(points: list[dict], width: int = 140, height: int = 28) -> str:
    """Inline SVG: one dot per code version coloured by status, a line through the measured figures."""
    if not points:
        return ""
    n = len(points)
    xs = [6 + (width - 12) * (i / (n - 1) if n > 1 else 0.5) for i in range(n)]
    vals = [p["value"] for p in points]
    known = [v for v in vals if v is not None]
    lo, hi = (min(known), max(known)) if known else (0.0, 1.0)
    span = (hi - lo) or 1.0
    ys = [height - 6 - (height - 12) * ((v - lo) / span) if v is not None else height / 2 for v in vals]
    parts = [f"<svg class='spark' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
             f"xmlns='http://www.w3.org/2000/svg'>"]
    line = [f"{x:.1f},{y:.1f}" for x, y, v in zip(xs, ys, vals) if v is not None]
    if len(line) > 1:
        parts.append(f"<polyline fill='none' stroke='#888' stroke-width='1' points='{' '.join(line)}'/>")
    for x, y, p in zip(xs, ys, points):
        tip = html.escape(f"{p['version']} {p['date']}{' DEBUG' if p['debug'] else ''}: {p['status']} · {p['measured']}")
        colour = _COLOR.get(p["status"], "#a0a")
        parts.append(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='3.5' fill='{colour}'><title>{tip}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def write_html(rows: list[dict], plots: dict[str, list[tuple[str, bytes]]], path: Path, uri: str,
               summary_html: str = "") -> Path:
    """The page: counts, ``summary_html`` (RESULTS.md's summary, when reproduce writes it), the claim
    table (figures labelled; STALE, NOT ON THE BOARD and accounting marked), the plots."""
    e = html.escape
    out = ["<!doctype html><meta charset='utf-8'><title>dtlab scoreboard</title><style>"
           "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
           "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px;vertical-align:top}th{background:#f3f3f3}"
           ".holds{color:#1a7f37;font-weight:bold}.fails{color:#c62828;font-weight:bold}"
           ".premise-not-met{color:#b26a00;font-weight:bold}.not-run{color:#999}.debug{color:#a0a;font-weight:bold}"
           ".inconclusive{color:#0b6e99;font-weight:bold}.stale{color:#b26a00}"
           "code{font-size:12px;color:#555}img.plot{max-width:560px;margin:4px;border:1px solid #eee}</style>",
           f"<h1>dtlab scoreboard</h1><p>Tracking store: <code>{e(uri)}</code> · written "
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}</p><p id='counts'>{e(counts_text(counts(rows)))}</p>",
           summary_html,
           "<table id='scoreboard'><tr><th>experiment</th><th>claim</th><th>status</th><th>paper</th>"
           "<th>measured</th><th>off-tuned</th><th>history (per code version)</th><th>code</th><th>date</th></tr>"]
    never: dict[str, int] = {}
    for r in rows:
        if not r["run_id"]:  # an experiment never run: one line under the table, not a row per claim
            never[r["experiment"]] = never.get(r["experiment"], 0) + 1
            continue
        cls = r["status"].replace(" ", "-")
        premise = ""
        if r["premise"]:
            p = {True: "met", False: "not met", None: "unknown"}[r["premise_holds"]] if r["status"] != "not run" else "(not run)"
            premise = f"<br><small>premise {p}: <code>{e(r['premise'])}</code> {e(r['premise_measured'])}</small>"
        out.append(
            f"<tr class='row row-{cls}'><td>{e(r['experiment'])}</td><td>{e(r['claim'])}"
            f"{'' if r['gate'] else ' <small>(control)</small>'}"
            f"{' <small>(accounting)</small>' if r['kind'] == 'accounting' else ''}</td><td class='{cls}'>{e(r['status'])}</td>"
            f"<td>{e(r['paper'])}</td><td>{e(r['measured_labelled'] or r['measured']).replace(chr(10), '<br>')}{premise}</td>"
            f"<td>{e(off_tuned_text(r['off_tuned']))}</td><td>{sparkline(r['history'])}</td>"
            f"<td>{e(r['code_version'])}{' <span class=debug>DEBUG</span>' if r['debug'] else ''}"
            f"{'' if r['board'] else ' <span class=debug>NOT ON THE BOARD: ' + e(r['off_board']) + '</span>'}"
            f"{' <span class=stale>STALE: ' + e(', '.join(r['stale'])) + '</span>' if r['board'] and r['stale'] else ''}</td>"
            f"<td>{e(r['date'])}</td></tr>")
    out.append("</table>")
    if never:
        out.append("<p class='not-run'>Not run yet (claims): " + ", ".join(f"{e(k)} ({v})" for k, v in never.items()) + "</p>")
    for exp, pngs in plots.items():
        if not pngs:
            continue
        out.append(f"<h2 id='plots-{e(exp)}'>{e(exp)}</h2><div class='plots'>")
        for name, data in pngs:
            out.append(f"<figure style='display:inline-block'><img class='plot' alt='{e(name)}' "
                       f"src='data:image/png;base64,{base64.b64encode(data).decode()}'><figcaption>{e(name)}</figcaption></figure>")
        out.append("</div>")
    # the browser reports what it drew (a screenshot test waits for this line)
    out.append("<p id='render-status'></p><script>window.addEventListener('load', () => {"
               "const im = [...document.querySelectorAll('img.plot')];"
               "const ok = im.filter(i => i.complete && i.naturalWidth > 0).length;"
               "document.getElementById('render-status').textContent = "
               "`plots rendered: ${ok}/${im.length} · sparklines: ${document.querySelectorAll('svg.spark').length}`;"
               "});</script>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out))
    return path


def table_columns(rows: list[dict]) -> dict[str, list]:
    """The flat table logged to MLflow (one column per field; nested fields as text)."""
    cols = ["experiment", "family", "claim", "gate", "kind", "status", "paper", "measured_label", "measured",
            "measured_labelled", "premise", "premise_holds", "code_version", "git_commit", "git_dirty", "date", "debug",
            "board", "off_board", "stale", "run_id"]
    data = {c: [r[c] if not isinstance(r[c], (dict, list)) else json.dumps(r[c]) for r in rows] for c in cols}
    data["premise_holds"] = ["" if v is None else str(v) for v in data["premise_holds"]]
    data["off_tuned"] = [off_tuned_text(r["off_tuned"]) for r in rows]
    return data


def log_to_mlflow(client, rows: list[dict], html_path: Path | None, extra: list[Path] = ()) -> str:
    """A ``scoreboard`` run (tag dtlab.kind=scoreboard) holding the table as an MLflow table artifact,
    the HTML page and ``extra`` files (RESULTS.md when reproduce writes it)."""
    from mlflow.entities import Metric

    from components.core.provenance import reproducibility_tags
    from components.core.tracker import ensure_experiment

    exp_id = ensure_experiment(client, SCOREBOARD_EXPERIMENT)
    run = client.create_run(exp_id, run_name=f"scoreboard-{time.strftime('%Y%m%d-%H%M%S')}",
                            tags={"dtlab.kind": "scoreboard", **reproducibility_tags()})
    rid = run.info.run_id
    try:
        client.log_table(rid, data=table_columns(rows), artifact_file="scoreboard.json")
        now = int(time.time() * 1000)
        c = counts(rows)
        metrics = [Metric(f"claims.{s.replace(' ', '_')}", v, now, 0) for s, v in c["empirical"].items() if s != "judged"]
        metrics += [Metric(f"accounting.{s.replace(' ', '_')}", v, now, 0) for s, v in c["accounting"].items()
                    if s != "judged"]
        client.log_batch(rid, metrics=metrics)
        for f in ([html_path] if html_path is not None else []) + list(extra):
            client.log_artifact(rid, str(f))
        client.set_terminated(rid, "FINISHED")
    except BaseException:
        client.set_terminated(rid, "FAILED")
        raise
    return rid


def scoreboard(uri: str, out_dir: str | Path, experiments: list[str] | None = None, family: str | None = None,
               status: str | None = None, console=None, as_json: bool = False, mlflow_run: bool = True,
               include_debug: bool = False, summary_html: str = "", extra: list[Path] = (), current=None,
               flavour: str = "full") -> dict:
    """Collect, print (or JSON), write the HTML page and log the MLflow table; what was written."""
    from components.core.tracker import tracking_client
    from pipelines.artifacts import pngs as _pngs

    client = tracking_client(uri)
    rows, latest = collect(client, experiments, family, status, include_debug=include_debug, current=current,
                           flavour=flavour)
    if as_json:
        print(json.dumps(rows, indent=1, default=str))
    elif console is not None:
        print_table(rows, console)
    shown = dict.fromkeys(r["experiment"] for r in rows)
    plots = {exp: _pngs(client, latest[exp].info.run_id) for exp in shown if exp in latest}
    path = write_html(rows, plots, Path(out_dir) / "scoreboard.html", uri, summary_html)
    run_id = log_to_mlflow(client, rows, path, extra) if mlflow_run else ""
    return {"rows": rows, "html": str(path), "mlflow_run_id": run_id}


def parse_args(args: list[str]) -> dict:
    """Flags (``--family F``, ``--experiment E[,E]``, ``--status S``, ``--include-debug``, ``--json``,
    ``--no-mlflow``) and config overrides (``runs_dir=...``, ``tracking=...``)."""
    opts: dict[str, Any] = {"family": None, "experiments": [], "status": None, "json": False, "mlflow": True,
                            "include_debug": False, "overrides": []}
    i = 0
    while i < len(args):
        a = args[i]
        flag, _, inline = a.partition("=") if a.startswith("--") else (a, "", "")
        if flag in ("--family", "--experiment", "--status"):
            value = inline or (args[i + 1] if i + 1 < len(args) else "")
            if not inline:
                i += 1
            if not value:
                _die(f"{flag}: a value (e.g. {flag} NAME)")
            if flag == "--family":
                opts["family"] = value
            elif flag == "--experiment":
                opts["experiments"] += [v for v in value.split(",") if v]
            else:
                value = value.replace("-", " ").replace("_", " ")
                allowed = list(dict.fromkeys([*STATUSES, *SHOWN]))
                if value not in allowed:
                    _die(f"--status={value!r}: one of " + ", ".join(allowed))
                opts["status"] = value
        elif a == "--json":
            opts["json"] = True
        elif a == "--no-mlflow":
            opts["mlflow"] = False
        elif a == "--include-debug":
            opts["include_debug"] = True
        elif "=" in a and not a.startswith("-"):
            opts["overrides"].append(a)
        else:
            _die(f"scoreboard: unknown argument {a!r}; see dtlab scoreboard --help")
        i += 1
    return opts


def cmd_scoreboard(args: list[str]) -> None:
    if any(a in ("-h", "--help") for a in args):
        print(USAGE)
        return
    from rich.console import Console

    from pipelines.preflight import tracking_store

    opts = parse_args(args)
    uri, _, cfg = tracking_store(opts["overrides"])
    try:
        out = scoreboard(uri, os.path.join(cfg["runs_dir"], "reports"), opts["experiments"] or None, opts["family"],
                         opts["status"], console=Console(), as_json=opts["json"], mlflow_run=opts["mlflow"],
                         include_debug=opts["include_debug"])
    except ValueError as e:
        _die(str(e))
    if not opts["json"]:
        print(f"HTML scoreboard: {out['html']}" + (f" · MLflow run {out['mlflow_run_id']} in experiment "
                                                     f"{SCOREBOARD_EXPERIMENT}" if out["mlflow_run_id"] else ""))
