"""`dtlab up` / `dtlab down` and how `dtlab run` finds Ray: a running local head, RAY_ADDRESS, or
embedded (sizing options only for a session it starts: Ray refuses them when connecting)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import types

import pytest

from tests.infra.svc import ROOT, free_port, wait_port_closed


@pytest.fixture
def fake_ray(monkeypatch):
    """ray.init recorded instead of run (no session is started)."""
    import ray

    calls: list[dict] = []
    ctx = types.SimpleNamespace(dashboard_url="127.0.0.1:8265", address_info={"gcs_address": "10.1.2.3:6379"})
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw) or ctx)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 4.0})
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}])
    monkeypatch.setattr("components.core.raytools.ensure_auth", lambda mode, create_token=True: mode or "token")
    monkeypatch.setattr("components.core.ray_watchdog.start", lambda *a, **k: None)  # no session to watch
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return calls


@pytest.fixture
def head_file(tmp_path, monkeypatch):
    """A Ray temp dir of our own whose address file points at a listening port (a stand-in GCS)."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "ray").mkdir()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    address = f"127.0.0.1:{srv.getsockname()[1]}"
    (tmp_path / "ray" / "ray_current_cluster").write_text(address)
    yield address, srv
    srv.close()


LOCAL = {"address": None, "attach": True, "num_cpus": 3, "include_dashboard": True, "auth_mode": "token"}


def test_no_head_starts_embedded_ray_sized_by_the_config(fake_ray, tmp_path, monkeypatch):
    from components.core.raytools import init_ray

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no address file here
    info = init_ray(LOCAL)
    (kw,) = fake_ray
    assert kw["address"] == "local" and kw["num_cpus"] == 3 and kw["dashboard_host"] == "127.0.0.1"
    assert info["mode"] == "embedded" and info["dashboard_url"] == "http://127.0.0.1:8265"
    assert "embedded" in info["summary"] and "http://127.0.0.1:8265" in info["summary"]


def test_a_running_head_is_attached_without_sizing_options(fake_ray, head_file):
    from components.core.raytools import init_ray, local_head

    address, _ = head_file
    assert local_head() == address
    info = init_ray(LOCAL)
    (kw,) = fake_ray
    assert kw["address"] == address and "num_cpus" not in kw and "include_dashboard" not in kw
    assert info["mode"] == "attached"


def test_ray_address_wins_and_gets_no_sizing_options(fake_ray, head_file, monkeypatch):
    from components.core.raytools import init_ray

    monkeypatch.setenv("RAY_ADDRESS", "10.9.9.9:6379")
    init_ray(LOCAL)
    (kw,) = fake_ray
    assert kw["address"] == "10.9.9.9:6379" and "num_cpus" not in kw and "num_gpus" not in kw


def test_stale_address_file_or_attach_false_means_embedded(fake_ray, head_file):
    from components.core.raytools import init_ray, local_head

    _, srv = head_file
    init_ray({**LOCAL, "attach": False})
    srv.close()  # the head is gone, its file stays
    assert local_head() is None
    init_ray(LOCAL)
    assert [kw["address"] for kw in fake_ray] == ["local", "local"]


def test_up_rejects_unknown_keys_and_bad_ports():
    from components.core.errors import ConfigError
    from pipelines.cluster import cluster_config, head_command

    with pytest.raises(ConfigError, match="cluster.nope"):
        cluster_config(["cluster.nope=1"])
    with pytest.raises(ConfigError, match="cluster.head.port"):
        cluster_config(["cluster.head.port=80"])
    cmd = head_command(cluster_config(["cluster.head.num_cpus=2"]))
    assert "--dashboard-host=127.0.0.1" in cmd and "--metrics-export-port=8080" in cmd and "--num-cpus=2" in cmd


@pytest.mark.slow
def test_up_run_attaches_down_stops_only_that_head(tmp_path):
    """A real head on private ports and temp dir; a debug run attaches to it; down ends it."""
    gcs, dash, metrics = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    short = tempfile.mkdtemp(prefix="dtl-", dir="/tmp")  # Ray's socket paths must stay under 107 characters
    env |= {"RAY_TMPDIR": short, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}

    def cli(*args, timeout=300):
        return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, env=env, text=True,
                              capture_output=True, timeout=timeout)

    up = cli("up", f"cluster.head.port={gcs}", f"cluster.head.dashboard_port={dash}",
             f"cluster.head.metrics_export_port={metrics}", "cluster.head.num_cpus=2")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"dashboard http://127.0.0.1:{dash}" in up.stdout and "auth token" in up.stdout
        again = cli("up")
        assert again.returncode == 0 and "already up" in again.stdout
        run = cli("run", "experiment=platform_probe", "debug=true", f"runs_dir={tmp_path}")
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        from mlflow.tracking import MlflowClient

        c = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
        (parent,) = c.search_runs([c.get_experiment_by_name("platform_probe").experiment_id],
                                  "tags.`dtlab.kind` = 'parent'")
        assert parent.data.tags.get("ray.dashboard") == f"http://127.0.0.1:{dash}", "the run used the warm head"
    finally:
        down = cli("down")
    assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
    assert wait_port_closed(gcs) and wait_port_closed(dash)
    shutil.rmtree(short, ignore_errors=True)


@pytest.mark.parametrize("key, value", [("auth_mode", "none"), ("attach", "yes"), ("num_cpus", 0)])
def test_bad_cluster_options_are_config_errors(key, value):
    from components.core.errors import ConfigError
    from components.core.raytools import check_cluster

    with pytest.raises(ConfigError, match=f"cluster.{key}"):
        check_cluster({**LOCAL, key: value})
    check_cluster(LOCAL)


def test_workers_know_their_own_cluster_address(ray_session):
    """Worker code that auto-detects "the" cluster (Ray Train's PlacementGroupCleaner, through the state
    API) must find this session's, not fail with "multiple active Ray instances" when another runs."""
    import ray

    # Prepare: a task that reads what auto-detection would connect to
    @ray.remote(num_cpus=0)
    def detected():
        from ray._private.services import canonicalize_bootstrap_address_or_die

        return os.environ.get("RAY_ADDRESS"), canonicalize_bootstrap_address_or_die(None)

    # Execute
    env, found = ray.get(detected.remote(), timeout=60)
    # Assert: pinned by the setup hook to this session's GCS
    ours = ray.get_runtime_context().gcs_address
    assert env == ours and found.split(":")[-1] == ours.split(":")[-1]
