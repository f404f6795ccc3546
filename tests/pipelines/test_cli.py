"""`dtlab list`, `dtlab compare` and `dtlab ui` do what the README says."""
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from components.core.registry import KINDS, entries
from pipelines.config import ROOT, experiment_names


def cli(*args, env=None, timeout=120):
    e = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=ROOT)


def test_list_names_every_experiment_and_registered_entry_with_its_file():
    # Execute
    r = cli("list", env={"COLUMNS": "250"})
    # Assert: every experiment, and every entry of every kind with the file that defines it
    assert r.returncode == 0, r.stderr
    for name in experiment_names():
        assert name in r.stdout
    for kind in KINDS:
        for name, e in entries(kind).items():
            assert name in r.stdout
            assert (Path(ROOT) / e.file).is_file(), e.file
            assert e.file in r.stdout, f"{kind} {name}: file {e.file} not shown"


def test_list_kind_shows_only_that_kind_and_rejects_unknown_kinds():
    # Execute
    blocks = cli("list", "block", env={"COLUMNS": "250"})
    bad = cli("list", "nope")
    # Assert
    assert blocks.returncode == 0 and "pre_ln" in blocks.stdout and "experiments" not in blocks.stdout
    assert bad.returncode == 2 and "list KIND='nope'" in bad.stderr and "technique" in bad.stderr


def test_compare_writes_html_with_latest_runs(run_experiment, tracking_uri, runs_dir):
    run_experiment("platform_probe")
    r = cli("compare", "platform_probe", f"runs_dir={runs_dir}", env={"MLFLOW_TRACKING_URI": tracking_uri, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "values_ordered" in r.stdout
    html_path = r.stdout.strip().splitlines()[-1].split("HTML report: ")[-1]
    html = Path(html_path).read_text()
    assert "platform_probe" in html and "values_ordered" in html and "data:image/png;base64" in html
    r = cli("compare", "no_such_experiment", f"runs_dir={runs_dir}", env={"MLFLOW_TRACKING_URI": tracking_uri})
    assert r.returncode != 0 and "no runs of experiment" in r.stderr + r.stdout


def test_ui_serves_on_loopback(tracking_uri):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "ui", str(port)], cwd=ROOT,
                         env={**os.environ, "MLFLOW_TRACKING_URI": tracking_uri},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline, ok = time.time() + 180, False
        while time.time() < deadline and not ok:
            try:
                ok = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200
            except OSError:
                time.sleep(1)
        assert ok, "MLflow UI did not answer on 127.0.0.1"
    finally:
        os.killpg(p.pid, 15)
        p.wait(timeout=30)
