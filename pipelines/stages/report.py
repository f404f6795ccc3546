"""report: the parent run's comparison table, plots, ``claim.<name>`` metrics and claims.json."""
from __future__ import annotations

from components.core.claims import ClaimOutcome
from pipelines.experiment import ExperimentSpec
from pipelines.stages.logging import markdown_table


def report(spec: ExperimentSpec, outcomes, claims: list[ClaimOutcome], rows: list[dict], tracker, parent_id: str) -> None:
    from pipelines import plots

    tracker.log_metrics(parent_id, {f"claim.{c.name}": float(c.holds) for c in claims if not c.skipped})
    gated = [c for c in claims if c.gate and not c.skipped]
    tracker.log_metrics(parent_id, {"claims_held": sum(c.holds for c in gated), "claims_total": len(gated)})
    tracker.log_json(parent_id, rows, "comparison.json")
    tracker.log_text(parent_id, markdown_table(rows), "comparison.md")
    tracker.log_json(parent_id, [c.__dict__ for c in claims], "claims.json")
    for p in spec.report.get("plots") or []:
        fig, drawn = plots.make_plot(p, outcomes)
        if drawn:
            tracker.log_figure(parent_id, fig, f"plots/{plots.plot_name(p)}.png")
        plots.close(fig)
