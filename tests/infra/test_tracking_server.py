"""infra/mlflow_server.sh: a real PostgreSQL + `mlflow server` stack on loopback, used by dtlab.

One stack per module (free ports, fresh dir), stopped afterwards even when a test fails; the
teardown also checks both ports are closed again.
"""
from __future__ import annotations

import subprocess
import time

import pytest
import yaml

from tests.infra.svc import BIN, INFRA, ROOT, dtlab_env, free_port, pg_bin, port_open, run_logged, wait_port_closed

SCRIPT = str(INFRA / "mlflow_server.sh")


@pytest.fixture(scope="module")
def stack(module_service_dir):
    pg_bin()  # skips with the reason when PostgreSQL is absent
    d = module_service_dir / "mlflow-server"
    port, pg_port = free_port(), free_port()
    args = ["--dir", str(d)]
    try:
        t0 = time.perf_counter()
        run_logged(["bash", SCRIPT, "start", *args, "--port", str(port), "--pg-port", str(pg_port)],
                   module_service_dir / "start.log", timeout=240)
        started_s = time.perf_counter() - t0
        yield {"dir": d, "port": port, "pg_port": pg_port, "uri": f"http://127.0.0.1:{port}", "start_s": started_s}
    finally:
        subprocess.run(["bash", SCRIPT, "stop", *args], cwd=ROOT, timeout=120)
    assert wait_port_closed(port), f"mlflow server still listening on {port} after stop"
    assert wait_port_closed(pg_port), f"PostgreSQL still listening on {pg_port} after stop"


def _pg_count(pg_port: int, sql: str) -> int:
    import psycopg

    with psycopg.connect(f"host=127.0.0.1 port={pg_port} user=postgres dbname=mlflow", connect_timeout=10) as conn:
        return conn.execute(sql).fetchone()[0]


def test_stack_serves_runs_from_postgres(stack):
    from mlflow.tracking import MlflowClient

    assert port_open(stack["port"]) and port_open(stack["pg_port"])
    st = subprocess.run(["bash", SCRIPT, "status", "--dir", str(stack["dir"])], cwd=ROOT, capture_output=True,
                        text=True, timeout=60)
    assert st.returncode == 0, st.stdout + st.stderr
    c = MlflowClient(tracking_uri=stack["uri"])
    exp = c.create_experiment("infra-smoke")
    run = c.create_run(exp, run_name="smoke")
    c.log_metric(run.info.run_id, "x", 1.5, step=3)
    c.log_text(run.info.run_id, "hello", "notes/hello.txt")
    c.set_terminated(run.info.run_id)
    back = c.get_run(run.info.run_id)
    assert back.data.metrics["x"] == 1.5 and back.info.status == "FINISHED"
    # the rows live in PostgreSQL, the artifact under the server's artifact root (proxied upload)
    assert _pg_count(stack["pg_port"], f"SELECT count(*) FROM runs WHERE run_uuid = '{run.info.run_id}'") == 1
    assert list((stack["dir"] / "artifacts").rglob("hello.txt")), "artifact not stored under the server's root"


@pytest.mark.slow
def test_debug_experiment_against_server(stack, tmp_path):
    from mlflow.tracking import MlflowClient

    runs_dir = tmp_path / "runs"
    env = dtlab_env(DTLAB_MLFLOW_SERVER=stack["uri"])
    run_logged([str(BIN / "dtlab"), "run", "experiment=error_feedback", "debug=true", "tracking=server",
                "cluster.include_dashboard=false", f"runs_dir={runs_dir}"], tmp_path / "dtlab.log", env=env, timeout=900)
    assert not (runs_dir / "mlflow.db").exists(), "dtlab wrote a local SQLite store instead of using the server"

    variants = set(yaml.safe_load((ROOT / "conf/experiment/error_feedback.yaml").read_text())["variants"])
    c = MlflowClient(tracking_uri=stack["uri"])
    exp = c.get_experiment_by_name("error_feedback")
    assert exp is not None
    parents = c.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'parent'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["claims_total"] >= 1
    children = c.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert {r.data.tags["variant"] for r in children} == variants
    assert all(r.info.status == "FINISHED" for r in children)
    assert all("wall_s" in r.data.metrics for r in children)
    hist = c.get_metric_history(next(r.info.run_id for r in children if r.data.tags["variant"] == "ef21"), "grad_norm_sq")
    assert len(hist) > 10
    assert {a.path for a in c.list_artifacts(parent.info.run_id)} >= {"summary.json", "comparison.json"}
    assert _pg_count(stack["pg_port"], f"SELECT count(*) FROM runs WHERE experiment_id = {int(exp.experiment_id)}") \
        == 1 + len(variants)
