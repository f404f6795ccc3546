"""`dtlab compare`: the latest FINISHED run of each experiment side by side, from the MLflow store;
`dtlab compare RUN_A RUN_B` (run ids, id prefixes, or ``EXPERIMENT@JOB`` for a multirun's jobs): two
runs of one experiment side by side (provenance, claims with labelled figures, metrics with B/A).

Prints each experiment's comparison tables and scoreboard (each measured figure labelled, the
``holds`` expression beside it, debug runs marked), and writes one self-contained HTML report
(tables plus the parent runs' PNG plots inlined) under runs/reports/. Newer runs that did not
finish (running, killed, failed) are named as skipped, never shown as the latest.
"""
from __future__ import annotations

import base64
import html
import json
import re
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from components.core.claims import ClaimOutcome
from components.core.runs_query import latest_parents
from pipelines.artifacts import pngs as _pngs, read_artifact as _read_artifact
from pipelines.live import DEBUG_BANNER, measured_text, claim_defs, claims_table, comparison_tables, is_debug


def _claim_defs(client, run_id: str) -> dict[str, Any]:
    """The claims' definitions (holds, measured) from the parent run's config.yaml."""
    import yaml

    try:
        cfg = yaml.safe_load(_read_artifact(client, run_id, "config.yaml") or b"{}") or {}
        from pipelines.experiment import claim_block

        return claim_defs(claim_block(cfg.get("experiment") or {}))
    except Exception:  # noqa: BLE001 - an old or odd config: outcomes are shown without definitions
        return {}


_RUN_ID = re.compile(r"[0-9a-f]{8,32}")


def is_run_ref(text: str) -> bool:
    """A run id (or a unique prefix of 8+ hex digits) or ``EXPERIMENT@JOB`` (job JOB of its newest multirun)."""
    return bool(_RUN_ID.fullmatch(text)) or bool(re.fullmatch(r"[A-Za-z_][\w]*@\d+", text))


def resolve_run(client, ref: str):
    """The parent run a reference names; ValueError (one line) when none or several do."""
    from components.core.runs_query import PARENT_FILTER

    if "@" in ref:
        exp_name, job = ref.split("@")
        exp = client.get_experiment_by_name(exp_name)
        runs = client.search_runs([exp.experiment_id], filter_string=f"{PARENT_FILTER} and tags.`hydra.job` = '{job}'",
                                  order_by=["attributes.start_time DESC"], max_results=1) if exp else []
        if not runs:
            raise ValueError(f"compare RUN={ref!r}: no parent run of experiment {exp_name!r} with hydra job {job} "
                             "(EXPERIMENT@JOB names a job of its newest multirun)")
        return runs[0]
    if len(ref) == 32:
        try:
            return client.get_run(ref)
        except Exception:  # noqa: BLE001 - MLflow raises its own not-found error
            raise ValueError(f"compare RUN={ref!r}: no such run in this store") from None
    exps = [e.experiment_id for e in client.search_experiments()]
    found = [r for r in client.search_runs(exps, filter_string=PARENT_FILTER, max_results=5000)
             if r.info.run_id.startswith(ref)] if exps else []
    if len(found) != 1:
        raise ValueError(f"compare RUN={ref!r}: {'no' if not found else len(found)} parent runs whose id starts "
                         "with it; give more digits")
    return found[0]


def pair(client, ref_a: str, ref_b: str) -> dict[str, Any]:
    """Two parent runs of one experiment side by side: their provenance, every claim (status and
    labelled figure in each) and every variant's metrics of the comparison table with B/A."""
    from pipelines.figures import ARTIFACT, operands_text
    from pipelines.scoreboard import _Artifacts, code_version
    from components.core.claims import outcome_status
    from components.core.runs_query import off_board

    a, b = resolve_run(client, ref_a), resolve_run(client, ref_b)
    ea, eb = a.data.tags.get("experiment", ""), b.data.tags.get("experiment", "")
    if ea != eb:
        raise ValueError(f"compare RUN_B={ref_b!r}: a run of experiment {ea!r} like RUN_A (it is one of {eb!r})")
    art = _Artifacts(client)
    sides = []
    for r in (a, b):
        defs = _claim_defs(client, r.info.run_id)
        ops = art.json(r.info.run_id, ARTIFACT) or {}
        claims = {}
        for c in art.claims(r.info.run_id):
            d = defs.get(c.name)
            fig = measured_text(c, d) if d is None or d.measured else (operands_text(ops.get(c.name)) or c.measured)
            claims[c.name] = {"status": outcome_status(c), "measured": fig, "gate": c.gate}
        rows = art.json(r.info.run_id, "comparison.json") or []
        sides.append({"run_id": r.info.run_id, "run_name": r.info.run_name, "status": r.info.status,
                      "code_version": code_version(r), "board": off_board(r) or "board run",
                      "overrides": r.data.tags.get("dtlab.overrides", ""), "robustness": r.data.tags.get("robustness", ""),
                      "input_hash": r.data.tags.get("dtlab.input_hash", ""),
                      "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.info.start_time / 1000)),
                      "claims": claims, "rows": {row.get("variant"): row for row in rows}})
    names = list(dict.fromkeys([*sides[0]["claims"], *sides[1]["claims"]]))
    claim_rows = [{"claim": n, "a": sides[0]["claims"].get(n), "b": sides[1]["claims"].get(n)} for n in names]
    metric_rows = []
    for v in dict.fromkeys([*sides[0]["rows"], *sides[1]["rows"]]):
        ra, rb = sides[0]["rows"].get(v) or {}, sides[1]["rows"].get(v) or {}
        keys = [k for k in dict.fromkeys([*ra, *rb]) if k not in ("variant", "technique", "role", "status", "seeds")
                and "/" not in k and not k.endswith("_se")]
        for k in keys:
            va, vb = ra.get(k), rb.get(k)
            ratio = vb / va if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va else None
            metric_rows.append({"variant": v, "metric": k, "a": va, "b": vb, "b/a": ratio})
    return {"experiment": ea, "a": {k: v for k, v in sides[0].items() if k not in ("claims", "rows")},
            "b": {k: v for k, v in sides[1].items() if k not in ("claims", "rows")},
            "claims": claim_rows, "metrics": metric_rows}


def print_pair(p: dict[str, Any], console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    from pipelines.scoreboard import _style

    t = Table(title=f"{p['experiment']}: A vs B", show_lines=True)
    for c in ("", "A", "B"):
        t.add_column(c, overflow="fold")
    for k in ("run_name", "run_id", "status", "code_version", "date", "board", "robustness", "overrides", "input_hash"):
        t.add_row(k, escape(str(p["a"][k])), escape(str(p["b"][k])))
    console.print(t)
    t = Table(title=f"{p['experiment']}: claims", show_lines=True)
    for c in ("claim", "A", "measured A", "B", "measured B"):
        t.add_column(c, overflow="fold")
    for r in p["claims"]:
        cells = [r["claim"]]
        for side in (r["a"], r["b"]):
            cells += ([f"[{_style(side['status'])}]{side['status']}[/]" + ("" if side["gate"] else " (control)"),
                       escape(side["measured"])] if side else ["[dim]–[/]", ""])
        t.add_row(*cells)
    console.print(t)
    t = Table(title=f"{p['experiment']}: metrics (comparison table)")
    for c in ("variant", "metric", "A", "B", "B/A"):
        t.add_column(c, justify="left" if c in ("variant", "metric") else "right")
    for r in p["metrics"]:
        t.add_row(r["variant"], r["metric"], _cell(r["a"]), _cell(r["b"]), _cell(r["b/a"]))
    console.print(t)


def _pair_html(p: dict[str, Any], uri: str) -> str:
    e = html.escape
    parts = [_html([], uri), f"<h2>{e(p['experiment'])}: A vs B</h2><table><tr><th></th><th>A</th><th>B</th></tr>"]
    for k in ("run_name", "run_id", "status", "code_version", "date", "board", "robustness", "overrides", "input_hash"):
        parts.append(f"<tr><td>{e(k)}</td><td>{e(str(p['a'][k]))}</td><td>{e(str(p['b'][k]))}</td></tr>")
    parts.append("</table><table><tr><th>claim</th><th>A</th><th>measured A</th><th>B</th><th>measured B</th></tr>")
    for r in p["claims"]:
        cells = "".join(f"<td>{e(s['status'])}</td><td>{e(s['measured']).replace(chr(10), '<br>')}</td>" if s
                        else "<td>–</td><td></td>" for s in (r["a"], r["b"]))
        parts.append(f"<tr><td>{e(r['claim'])}</td>{cells}</tr>")
    parts.append("</table><table><tr><th>variant</th><th>metric</th><th>A</th><th>B</th><th>B/A</th></tr>")
    for r in p["metrics"]:
        parts.append(f"<tr><td>{e(str(r['variant']))}</td><td>{e(r['metric'])}</td><td>{_cell(r['a'])}</td>"
                     f"<td>{_cell(r['b'])}</td><td>{_cell(r['b/a'])}</td></tr>")
    parts.append("</table>")
    return "\n".join(parts)


def compare_runs(uri: str, ref_a: str, ref_b: str, out_dir: str, console: Console | None = None) -> str:
    """`dtlab compare RUN_A RUN_B`: print the pair and write its HTML report; the report's path."""
    from components.core.tracker import tracking_client

    console = console or Console()
    try:
        p = pair(tracking_client(uri), ref_a, ref_b)
    except ValueError as e:
        raise SystemExit(f"dtlab: error: {e}") from None
    print_pair(p, console)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"compare-{p['experiment']}-{p['a']['run_id'][:8]}-{p['b']['run_id'][:8]}.html"
    path.write_text(_pair_html(p, uri))
    return str(path)


def compare(uri: str, names: list[str] | None, out_dir: str, console: Console | None = None) -> str | None:
    """Experiments' latest runs side by side; two run references (``is_run_ref``): those two runs."""
    import os

    if names and len(names) == 2 and all(is_run_ref(n) for n in names):
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        return compare_runs(uri, names[0], names[1], out_dir, console)

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from components.core.tracker import tracking_client

    console = console or Console()
    client = tracking_client(uri)
    from components.core.provenance import mark_stale

    stale = mark_stale(client)
    if stale:
        console.print(f"[yellow]{len(stale)} run(s) left RUNNING by a driver that is gone: marked FAILED[/]")
    try:  # FINISHED only: a run killed or failed half-way is named as skipped, never shown as the latest
        parents = latest_parents(client, names or None, statuses=("FINISHED",))
    except ValueError as e:
        raise SystemExit(f"dtlab: error: {e}") from None
    for n in sorted(set(names or []) - {p.experiment.name for p in parents}):
        console.print(f"[yellow]{n}: no FINISHED run yet (only failed, killed or running ones)[/]")
    if not parents:
        console.print(f"no finished dtlab runs in {uri}; run `dtlab run experiment=NAME` first")
        return None
    sections = []
    for latest in parents:
        exp, run = latest.experiment, latest.run
        if latest.skipped:
            console.print(f"[dim]{exp.name}: skipped {len(latest.skipped)} newer run(s) not FINISHED: "
                          + ", ".join(f"{r.info.run_name} ({r.info.status})" for r in latest.skipped) + "[/]")
        rows = json.loads(_read_artifact(client, run.info.run_id, "comparison.json") or b"[]")
        claims_raw = json.loads(_read_artifact(client, run.info.run_id, "claims.json") or b"[]")
        claims = [ClaimOutcome(**c) for c in claims_raw]
        defs = _claim_defs(client, run.info.run_id)
        debug = is_debug(run.data.tags)
        status = run.info.status
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.info.start_time / 1000))
        title = f"{exp.name} · {run.info.run_name} · {status} · {when}" + (" · DEBUG" if debug else "")
        if debug:
            console.print(DEBUG_BANNER)
        for t in comparison_tables(rows, title):
            console.print(t)
        if claims:
            judged = [c for c in claims if c.gate and not c.skipped]
            ops = json.loads(_read_artifact(client, run.info.run_id, "claim_operands.json") or b"{}")
            console.print(claims_table(claims, f"{exp.name}: {sum(c.holds for c in judged)}/{len(judged)} claims hold",
                                       defs=defs, operands=ops))
        skipped = [f"{r.info.run_name} ({r.info.status})" for r in latest.skipped]
        sections.append((exp.name, title, rows, claims, _pngs(client, run.info.run_id), defs, debug, skipped))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"compare-{time.strftime('%Y%m%d-%H%M%S')}.html"
    path.write_text(_html(sections, uri))
    return str(path)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def _html(sections, uri: str) -> str:
    parts = ["<!doctype html><meta charset='utf-8'><title>dtlab comparison</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#f3f3f3}"
             ".ok{color:#080}.bad{color:#b00}.debug{background:#ffd;border:1px solid #cc0;padding:4px}.skipped{color:#666}img{max-width:640px;margin:6px;border:1px solid #eee}"
             # the variant table has a column per metric: it scrolls sideways inside the page, variant names kept
             ".wide{overflow-x:auto;max-width:100%}.wide table{margin:0}.wide th{white-space:normal;max-width:9em;"
             "overflow-wrap:anywhere}.wide td{white-space:nowrap}.wide td:first-child,.wide th:first-child"
             "{position:sticky;left:0;background:#fff}.wide th:first-child{background:#f3f3f3}</style>",
             f"<h1>dtlab comparison</h1><p>Tracking store: <code>{html.escape(uri)}</code></p>"]
    for name, title, rows, claims, pngs, defs, debug, skipped in sections:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        if skipped:
            parts.append(f"<p class=skipped>Newer runs not FINISHED, skipped: {html.escape(', '.join(skipped))}</p>")
        if debug:
            parts.append("<p class=debug><b>DEBUG RUN</b>: the tiny debug flavour (debug=true); models and data are "
                         "shrunk and claims are expected to fail.</p>")
        if claims:
            parts.append("<table><tr><th>claim</th><th>paper</th><th>measured</th><th>holds if</th><th>holds</th></tr>")
            for c in claims:
                mark = ("not run" if c.skipped else ("<span class=ok>holds</span>" if c.holds else "<span class=bad>fails</span>")
                        + ("" if c.gate else " (control)"))
                claim = defs.get(c.name)
                measured = html.escape(measured_text(c, claim)).replace("\n", "<br>")
                parts.append(f"<tr><td>{_cell(c.name)}</td><td>{_cell(c.paper)}</td><td>{measured}</td>"
                             f"<td><code>{_cell(claim.holds if claim else '')}</code></td><td>{mark}</td></tr>")
            parts.append("</table>")
        if rows:
            cols = list(dict.fromkeys(k for r in rows for k in r))
            parts.append("<div class=wide><table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>")
            for r in rows:
                parts.append("<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in cols) + "</tr>")
            parts.append("</table></div>")
        for pname, data in pngs:
            parts.append(f"<figure><img alt='{html.escape(pname)}' src='data:image/png;base64,{base64.b64encode(data).decode()}'>"
                         f"<figcaption>{html.escape(pname)}</figcaption></figure>")
    return "\n".join(parts)
