"""`dtlab compare`: the latest FINISHED run of each experiment side by side, from the MLflow store.

Prints each experiment's comparison tables and scoreboard (each measured figure labelled, the
``holds`` expression beside it, debug runs marked), and writes one self-contained HTML report
(tables plus the parent runs' PNG plots inlined) under runs/reports/. Newer runs that did not
finish (running, killed, failed) are named as skipped, never shown as the latest.
"""
from __future__ import annotations

import base64
import html
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from components.core.claims import ClaimOutcome
from components.core.runs_query import latest_parents
from pipelines.live import DEBUG_BANNER, measured_text, claim_defs, claims_table, comparison_tables, is_debug


def _read_artifact(client, run_id: str, path: str) -> bytes | None:
    try:
        with tempfile.TemporaryDirectory() as d:
            local = client.download_artifacts(run_id, path, d)
            return Path(local).read_bytes()
    except Exception:
        return None


def _pngs(client, run_id: str) -> list[tuple[str, bytes]]:
    try:
        items = client.list_artifacts(run_id, "plots")
    except Exception:
        return []
    out = []
    for it in items:
        if it.path.endswith(".png"):
            data = _read_artifact(client, run_id, it.path)
            if data:
                out.append((it.path, data))
    return out


def _claim_defs(client, run_id: str) -> dict[str, Any]:
    """The claims' definitions (holds, measured) from the parent run's config.yaml."""
    import yaml

    try:
        cfg = yaml.safe_load(_read_artifact(client, run_id, "config.yaml") or b"{}") or {}
        return claim_defs((cfg.get("experiment") or {}).get("claims") or {})
    except Exception:  # noqa: BLE001 - an old or odd config: outcomes are shown without definitions
        return {}


def compare(uri: str, names: list[str] | None, out_dir: str, console: Console | None = None) -> str | None:
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow.tracking import MlflowClient

    console = console or Console()
    client = MlflowClient(tracking_uri=uri)
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
            console.print(claims_table(claims, f"{exp.name}: {sum(c.holds for c in judged)}/{len(judged)} claims hold",
                                       defs=defs))
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
             ".ok{color:#080}.bad{color:#b00}.debug{background:#ffd;border:1px solid #cc0;padding:4px}.skipped{color:#666}img{max-width:640px;margin:6px;border:1px solid #eee}</style>",
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
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>")
            for r in rows:
                parts.append("<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in cols) + "</tr>")
            parts.append("</table>")
        for pname, data in pngs:
            parts.append(f"<figure><img alt='{html.escape(pname)}' src='data:image/png;base64,{base64.b64encode(data).decode()}'>"
                         f"<figcaption>{html.escape(pname)}</figcaption></figure>")
    return "\n".join(parts)
