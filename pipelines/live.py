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


def claims_table(claims, title: str = "claims", defs: dict[str, Any] | None = None,
                 operands: dict[str, list] | None = None) -> Table:
    """The scoreboard: claim, holds or not, each measured figure labelled (a claim without
    ``measured:``: its ``holds`` operands from ``operands``), the ``holds`` expression (its
    threshold), the premise with its value, and the paper's figure. ``defs``: Claim definitions by name."""
    from pipelines.figures import operands_text

    defs, operands = defs or {}, operands or {}
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
        elif getattr(c, "inconclusive", False):   # a timed effect inside its noise floor
            mark = ("[magenta]~ inconclusive[/]" if c.gate else "[dim]control:[/] inconclusive")
        elif not c.gate:
            mark = "[dim]control:[/] " + ("yes" if c.holds else "no")
        claim = defs.get(c.name)
        holds_if = escape(claim.holds + (f" (over {', '.join(claim.over)})" if claim.over else "")) if claim else ""
        if getattr(c, "premise", ""):
            met = {True: "met", False: "NOT MET", None: "unknown"}[getattr(c, "premise_holds", None)]
            pm = getattr(c, "premise_measured", "")
            holds_if += f"\n[dim]premise {met}: {escape(c.premise)}" + (f" = {escape(pm)}" if pm else "") + "[/]"
        shown = measured_text(c, claim) if claim is None or claim.measured else (operands_text(operands.get(c.name))
                                                                                 or c.measured)
        t.add_row(c.name, mark, escape(shown) + (f" [dim]({escape(c.error)})[/]" if c.error else ""),
                  holds_if, escape(c.paper))
    return t


DEBUG_BANNER = ("[bold black on yellow] DEBUG RUN [/] tiny debug flavour (debug=true): models and data are "
                "shrunk, claims are expected to fail; run without debug=true for the paper's figures")


def is_debug(tags: dict[str, str]) -> bool:
    """Whether a parent run was a debug run (its ``debug`` tag)."""
    return str(tags.get("debug", "")).lower() == "true"


def print_scoreboard(console: Console, outcome, spec, debug: bool | None = None, timing: bool = True) -> None:
    """The end-of-run tables; ``debug`` None: read from the parent run's ``debug`` tag.
    ``timing``: the timing and MLflow lines too (:func:`print_timing`)."""
    from pipelines.figures import claim_operands

    if debug is None:
        debug = _parent_debug(outcome)
    if debug:
        console.print(DEBUG_BANNER)
    for t in comparison_tables(outcome.comparison, f"{outcome.experiment}: comparison"):
        console.print(t)
    console.print(claims_table(outcome.claims, f"{outcome.experiment}: scoreboard "
                                               f"({outcome.claims_held}/{outcome.claims_judged} claims hold"
                                               + (f", {n} inconclusive" if (n := getattr(outcome, "claims_inconclusive", 0)) else "")
                                               + ")"
                                               + (" · DEBUG" if debug else ""),
                               defs=claim_defs(spec.claims),
                               operands=claim_operands(spec.claims, outcome.metrics(), outcome.seed_metrics())))
    for n in outcome.failed:
        console.print(f"[red]variant {n} failed:[/] {outcome.variants[n].error.splitlines()[0]}")
    if timing:
        print_timing(console, outcome)


def print_timing(console: Console, outcome) -> None:
    """Where the run's time went (:func:`timing_lines`), then where its MLflow runs are."""
    for line in timing_lines(outcome.timings, outcome.prepare_cache):
        console.print(f"[dim]{escape(line)}[/]")
    console.print(f"[dim]MLflow: {outcome.tracking_uri} · experiment {outcome.experiment} · parent run {outcome.parent_run_id}[/]")


# the back-to-back phases of a run (pipelines.dag.Phases), in order: timings key -> label
PHASE_LABELS = {"startup_s": "start-up", "ray_init_s": "ray init", "prepare_s": "prepare", "execute_s": "execute",
                "report_s": "report", "tracking_wait_s": "tracking", "teardown_s": "teardown"}


def _tenths(parts: list[float], total: float) -> list[int]:
    """``parts`` in tenths of a second, rounded so that they add up to ``total`` rounded (largest
    remainders get the leftover tenths): the printed sum is the printed total."""
    import math

    raw = [10 * max(0.0, p) for p in parts]
    out = [math.floor(r) for r in raw]
    left = max(0, round(10 * total) - sum(out))
    for i in sorted(range(len(raw)), key=lambda i: out[i] - raw[i])[:left]:
        out[i] += 1
    return out


def timing_lines(t: dict[str, float], prepare_cache: dict | None = None) -> list[str]:
    """The timing line: the total cut into its phases (start-up: imports and validation; ray
    init; prepare; execute; report: evaluation, plots, the parent run's artifacts, the
    scoreboard; tracking: the driver waiting on MLflow between stages; teardown: stopping the Ray
    session the run started) plus ``other`` for what no phase covers, so that the parts add up to
    the total and none is negative. Then the figures that overlap those parts, each labelled: the
    time any task was computing (inside prepare and execute) and the time spent in MLflow calls."""
    parts = {label: float(t[k]) for k, label in PHASE_LABELS.items() if t.get(k) is not None}
    total = max(float(t.get("total_s") or 0.0), sum(max(0.0, v) for v in parts.values()))
    parts["other"] = max(0.0, total - sum(max(0.0, v) for v in parts.values()))
    shown = _tenths(list(parts.values()), total)
    split = " + ".join(f"{label} {n / 10:.1f}" for label, n in zip(parts, shown) if n or label in ("execute",))
    cache = ", ".join(f"{k}={v}" for k, v in (prepare_cache or {}).items()) or "none"
    over = f"technique computing {t.get('technique_s', 0.0):.1f}s (inside prepare and execute)"
    if t.get("tracking_s") is not None:
        over += f" · MLflow calls {t['tracking_s']:.1f}s (inside the parts)"
    if t.get("overhead_share") is not None:
        over += f" · platform overhead {100 * t['overhead_share']:.0f}%"
    return [f"total {round(10 * total) / 10:.1f}s = {split}", f"{over} · prepare cache: {cache}"]


def _parent_debug(outcome) -> bool:
    try:
        from components.core.tracker import tracking_client

        return is_debug(tracking_client(outcome.tracking_uri).get_run(outcome.parent_run_id).data.tags)
    except Exception:  # noqa: BLE001 - the banner is a nicety; the run name says "-debug" too
        return False
