"""`dtlab up` / `dtlab down` and how `dtlab run` finds Ray: a running local head of this checkout and
environment, RAY_ADDRESS, or embedded (sizing options only for a session it starts: Ray refuses them
when connecting); another checkout's head is refused; the head listens on loopback only."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import types
from pathlib import Path

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
    """A Ray temp dir of our own whose address file points at a listening port (a stand-in GCS),
    with the record `dtlab up` writes for a head of this checkout and environment."""
    from components.core.raytools import HEAD_FILE, this_environment

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "ray").mkdir()
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    address = f"127.0.0.1:{srv.getsockname()[1]}"
    (tmp_path / "ray" / "ray_current_cluster").write_text(address)
    (tmp_path / "ray" / HEAD_FILE).write_text(json.dumps({"pid": 1, "address": address, **this_environment(),
                                                          "commit": "c0ffee", "dirty": "false"}))
    yield address, srv
    srv.close()


def _record(head_dir, **changes) -> None:
    """Rewrite the stand-in head's `dtlab up` record (``None`` values: remove the record)."""
    from components.core.raytools import HEAD_FILE

    f = head_dir / "ray" / HEAD_FILE
    if None in changes.values():
        f.unlink()
        return
    f.write_text(json.dumps({**json.loads(f.read_text()), **changes}))


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


@pytest.mark.parametrize("changes, says", [({"checkout": "/elsewhere/dtlab"}, "from checkout /elsewhere/dtlab"),
                                           ({"python": "/other/venv"}, "(python /other/venv)"),
                                           ({"record": None}, "not started by `dtlab up`")])
def test_a_head_of_another_checkout_or_environment_is_refused_before_ray_starts(fake_ray, head_file, tmp_path,
                                                                                changes, says):
    """Its workers would run the other checkout's code with the other interpreter under this run's
    git.commit: one line naming both sides and the two ways on, before Ray starts."""
    from components.core.errors import ConfigError
    from components.core.raytools import check_cluster, init_ray, this_environment

    # Prepare: the running head was started elsewhere (or by plain `ray start`)
    address, _ = head_file
    _record(tmp_path, **changes)
    # Execute / Assert: the validation pass refuses it, and init_ray never calls ray.init
    for attempt in (check_cluster, init_ray):
        with pytest.raises(ConfigError) as e:
            attempt(LOCAL)
        msg = str(e.value)
        assert msg.startswith("cluster.attach=True: ") and "\n" not in msg
        assert address in msg and says in msg and this_environment()["checkout"] in msg
        assert "cluster.attach=any" in msg and "cluster.attach=false" in msg
    assert fake_ray == []


def test_another_checkouts_head_only_when_asked(fake_ray, head_file, tmp_path, monkeypatch):
    """cluster.attach=any or RAY_ADDRESS attach to it; the parent records whose head it was."""
    from components.core.raytools import init_ray

    address, _ = head_file
    _record(tmp_path, checkout="/elsewhere/dtlab", commit="abc123")
    info = init_ray({**LOCAL, "attach": "any"})
    assert fake_ray[-1]["address"] == address and info["mode"] == "attached"
    assert info["tags"]["ray.head.checkout"] == "/elsewhere/dtlab" and info["tags"]["ray.head.commit"] == "abc123"
    monkeypatch.setenv("RAY_ADDRESS", address)
    assert init_ray(LOCAL)["mode"] == "connected" and fake_ray[-1]["address"] == address


def test_the_parent_run_records_the_heads_code_version(fake_ray, head_file):
    from components.core.raytools import init_ray, this_environment

    info = init_ray(LOCAL)
    assert info["tags"] == {"ray.head.checkout": this_environment()["checkout"],
                            "ray.head.python": this_environment()["python"],
                            "ray.head.commit": "c0ffee", "ray.head.dirty": "false"}
    assert init_ray({**LOCAL, "attach": False})["tags"] == {}, "an embedded session is no `dtlab up` head"


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


def test_the_heads_agent_port_is_not_the_one_every_embedded_session_takes():
    # Prepare: Ray's fixed agent HTTP port, which ray.init gives every embedded session's agent
    from ray._private.ray_constants import DEFAULT_DASHBOARD_AGENT_LISTEN_PORT

    from pipelines.cluster import cluster_config, head_command

    # Execute
    cmd = head_command(cluster_config([]))

    # Assert: a run with cluster.attach=false beside the head would wait out its agent's bind retries
    assert f"--dashboard-agent-listen-port={DEFAULT_DASHBOARD_AGENT_LISTEN_PORT}" not in cmd
    assert any(c.startswith("--dashboard-agent-listen-port=") for c in cmd)


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


@pytest.fixture
def own_head(tmp_path):
    """`dtlab up` in a Ray temp dir of its own, on free ports (none shared with another head on the
    machine); yields (cli, state, ports); `dtlab down --force` and the temp dir removed after."""
    ports = {k: free_port() for k in ("port", "dashboard_port", "metrics_export_port", "dashboard_agent_listen_port",
                                      "ray_client_server_port")}
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    short = tempfile.mkdtemp(prefix="dtl-", dir="/tmp")  # Ray's socket paths must stay under 107 characters
    env["RAY_TMPDIR"] = short

    def cli(*args, timeout=300):
        return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, env=env, text=True,
                              capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)

    up = cli("up", *(f"cluster.head.{k}={v}" for k, v in ports.items()), "cluster.head.num_cpus=1")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((Path(short) / "ray" / "dtlab-head.json").read_text())
        yield cli, state, ports, up.stdout, env
    finally:
        cli("down", "--force")
        shutil.rmtree(short, ignore_errors=True)


# a real head: ~13 s in all here (start 9.5 s, stop 3 s); not slow
def test_every_listener_of_a_dtlab_up_head_is_on_loopback(own_head):
    """Metrics export, the dashboard agent's HTTP and gRPC ports, GCS, raylet, client server: all on
    127.0.0.1, read from the kernel's socket table (no traffic is sent anywhere); the printed line says so."""
    from pipelines.cluster import LOOPBACK, head_listeners

    cli, state, ports, printed, _ = own_head
    listeners = head_listeners(state["pid"])
    bound = {p for _, p, _ in listeners}
    assert {ports["port"], ports["dashboard_port"], ports["metrics_export_port"],
            ports["dashboard_agent_listen_port"]} <= bound, listeners
    beyond = [t for t in listeners if t[0] not in LOOPBACK and not t[0].startswith("127.")]
    assert beyond == [], f"listening beyond loopback: {beyond}"
    assert state["exposed"] == [] and "every port of the head listens on 127.0.0.1 only" in printed
    assert f"127.0.0.1:{ports['metrics_export_port']}" in printed
    assert state["checkout"] == str(ROOT) and state["commit"] not in ("", None)


# a real head and a real driver: ~17 s in all here
def test_down_names_a_real_attached_driver(own_head):
    """`dtlab down` reads Ray's job table: a driver attached to the head is named, and without a
    terminal the head is left up until --force."""
    cli, state, ports, _, env = own_head
    driver = subprocess.Popen([sys.executable, "-c", "import ray, sys, time; ray.init(address=sys.argv[1]); "
                               "print('attached', flush=True); time.sleep(600)", state["address"]],
                              cwd=ROOT, env={**env, "RAY_AUTH_MODE": "token", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
                              text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
    try:
        assert driver.stdout.readline().strip() == "attached"
        refused = cli("down")
        assert refused.returncode == 1 and f"pid {driver.pid}: " in refused.stderr and "--force" in refused.stderr
        assert os.path.exists(os.path.join(env["RAY_TMPDIR"], "ray", "dtlab-head.json")), "the head is still up"
        forced = cli("down", "--force")
        assert forced.returncode == 0 and f"pid {driver.pid}" in forced.stdout and "stopped" in forced.stdout
    finally:
        driver.kill()
        driver.wait()


@pytest.mark.parametrize("key, value", [("auth_mode", "none"), ("attach", "yes"), ("attach", 1), ("num_cpus", 0)])
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


HEAD = {"pid": 1, "address": "127.0.0.1:1", "auth_mode": "token"}


@pytest.fixture
def drivers(monkeypatch):
    """The head's job table as `dtlab down` reads it, set by the test."""
    table: list[str] = []
    monkeypatch.setattr("pipelines.cluster.attached_drivers", lambda state: list(table))
    return table


def test_down_names_attached_drivers_and_needs_force_without_a_terminal(drivers, capsys):
    from components.core.raytools import this_environment
    from pipelines.cluster import confirm_down

    # Prepare: one run attached to this checkout's head
    head = {**HEAD, **this_environment()}
    drivers.append("pid 4242: dtlab run experiment=error_feedback")
    # Execute / Assert: no terminal, no --force: one line naming the driver, exit 1, nothing stopped
    with pytest.raises(SystemExit) as e:
        confirm_down(head, force=False)
    err = capsys.readouterr().err
    assert e.value.code == 1 and "pid 4242: dtlab run experiment=error_feedback" in err and "--force" in err
    assert err.count("\n") == 1
    # --force goes on and says what it stops under
    confirm_down(head, force=True)
    assert "pid 4242" in capsys.readouterr().out
    # on a terminal it asks: "n" keeps the head, "y" stops it
    asked: list[str] = []
    with pytest.raises(SystemExit):
        confirm_down(head, force=False, ask=lambda q: asked.append(q) or "n")
    confirm_down(head, force=False, ask=lambda q: "y")
    assert "pid 4242" in asked[0] and "[y/N]" in asked[0]


def test_down_without_drivers_goes_on_but_another_checkouts_head_needs_force(drivers, capsys):
    from components.core.raytools import this_environment
    from pipelines.cluster import confirm_down

    confirm_down({**HEAD, **this_environment()}, force=False)  # nothing attached: no question
    with pytest.raises(SystemExit) as e:
        confirm_down({**HEAD, "checkout": "/elsewhere/dtlab", "python": "/elsewhere/.venv"}, force=False)
    assert e.value.code == 1 and "from checkout /elsewhere/dtlab" in capsys.readouterr().err


def test_down_takes_only_force():
    p = subprocess.run([sys.executable, "-m", "pipelines.cli", "down", "--now"], cwd=ROOT, text=True,
                       capture_output=True, timeout=120)
    assert p.returncode == 2 and "--force" in p.stderr and "'--now'" in p.stderr


def test_train_placement_group_cleaner_warns_once_not_every_second(monkeypatch):
    """Without a dashboard Ray Train's PlacementGroupCleaner cannot reach the state API and warned once a
    second (145 lines in one duo run): the workers' setup hook keeps the first warning, explained."""
    import logging

    from components.core.raytools import TRAIN_PG_CLEANER_LOGGER, worker_setup

    # Prepare: the cleaner's logger as a worker has it, recording what passes its filters
    logger = logging.getLogger(TRAIN_PG_CLEANER_LOGGER)
    monkeypatch.setattr(logger, "filters", [])
    monkeypatch.setattr("components.core.raytools.pin_ray_address", lambda: None)  # no session here
    monkeypatch.setenv("DTLAB_VERBOSE", "0")
    passed: list[str] = []

    def emit(n: int) -> None:
        for _ in range(n):
            record = logger.makeRecord(logger.name, logging.WARNING, __file__, 1, "Failed to query Ray Train Controller "
                                       "actor state. State API may be temporarily unavailable. Continuing to monitor.",
                                       (), None)
            if logger.filter(record):
                passed.append(record.getMessage())

    # Execute: the hook, then 145 failed checks and one other warning
    worker_setup()
    worker_setup()  # a second call adds no second filter
    emit(145)
    other = logger.makeRecord(logger.name, logging.WARNING, __file__, 1, "Detected that the controller is dead", (), None)
    # Assert: one line, saying why and how to see them all; other warnings untouched
    assert len(passed) == 1 and "state API needs the dashboard" in passed[0] and "verbose=true" in passed[0]
    assert logger.filter(other)
    monkeypatch.setattr(logger, "filters", [])
    monkeypatch.setenv("DTLAB_VERBOSE", "1")
    worker_setup()
    passed.clear()
    emit(3)
    assert len(passed) == 3, "verbose runs show every one"


def test_shutdown_kills_its_own_monitor_at_once_and_leaves_a_connected_heads_alone(monkeypatch):
    # Prepare: Ray's global node stand-ins, one a session this process started, one a connection to a head
    import ray
    from ray._private import ray_constants
    from ray._private import worker as ray_worker

    from pipelines.dag import shutdown_embedded

    calls = []

    class Node:
        def __init__(self, head):
            self.head = head

        def _kill_process_type(self, process_type, **kw):
            calls.append((process_type, kw))

    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    # Execute
    monkeypatch.setattr(ray_worker, "_global_node", Node(head=True), raising=False)
    shutdown_embedded()
    own = list(calls)
    calls.clear()
    monkeypatch.setattr(ray_worker, "_global_node", Node(head=False), raising=False)
    shutdown_embedded()
    # Assert: its own session's monitor is SIGKILLed (no 1 s SIGTERM grace) before the shutdown; a connected
    # driver only shuts down
    assert own == [(ray_constants.PROCESS_TYPE_MONITOR, {"check_alive": False, "allow_graceful": False}), "shutdown"]
    assert calls == ["shutdown"]
