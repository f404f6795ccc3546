"""Figures for techniques' own artifacts: a headless figure, and figure -> PNG bytes; and the axis and
label helpers every figure shares (the report's too): log ticks and point names that never collide.

Techniques return PNG bytes in ``Result.files`` (they run in Ray workers; figures themselves do
not travel well), so every family turns figures into bytes the same way, here.
"""
from __future__ import annotations

import io


def figure(w: float = 6.0, h: float = 4.0, ncols: int = 1, nrows: int = 1):
    """``plt.subplots`` on the Agg backend, axes always a 2-D array."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(w, h), squeeze=False)


def fig_png(fig, dpi: int = 100) -> bytes:
    """Lay out, render to PNG bytes, and close the figure (frees its memory)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def readable_log_axis(ax, which: str = "x", max_labels: int = 6) -> None:
    """Log-axis ticks whose labels cannot collide: at most ``max_labels`` labelled decades (thinned when
    the data span more), minor ticks never labelled; an axis spanning less than a decade (no decade or
    one inside it) gets labels at 1, 2 and 5 times a power of ten instead of matplotlib's labelled minor
    ticks, whose long ``a x 10^b`` labels run into each other."""
    import math

    import numpy as np
    from matplotlib import ticker

    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
    if lo <= 0 or hi <= 0:
        return
    axis.set_minor_locator(ticker.LogLocator(base=10.0, subs=np.arange(2, 10) * 0.1, numticks=100))
    axis.set_minor_formatter(ticker.NullFormatter())
    decades = [e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) if lo <= 10.0 ** e <= hi]
    if len(decades) >= 2:
        axis.set_major_locator(ticker.LogLocator(base=10.0, numticks=max_labels + 1))
    else:
        axis.set_major_locator(ticker.LogLocator(base=10.0, subs=(1.0, 2.0, 5.0), numticks=max_labels + 1))
    # every major tick labelled (they are few by construction): no span-dependent thinning of the formatter
    axis.set_major_formatter(ticker.LogFormatterSciNotation(base=10.0, labelOnlyBase=False,
                                                            minor_thresholds=(math.inf, math.inf)))


def label_points(ax, xs, ys, labels, fontsize: float = 8.0, avoid=()) -> list:
    """Name each point beside it without two names (or a name and the axes' edge) overlapping: each
    label takes the first of eight offsets around its point that is free in display space (labels
    placed in order; rings further out when the near ones are taken), else the least-overlapping one;
    a label moved off its ring of first choice is joined to its point by a thin line. Call after the
    axes' scales and limits are set; ``avoid``: artists (a legend) no name may cover. Returns the
    annotations."""
    from matplotlib.transforms import Bbox

    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    centres = ax.transData.transform(list(zip(xs, ys))) if len(xs) else []
    dots = [Bbox.from_bounds(px - 4, py - 4, 8, 8) for px, py in centres]      # the markers themselves
    blocked = dots + [a.get_window_extent(renderer) for a in avoid if a is not None]
    near = [(5, 5), (5, -11), (-5, 5), (-5, -11), (0, 12), (0, -17), (12, -3), (-12, -3)]
    candidates = [(dx * r, dy * r) for r in (1, 2, 3) for dx, dy in near]
    placed, out = [], []
    for x, y, text in zip(xs, ys, labels):
        best = None
        for i, (dx, dy) in enumerate(candidates):
            ann = ax.annotate(str(text), (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                              ha="left" if dx >= 0 else "right")
            box = ann.get_window_extent(renderer)
            clash = sum(_overlap(box, b) for b in placed + blocked) + _outside(box, frame)
            ann.remove()
            if best is None or clash < best[0]:
                best = (clash, i, box)
            if clash == 0:
                break
        clash, i, box = best
        dx, dy = candidates[i]
        line = {"arrowprops": {"arrowstyle": "-", "lw": 0.5, "color": "0.5"}} if i >= len(near) or clash else {}
        out.append(ax.annotate(str(text), (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                               ha="left" if dx >= 0 else "right", **line))
        placed.append(box)
    return out


def _overlap(a, b) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def _outside(box, frame) -> float:
    """Area of ``box`` beyond ``frame`` (display units)."""
    inside = _overlap(box, frame)
    return box.width * box.height - inside
