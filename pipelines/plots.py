"""Report plots, made from the variants' results (matplotlib, headless)."""
from __future__ import annotations

import textwrap
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from components.core.plotting import label_points, readable_log_axis as _readable_log_axis  # noqa: E402

ROLE_STYLE = {"technique": "-", "baseline": "--", "control": ":"}
ROLE_COLOR = {"technique": "tab:blue", "baseline": "tab:gray", "control": "tab:olive"}
ROLE_MARKER = {"technique": "o", "baseline": "s", "control": "^"}
TITLE_CHARS = 68   # a title line that fits the 7-inch figure at 12 pt; longer titles wrap instead of running off


MINOR_TICK_DECADES = 8   # a log axis spanning more decades draws no minor ticks (matplotlib's own default)


def readable_log_axis(ax, which: str = "x") -> None:
    """:func:`components.core.plotting.readable_log_axis`, with the minor ticks' labels (empty: never
    labelled) switched off rather than laid out: matplotlib measures every visible label. Over more than
    :data:`MINOR_TICK_DECADES` decades the minor ticks go too: error_feedback's 30 decades made 240 of
    them, each a tick object that tight_layout and savefig lay out (0.4 s of a plot's 0.6 s here), for a
    band of marks the grid already shows."""
    import math

    from matplotlib import ticker

    _readable_log_axis(ax, which)
    ax.tick_params(axis=which, which="minor", labelbottom=False, labeltop=False, labelleft=False, labelright=False)
    lo, hi = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
    if lo > 0 and math.log10(hi / lo) > MINOR_TICK_DECADES:
        (ax.xaxis if which == "x" else ax.yaxis).set_minor_locator(ticker.NullLocator())


def set_title(ax, text: str, **kw) -> None:
    """``ax.set_title`` with the text wrapped to lines that fit the figure's width."""
    ax.set_title(textwrap.fill(str(text), TITLE_CHARS), **kw)


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
        readable_log_axis(ax, "y")
    ax.set_xlabel(xlabel or "step")
    ax.set_ylabel(metric)
    set_title(ax, title or metric)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig, drawn


def _role_legend(ax, roles: list[str], marker: bool = False) -> None:
    """A legend naming what each colour (bars) or marker (points) stands for; bars get it in a row
    between the title and the plot, where it cannot cover a bar."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    seen = [r for r in ROLE_COLOR if r in roles]
    if marker:
        handles = [Line2D([], [], ls="", marker=ROLE_MARKER[r], color=ROLE_COLOR[r], label=r) for r in seen]
    else:
        handles = [Patch(color=ROLE_COLOR[r], label=r) for r in seen]
        ax.legend(handles=handles, fontsize=9, ncol=len(handles), loc="lower center", bbox_to_anchor=(0.5, 1.0),
                  frameon=False)
        return
    ax.legend(handles=handles, fontsize=9, title="role", title_fontsize=9, loc="best")


def bar_plot(outcomes: dict[str, Any], metric: str, logy: bool = False, variants: list[str] | None = None,
             title: str | None = None):
    """One bar per variant, coloured by role (legend), horizontal so that every name reads at full size
    and the figure keeps one width however many variants there are."""
    names, vals, roles = [], [], []
    for name, o in outcomes.items():
        if variants and name not in variants:
            continue
        if o.result is None or metric not in o.result.metrics:
            continue
        names.append(name)
        vals.append(float(o.result.metrics[metric]))
        roles.append(o.role if o.role in ROLE_COLOR else "technique")
    fig, ax = plt.subplots(figsize=(7, max(2.6, 0.34 * len(names) + 1.4)))
    ax.barh(names, vals, color=[ROLE_COLOR[r] for r in roles])
    if logy:                               # before anything autoscales the empty axes' x to negative limits
        ax.set_xscale("log")
    if names:
        ax.invert_yaxis()                  # the experiment's order, top to bottom
    if logy:
        readable_log_axis(ax, "x")
    ax.set_xlabel(metric, fontsize=11)
    set_title(ax, title or metric, fontsize=12, pad=26 if names else 6)   # the role legend sits below it
    ax.tick_params(labelsize=10)
    ax.grid(axis="x", alpha=0.3)
    if names:
        _role_legend(ax, roles)
    fig.tight_layout()
    return fig, len(names)


def scatter_plot(outcomes: dict[str, Any], x: str, y: str, logx: bool = False, logy: bool = False,
                 variants: list[str] | None = None, title: str | None = None):
    """One point per variant (marker and colour by role, legend), each named beside it without overlap."""
    fig, ax = plt.subplots(figsize=(7, 4.8))
    pts = []
    for name, o in outcomes.items():
        if variants and name not in variants:
            continue
        if o.result is None or x not in o.result.metrics or y not in o.result.metrics:
            continue
        role = o.role if o.role in ROLE_COLOR else "technique"
        pts.append((float(o.result.metrics[x]), float(o.result.metrics[y]), name, role))
        ax.scatter(pts[-1][0], pts[-1][1], marker=ROLE_MARKER[role], color=ROLE_COLOR[role], zorder=3)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.margins(0.12)                       # room for the names at the edges
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    set_title(ax, title or f"{y} vs {x}")
    ax.grid(alpha=0.3)
    if pts:
        _role_legend(ax, [p[3] for p in pts], marker=True)
    fig.tight_layout()
    if logx:
        readable_log_axis(ax, "x")
    if logy:
        readable_log_axis(ax, "y")
    fig.tight_layout()
    label_points(ax, [p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], avoid=[ax.get_legend()])
    return fig, len(pts)


def first_term(expr: str) -> str:
    """The figure a cells plot draws from a claim's ``measured``: the first element of a list, else all
    of it (``{axis}`` templates kept)."""
    import ast

    from components.core.claims import template_axes

    axes = sorted(template_axes(expr))
    marked = expr
    for a in axes:                         # {axis} is not Python: a placeholder name while parsing
        marked = marked.replace("{" + a + "}", f"__axis_{a}__")
    body = ast.parse(marked, mode="eval").body
    term = ast.unparse(body.elts[0]) if isinstance(body, (ast.List, ast.Tuple)) and body.elts else marked
    for a in axes:
        term = term.replace(f"__axis_{a}__", "{" + a + "}")
    return term


def cell_values(outcomes: dict[str, Any], figure: str, cells: list[dict]) -> list[tuple[float, float]]:
    """(value, SE) of a claim's figure template in each cell; SE is the paired SE of a ``paired(E)``
    figure (0 otherwise), NaN where the cell cannot be computed."""
    import ast
    import math

    from components.core.claims import evaluate, substitute

    metrics = {n: o.result.clean_metrics() for n, o in outcomes.items() if o.result is not None}
    seeds = {n: o.seed_metrics() for n, o in outcomes.items() if o.result is not None}
    out = []
    for cell in cells:
        term = first_term(substitute(figure, cell))
        body = ast.parse(term, mode="eval").body
        try:
            value = float(evaluate(term, metrics, "plot", seeds))
        except Exception:  # noqa: BLE001 - a variant or metric the run lacks: a gap in the curve
            out.append((math.nan, math.nan))
            continue
        se = 0.0
        if isinstance(body, ast.Call) and isinstance(body.func, ast.Name) and body.func.id == "paired":
            try:
                se = float(evaluate(f"paired_se({ast.unparse(body.args[0])})", metrics, "plot", seeds))
            except Exception:  # noqa: BLE001 - one seed: no SE to draw
                se = math.nan
        out.append((value, se))
    return out


def cells_plot(outcomes: dict[str, Any], claim: str, figure: str, axes: dict[str, list], x: str,
               group: str | None = None, x_figure: str | None = None, hline: float | None = None,
               logx: bool = False, logy: bool = False, title: str | None = None, ylabel: str | None = None,
               xlabel: str | None = None):
    """A grid claim's figure over its cells: one point per value of axis ``x`` (placed at that value,
    or at ``x_figure`` computed in the cell: a measured x such as a communication share), one line per
    value of axis ``group``, ± the paired SE where the figure is ``paired(...)``; ``hline``: a reference (the gate)."""
    import math

    fig, ax = plt.subplots(figsize=(7, 4.2))
    drawn = 0
    for g in (axes[group] if group else [None]):
        cells = [{x: v, **({group: g} if group else {})} for v in axes[x]]
        vals = cell_values(outcomes, figure, cells)
        xs_at = [v for v, _ in cell_values(outcomes, x_figure, cells)] if x_figure else [float(v) for v in axes[x]]
        pts = [(xv, y, se) for xv, (y, se) in zip(xs_at, vals) if math.isfinite(y) and math.isfinite(xv)]
        if not pts:
            continue
        xs, ys, ses = zip(*pts)
        ax.errorbar(xs, ys, yerr=[0.0 if not math.isfinite(e) else e for e in ses], marker="o", capsize=3, lw=1.4,
                    label=f"{group} = {g}" if group else None)
        if x_figure:                       # a measured x: say which cell each point is
            shown = [v for v, xv, (y, _) in zip(axes[x], xs_at, vals) if math.isfinite(y) and math.isfinite(xv)]
            for (xv, y, _), v in zip(pts, shown):
                ax.annotate(f"{x}={v}", (xv, y), textcoords="offset points", xytext=(4, 5), fontsize=7)
        drawn += 1
    if hline is not None:
        ax.axhline(hline, color="tab:red", ls="--", lw=1, label=f"gate {hline:g}")
    if logx:
        ax.set_xscale("log")
        readable_log_axis(ax, "x")
    if logy:
        ax.set_yscale("log")
        readable_log_axis(ax, "y")
    if x_figure:
        ax.margins(x=0.08)                 # room for the last point's name
    else:                                  # the axis values themselves, as the grid spells them
        ax.set_xticks([float(v) for v in axes[x]], [str(v) for v in axes[x]])
        ax.minorticks_off()
    ax.set_xlabel(xlabel or (first_term(x_figure) if x_figure else x))
    ax.set_ylabel(ylabel or first_term(figure))
    set_title(ax, title or claim)
    ax.grid(alpha=0.3)
    if drawn and (group or hline is not None):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig, drawn


def make_plot(spec: dict[str, Any], outcomes: dict[str, Any]):
    kind = spec["kind"]
    opts = {k: v for k, v in spec.items() if k not in ("kind", "name")}
    if kind == "series":
        return series_plot(outcomes, **opts)
    if kind == "bar":
        return bar_plot(outcomes, **opts)
    if kind == "cells":
        return cells_plot(outcomes, **opts)
    return scatter_plot(outcomes, **opts)


def plot_name(spec: dict[str, Any]) -> str:
    if spec.get("name"):
        return str(spec["name"])
    if spec["kind"] == "scatter":
        return f"scatter_{spec['y']}_vs_{spec['x']}"
    if spec["kind"] == "cells":
        return f"cells_{spec['claim']}"
    return f"{spec['kind']}_{spec['metric']}" + ("_" + "_".join(spec["variants"]) if spec.get("variants") and len(spec["variants"]) <= 2 else "")


def close(fig) -> None:
    plt.close(fig)
