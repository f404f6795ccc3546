"""A two-node Ray cluster on loopback (infra/multinode.sh), a debug experiment submitted through
the Ray Jobs API with the laptop command, its variants spread over both nodes, results in MLflow."""
from __future__ import annotations

import subprocess
import uuid

import pytest
import yaml

from tests.infra.svc import BIN, INFRA, ROOT, dtlab_env, free_port, run_logged, wait_port_closed

SCRIPT = str(INFRA / "multinode.sh")


@pytest.mark.slow
def test_job_spreads_variants_over_two_nodes(service_dir):
    from mlflow.tracking import MlflowClient
    from ray.util.state import list_nodes, list_tasks

    gcs, dash = free_port(), free_port()
    d = service_dir / "multinode"
    dashboard = f"http://127.0.0.1:{dash}"
    runs_dir = service_dir / "runs"
    try:
        run_logged(["bash", SCRIPT, "start", "--dir", str(d), "--port", str(gcs), "--dashboard-port", str(dash),
                    "--cpus", "1", "--nodes", "2"], service_dir / "start.log", timeout=300)
        nodes = {n.node_id for n in list_nodes(address=dashboard) if n.state == "ALIVE"}
        assert len(nodes) == 2
        sub_id = f"dtlab-test-{uuid.uuid4().hex[:8]}"
        run_logged([str(BIN / "ray"), "job", "submit", "--address", dashboard, "--submission-id", sub_id, "--",
                    "dtlab", "run", "experiment=platform_probe", "debug=true", "cluster=remote",
                    f"runs_dir={runs_dir}"], service_dir / "job.log", env=dtlab_env(), timeout=600)
        # where each variant ran, from Ray's state API (task name = "<experiment>:<variant>@<seed>")
        variants = set(yaml.safe_load((ROOT / "conf/experiment/platform_probe.yaml").read_text())["variants"])
        tasks = [t for t in list_tasks(address=dashboard, detail=True, limit=10000)
                 if t.name.startswith("platform_probe:") and t.state == "FINISHED"]
        ran_on = {t.name.split(":", 1)[1].rsplit("@", 1)[0]: t.node_id for t in tasks}
        assert set(ran_on) == variants
        assert set(ran_on.values()) == nodes, f"variants ran on {set(ran_on.values())}, cluster nodes {nodes}"
        # results in MLflow (the job wrote the SQLite store under runs_dir)
        c = MlflowClient(tracking_uri=f"sqlite:///{runs_dir}/mlflow.db")
        exp = c.get_experiment_by_name("platform_probe")
        (parent,) = c.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'parent'")
        assert parent.info.status == "FINISHED" and parent.data.metrics["claims_held"] == 1
        kids = c.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
        assert {r.data.tags["variant"] for r in kids} == variants
        assert all(r.info.status == "FINISHED" for r in kids)
    finally:
        subprocess.run(["bash", SCRIPT, "stop", "--dir", str(d)], cwd=ROOT, timeout=120)
    assert wait_port_closed(gcs) and wait_port_closed(dash), "Ray head still listening after stop"
