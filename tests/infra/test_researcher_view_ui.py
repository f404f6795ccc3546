"""What a researcher sees, rendered by headless Chromium: MLflow's chart of a curve whose x is a
fraction (its real x beside it, not two collapsed steps), and `dtlab compare`'s HTML report after
a run was ended by SIGTERM (the finished run shown, the killed one only named as skipped)."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.infra.svc import BIN, INFRA, ROOT, dtlab_env, free_port, need_binary, run_logged

sys.path.insert(0, str(INFRA))
from screenshot_mlflow import _stop, _wait_health, shoot  # noqa: E402 - the infra script's Chromium driver


def _rendered(png, size):
    """A page, not a blank or a loading skeleton (thresholds as in test_screenshot_mlflow)."""
    from PIL import Image, ImageStat

    img = Image.open(png).convert("RGB")
    assert img.size == size
    gray = img.convert("L")
    assert ImageStat.Stat(gray).stddev[0] > 10, "screenshot is (nearly) one colour"
    dark = gray.point(lambda p: 255 if p < 128 else 0).histogram()[255]
    assert dark > 0.002 * size[0] * size[1], f"almost no text or lines on the page ({dark} dark pixels)"


@pytest.mark.slow
def test_mlflow_chart_of_a_fractional_x_curve_shows_its_real_x(tmp_path):
    need_binary(["chromium", "chromium-browser"], "chromium")
    from components.core.result import Result
    from components.core.tracker import Tracker
    from pipelines.stages.logging import log_result

    # Prepare: a variant run logged the way the DAG logs it, with gatekeeper's curve shape
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri, background=False)
    exp = tracker.experiment_id("gatekeeper")
    run = tracker.start_run(exp, "gatekeeper-curve")
    r = [i / 20 for i in range(21)]
    log_result(tracker, run, Result(metrics={"s_d": 0.47}, series={"acc_vs_deferral": (r, [0.8 + 0.2 * x * x for x in r],
                                                                                         "deferral ratio")}),
               "gatekeeper", max_points=None, summary={}, wall_s=1.0)
    tracker.end(run)
    history = tracker.client.get_metric_history(run, "acc_vs_deferral.x")
    assert sorted(m.step for m in history) == list(range(21)) and max(m.value for m in history) == 1.0
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    ui = subprocess.Popen([str(BIN / "mlflow"), "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port",
                           str(port), "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True, env=dtlab_env())
    q = {"runs": json.dumps([run]), "metric": json.dumps("acc_vs_deferral"), "experiments": json.dumps([exp]),
         "plot_metric_keys": json.dumps(["acc_vs_deferral", "acc_vs_deferral.x"]), "plot_layout": "{}",
         "x_axis": "step", "y_axis_scale": "linear", "line_smoothness": "1", "show_point": "true",
         "deselected_curves": "[]", "last_linear_y_axis_range": "[]"}
    out = tmp_path / "chart.png"
    try:
        _wait_health(base, ui, 180)
        # Execute
        text = shoot(f"{base}/#/metric?{urllib.parse.urlencode(q)}", out, 1400, 900, ["acc_vs_deferral.x"])
    finally:
        _stop(ui)
    # Assert: the chart plots the curve and its x values at step = index, all 21 points (int(x) gave steps 0-1)
    assert "acc_vs_deferral.x" in text and "acc_vs_deferral" in text.replace("acc_vs_deferral.x", "")
    assert "(step=20)" in text, text[:500]
    _rendered(out, (1400, 900))


@pytest.mark.slow
def test_compare_report_after_sigterm_shows_the_finished_run(tmp_path):
    need_binary(["chromium", "chromium-browser"], "chromium")
    from mlflow.tracking import MlflowClient

    # Prepare: one finished debug run, then a newer one ended by SIGTERM while its variants run
    runs_dir = tmp_path / "runs"
    uri = f"sqlite:///{runs_dir}/mlflow.db"
    base = [str(BIN / "dtlab"), "run", "experiment=platform_probe", "debug=true", "cluster.include_dashboard=false",
            f"runs_dir={runs_dir}"]
    run_logged(base, tmp_path / "finished.log", env=dtlab_env(), timeout=600)
    p = subprocess.Popen(base + ["experiment.common.probe.seconds=60"], cwd=ROOT, env=dtlab_env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("platform_probe")
    try:
        deadline, running = time.time() + 180, []
        while time.time() < deadline and not running and p.poll() is None:
            time.sleep(1)
            running = client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'variant' and attributes.status = 'RUNNING'")
        assert running, "the second run started no variant"
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    parents = client.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'parent'", order_by=["attributes.start_time DESC"])
    killed, finished = parents[0], parents[1]
    assert (killed.info.status, finished.info.status) == ("KILLED", "FINISHED")
    # Execute
    r = run_logged([str(BIN / "dtlab"), "compare", "platform_probe", f"runs_dir={runs_dir}"], tmp_path / "compare.log",
                   env=dtlab_env(MLFLOW_TRACKING_URI=uri, COLUMNS="200"))
    log = (tmp_path / "compare.log").read_text()
    report = log.strip().splitlines()[-1].split("HTML report: ")[-1]
    out = tmp_path / "compare.png"
    text = shoot(f"file://{report}", out, 1400, 1000, [finished.info.run_name], settle_s=1.0)
    # Assert: the finished run is the one shown (labelled, marked debug); the killed one only named as skipped
    assert r.returncode == 0
    assert f"skipped 1 newer run(s) not FINISHED: {killed.info.run_name} (KILLED)" in " ".join(log.split())
    titles = re.findall(r"<h2>(.*?)</h2>", Path(report).read_text())
    assert len(titles) == 1 and finished.info.run_name in titles[0] and "FINISHED" in titles[0]
    assert f"skipped: {killed.info.run_name} (KILLED)" in text and "DEBUG RUN" in text
    assert "a.value = 1" in text and "a.value < b.value < c.value < d.value" in text
    _rendered(out, (1400, 1000))
