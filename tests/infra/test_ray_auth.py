"""Safe by default: a real `dtlab run` refuses Ray clients without the token, and every HTTP
service dtlab starts (Ray dashboard, `dtlab ui`, `dtlab serve`'s Ray Serve proxy) is on 127.0.0.1.

Ray 2.60 binds its GCS, raylets and agents to the machine's routable address whatever the node IP
says, so the token is the control that works: with auth disabled, the unauthenticated
``GetAllNodeInfo`` below answers OK. Ray's Prometheus endpoints (read-only metrics) also bind to
all interfaces and take no token; they are the one exception allowed, and named as such.
"""
from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest

from tests.infra.svc import ROOT, free_port

LOOPBACK = {"127.0.0.1", "::1"}


def _tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p] + p.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _listeners(procs: list[psutil.Process]) -> list[tuple[psutil.Process, str, int]]:
    out = []
    for p in procs:
        try:
            out += [(p, c.laddr.ip, c.laddr.port) for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            pass
    return out


def _http_all(listeners: list[tuple[psutil.Process, str, int]]) -> list[tuple[psutil.Process, str, int, tuple | None]]:
    """:func:`_http` of every listener at once: a gRPC port holds a GET until its 3 s timeout, and a
    Ray node has a dozen of them."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, len(listeners))) as pool:
        answers = list(pool.map(lambda lst: _http(lst[1], lst[2]), listeners))
    return [(p, ip, port, r) for (p, ip, port), r in zip(listeners, answers)]


def _http(ip: str, port: int) -> tuple[int, str] | None:
    """(status, start of body) of GET / without a token; None if the port does not speak HTTP."""
    host = "127.0.0.1" if ip in ("0.0.0.0", "::") else ip
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/", timeout=3) as r:
            return r.status, r.read(200).decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except Exception:  # noqa: BLE001 - gRPC or another protocol
        return None


def _health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _grpc(port: int, service: str, token: str | None = None) -> str:
    """Status of one real read-only call on a Ray gRPC port, from a plain client (no Ray interceptor)."""
    import grpc
    from ray.core.generated import gcs_service_pb2 as gcs
    from ray.core.generated import node_manager_pb2 as nm

    method, req, reply = {"gcs": ("/ray.rpc.NodeInfoGcsService/GetAllNodeInfo", gcs.GetAllNodeInfoRequest,
                                  gcs.GetAllNodeInfoReply),
                          "raylet": ("/ray.rpc.NodeManagerService/GetNodeStats", nm.GetNodeStatsRequest,
                                     nm.GetNodeStatsReply)}[service]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary(method, request_serializer=req.SerializeToString, response_deserializer=reply.FromString)
        try:
            call(req(), timeout=10, metadata=(("authorization", f"Bearer {token}"),) if token else None)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name


def _wait(pred, timeout_s: float, proc: subprocess.Popen, log) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if pred():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"not up after {time.monotonic() - t0:.0f} s (exit {proc.poll()}):\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGINT, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def test_a_real_run_refuses_clients_without_the_token_and_http_is_on_loopback(tmp_path):
    """`dtlab run` (and `dtlab ui` beside it, both starting at once: each takes ~10-20 s)."""
    token_file = tmp_path / "auth" / "auth_token"  # fresh: dtlab must create it, not Ray
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env |= {"RAY_AUTH_TOKEN_PATH": str(token_file), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db",
            "PYTHONUNBUFFERED": "1"}
    log, ui_log, ui_port = tmp_path / "run.log", tmp_path / "ui.log", free_port()
    cmd = [sys.executable, "-m", "pipelines.cli", "run", "experiment=platform_probe", "only=[a]",
           "experiment.common.probe.seconds=300", "experiment.common.probe.mode=sleep", "cluster.attach=false",
           f"runs_dir={tmp_path}"]
    with open(log, "w") as f, open(ui_log, "w") as g:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        ui = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "ui", str(ui_port), f"runs_dir={tmp_path}"],
                              cwd=ROOT, env={**env, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/ui.db"},
                              stdout=g, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def by_name(name):
            return [p for p in _tree(proc.pid) if _safe(lambda: p.name()) == name]

        def dashboard():  # the dashboard head's HTTP server: GET / is its page
            heads = [p for p in _tree(proc.pid) if "dashboard.py" in " ".join(_safe(p.cmdline) or [])]
            for _, ip, port, r in _http_all(_listeners(heads)):
                if r and r[0] == 200 and "<!doctype html" in r[1].lower():
                    yield ip, port

        # up: GCS and raylet listening, the dashboard serving and the probe variant running
        _wait(lambda: _listeners(by_name("gcs_server")) and _listeners(by_name("raylet")) and any(dashboard())
              and any("platform_probe:a" in " ".join(_safe(p.cmdline) or []) for p in _tree(proc.pid)), 150, proc, log)

        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600, oct(token_file.stat().st_mode)
        token = token_file.read_text().strip()
        assert len(token) == 64 and int(token, 16) >= 0

        gcs_ports = {port for _, _, port in _listeners(by_name("gcs_server"))}
        assert {_grpc(p, "gcs") for p in gcs_ports} == {"UNAUTHENTICATED"}, "GCS answered a client without the token"
        assert "OK" in {_grpc(p, "gcs", token) for p in gcs_ports}, "the same call with the token must pass"
        raylet = {_grpc(port, "raylet") for _, _, port in _listeners(by_name("raylet"))}
        assert "UNAUTHENTICATED" in raylet and "OK" not in raylet, raylet

        # every HTTP listener of the run: loopback, or refuses without the token, or Ray's metrics
        dash = {ip for ip, _ in dashboard()}
        assert dash and dash <= LOOPBACK, f"dashboard listens on {dash}"
        exposed = []
        for p, ip, port, r in _http_all(_listeners(_tree(proc.pid))):
            if r is None or ip in LOOPBACK or r[0] in (401, 403) or r[1].startswith("# HELP"):
                continue
            exposed.append(f"{_safe(p.name)} {ip}:{port} -> HTTP {r[0]}")
        assert not exposed, "HTTP reachable beyond loopback without the token:\n" + "\n".join(exposed)

        _wait(lambda: any(p == ui_port for _, _, p in _listeners(_tree(ui.pid))), 120, ui, ui_log)
        addrs = {(ip, p) for _, ip, p in _listeners(_tree(ui.pid))}
        assert {ip for ip, _ in addrs} <= LOOPBACK, f"dtlab ui listens on {addrs}"
        _wait(lambda: _health(ui_port), 60, ui, ui_log)      # and the MLflow UI answers there
    finally:
        _stop(proc)
        _stop(ui)


def _safe(fn):
    try:
        return fn()
    except psutil.Error:
        return None


def test_serve_proxy_listens_on_loopback_only(serve_instance):
    """`dtlab serve` starts Ray Serve through start_serve (components/serving/app.py); here the suite's
    instance, in its token-authenticated session (a `serve_session` of its own would shut down the
    instance the serving tests share when it ran after them)."""
    # Execute
    addrs = {c.laddr.ip for c in psutil.net_connections("tcp")
             if c.status == psutil.CONN_LISTEN and c.laddr.port == serve_instance.port}

    # Assert
    assert addrs and addrs <= LOOPBACK, f"Serve's HTTP proxy listens on {addrs}"
    assert serve_instance.url("/").startswith("http://127.0.0.1:")


# ---------------------------------------------------------------------------------------- units
@pytest.fixture
def auth_env(monkeypatch):
    """ensure_auth changes this process's Ray auth settings: put the suite's back afterwards."""
    from components.core.raytools import ensure_auth

    mode = os.environ.get("RAY_AUTH_MODE", "token")
    yield monkeypatch
    monkeypatch.undo()
    ensure_auth(mode, create_token=False)


def test_token_is_created_once_with_mode_0600_and_a_loose_one_is_tightened(tmp_path, auth_env):
    from components.core.raytools import ensure_auth

    path = tmp_path / "ray" / "auth_token"
    auth_env.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    auth_env.delenv("RAY_AUTH_TOKEN", raising=False)
    auth_env.delenv("RAY_AUTH_MODE", raising=False)
    assert ensure_auth(None, create_token=True) == "token" and os.environ["RAY_AUTH_MODE"] == "token"
    first = path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(first) == 64
    path.chmod(0o644)
    ensure_auth("token")
    assert path.read_text() == first, "created once: a second call keeps the token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_auth_off_only_by_config_with_a_warning_and_bad_modes_rejected(auth_env, caplog):
    from components.core import raytools
    from components.core.errors import ConfigError

    auth_env.setenv("RAY_AUTH_MODE", "token")
    auth_env.setattr(raytools, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="dtlab.ray"):
        assert raytools.ensure_auth("disabled", create_token=False) == "disabled"
    assert os.environ["RAY_AUTH_MODE"] == "disabled"
    assert any("authentication is OFF" in r.message and "run code" in r.message for r in caplog.records)
    assert any("RAY_AUTH_MODE=token from the environment is overridden" in r.message for r in caplog.records)
    with pytest.raises(ConfigError, match="cluster.auth_mode"):
        raytools.ensure_auth("none")
