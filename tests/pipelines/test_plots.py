"""Report plots read at the size the report shows them: bars keep one width and full-size names with a
legend for their colours, scatter points are named without overlap, files are named for what they show."""
from types import SimpleNamespace as NS

from matplotlib.text import Text

from components.core.result import Result
from pipelines import config, plots


def _outcome(role: str, **metrics):
    return NS(role=role, result=Result(metrics=metrics))


def test_bar_plot_of_many_variants_keeps_its_width_and_names_its_colours():
    # Prepare: 17 variants (mozart's count), every role
    outs = {f"variant_{i}": _outcome(("technique", "baseline", "control")[i % 3], moe_layer_time_s=1e-3 * (i + 1))
            for i in range(17)}
    # Execute
    fig, drawn = plots.make_plot({"kind": "bar", "metric": "moe_layer_time_s"}, outs)
    # Assert: 7 inches wide whatever the count (not scaled down in the report), names at >= 10 pt,
    # a legend naming each role's colour
    ax = fig.axes[0]
    assert drawn == 17 and fig.get_figwidth() == 7
    assert [t.get_text() for t in ax.get_yticklabels()] == list(outs)
    assert min(t.get_fontsize() for t in ax.get_yticklabels()) >= 10
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["technique", "baseline", "control"]
    plots.close(fig)


def test_scatter_names_every_point_without_overlap_and_has_a_role_legend():
    # Prepare: plan_cache-like points, six of them within 0.05 of each other
    pts = {"large_only": ("baseline", 1.0, 0.92), "small_only": ("baseline", 0.08, 0.55),
           "plan_cache": ("technique", 0.31, 0.90), "plan_cache_exact": ("technique", 0.33, 0.89),
           "semantic_cache": ("baseline", 0.30, 0.86), "full_history": ("baseline", 0.34, 0.88),
           "plan_cache_no_filter": ("technique", 0.29, 0.87), "query_cache": ("baseline", 0.32, 0.90)}
    outs = {n: _outcome(r, cost_ratio_vs_large=x, accuracy=y) for n, (r, x, y) in pts.items()}
    # Execute
    fig, drawn = plots.make_plot({"kind": "scatter", "x": "cost_ratio_vs_large", "y": "accuracy"}, outs)
    # Assert
    ax = fig.axes[0]
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    names = [c for c in ax.texts]
    boxes = [Text.get_window_extent(t, r) for t in names]
    assert drawn == 8 and sorted(t.get_text() for t in names) == sorted(pts)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["technique", "baseline"]
    plots.close(fig)


def test_a_long_title_wraps_inside_the_figure():
    # Prepare: fal's depth plot title (86 characters ran off both edges of the 7-inch figure)
    title = "final validation loss vs depth (3 and 6 layers d 64, 12 layers d 48; 600 steps; mean over seeds)"
    outs = {"a": _outcome("baseline", n_layer=3, final_val_loss=1.9), "b": _outcome("technique", n_layer=12, final_val_loss=2.0)}
    # Execute
    fig, _ = plots.make_plot({"kind": "scatter", "x": "n_layer", "y": "final_val_loss", "title": title}, outs)
    fig.canvas.draw()
    box = fig.axes[0].title.get_window_extent(fig.canvas.get_renderer())
    # Assert: every word kept, on more than one line, within the figure's width
    shown = fig.axes[0].get_title()
    assert shown.split() == title.split() and "\n" in shown
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width
    plots.close(fig)


def test_log_plots_with_nothing_to_draw_still_render():
    # Prepare: the only variant failed (no result), every kind on log axes
    outs = {"cf_1bit": NS(role="technique", result=None)}
    specs = [{"kind": "bar", "metric": "bytes_per_step", "logy": True},
             {"kind": "scatter", "x": "bits_sent", "y": "loss", "logx": True, "logy": True},
             {"kind": "series", "metric": "loss", "logy": True}]
    for spec in specs:
        # Execute
        fig, drawn = plots.make_plot(spec, outs)
        fig.canvas.draw()                  # what the report's PNG export does
        # Assert
        assert drawn == 0
        plots.close(fig)


def test_error_feedback_scatter_file_is_named_for_what_it_shows():
    # Prepare
    exp = config.compose(["experiment=error_feedback"])["experiment"]
    # Execute
    spec = next(p for p in exp["report"]["plots"] if p["kind"] == "scatter")
    # Assert: it plots final_grad_norm_sq against bits_sent, and its file says so
    assert (spec["y"], spec["x"]) == ("final_grad_norm_sq", "bits_sent")
    assert plots.plot_name(spec) == "grad_norm_sq_vs_bits"


def _seeded(role: str, per_seed: dict[int, dict]):
    """A variant outcome with per-seed metrics (what paired() reads) and their means."""
    import numpy as np

    keys = next(iter(per_seed.values()))
    mean = {k: float(np.mean([m[k] for m in per_seed.values()])) for k in keys}
    return NS(role=role, result=Result(metrics=mean), seed_metrics=lambda: per_seed)


def test_cells_plot_draws_a_grid_claims_figure_per_cell_with_its_paired_se():
    # Prepare: a figure over axes bw x lat (SSN's latency curve): ratio = t_{bw,lat}(a) / t_{bw,lat}(b) per seed;
    # the lat=50 cell at bw=300 is missing from a's metrics (a gap, not a zero)
    cells = [(bw, lat) for bw in (80, 300) for lat in (5, 50)]
    a = {s: {f"t_b{bw}_l{lat}": (1 + 0.1 * s) * lat for bw, lat in cells if (bw, lat) != (300, 50)} for s in (0, 1, 2)}
    b = {s: {f"t_b{bw}_l{lat}": 2.0 * lat for bw, lat in cells} for s in (0, 1, 2)}
    outs = {"a": _seeded("technique", a), "b": _seeded("baseline", b)}
    spec = {"kind": "cells", "claim": "ratio_by_link", "x": "lat", "group": "bw", "hline": 0.5,
            "axes": {"bw": [80, 300], "lat": [5, 50]}, "figure": "[paired(a.t_b{bw}_l{lat} / b.t_b{bw}_l{lat}), 1]"}
    # Execute
    vals = plots.cell_values(outs, spec["figure"], [{"bw": 80, "lat": 5}, {"bw": 300, "lat": 50}])
    fig, drawn = plots.make_plot(spec, outs)
    # Assert: mean of (1 + 0.1 s) / 2 over seeds 0..2 = 0.55 with its paired SE; the gap is NaN; two lines + gate
    import math
    (v, se), (gap, _) = vals
    assert math.isclose(v, 0.55) and math.isclose(se, 0.05 / math.sqrt(3), rel_tol=1e-6)
    assert math.isnan(gap)
    assert drawn == 2 and plots.plot_name(spec) == "cells_ratio_by_link"
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["5", "50"]   # the grid's values, as written
    assert sorted(t.get_text() for t in fig.axes[0].get_legend().get_texts()) == ["bw = 300", "bw = 80", "gate 0.5"]
    plots.close(fig)


def test_a_cells_plot_must_name_a_grid_claim_and_its_axes(tmp_path):
    # Prepare: the SSN experiment's latency plot, pointed at a claim without axes, then at a wrong axis
    import pytest

    from components.core.errors import ConfigError
    from pipelines.experiment import build_spec

    exp = config.compose(["experiment=subspace_model_parallel"])["experiment"]
    i = next(i for i, p in enumerate(exp["report"]["plots"]) if p["kind"] == "cells")
    bad_claim = {**exp, "report": {**exp["report"], "plots": [{**exp["report"]["plots"][i], "claim": "ssn_exact"}]}}
    bad_axis = {**exp, "report": {**exp["report"], "plots": [{**exp["report"]["plots"][i], "x": "bandwidth"}]}}
    # Execute / Assert: one line naming the key, the value and what is allowed
    with pytest.raises(ConfigError) as e:
        build_spec(bad_claim)
    assert "experiment.report.plots[0].claim" in str(e.value) and "ssn_time_to_loss_by_link" in str(e.value)
    with pytest.raises(ConfigError) as e:
        build_spec(bad_axis)
    assert "experiment.report.plots[0].x" in str(e.value) and "over: ['bw', 'lat']" in str(e.value)


def test_a_log_axis_lays_out_no_minor_labels_and_labels_its_decades():
    # Prepare: a scatter over 5 decades of x and 30 of y (error_feedback's grad norms: 240 minor ticks)
    outs = {f"v{i}": _outcome("technique", bits=10.0 ** (i % 6), err=10.0 ** (-5 * i)) for i in range(7)}
    # Execute
    fig, _ = plots.make_plot({"kind": "scatter", "x": "bits", "y": "err", "logx": True, "logy": True}, outs)
    fig.canvas.draw()
    ax = fig.axes[0]
    # Assert: decade labels drawn on both; minor ticks without labels (never laid out) on the 5 decades,
    # none at all on the 30 (more than MINOR_TICK_DECADES)
    for axis in (ax.xaxis, ax.yaxis):
        assert [t for t in axis.get_major_ticks() if t.label1.get_visible() and t.label1.get_text()]
    assert ax.xaxis.get_minor_ticks() and not any(t.label1.get_visible() for t in ax.xaxis.get_minor_ticks())
    assert len(ax.xaxis.get_minorticklocs()) > 0 and len(ax.yaxis.get_minorticklocs()) == 0
    plots.close(fig)
