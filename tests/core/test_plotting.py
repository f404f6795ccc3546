"""Shared figure helpers: log-axis labels and point names that never collide, checked on the rendered
figure's own text extents (display space)."""
import itertools

import pytest
from matplotlib.text import Text

from components.core.plotting import figure, label_points, readable_log_axis


def _labels(fig, ax):
    """The x axis's drawn tick labels (non-empty, their tick inside the view) and their extents."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    lo, hi = sorted(ax.get_xlim())
    return [(t.get_text(), t.get_window_extent(r)) for t in ax.xaxis.get_ticklabels()
            if t.get_text() and lo * (1 - 1e-9) <= t.get_position()[0] <= hi * (1 + 1e-9)]


def _disjoint(boxes) -> bool:
    return not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))


@pytest.mark.parametrize("lo, hi, want", [
    (2.6e4, 2.0e5, {"5", "10^{5}", "2"}),       # less than a decade: 5e4, 1e5, 2e5 labelled, nothing else
    (1e-31, 10.0, None),                          # 32 decades: thinned to a few labels
    (3e2, 4e5, None),                             # three decades
])
def test_log_axis_labels_are_few_and_never_overlap(lo, hi, want):
    # Prepare: a 6-inch axis over [lo, hi] on a log scale
    fig, ax = figure(6.0, 4.0)
    ax = ax[0, 0]
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    # Execute
    readable_log_axis(ax, "x")
    labels = _labels(fig, ax)
    # Assert: at least two labels, at most 7, none overlapping; below a decade the 1-2-5 ticks
    assert 2 <= len(labels) <= 7
    assert _disjoint([b for _, b in labels])
    if want:
        assert all(any(w in text for w in want) for text, _ in labels) and len(labels) == 3


def test_point_names_do_not_overlap_each_other_the_points_or_the_legend():
    # Prepare: eight points in a tight cluster and two apart (plan_cache's scatter), a legend top left
    fig, ax = figure(7.0, 4.8)
    ax = ax[0, 0]
    pts = [(0.31, 0.90), (0.33, 0.89), (0.30, 0.86), (0.34, 0.88), (0.29, 0.87), (0.32, 0.90),
           (1.0, 0.92), (0.08, 0.55)]
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], label="points")
    ax.margins(0.12)
    legend = ax.legend(loc="upper left")
    names = [f"variant_name_{i}" for i in range(len(pts))]
    # Execute
    anns = label_points(ax, [p[0] for p in pts], [p[1] for p in pts], names, avoid=[legend])
    # Assert: every name drawn once, no two overlapping, none over the legend or outside the axes
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = [Text.get_window_extent(a, r) for a in anns]      # the name itself (not its leader line)
    assert [a.get_text() for a in anns] == names
    assert _disjoint(boxes)
    frame, leg = ax.get_window_extent(r), legend.get_window_extent(r)
    assert not any(b.overlaps(leg) for b in boxes)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
