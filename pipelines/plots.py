"""Report plots, made from the variants' results (matplotlib, headless)."""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROLE_STYLE = {"technique": "-", "baseline": "--", "control": ":"}


def series_plot(outcomes: dict[str, Any], metric: str, logy: bool = False, variants: list[str] | None = None,
                title: str | None = None, xlabel: str | None = None):
    """One curve per variant of a series; baselines dashed. The x axis is ``xlabel``, else what
    the series' x is (Result.series: "alpha", "deferral ratio"), else "step"."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    drawn = 0
    for name, o in outcomes.items():
        if variants and name not in variants:
            continue
        if o.result is None or metric not in o.result.series:
            continue
        x, y = o.result.series_xy(metric)
        xlabel = xlabel or getattr(x, "name", None)
        if logy:
            y = [max(v, 1e-300) for v in y]
        ax.plot(x, y, ROLE_STYLE.get(o.role, "-"), label=name, lw=1.4)
        drawn += 1
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel or "step")
    ax.set_ylabel(metric)
    ax.set_title(title or metric)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig, drawn


def bar_plot(outcomes: dict[str, Any], metric: str, logy: bool = False, variants: list[str] | None = None,
             title: str | None = None):
    names, vals, colors = [], [], []
    for name, o in outcomes.items():
        if variants and name not in variants:
            continue
        if o.result is None or metric not in o.result.metrics:
            continue
        names.append(name)
        vals.append(float(o.result.metrics[metric]))
        colors.append({"technique": "tab:blue", "baseline": "tab:gray", "control": "tab:olive"}.get(o.role, "tab:blue"))
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(names) + 2), 4))
    ax.bar(names, vals, color=colors)
    if logy:
        ax.set_yscale("log")
    ax.set_ylabel(metric)
    ax.set_title(title or metric)
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    return fig, len(names)


def scatter_plot(outcomes: dict[str, Any], x: str, y: str, logx: bool = False, logy: bool = False,
                 variants: list[str] | None = None, title: str | None = None):
    fig, ax = plt.subplots(figsize=(6, 4.2))
    n = 0
    for name, o in outcomes.items():
        if variants and name not in variants:
            continue
        if o.result is None or x not in o.result.metrics or y not in o.result.metrics:
            continue
        ax.scatter(o.result.metrics[x], o.result.metrics[y], label=name,
                   marker="o" if o.role == "technique" else "s")
        ax.annotate(name, (o.result.metrics[x], o.result.metrics[y]), fontsize=7)
        n += 1
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or f"{y} vs {x}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig, n


def make_plot(spec: dict[str, Any], outcomes: dict[str, Any]):
    kind = spec["kind"]
    opts = {k: v for k, v in spec.items() if k not in ("kind", "name")}
    if kind == "series":
        return series_plot(outcomes, **opts)
    if kind == "bar":
        return bar_plot(outcomes, **opts)
    return scatter_plot(outcomes, **opts)


def plot_name(spec: dict[str, Any]) -> str:
    if spec.get("name"):
        return str(spec["name"])
    if spec["kind"] == "scatter":
        return f"scatter_{spec['y']}_vs_{spec['x']}"
    return f"{spec['kind']}_{spec['metric']}" + ("_" + "_".join(spec["variants"]) if spec.get("variants") and len(spec["variants"]) <= 2 else "")


def close(fig) -> None:
    plt.close(fig)
