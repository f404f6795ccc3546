"""Every panel of our Grafana dashboards returns data from a real Prometheus scraping a real Ray run.

Grafana cannot be installed here, so this test does what it would: infra/prometheus.sh starts
Prometheus (Debian's binary) scraping the metrics port of a `dtlab run` subprocess every second,
then each panel's PromQL (variables filled as Grafana would) goes to Prometheus's HTTP API as a
range query over the run, and must return at least one series with samples.
"""
from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from tests.infra.promql import DASHBOARDS, fill, targets
from tests.infra.svc import BIN, INFRA, ROOT, dtlab_env, free_port, need_binary, run_logged, wait_port_closed

SCRIPT = str(INFRA / "prometheus.sh")
LINGER_S = 6   # > a few report intervals: node metrics and final values reach a scrape


@pytest.fixture(scope="module")
def prometheus(module_service_dir):
    need_binary(["prometheus", "/usr/bin/prometheus"], "prometheus")
    d = module_service_dir / "prometheus"
    port, metrics_port = free_port(), free_port()
    try:
        run_logged(["bash", SCRIPT, "start", "--dir", str(d), "--port", str(port), "--target",
                    f"127.0.0.1:{metrics_port}", "--sd-file", "none", "--interval", "1s"],
                   module_service_dir / "prom-start.log", timeout=120)
        yield {"url": f"http://127.0.0.1:{port}", "metrics_port": metrics_port, "dir": d}
    finally:
        subprocess.run(["bash", SCRIPT, "stop", "--dir", str(d)], cwd=ROOT, timeout=60)
    assert wait_port_closed(port), f"prometheus still listening on {port} after stop"


def _api(url: str, path: str, **params) -> dict:
    with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(params)}", timeout=30) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


def _run_scraped(prom: dict, experiment: str, tmp_path) -> tuple[float, float]:
    """Run a debug experiment with Ray's metrics on the scraped port; return its time window."""
    env = dtlab_env(RAY_metrics_report_interval_ms="1000")  # Ray's default pushes every 10 s
    t0 = time.time()
    run_logged([str(BIN / "dtlab"), "run", f"experiment={experiment}", "debug=true", "cluster.include_dashboard=false",
                f"cluster.metrics_export_port={prom['metrics_port']}", f"cluster.metrics_linger_s={LINGER_S}",
                f"runs_dir={tmp_path / 'runs'}"], tmp_path / f"{experiment}.log", env=env, timeout=900)
    t1 = time.time()
    up = _api(prom["url"], "/api/v1/query_range", query="up", start=t0, end=t1, step=1)
    assert any(float(v) == 1 for s in up["result"] for _, v in s["values"]), "Prometheus never scraped Ray's metrics port"
    return t0, t1


def _check_dashboard(prom: dict, dashboard, window: tuple[float, float], experiment: str) -> None:
    empty = []
    checked = 0
    for title, expr in targets(dashboard):
        q = fill(expr, {"experiment": experiment, "__rate_interval": "30s", "__interval": "1s",
                        "__range": "5m", "datasource": "dtlab-prometheus"})
        data = _api(prom["url"], "/api/v1/query_range", query=q, start=window[0], end=window[1] + 2, step=1)
        if not any(s["values"] for s in data["result"]):
            empty.append(f"{dashboard.name}: {title}: {q}")
        checked += 1
    assert checked > 0
    assert not empty, "panels without data:\n" + "\n".join(empty)


def _dashboard(name: str):
    return next(d for d in DASHBOARDS if d.stem == name)


@pytest.mark.slow   # a real run scraped by Prometheus, ~30 s: runs in `make bench` (keeps `make test` in its 15 minutes)
def test_platform_panels_return_data(prometheus, tmp_path):
    window = _run_scraped(prometheus, "platform_probe", tmp_path)
    _check_dashboard(prometheus, _dashboard("platform"), window, "platform_probe")


@pytest.mark.slow
def test_training_panels_return_data_for_error_feedback(prometheus, tmp_path):
    window = _run_scraped(prometheus, "error_feedback", tmp_path)
    for d in DASHBOARDS:  # every dashboard, the platform one included, on the training run
        _check_dashboard(prometheus, d, window, "error_feedback")
    # the live figure is the technique's real grad norm, one series per error_feedback variant
    data = _api(prometheus["url"], "/api/v1/query_range", start=window[0], end=window[1] + 2, step=1,
                query='max by (variant) (ray_dtlab_live_metric{experiment="error_feedback", metric="grad_norm_sq"})')
    series = {s["metric"]["variant"]: [float(v) for _, v in s["values"]] for s in data["result"]}
    assert {"dist_ef21", "dist_cgd", "ef21", "cgd"} <= set(series), sorted(series)
    assert all(v >= 0 and v == v for vals in series.values() for v in vals)
