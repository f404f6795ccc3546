"""`dtlab up` / `dtlab down`: a long-lived local Ray head that `dtlab run` attaches to by itself.

    dtlab up [cluster.KEY=VALUE ...]    start it (once; a second `up` says where it runs)
    dtlab down [--force]                stop it (only the head `dtlab up` started); names the drivers
                                        still attached and asks first (without a terminal: --force)

Settings come from conf/cluster/local.yaml (``head.*``, ``dashboard_host``, ``auth_mode``), with
the same overrides as `dtlab run`, e.g. ``dtlab up cluster.head.num_cpus=4``. The dashboard and
the metrics export are on; token authentication is on unless ``cluster.auth_mode=disabled``. A
warm head saves each run Ray's start-up (seconds) and keeps the dashboard and metrics between runs.

Network: with ``cluster.head.loopback_only`` (the default) every port of the head (GCS, raylet,
dashboard, the dashboard agent's HTTP and gRPC ports, the Prometheus metrics export, the Ray
client server, the runtime-env agent) listens on 127.0.0.1 only: the head is started in Ray's
single-machine mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which makes Ray take 127.0.0.1 as the
node address; ``--node-ip-address=127.0.0.1`` alone is turned back into the routable address by
Ray). No other node can join such a head. ``loopback_only=false`` keeps Ray's default: the metrics
port on every interface (0.0.0.0) and the agent, GCS and raylet on this machine's address; the
metrics endpoint has no authentication (the token covers the GCS, dashboard and agents), so
restrict it with a firewall. `dtlab up` prints every listener of the head beyond loopback.

The head is ``ray start --head --block`` in a session of its own; its pid, address, log, checkout,
environment (``sys.prefix``) and commit are in ``<Ray temp dir>/dtlab-head.json``. `dtlab run`
attaches only to a head of its own checkout and environment (``cluster.attach=any`` for any head).
`dtlab down` ends that process and what it started, never other Ray sessions on the machine (as
``ray stop`` would).
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

from components.core.raytools import HEAD_FILE as STATE
from components.core.raytools import LOOPBACK_ENV

PORTS = ("port", "dashboard_port", "metrics_export_port", "dashboard_agent_listen_port", "ray_client_server_port")
LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1", "localhost")


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
    for k in PORTS:
        v = head.get(k)
        if not (isinstance(v, int) and 1024 <= v <= 65535):
            raise ConfigError(f"cluster.head.{k}", v, "a port in [1024, 65535]")
    n = head.get("num_cpus")
    if n is not None and not (isinstance(n, int) and n >= 1):
        raise ConfigError("cluster.head.num_cpus", n, "null (every core) or a positive integer")
    if not isinstance(head.get("loopback_only", True), bool):
        raise ConfigError("cluster.head.loopback_only", head.get("loopback_only"), "true or false")
    return out


def _state_file() -> Path:
    from components.core.raytools import ray_temp_dir

    return ray_temp_dir() / STATE


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
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
           f"--dashboard-agent-listen-port={head['dashboard_agent_listen_port']}",
           f"--ray-client-server-port={head['ray_client_server_port']}", "--disable-usage-stats"]
    if head.get("num_cpus"):
        cmd.append(f"--num-cpus={head['num_cpus']}")
    if cluster.get("object_store_memory"):
        cmd.append(f"--object-store-memory={int(cluster['object_store_memory'])}")
    return cmd


def head_env(cluster: dict[str, Any], auth: str) -> dict[str, str]:
    """The head's environment: token mode, no usage stats, and with ``head.loopback_only`` Ray's
    single-machine mode, in which Ray takes 127.0.0.1 as the node address and binds every port there."""
    env = {**os.environ, "RAY_AUTH_MODE": auth, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    if cluster["head"].get("loopback_only", True):
        env[LOOPBACK_ENV] = "0"
    return env


def head_listeners(pid: int) -> list[tuple[str, int, str]]:
    """Every listening TCP socket of the head ``pid`` and its descendants (GCS, raylet, dashboard,
    agents, workers): (address, port, process name), from the kernel's socket table; nothing is sent."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    out = set()
    for p in procs:
        try:
            name = p.name()
            for c in p.net_connections("tcp"):
                if c.status == psutil.CONN_LISTEN:
                    out.add((c.laddr.ip, c.laddr.port, name))
        except psutil.Error:  # gone meanwhile
            pass
    return sorted(out, key=lambda t: (t[1], t[0]))


def beyond_loopback(listeners: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """The listeners reachable from other machines: bound to anything but a loopback address."""
    return [t for t in listeners if t[0] not in LOOPBACK and not t[0].startswith("127.")]


def up(cluster: dict[str, Any], timeout_s: float = 180.0) -> dict[str, Any]:
    """Start the head (or find the one running); returns its state (pid, address, dashboard, log,
    checkout, python, commit, and ``exposed``: its listeners beyond loopback)."""
    from components.core.provenance import git_state
    from components.core.raytools import ensure_auth, head_record, local_head, ray_temp_dir, this_environment

    auth = ensure_auth(cluster.get("auth_mode"))
    state_f = _state_file()
    running = local_head()
    if running:
        state = head_record(running) or {"address": running, "pid": None}
        state["already_up"] = True
        return state
    head = cluster["head"]
    ray_temp_dir().mkdir(parents=True, exist_ok=True)
    log_path = ray_temp_dir() / "dtlab-head.log"
    dash_host = cluster.get("dashboard_host") or "127.0.0.1"
    dashboard = f"http://{dash_host}:{head['dashboard_port']}"
    env = head_env(cluster, auth)
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
    git = git_state()
    listeners = head_listeners(proc.pid)
    deadline = time.monotonic() + 30  # the agent binds its ports a little after the dashboard answers
    while head["metrics_export_port"] not in {p for _, p, _ in listeners} and time.monotonic() < deadline:
        time.sleep(0.5)
        listeners = head_listeners(proc.pid)
    metrics = [f"{h}:{p}" for h, p, _ in listeners if p == head["metrics_export_port"]]
    state = {"pid": proc.pid, "address": address, "dashboard_url": dashboard, "auth_mode": auth,
             "metrics": ", ".join(metrics) or f"127.0.0.1:{head['metrics_export_port']}", "log": str(log_path),
             "startup_s": round(time.monotonic() - t0, 2), **this_environment(),
             "commit": git["git.commit"], "dirty": git["git.dirty"], "started": time.strftime("%Y-%m-%d %H:%M:%S"),
             "loopback_only": bool(head.get("loopback_only", True)),
             "exposed": [f"{h}:{p} {n}" for h, p, n in beyond_loopback(listeners)]}
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


def attached_drivers(state: dict[str, Any], timeout_s: float = 10.0) -> list[str] | None:
    """The drivers attached to the head now, from Ray's own job table in its GCS (``dtlab run``,
    ``ray job submit``, any ``ray.init``): one ``pid N: command`` each; None when the GCS cannot be
    asked (the head is not answering). Ray's internal jobs (dashboard, Serve) are left out."""
    from components.core.raytools import ensure_auth

    try:
        ensure_auth(state.get("auth_mode"), create_token=False)
        from ray._raylet import GcsClient

        jobs = GcsClient(address=state["address"]).get_all_job_info(
            skip_submission_job_info_field=True, skip_is_running_tasks_field=True, timeout=timeout_s)
    except Exception:  # noqa: BLE001 - an unreachable GCS has no drivers to name
        return None
    out = []
    for job in jobs.values():
        if job.is_dead or job.config.ray_namespace.startswith("_ray_internal"):
            continue
        cmd = " ".join(str(job.entrypoint).split()) or "?"
        out.append(f"pid {job.driver_pid}: {cmd[:160]}")
    return sorted(out)


def head_state() -> dict[str, Any] | None:
    """The record of the head `dtlab up` started (in Ray's temp dir), or None."""
    try:
        return json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return None


def down() -> dict[str, Any] | None:
    """Stop the head `dtlab up` started; None when there is none. Other Ray sessions are left alone."""
    from components.core.raytools import local_head, ray_temp_dir

    state_f = _state_file()
    state = head_state()
    if state is None:
        return None
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
    from components.core.raytools import describe_head, this_environment

    if state.get("already_up"):
        mine = all(state.get(k) == v for k, v in this_environment().items())
        print(f"dtlab up: a Ray head is already up at {state['address']}"
              + (f" (dashboard {state['dashboard_url']})" if state.get("dashboard_url") else "")
              + ("" if state.get("pid") else "; it was not started by `dtlab up`, stop it with `ray stop`")
              + ("" if mine or not state.get("pid") else
                 f"; it is {describe_head(state)}: runs from here attach to it only with cluster.attach=any"))
        return
    exposed = state.get("exposed") or []
    print(f"dtlab up: Ray head at {state['address']} ({state['startup_s']:.1f} s), auth {state['auth_mode']}, "
          f"commit {str(state.get('commit'))[:12]}\n"
          f"  dashboard {state['dashboard_url']}   metrics (Prometheus target, no auth) {state['metrics']}   "
          f"log {state['log']}\n"
          + ("  every port of the head listens on 127.0.0.1 only\n" if not exposed else
             f"  listening beyond loopback (other machines can reach them; the metrics port has no auth, restrict "
             f"with a firewall or cluster.head.loopback_only=true): {', '.join(exposed)}\n")
          + "  `dtlab run ...` from this checkout and environment attaches to it; `dtlab down` stops it."
          + (f"\n  Other Ray clients (ray.init, `ray status`) reach a loopback head with {LOOPBACK_ENV}=0."
             if state.get("loopback_only") else "")
          + ("\n  The dashboard asks for the token: `ray get-auth-token` prints it; "
             "for `ray job submit` and other Ray CLIs: export RAY_AUTH_MODE=token."
             if state["auth_mode"] == "token" else ""))


def confirm_down(state: dict[str, Any], force: bool, ask=None) -> None:
    """Before stopping the head: name the drivers attached to it (and a head of another checkout);
    go on with ``force``, else ask on a terminal, else stop with exit 1 and say ``--force``."""
    from components.core.raytools import describe_head, this_environment

    drivers = attached_drivers(state) or []
    mine = all(state.get(k) == v for k, v in this_environment().items())
    why = ([f"{len(drivers)} driver(s) attached: " + "; ".join(drivers)] if drivers else []) \
        + ([] if mine else [f"the head is {describe_head(state)}, not this checkout's"])
    if not why or force:
        if why:
            print(f"dtlab down: --force: stopping the Ray head at {state['address']} although " + "; ".join(why))
        return
    msg = f"the Ray head at {state['address']}: " + "; ".join(why)
    if ask is None and sys.stdin.isatty():
        ask = input
    if ask is None:
        _die(f"{msg}; `dtlab down --force` stops it under them", code=1)
    if ask(f"dtlab down: {msg}\nstop it anyway? [y/N] ").strip().lower() not in ("y", "yes"):
        _die("not stopped", code=1)


def cmd_down(args: list[str]) -> None:
    """`dtlab down [--force]`."""
    from components.core.raytools import local_head

    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return
    bad = [a for a in args if a not in ("--force", "-f")]
    if bad:
        _die(f"down {bad[0]!r}: `dtlab down` takes only --force")
    state = head_state()
    if state is not None and state.get("pid") and _alive(int(state["pid"])):
        confirm_down(state, force=bool(args))
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
