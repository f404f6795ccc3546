"""Terminal output: the live variant table while the DAG runs, then the scoreboard."""
from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from components.core.formatting import fmt

_STATUS = {"QUEUED": "[dim]queued[/]", "RUNNING": "[yellow]running[/]", "FINISHED": "[green]done[/]",
           "FAILED": "[red]FAILED[/]"}


def _bar(step: int, total: int, width: int = 18) -> str:
    if total <= 0:
        return ""
    frac = min(1.0, step / total)
    full = int(frac * width)
    return "█" * full + "░" * (width - full) + f" {100 * frac:3.0f}%"


class LiveTable:
    """A rich Live table of variants: status, progress bar, elapsed time, live figures."""

    def __init__(self, experiment: str, outcomes: dict[str, Any], console: Console | None):
        self.experiment, self.outcomes, self.console = experiment, outcomes, console
        self.snapshot: dict[str, dict] = {}
        self._live = None

    def render(self) -> Table:
        t = Table(title=f"{self.experiment}: variants", expand=False)
        for col in ("variant", "role", "status", "progress", "elapsed", "live"):
            t.add_column(col)
        now = time.time()
        for name, o in self.outcomes.items():
            snap = self.snapshot.get(name, {})
            step, total = snap.get("step", 0), snap.get("total", 0)
            if o.status == "FINISHED":
                step, total = 1, 1
            live = ", ".join(f"{k}={v:.3g}" for k, v in list(snap.get("live", {}).items())[:3])
            elapsed = (o.ended or now) - o.started if o.started else 0.0
            t.add_row(name, o.role, _STATUS.get(o.status, o.status), _bar(step, total), f"{elapsed:6.1f}s", live)
        return t

    def __enter__(self):
        if self.console is not None:
            self._live = Live(self.render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def update(self, snapshot: dict) -> None:
        self.snapshot = snapshot or self.snapshot
        if self._live is not None:
            self._live.update(self.render())

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.update(self.render())
            self._live.__exit__(*exc)


def _cell(v: Any) -> str:
    """A live-table cell: 3 significant digits, a dash where the value is missing."""
    return fmt(v, 3, "–")


_ROW_KEYS = ("variant", "technique", "status", "role", "wall_s", "seeds")


def comparison_tables(rows: list[dict], title: str, per_table: int = 6) -> list[Table]:
    """Variant rows with every metric of the report's table, ``per_table`` metric columns to a
    table (more metrics: more tables, each titled with its share; none is dropped). A metric's
    standard error is shown beside it (``0.47 ± 0.01``); ratio columns stay in comparison.json."""
    keys = list(dict.fromkeys(k for r in rows for k in r if k not in _ROW_KEYS and "/" not in k))
    metrics = [k for k in keys if not (k.endswith("_se") and k[:-3] in keys)]
    chunks = [metrics[i:i + per_table] for i in range(0, len(metrics), per_table)] or [[]]
    tables = []
    for i, chunk in enumerate(chunks):
        part = f" (metrics {i * per_table + 1}-{i * per_table + len(chunk)} of {len(metrics)})" if len(chunks) > 1 else ""
        t = Table(title=title + part)
        for c in ["variant", "role", *chunk]:
            t.add_column(c, justify="left" if c in ("variant", "role") else "right", no_wrap=c == "variant")
        for r in rows:
            name = f"[red]{r['variant']} (failed)[/]" if r.get("status") == "FAILED" else str(r.get("variant"))
            t.add_row(name, _cell(r.get("role")), *[_cell(r.get(c)) + (f" ± {_cell(r[c + '_se'])}" if r.get(c + "_se") is not None else "")
                                                   for c in chunk])
        tables.append(t)
    return tables


def _split_top(text: str) -> list[str]:
    """``"[0.47, [1, 2], 0.3]"`` -> ``["0.47", "[1, 2]", "0.3"]`` (commas at the top level only)."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return [text]
    out, depth, cur = [], 0, ""
    for ch in text[1:-1]:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += 1 if ch in "[(" else -1 if ch in "])" else 0
        cur += ch
    return out + [cur.strip()] if cur.strip() else out


def labelled(expr: str, measured: str) -> str:
    """Each measured figure beside what it is: ``"[a.s_d, b.s_d]"`` measured ``"[0.468, 0.295]"``
    -> ``"a.s_d = 0.468\nb.s_d = 0.295"``; the figure as is when the two do not line up."""
    import ast

    try:
        body = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return measured
    parts = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    values = _split_top(measured) if isinstance(body, (ast.List, ast.Tuple)) else [measured]
    if len(parts) != len(values) or not measured:
        return measured
    return "\n".join(f"{ast.unparse(p)} = {v}" for p, v in zip(parts, values))


def claim_defs(claims) -> dict[str, Any]:
    """``Claim`` definitions by name (premises as ``NAME.premise``), what the scoreboard shows
    beside each outcome; from Claim objects or from an experiment config's ``claims`` mapping."""
    from components.core.claims import Claim

    if isinstance(claims, dict):
        built = []
        for name, c in claims.items():
            over = c.get("over") or ()
            built.append(Claim(name, str(c.get("holds", "")), measured=str(c.get("measured") or ""),
                               gate=bool(c.get("gate", True)), over=(over,) if isinstance(over, str) else tuple(over),
                               premise=str(c.get("premise") or ""),
                               premise_measured=str(c.get("premise_measured") or "")))
        claims = built
    defs: dict[str, Any] = {}
    for claim in claims or []:
        defs[claim.name] = claim
        if claim.premise:
            defs[f"{claim.name}.premise"] = claim.premise_claim()
    return defs


def measured_text(c, claim) -> str:
    """The measured figure(s), each labelled by its term of the ``measured`` expression."""
    if claim is None or not claim.measured:
        return c.measured
    if c.cells:
        from components.core.claims import substitute

        head = c.measured.split(" · ", 1)[0] + "\n" if " · " in c.measured else ""
        return head + "\n".join(f"{','.join(str(v) for v in cell['cell'].values())}: "
                                 + labelled(substitute(claim.measured, cell["cell"]), cell["measured"]).replace("\n", "; ")
                                 for cell in c.cells)
    return labelled(claim.measured, getattr(c, "measured_pm", "") or c.measured)


def claims_table(claims, title: str = "claims", defs: dict[str, Any] | None = None) -> Table:
    """The scoreboard: claim, holds or not, each measured figure labelled, the ``holds``
    expression (its threshold) and the paper's figure. ``defs``: Claim definitions by name."""
    defs = defs or {}
    t = Table(title=title, show_lines=True)
    t.add_column("claim", no_wrap=True)
    t.add_column("holds", no_wrap=True)
    t.add_column("measured", ratio=2)
    t.add_column("holds if", ratio=2)
    t.add_column("paper", ratio=2)
    for c in claims:
        mark = "[green]✓ holds[/]" if c.holds else "[red]✗ fails[/]"
        if getattr(c, "skipped", False):
            mark = "[dim]not run[/]"
        elif getattr(c, "status", "") == "premise not met" and c.gate:
            mark = "[yellow]premise not met[/]"
        elif not c.gate:
            mark = "[dim]control:[/] " + ("yes" if c.holds else "no")
        claim = defs.get(c.name)
        holds_if = escape(claim.holds + (f" (over {', '.join(claim.over)})" if claim.over else "")) if claim else ""
        if getattr(c, "premise", ""):
            holds_if += f"\n[dim]premise: {escape(c.premise)}[/]"
        t.add_row(c.name, mark, escape(measured_text(c, claim)) + (f" [dim]({escape(c.error)})[/]" if c.error else ""),
                  holds_if, escape(c.paper))
    return t


DEBUG_BANNER = ("[bold black on yellow] DEBUG RUN [/] tiny debug flavour (debug=true): models and data are "
                "shrunk, claims are expected to fail; run without debug=true for the paper's figures")


def is_debug(tags: dict[str, str]) -> bool:
    """Whether a parent run was a debug run (its ``debug`` tag)."""
    return str(tags.get("debug", "")).lower() == "true"


def print_scoreboard(console: Console, outcome, spec, debug: bool | None = None) -> None:
    """The end-of-run tables; ``debug`` None: read from the parent run's ``debug`` tag."""
    if debug is None:
        debug = _parent_debug(outcome)
    if debug:
        console.print(DEBUG_BANNER)
    for t in comparison_tables(outcome.comparison, f"{outcome.experiment}: comparison"):
        console.print(t)
    console.print(claims_table(outcome.claims, f"{outcome.experiment}: scoreboard "
                                               f"({outcome.claims_held}/{outcome.claims_judged} claims hold)"
                                               + (" · DEBUG" if debug else ""),
                               defs=claim_defs(spec.claims)))
    for n in outcome.failed:
        console.print(f"[red]variant {n} failed:[/] {outcome.variants[n].error.splitlines()[0]}")
    t = outcome.timings
    console.print(f"[dim]total {t['total_s']:.1f}s · technique {t['technique_s']:.1f}s · ray init {t['ray_init_s']:.1f}s · "
                  f"tracking {t['tracking_s']:.1f}s · platform overhead {100 * t['overhead_share']:.0f}% · "
                  f"prepare cache: {', '.join(f'{k}={v}' for k, v in outcome.prepare_cache.items()) or 'none'}[/]")
    console.print(f"[dim]MLflow: {outcome.tracking_uri} · experiment {outcome.experiment} · parent run {outcome.parent_run_id}[/]")


def _parent_debug(outcome) -> bool:
    try:
        from mlflow.tracking import MlflowClient

        return is_debug(MlflowClient(tracking_uri=outcome.tracking_uri).get_run(outcome.parent_run_id).data.tags)
    except Exception:  # noqa: BLE001 - the banner is a nicety; the run name says "-debug" too
        return False
