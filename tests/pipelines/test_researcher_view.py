"""What a researcher reads is what was measured: curves keep their real x in MLflow and the plots,
the scoreboard labels every figure with its claim's expression, marks debug runs and drops no
metric, `dtlab compare` shows the latest FINISHED run, and Ray / torch noise stays off the
terminal. None of these tests starts Ray."""
from __future__ import annotations

import json
import os
import logging
import warnings
from types import SimpleNamespace

import pytest
from rich.console import Console

from components.core.claims import Claim, ClaimOutcome
from components.core.result import Result
from components.core.seeds import aggregate_results
from components.core.tracker import Tracker

DEFERRAL = [0.0, 0.25, 0.5, 0.75, 1.0]
ACC = [0.80, 0.86, 0.91, 0.95, 1.0]


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri, background=False)
    return tracker, tracker.experiment_id("researcher_view")


def _history(tracker, run_id, key):
    return sorted((m.step, m.value) for m in tracker.client.get_metric_history(run_id, key))


# ---------------------------------------------------------------- series with a real x
def test_fractional_x_is_logged_by_index_with_its_x_beside_it(store):
    # Prepare
    tracker, exp = store
    run = tracker.start_run(exp, "curve")
    # Execute: a curve over the deferral ratio, and a per-step series
    tracker.log_series(run, "acc_vs_deferral", DEFERRAL, ACC, x_name="deferral ratio")
    tracker.log_series(run, "loss", [0, 10, 20], [3.0, 2.0, 1.0])
    tracker.end(run)
    # Assert: one point per x (the old int(x) cast put them all on steps 0 and 1), x at the same steps
    assert _history(tracker, run, "acc_vs_deferral") == list(enumerate(ACC))
    assert _history(tracker, run, "acc_vs_deferral.x") == list(enumerate(DEFERRAL))
    assert _history(tracker, run, "loss") == [(0, 3.0), (10, 2.0), (20, 1.0)]   # steps stay steps
    assert "loss.x" not in tracker.client.get_run(run).data.metrics


def test_unnamed_fractional_x_is_a_curve_too(store):
    # Prepare: a technique that wrote (xs, ys) with fractional xs and no name
    tracker, exp = store
    res = Result(series={"s_d_vs_alpha": ([0.1, 0.3, 0.5], [0.4, 0.3, 0.2]), "steps": ([0, 5], [1.0, 2.0])})
    run = tracker.start_run(exp, "unnamed")
    # Execute
    xs, ys = res.series_xy("s_d_vs_alpha")
    tracker.log_series(run, "s_d_vs_alpha", xs, ys)
    tracker.end(run)
    # Assert
    assert res.x_name("s_d_vs_alpha") == "x" and res.x_name("steps") is None
    assert [v for _, v in _history(tracker, run, "s_d_vs_alpha.x")] == [0.1, 0.3, 0.5]


def test_x_name_survives_the_mean_over_seeds_and_pickling():
    import pickle

    # Prepare
    per_seed = {s: Result(series={"acc_vs_p": ([0.2, 0.5, 0.9], [0.5 + s, 0.6, 0.7], "participation probability"),
                                  "loss": [3.0, 2.0]}) for s in (0, 1)}
    # Execute
    agg = pickle.loads(pickle.dumps(aggregate_results(per_seed)))
    # Assert
    assert agg.x_name("acc_vs_p") == "participation probability" and agg.x_name("loss") is None
    assert agg.series_xy("acc_vs_p")[1] == [1.0, 0.6, 0.7]


class _Recorder:
    """A tracker that records what log_result asks of it (figures by path with their x labels)."""

    def __init__(self):
        self.series, self.json, self.figures = {}, {}, {}

    def log_metrics(self, run_id, metrics, step=0):
        self.metrics = dict(metrics)

    def log_series(self, run_id, name, xs, ys, max_points=None, x_name=None):
        self.series[name] = x_name

    def log_json(self, run_id, obj, path):
        self.json[path] = json.loads(json.dumps(obj))

    def log_text(self, run_id, text, path):
        pass

    def log_bytes(self, run_id, data, path):
        pass

    def log_figure(self, run_id, fig, path):
        self.figures[path] = [ax.get_xlabel() for ax in fig.axes]

    def submit_for(self, run_id, fn, *args):  # the writer thread's queue: recorded, then run here
        self.submitted = getattr(self, "submitted", []) + [run_id]
        fn(*args)


def test_log_result_gives_a_curve_its_table_and_a_plot_with_its_x_label():
    from pipelines.stages.logging import log_result

    # Prepare
    res = Result(metrics={"s_d": 0.47},
                 series={"acc_vs_deferral": (DEFERRAL, ACC, "deferral ratio"), "loss": [3.0, 2.0, 1.0]})
    rec = _Recorder()
    # Execute
    log_result(rec, "run", res, "gatekeeper", max_points=None, summary={}, wall_s=1.0)
    # Assert: the curve's x named in MLflow, a table of (x, y), its own plot labelled by x
    assert rec.series == {"acc_vs_deferral": "deferral ratio", "loss": None}
    assert rec.json["curves/acc_vs_deferral.json"][1] == {"deferral ratio": 0.25, "acc_vs_deferral": 0.86}
    assert rec.json["series.json"]["acc_vs_deferral"]["x"] == "deferral ratio"
    assert rec.figures == {"plots/series.png": ["step"], "plots/curves.png": ["deferral ratio"]}
    assert rec.submitted == ["run"], "the plots are drawn on the tracker's writer, for this run"
    assert "acc_vs_deferral" not in rec.metrics   # a curve's last point is no final figure


def test_report_series_plot_labels_x_by_its_name():
    from pipelines import plots

    # Prepare
    outcomes = {"gk": SimpleNamespace(role="technique", result=Result(series={"s_d_vs_alpha": ([0.1, 0.5], [0.4, 0.2], "alpha"),
                                                                              "loss": [1.0, 0.5]}))}
    # Execute
    named, _ = plots.series_plot(outcomes, "s_d_vs_alpha")
    given, _ = plots.series_plot(outcomes, "s_d_vs_alpha", xlabel="alpha (loss weight)")
    steps, _ = plots.series_plot(outcomes, "loss")
    # Assert
    assert [f.axes[0].get_xlabel() for f in (named, given, steps)] == ["alpha", "alpha (loss weight)", "step"]
    for f in (named, given, steps):
        plots.close(f)


def test_techniques_name_the_x_of_their_curves():
    """The curves the issue found collapsed in MLflow say what their x is."""
    import ast
    from pathlib import Path

    from pipelines.config import ROOT

    # Prepare: the series each technique module builds as a literal (xs, ys, ...) tuple
    wanted = {"components/serving/gatekeeper/technique.py": {"acc_vs_deferral", "s_d_vs_alpha", "small_acc_vs_alpha"},
              "components/federated/technique.py": {"acc_vs_p"}}
    for rel, names in wanted.items():
        tree = ast.parse((Path(ROOT) / rel).read_text())
        # Execute
        found = {k.value: v for node in ast.walk(tree) if isinstance(node, ast.Dict)
                 for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and k.value in names}
        # Assert: each is built as (xs, ys, "what x is")
        assert set(found) == names, rel
        assert all(isinstance(v, ast.Tuple) and len(v.elts) == 3 for v in found.values()), rel


# ---------------------------------------------------------------- the scoreboard
def _text(*renderables, width=220) -> str:
    c = Console(record=True, width=width)
    for r in renderables:
        c.print(r)
    return c.export_text()


def test_scoreboard_labels_each_measured_figure_and_shows_the_holds_expression():
    from pipelines.live import claim_defs, claims_table

    # Prepare
    claims = [Claim("s_d_gain", "gatekeeper.s_d >= ce_continued.s_d + 0.05", paper="+0.05 s_d",
                    measured="[gatekeeper.s_d, ce_continued.s_d, untuned.s_d, temperature.s_d]")]
    outcomes = [ClaimOutcome("s_d_gain", "+0.05 s_d", "[0.4684, 0.295, 0.1734, 0.01258]", True, True)]
    # Execute
    text = _text(claims_table(outcomes, "scoreboard", defs=claim_defs(claims)))
    # Assert
    for line in ("gatekeeper.s_d = 0.4684", "ce_continued.s_d = 0.295", "temperature.s_d = 0.01258",
                 "gatekeeper.s_d >= ce_continued.s_d + 0.05"):
        assert line in text, text


def test_scoreboard_labels_the_cells_of_a_claim_over_an_axis():
    from pipelines.live import claim_defs, claims_table

    # Prepare: definitions as compare reads them from a parent's config.yaml
    defs = claim_defs({"php_wins": {"holds": "php_{pattern}.acc > fedavg_{pattern}.acc", "over": "pattern",
                                    "measured": "[php_{pattern}.acc, fedavg_{pattern}.acc]"}})
    out = ClaimOutcome("php_wins", "", "1/2 cells hold (need 2) · linear: [0.9, 0.8]; bimodal: [0.7, 0.75]", False, True,
                       cells=[{"cell": {"pattern": "linear"}, "holds": True, "measured": "[0.9, 0.8]", "error": ""},
                              {"cell": {"pattern": "bimodal"}, "holds": False, "measured": "[0.7, 0.75]", "error": ""}])
    # Execute
    text = _text(claims_table([out], defs=defs))
    # Assert
    assert "linear: php_linear.acc = 0.9; fedavg_linear.acc = 0.8" in text, text
    assert "bimodal: php_bimodal.acc = 0.7" in text and "(over pattern)" in text


def test_comparison_shows_every_declared_metric():
    from pipelines.live import comparison_tables

    # Prepare: 14 metrics, more than one table holds
    row = {"variant": "gk", "technique": "gatekeeper", "role": "technique", "status": "FINISHED", "seeds": 5,
           "wall_s": 1.0, **{f"metric_{i:02d}": i / 10 for i in range(14)}, "metric_03_se": 0.01, "metric_00/base": 2.0}
    # Execute
    tables = comparison_tables([row], "gatekeeper: comparison")
    text = _text(*tables)
    # Assert: none dropped, each table says which share it holds, SE beside its mean
    assert all(f"metric_{i:02d}" in text for i in range(14)), text
    assert len(tables) == 3 and "of 14" in text and "0.3 ± 0.01" in text


def _outcome(uri="", parent=""):
    return SimpleNamespace(experiment="platform_probe", comparison=[{"variant": "a", "role": "technique", "value": 1.0}],
                           claims=[ClaimOutcome("values_ordered", "", "[1, 2]", True, True)], claims_held=1,
                           claims_judged=1, failed=[], variants={}, prepare_cache={}, tracking_uri=uri,
                           parent_run_id=parent, timings={"total_s": 1.0, "technique_s": 0.5, "ray_init_s": 0.1,
                                                          "tracking_s": 0.1, "overhead_share": 0.5},
                           metrics=lambda: {"a": {"value": 1.0}, "b": {"value": 2.0}}, seed_metrics=lambda: {})


def test_debug_runs_carry_a_banner_read_from_the_parent_tag(store):
    from pipelines.live import print_scoreboard

    # Prepare: a debug parent and a full one
    tracker, exp = store
    spec = SimpleNamespace(claims=[Claim("values_ordered", "a.value < b.value", measured="[a.value, b.value]")])
    debug_run = tracker.start_run(exp, "debug", tags={"debug": "True"})
    full_run = tracker.start_run(exp, "full", tags={"debug": "False"})
    # Execute
    texts = {}
    for name, run in (("debug", debug_run), ("full", full_run)):
        c = Console(record=True, width=200)
        print_scoreboard(c, _outcome(tracker.uri, run), spec)
        texts[name] = c.export_text()
    # Assert
    assert "DEBUG RUN" in texts["debug"] and "DEBUG RUN" not in texts["full"]
    assert "a.value = 1" in texts["full"] and "a.value < b.value" in texts["full"]


def _parent(tracker, exp, name, status, debug="False"):
    run = tracker.start_run(exp, name, tags={"dtlab.kind": "parent", "debug": debug})
    tracker.log_json(run, [{"variant": "a", "role": "technique", "status": "FINISHED", "value": 1.0}], "comparison.json")
    tracker.log_json(run, [ClaimOutcome("values_ordered", "as configured", "[1, 2]", True, True).__dict__], "claims.json")
    tracker.log_text(run, "experiment:\n  claims:\n    values_ordered:\n      holds: a.value < b.value\n"
                          "      measured: '[a.value, b.value]'\n", "config.yaml")
    tracker.end(run, status)
    return run


def test_compare_shows_the_latest_finished_run_labelled_and_names_the_killed_one(store, tmp_path):
    from pipelines.compare import compare

    # Prepare: a finished debug run, then a newer one killed by a signal
    tracker, _ = store
    exp = tracker.experiment_id("platform_probe")
    _parent(tracker, exp, "probe-finished", "FINISHED", debug="True")
    _parent(tracker, exp, "probe-killed", "KILLED")
    console = Console(record=True, width=200)
    # Execute
    path = compare(tracker.uri, ["platform_probe"], str(tmp_path / "reports"), console=console)
    # Assert
    text, page = console.export_text(), open(path).read()
    assert "probe-finished" in text and "skipped 1 newer run(s) not FINISHED: probe-killed (KILLED)" in text
    assert "DEBUG RUN" in text and "a.value = 1" in text and "a.value &lt; b.value" in page
    assert "<h2>platform_probe · probe-finished · FINISHED" in page and "DEBUG RUN" in page
    assert "probe-killed" not in page.split("skipped: probe-killed (KILLED)")[1]


# ---------------------------------------------------------------- noise
def test_read_only_arrays_from_ray_train_without_torch_warnings():
    import numpy as np
    import torch

    from components.serving.gatekeeper.digits import logits_of, train

    # Prepare: arrays as Ray's object store hands them over (read-only)
    x = np.random.default_rng(0).normal(size=(32, 8)).astype(np.float32)
    y = np.arange(32, dtype=np.int64) % 3
    x.setflags(write=False)
    y.setflags(write=False)
    # Execute / Assert: torch's "The given NumPy array is not writable" would be an error here
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model = torch.nn.Linear(8, 3)
        train(model, x, y, epochs=1, lr=0.01, batch=8, seed=0)
        assert logits_of(model, x).shape == (32, 3)


def test_ray_and_serve_log_at_warning_unless_verbose(monkeypatch):
    import ray

    from components.core import raytools

    # Prepare: ray.init recorded instead of started
    seen = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw) or SimpleNamespace(dashboard_url=None, address_info={}))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 1.0})
    monkeypatch.setattr(ray, "nodes", lambda: [])
    monkeypatch.setattr(raytools, "local_head", lambda: None)
    # the suite's live session keeps its auth config and needs no second watchdog
    monkeypatch.setattr(raytools, "ensure_auth", lambda *a, **k: "token")
    from components.core import ray_watchdog

    monkeypatch.setattr(ray_watchdog, "start", lambda *a, **k: None)
    cluster = {"attach": False, "logging_level": "WARNING"}
    levels = {}
    for verbose in ("0", "1"):
        monkeypatch.setenv("DTLAB_VERBOSE", verbose)
        logging.getLogger("ray.serve").setLevel(logging.INFO)   # Serve's own default
        # Execute
        raytools.init_ray(cluster)
        levels[verbose] = (seen["logging_level"], logging.getLogger("ray.serve").level)
    # Assert
    assert levels == {"0": ("WARNING", logging.WARNING), "1": ("INFO", logging.INFO)}


def test_verbose_is_a_root_key_that_sets_the_log_switch(monkeypatch):
    from pipelines import config
    from pipelines.cli import set_verbose

    # Prepare
    monkeypatch.delenv("DTLAB_VERBOSE", raising=False)
    # Execute
    default = config.compose(["experiment=platform_probe"])
    set_verbose(default)
    quiet = os.environ["DTLAB_VERBOSE"]
    set_verbose(config.compose(["experiment=platform_probe", "verbose=true"]))
    # Assert
    assert default["verbose"] is False and quiet == "0" and os.environ["DTLAB_VERBOSE"] == "1"
