"""What a run (variant or seed) carries in MLflow: metrics, thinned series, tables, files, plots."""
from __future__ import annotations

import math
from typing import Any

from components.core.formatting import fmt
from components.core.result import Result

SERIES_PLOTS = 6


def to_yaml(obj: Any) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(obj))


def _loggable(metrics: dict[str, float], n_seeds: int) -> dict[str, float]:
    """With one seed the ``_se`` (NaN) and ``_n`` (1) columns say nothing: they stay out of MLflow."""
    if n_seeds > 1:
        return metrics
    base = {k for k in metrics if not (k.endswith("_se") or k.endswith("_n"))}
    return {k: v for k, v in metrics.items()
            if k in base or not (k[:-3] in base if k.endswith("_se") else k[:-2] in base)}


def log_result(tracker, run_id: str, res: Result, title: str, max_points: int | None, summary: dict,
               wall_s: float, files: bool = True, n_seeds: int = 1) -> None:
    """Log one Result to ``run_id``: final metrics, series (thinned; full ones in series.json),
    tables, files, summary.json and the plots: per-step series in plots/series.png, curves over
    another x (Result.series) in plots/curves.png with that x on the axis, each also as the
    table ``curves/<name>.json``. The plots are drawn on the tracker's writer thread, in order
    with the run's writes (``Tracker.submit_for``: a drawing that fails ends the run FAILED with
    the reason); whoever draws in its own thread afterwards flushes the tracker first, as matplotlib
    is not thread-safe (:func:`pipelines.stages.execute.execute` does, before the report)."""
    metrics = _loggable(res.clean_metrics(), n_seeds)
    metrics["variant_wall_s"] = wall_s
    metrics.setdefault("wall_s", wall_s)  # a technique's own wall_s (e.g. per request) wins
    tracker.log_metrics(run_id, metrics)
    full, curves = {}, []
    for name in res.series:
        xs, ys = res.series_xy(name)
        x_name = getattr(xs, "name", None)
        # a series named like a final metric would overwrite it in MLflow's "latest value" view
        tracker.log_series(run_id, f"{name}_series" if name in metrics else name, xs, ys, max_points=max_points,
                           x_name=x_name)
        full[name] = {"step": xs, "value": ys} if x_name is None else {"x": x_name, "step": xs, "value": ys}
        if x_name is not None:
            curves.append(name)
            tracker.log_json(run_id, [{x_name: x, name: y} for x, y in zip(xs, ys)], f"curves/{name}.json")
    if full:
        tracker.log_json(run_id, full, "series.json")
    for name, rows in res.tables.items():
        tracker.log_json(run_id, rows, f"tables/{name}.json")
    if files:
        for name, data in res.files.items():
            if isinstance(data, str):
                tracker.log_text(run_id, data, name)
            else:
                tracker.log_bytes(run_id, data, name)
    tracker.log_json(run_id, {**summary, "metrics": metrics, "info": res.info}, "summary.json")
    steps = [n for n in res.series if n not in curves]
    figures = [(names, path) for names, path in ((steps[:SERIES_PLOTS], "plots/series.png"), (curves, "plots/curves.png"))
               if names]
    if figures:  # drawn on the tracker's writer thread: the driver goes back to dispatching at once
        tracker.submit_for(run_id, _draw_figures, tracker, run_id, res, title, figures)


def _draw_figures(tracker, run_id: str, res: Result, title: str, figures: list[tuple[list[str], str]]) -> None:
    for names, path in figures:
        _series_figure(tracker, run_id, res, names, title, path)


def _series_figure(tracker, run_id: str, res: Result, names: list[str], title: str, path: str) -> None:
    """One panel per series, its x axis labelled by what x is ("step" for steps)."""
    import matplotlib.pyplot as plt

    from pipelines import plots

    fig, axes = plt.subplots(len(names), 1, figsize=(6, 2.3 * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        xs, ys = res.series_xy(name)
        ax.plot(xs, ys, lw=1.2)
        finite = [y for y in ys if isinstance(y, float) and math.isfinite(y)]
        if finite and min(finite) > 0 and max(finite) / max(min(finite), 1e-300) > 1e3:
            ax.set_yscale("log")
        ax.set_ylabel(name, fontsize=8)
        ax.set_xlabel(getattr(xs, "name", None) or "step", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    tracker.log_figure(run_id, fig, path)
    plots.close(fig)


def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return ""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(fmt(r.get(c)) for c in cols) + " |")
    return "\n".join(out) + "\n"


