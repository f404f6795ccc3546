"""`dtlab up` / `dtlab down`: a long-lived local Ray head that `dtlab run` attaches to by itself.

    dtlab up [cluster.KEY=VALUE ...]    start it (once; a second `up` says where it runs)
    dtlab down                          stop it (only the head `dtlab up` started)

Settings come from conf/cluster/local.yaml (``head.*``, ``dashboard_host``, ``auth_mode``), with
the same overrides as `dtlab run`, e.g. ``dtlab up cluster.head.num_cpus=4``. The dashboard and
the metrics export are on, on 127.0.0.1 unless ``cluster.dashboard_host`` says otherwise; token
authentication is on unless ``cluster.auth_mode=disabled``. A warm head saves each run Ray's
start-up (seconds) and keeps the dashboard and metrics between runs.

The head is ``ray start --head --block`` in a session of its own; its pid, address and log are in
``<Ray temp dir>/dtlab-head.json``. `dtlab down` ends that process and what it started, never
other Ray sessions on the machine (as ``ray stop`` would).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STATE = "dtlab-head.json"


def _die(msg: str, code: int = 2) -> None:
    print(f"dtlab: error: {msg}", file=sys.stderr)
    raise SystemExit(code)


def cluster_config(overrides: list[str]) -> dict[str, Any]:
    """conf/cluster/local.yaml with ``cluster.KEY=VALUE`` overrides, as plain Python."""
    from omegaconf import OmegaConf

    from components.core.errors import ConfigError, require

    root = Path(__file__).resolve().parent.parent
    cfg = OmegaConf.load(root / "conf" / "cluster" / "local.yaml")
    for o in overrides:
        key, sep, value = o.partition("=")
        sub = key[len("cluster."):] if key.startswith("cluster.") else ""
        require(bool(sep and sub) and OmegaConf.select(cfg, sub, default=KeyError) is not KeyError, key or o, value,
                "cluster.KEY=VALUE for a key of conf/cluster/local.yaml")
        OmegaConf.update(cfg, sub, OmegaConf.from_dotlist([f"v={value}"]).v, merge=True)
    out = OmegaConf.to_container(cfg, resolve=True)
    head = out.get("head") or {}
    for k in ("port", "dashboard_port", "metrics_export_port"):
        v = head.get(k)
        if not (isinstance(v, int) and 1024 <= v <= 65535):
            raise ConfigError(f"cluster.head.{k}", v, "a port in [1024, 65535]")
    n = head.get("num_cpus")
    if n is not None and not (isinstance(n, int) and n >= 1):
        raise ConfigError("cluster.head.num_cpus", n, "null (every core) or a positive integer")
    return out


def _state_file() -> Path:
    from components.core.raytools import ray_temp_dir

    return ray_temp_dir() / STATE


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _http_ok(url: str, timeout_s: float = 2.0) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status == 200
    except Exception:  # noqa: BLE001 - not up yet
        return False


def head_command(cluster: dict[str, Any]) -> list[str]:
    """The ``ray start`` command line of the head ``cluster`` describes."""
    head = cluster["head"]
    ray = Path(sys.executable).with_name("ray")
    cmd = [str(ray) if ray.exists() else "ray", "start", "--head", "--block", f"--port={head['port']}",
           "--include-dashboard=true", f"--dashboard-host={cluster.get('dashboard_host') or '127.0.0.1'}",
           f"--dashboard-port={head['dashboard_port']}", f"--metrics-export-port={head['metrics_export_port']}",
           "--disable-usage-stats"]
    if head.get("num_cpus"):
        cmd.append(f"--num-cpus={head['num_cpus']}")
    if cluster.get("object_store_memory"):
        cmd.append(f"--object-store-memory={int(cluster['object_store_memory'])}")
    return cmd


def up(cluster: dict[str, Any], timeout_s: float = 180.0) -> dict[str, Any]:
    """Start the head (or find the one running); returns its state (pid, address, dashboard, log)."""
    from components.core.raytools import ensure_auth, local_head, ray_temp_dir

    auth = ensure_auth(cluster.get("auth_mode"))
    state_f = _state_file()
    running = local_head()
    if running:
        state = json.loads(state_f.read_text()) if state_f.exists() else {"address": running, "pid": None}
        state["already_up"] = True
        return state
    head = cluster["head"]
    ray_temp_dir().mkdir(parents=True, exist_ok=True)
    log_path = ray_temp_dir() / "dtlab-head.log"
    dash_host = cluster.get("dashboard_host") or "127.0.0.1"
    dashboard = f"http://{dash_host}:{head['dashboard_port']}"
    env = {**os.environ, "RAY_AUTH_MODE": auth, "RAY_USAGE_STATS_ENABLED": "0"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(head_command(cluster), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    t0 = time.monotonic()
    address = None
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            tail = "".join(log_path.read_text().splitlines(keepends=True)[-15:])
            raise RuntimeError(f"the Ray head exited during start-up (log {log_path}):\n{tail}")
        address = address or local_head()
        if address and _http_ok(f"{dashboard}/api/gcs_healthz"):
            break
        time.sleep(0.5)
    else:
        _stop(proc.pid)
        raise RuntimeError(f"the Ray head did not come up within {timeout_s:.0f} s (log {log_path})")
    state = {"pid": proc.pid, "address": address, "dashboard_url": dashboard, "auth_mode": auth,
             "metrics": f"127.0.0.1:{head['metrics_export_port']}", "log": str(log_path),
             "startup_s": round(time.monotonic() - t0, 2)}
    state_f.write_text(json.dumps(state, indent=2))
    return state


def _stop(pid: int, timeout_s: float = 60.0) -> None:
    """SIGTERM to ``ray start --block`` (it takes its node down), then SIGKILL its session."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    t0 = time.monotonic()
    while _alive(pid) and time.monotonic() - t0 < timeout_s:
        time.sleep(0.25)
    try:
        os.killpg(pid, signal.SIGKILL)  # leftovers of this head only: its own session
    except (ProcessLookupError, PermissionError):
        pass


def down() -> dict[str, Any] | None:
    """Stop the head `dtlab up` started; None when there is none. Other Ray sessions are left alone."""
    from components.core.raytools import local_head, ray_temp_dir

    state_f = _state_file()
    if not state_f.exists():
        return None
    state = json.loads(state_f.read_text())
    if state.get("pid") and _alive(int(state["pid"])):
        _stop(int(state["pid"]))
    addr_f = ray_temp_dir() / "ray_current_cluster"
    try:
        if addr_f.read_text().strip() == state.get("address"):
            addr_f.unlink()
    except OSError:
        pass
    state_f.unlink(missing_ok=True)
    state["still_listening"] = local_head() == state.get("address")
    return state


def cmd_up(args: list[str]) -> None:
    """`dtlab up [cluster.KEY=VALUE ...]`."""
    from components.core.errors import ConfigError

    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return
    try:
        cluster = cluster_config(args)
        state = up(cluster)
    except ConfigError as e:
        _die(str(e))
    except RuntimeError as e:
        _die(str(e), code=1)
    if state.get("already_up"):
        print(f"dtlab up: a Ray head is already up at {state['address']}"
              + (f" (dashboard {state['dashboard_url']})" if state.get("dashboard_url") else "")
              + ("" if state.get("pid") else "; it was not started by `dtlab up`, stop it with `ray stop`"))
        return
    print(f"dtlab up: Ray head at {state['address']} ({state['startup_s']:.1f} s), auth {state['auth_mode']}\n"
          f"  dashboard {state['dashboard_url']}   metrics (Prometheus target) {state['metrics']}   log {state['log']}\n"
          "  `dtlab run ...` attaches to it; `dtlab down` stops it."
          + ("\n  The dashboard asks for the token: `ray get-auth-token` prints it; "
             "for `ray job submit` and other Ray CLIs: export RAY_AUTH_MODE=token."
             if state["auth_mode"] == "token" else ""))


def cmd_down(args: list[str]) -> None:
    """`dtlab down`."""
    from components.core.raytools import local_head

    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return
    state = down()
    if state is None:
        other = local_head()
        print("dtlab down: no head started by `dtlab up`"
              + (f"; another Ray head is up at {other} (stop it with `ray stop`)" if other else ""))
        return
    if state["still_listening"]:
        _die(f"the Ray head at {state['address']} still listens after stop (log {state.get('log')})", code=1)
    print(f"dtlab down: Ray head at {state['address']} stopped")


if __name__ == "__main__":  # python -m pipelines.cluster up|down|token
    cmd, rest = (sys.argv[1:2] or ["--help"])[0], sys.argv[2:]
    if cmd == "token":  # create the token file (0600) if missing, print its path (for `ray up`, scripts)
        from components.core.raytools import ensure_token

        print(ensure_token())
    else:
        {"up": cmd_up, "down": cmd_down}.get(cmd, lambda a: print(__doc__))(rest)
