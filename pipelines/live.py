"""Terminal output: the live variant table while the DAG runs, then the scoreboard."""
from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

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


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def comparison_table(rows: list[dict], title: str, max_metrics: int = 6) -> Table:
    """Variant rows with the report's table metrics (ratio columns stay in comparison.json)."""
    t = Table(title=title)
    metrics = [k for r in rows for k in r if k not in ("variant", "technique", "status", "role", "wall_s") and "/" not in k]
    cols = ["variant", "role"] + list(dict.fromkeys(metrics))[:max_metrics]
    for c in cols:
        t.add_column(c, justify="left" if c in ("variant", "role") else "right", no_wrap=c == "variant")
    for r in rows:
        t.add_row(*[_fmt(r.get(c)) if not (c == "variant" and r.get("status") == "FAILED") else f"[red]{r[c]} (failed)[/]"
                    for c in cols])
    return t


def claims_table(claims, title: str = "claims") -> Table:
    """The scoreboard: claim, holds or not, our measured figure, the paper's figure."""
    t = Table(title=title, show_lines=True)
    t.add_column("claim", no_wrap=True)
    t.add_column("holds", no_wrap=True)
    t.add_column("measured", ratio=1)
    t.add_column("paper", ratio=2)
    for c in claims:
        mark = "[green]✓ holds[/]" if c.holds else "[red]✗ fails[/]"
        if getattr(c, "skipped", False):
            mark = "[dim]not run[/]"
        elif not c.gate:
            mark = "[dim]control:[/] " + ("yes" if c.holds else "no")
        t.add_row(c.name, mark, c.measured + (f" [dim]({c.error})[/]" if c.error else ""), c.paper)
    return t


def print_scoreboard(console: Console, outcome, spec) -> None:
    console.print(comparison_table(outcome.comparison, f"{outcome.experiment}: comparison"))
    console.print(claims_table(outcome.claims, f"{outcome.experiment}: scoreboard "
                                               f"({outcome.claims_held}/{outcome.claims_judged} claims hold)"))
    for n in outcome.failed:
        console.print(f"[red]variant {n} failed:[/] {outcome.variants[n].error.splitlines()[0]}")
    t = outcome.timings
    console.print(f"[dim]total {t['total_s']:.1f}s · technique {t['technique_s']:.1f}s · ray init {t['ray_init_s']:.1f}s · "
                  f"tracking {t['tracking_s']:.1f}s · platform overhead {100 * t['overhead_share']:.0f}% · "
                  f"prepare cache: {', '.join(f'{k}={v}' for k, v in outcome.prepare_cache.items()) or 'none'}[/]")
    console.print(f"[dim]MLflow: {outcome.tracking_uri} · experiment {outcome.experiment} · parent run {outcome.parent_run_id}[/]")
