"""Ray helpers: authentication, a running local head, embedded Ray or a cluster, from `cluster`.

Safe by default: Ray's token authentication is on unless ``cluster.auth_mode: disabled`` (Ray
2.60 binds its GCS, raylets and agents to the machine's routable address whatever
``--node-ip-address`` says, and its metrics port to 0.0.0.0, so the token is the control that works;
only Ray's single-machine mode, which `dtlab up` uses, puts them all on 127.0.0.1: see
pipelines/cluster.py; the metrics port has no token in any mode). The token is one file, ``~/.ray/auth_token`` (or
``RAY_AUTH_TOKEN_PATH``), created once here with mode 0600 before Ray would write it 0644; the
driver, its workers, Ray Train and Serve, and ``ray`` CLI calls with ``RAY_AUTH_MODE=token`` all
read it.

A local head (`dtlab up`) is attached to only when it was started from this checkout and this
environment (repo root and ``sys.prefix``, recorded in ``<Ray temp dir>/dtlab-head.json``): its
workers import this checkout's code with this interpreter. Any other head on the machine is
refused with one line, unless ``cluster.attach=any`` (or ``RAY_ADDRESS`` / ``cluster.address``)
asks for it.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import sys
import time
from pathlib import Path
from typing import Any

from components.core.errors import ConfigError

AUTH_MODES = ("token", "disabled")
ATTACH = (True, False, "any")
HEAD_FILE = "dtlab-head.json"  # in Ray's temp dir: what `dtlab up` started (pid, address, checkout, env)
ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("dtlab.ray")
_warned: set[str] = set()


def token_path() -> Path | None:
    """Where Ray reads the token: ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``; None when the
    token is in ``RAY_AUTH_TOKEN`` itself."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return None
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").expanduser()


def ensure_token() -> Path | None:
    """The token file, created once (mode 0600, 256 random bits) or tightened to 0600 if looser."""
    path = token_path()
    if path is None:
        return None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path


def ensure_auth(mode: str | None = "token", create_token: bool = True) -> str:
    """Set ``RAY_AUTH_MODE`` for this process and its children from ``cluster.auth_mode``.

    ``token`` (also for ``None``): the token file exists (``create_token``: made here, 0600).
    ``disabled``: a warning that names the risk. The config wins over an inherited
    ``RAY_AUTH_MODE``, which is reported when it differed. Returns the mode.
    """
    mode = "token" if mode in (None, "") else str(mode)
    if mode not in AUTH_MODES:
        raise ConfigError("cluster.auth_mode", mode, " or ".join(AUTH_MODES))
    env = os.environ.get("RAY_AUTH_MODE")
    if env and env != mode and f"env:{env}" not in _warned:
        _warned.add(f"env:{env}")
        log.warning("RAY_AUTH_MODE=%s from the environment is overridden by cluster.auth_mode=%s", env, mode)
    os.environ["RAY_AUTH_MODE"] = mode
    if mode == "token":
        if create_token:
            ensure_token()
    elif "disabled" not in _warned:
        _warned.add("disabled")
        log.warning("Ray token authentication is OFF (cluster.auth_mode=disabled): Ray's GCS, raylets and "
                    "agents listen on this machine's network address, so anyone who can reach it can "
                    "submit jobs and run code as you. Use it only on a machine nobody else can reach.")
    try:  # Ray read RAY_AUTH_MODE when it was imported: make it read the new value and token
        import sys

        worker = getattr(sys.modules.get("ray._private.worker"), "global_worker", None)
        live = getattr(worker, "connected", False) or sys.modules["ray"].is_initialized()
        if "ray._raylet" in sys.modules and not live:  # never under a live session: it would lose its token
            from ray._raylet import AuthenticationTokenLoader, Config

            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()
    except Exception:  # noqa: BLE001 - older Ray without these: the environment is what counts
        pass
    return mode


def check_cluster(cluster: dict[str, Any]) -> None:
    """The ``cluster`` options init_ray reads, checked before anything starts (ConfigError)."""
    mode = cluster.get("auth_mode")
    if mode not in (None, "", *AUTH_MODES):
        raise ConfigError("cluster.auth_mode", mode, " or ".join(AUTH_MODES))
    attach = cluster.get("attach", True)
    if not any(attach is a or (isinstance(a, str) and attach == a) for a in ATTACH):
        raise ConfigError("cluster.attach", attach, "true (a `dtlab up` head of this checkout), false (always "
                          "embedded) or any (whatever local head is up)")
    n = cluster.get("num_cpus")
    if n is not None and not (isinstance(n, (int, float)) and not isinstance(n, bool) and n > 0):
        raise ConfigError("cluster.num_cpus", n, "null (every core) or a positive number")
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():  # where init_ray would go: another checkout's head is refused here
        attach_target(cluster)


def ray_temp_dir() -> Path:
    """Ray's temp dir as ``ray start`` uses it (``RAY_TMPDIR``, else ``TMPDIR``, else /tmp, + ray)."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(base) / "ray"


def local_head(temp_dir: Path | None = None, timeout_s: float = 0.25) -> str | None:
    """The GCS address of a running local head (``dtlab up``, ``ray start --head``), or None.

    Cheap: reads the address file ``ray start`` writes (``<temp dir>/ray_current_cluster``) and
    connects to that port once; a file left by a killed head is ignored.
    """
    f = (temp_dir or ray_temp_dir()) / "ray_current_cluster"
    try:
        address = f.read_text().strip()
        host, port = address.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError):
        return None
    return address


def this_environment() -> dict[str, str]:
    """What a head must share with a driver that attaches to it: the checkout (repo root) its
    workers import and the environment (``sys.prefix``) whose interpreter and packages run them."""
    return {"checkout": str(ROOT), "python": str(Path(sys.prefix).resolve())}


def head_record(address: str | None, temp_dir: Path | None = None) -> dict[str, Any] | None:
    """The record `dtlab up` wrote for the head at ``address`` (pid, checkout, python, commit, ...),
    or None when that head was not started by `dtlab up` (or ``address`` is None)."""
    try:
        rec = json.loads(((temp_dir or ray_temp_dir()) / HEAD_FILE).read_text())
    except (OSError, ValueError):
        return None
    return rec if address and isinstance(rec, dict) and rec.get("address") == address else None


def describe_head(rec: dict[str, Any] | None) -> str:
    """``checkout X (python Y)`` of a head record, or why there is none."""
    if rec is None:
        return "not started by `dtlab up` (its checkout and environment are unknown)"
    return f"from checkout {rec.get('checkout', '?')} (python {rec.get('python', '?')})"


def attach_target(cluster: dict[str, Any]) -> tuple[str | None, str]:
    """Where init_ray connects, decided before Ray starts: ``(address, how)``.

    ``how`` is ``connected`` (``cluster.address`` or ``RAY_ADDRESS``), ``attached`` (a running local
    head of this checkout and environment, or any local head with ``cluster.attach=any``) or
    ``embedded`` (address None: no head, or ``cluster.attach=false``). A local head started from
    another checkout or environment, or not by `dtlab up`, raises ConfigError naming both sides:
    its workers would run that checkout's code with that interpreter under this run's provenance.
    """
    explicit = cluster.get("address") or os.environ.get("RAY_ADDRESS") or None
    if explicit:
        return explicit, "connected"
    attach = cluster.get("attach", True)
    if attach is False:
        return None, "embedded"
    address = local_head()
    if address is None:
        return None, "embedded"
    rec = head_record(address)
    mine = this_environment()
    if attach == "any" or (rec is not None and all(rec.get(k) == v for k, v in mine.items())):
        return address, "attached"
    raise ConfigError("cluster.attach", attach,
                      f"the local Ray head at {address} is {describe_head(rec)}, this run is checkout "
                      f"{mine['checkout']} (python {mine['python']}); cluster.attach=any attaches to it anyway, "
                      "cluster.attach=false starts an embedded Ray for this run")


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's single-machine mode, every address 127.0.0.1


def single_machine_mode() -> None:
    """Put this process's Ray in the single-machine mode a loopback-only `dtlab up` head runs in.

    Ray turns a loopback bootstrap address (``127.0.0.1:6379``) into this machine's routable
    address unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``; a head bound to 127.0.0.1 is then
    unreachable ("Failed to connect to GCS at address 192.0.2.2:6379"). Ray reads the variable when
    it is imported, so the constant it set is changed too; workers inherit the variable."""
    os.environ[LOOPBACK_ENV] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False


def head_tags(rec: dict[str, Any] | None) -> dict[str, str]:
    """The parent run's record of the head it ran on: its checkout, environment and code version
    (the commit its checkout was at when `dtlab up` started it)."""
    if rec is None:
        return {}
    return {"ray.head.checkout": str(rec.get("checkout", "unknown")), "ray.head.python": str(rec.get("python", "unknown")),
            "ray.head.commit": str(rec.get("commit", "unknown")), "ray.head.dirty": str(rec.get("dirty", "unknown"))}


def log_level(cluster: dict[str, Any]) -> str:
    """Ray's and Ray Serve's log level on the driver: ``cluster.logging_level`` (WARNING), INFO
    when the run is verbose (``verbose=true`` sets ``DTLAB_VERBOSE``)."""
    if os.environ.get("DTLAB_VERBOSE", "").lower() in ("1", "true", "yes"):
        return "INFO"
    return str(cluster.get("logging_level") or "WARNING")


def pin_ray_address() -> None:
    """Every worker's setup hook: ``RAY_ADDRESS`` = this cluster's GCS, unless set.

    Code in a worker that finds "the" cluster by address auto-detection (Ray Train's
    PlacementGroupCleaner queries the state API that way) otherwise fails with "Found multiple active
    Ray instances" as soon as a second session runs on the machine: the cleaner then dies, and a
    controller that dies later leaves its placement group (and its CPUs) held."""
    import ray

    os.environ.setdefault("RAY_ADDRESS", ray.get_runtime_context().gcs_address)


TRAIN_PG_CLEANER_LOGGER = "ray.train.v2._internal.execution.controller.placement_group_cleaner"


class _OnceFilter(logging.Filter):
    """Let the first record whose message starts with ``prefix`` through (with ``note`` appended),
    drop the repeats; other records pass."""

    def __init__(self, prefix: str, note: str):
        super().__init__()
        self.prefix, self.note, self.seen = prefix, note, False

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.prefix):
            return True
        if self.seen:
            return False
        self.seen = True
        record.msg = f"{record.msg} {self.note}"
        return True


def quiet_train_cleaner() -> None:
    """Ray Train's PlacementGroupCleaner (a detached actor per training run) asks the state API every
    check interval whether the Train controller lives, and logs a WARNING each time that fails. The
    state API is served by the dashboard, so in a session without one (``include_dashboard=false``:
    the tests, the benchmarks) every check fails: 145 identical lines in one duo run. Its first
    warning is kept, with what it means; the repeats are dropped, unless the run is verbose."""
    if os.environ.get("DTLAB_VERBOSE", "").lower() in ("1", "true", "yes"):
        return
    logger = logging.getLogger(TRAIN_PG_CLEANER_LOGGER)
    if not any(isinstance(f, _OnceFilter) for f in logger.filters):
        logger.addFilter(_OnceFilter("Failed to query Ray Train Controller actor state",
                                     "(repeats dropped: the state API needs the dashboard; without it the cleaner "
                                     "cannot tell whether the controller lives. verbose=true shows every one)"))


def worker_setup() -> None:
    """Every worker's setup hook (``worker_process_setup_hook``): the cluster's address pinned
    (:func:`pin_ray_address`) and Ray Train's placement-group cleaner quiet (:func:`quiet_train_cleaner`)."""
    pin_ray_address()
    quiet_train_cleaner()


def init_ray(cluster: dict[str, Any]) -> dict[str, Any]:
    """Connect to the cluster ``cluster`` names, or start embedded Ray; reuse a running session.

    Where to: ``cluster.address``, else ``RAY_ADDRESS``, else a running local head of this
    checkout and environment (see :func:`attach_target`), else a new embedded session sized by
    ``cluster``. Sizing options are given only to a session started here (Ray refuses them when
    connecting). Returns facts for the report: ``mode`` (embedded / attached / connected),
    ``address``, ``dashboard_url``, ``num_cpus``, ``nodes``, ``auth_mode``, ``ray_init_s``, ``tags``
    (the `dtlab up` head's checkout, environment and commit, when the session is that head's) and a
    one-line ``summary`` to print.
    """
    import ray

    check_cluster(cluster)
    t0 = time.perf_counter()
    mode, address = "reused", None
    if not ray.is_initialized():
        address, how = attach_target(cluster)
        auth = ensure_auth(cluster.get("auth_mode"), create_token=address is None)
        level = log_level(cluster)
        # Serve's driver-side logger prints INFO ("Started Serve", "... is ready at") over the live table
        logging.getLogger("ray.serve").setLevel(level)
        kwargs: dict[str, Any] = {"log_to_driver": bool(cluster.get("log_to_driver", True)),
                                  "logging_level": level,
                                  "runtime_env": {"worker_process_setup_hook": f"{__name__}.worker_setup"}}
        if address:
            mode = how
            kwargs["address"] = address
            if (head_record(address) or {}).get("loopback_only"):
                single_machine_mode()
        else:
            mode = "embedded"
            kwargs["address"] = "local"  # a new session even if Ray could find another one
            kwargs["num_cpus"] = cluster.get("num_cpus") or os.cpu_count()
            kwargs["include_dashboard"] = bool(cluster.get("include_dashboard", True))
            kwargs["dashboard_host"] = cluster.get("dashboard_host") or "127.0.0.1"
            if cluster.get("dashboard_port"):
                kwargs["dashboard_port"] = int(cluster["dashboard_port"])
            if cluster.get("metrics_export_port"):
                kwargs["_metrics_export_port"] = int(cluster["metrics_export_port"])
            if cluster.get("object_store_memory"):
                kwargs["object_store_memory"] = int(cluster["object_store_memory"])
        ctx = ray.init(**kwargs)
        if mode == "embedded":  # its processes end with this driver, even one killed by SIGKILL
            from components.core import ray_watchdog

            ray_watchdog.start()
        dashboard = ctx.dashboard_url
        head = head_record(address)  # the address asked for is the one `dtlab up` recorded
        address = ctx.address_info.get("gcs_address") or address
    else:
        auth = os.environ.get("RAY_AUTH_MODE", "disabled")
        dashboard = None
        try:
            from ray._private.worker import get_dashboard_url

            dashboard = get_dashboard_url()
        except Exception:  # noqa: BLE001 - the URL is a nicety
            pass
    if dashboard and not str(dashboard).startswith("http"):
        dashboard = f"http://{dashboard}"
    res = ray.cluster_resources()
    if mode == "reused":  # a multirun job in a worker: the session's own GCS says which head it is
        try:
            address = ray.get_runtime_context().gcs_address
        except Exception:  # noqa: BLE001 - the head record is a nicety here
            address = None
        head = head_record(address)
    info = {"mode": mode, "address": address, "dashboard_url": dashboard or None, "auth_mode": auth,
            "num_cpus": res.get("CPU", 0.0), "nodes": len([n for n in ray.nodes() if n.get("Alive")]),
            "ray_init_s": time.perf_counter() - t0, "tags": head_tags(head)}
    where = {"embedded": "embedded session", "attached": f"local head {address}",
             "connected": f"cluster {address}", "reused": "this process's session"}[mode]
    info["summary"] = (f"Ray: {where}, {info['num_cpus']:g} CPUs, auth {auth}"
                       + (f"; dashboard {dashboard}" if dashboard else "") + f" ({info['ray_init_s']:.1f} s)")
    return info


class NodeActor:
    """A generic Ray actor standing for one machine (a worker node, a client host, a chiplet).

    It hosts any number of objects by key, so concurrent variants of an experiment share one pool
    of node processes instead of each starting their own: ``host(key, cls, *args)`` builds an
    object on the node, ``call(key, method, *args)`` runs one of its methods there.
    """

    def __init__(self, index: int):
        self.index = index
        self.objects: dict[str, Any] = {}

    def host(self, key: str, cls, *args, **kwargs) -> None:
        self.objects[key] = cls(*args, **kwargs)

    def call(self, key: str, method: str, *args, **kwargs):
        return getattr(self.objects[key], method)(*args, **kwargs)

    def drop(self, key: str) -> None:
        self.objects.pop(key, None)

    def keys(self) -> list[str]:
        return list(self.objects)


def failure_reason(e: Exception) -> str:
    """Ray's error as one line for a FAILED run's reason: the exception type and its first line."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}".strip()


def start_nodes(n: int, num_cpus: float = 0.0, prefix: str = "node"):
    """Start ``n`` NodeActors (named ``prefix-i`` in the Ray dashboard)."""
    import ray

    cls = ray.remote(num_cpus=num_cpus)(NodeActor)
    return [cls.options(name=f"{prefix}-{i}-{os.getpid()}-{time.time_ns() % 10**6}").remote(i) for i in range(n)]


class RemoteObjects:
    """Objects hosted one per node (``nodes[i]`` hosts ``objs[i]``), called all at once.

    ``call('round', x)`` returns the results in node order. With ``nodes=None`` the objects are
    plain local objects (single-process runs, unit tests) behind the same API.
    """

    def __init__(self, key: str, factories: list[tuple], nodes: list | None):
        self.key, self.n = key, len(factories)
        self.nodes = list(nodes[: self.n]) if nodes is not None else None
        if self.nodes is None:
            self.local = [cls(*args) for cls, *args in factories]
            return
        import ray

        if len(self.nodes) < self.n:
            raise ValueError(f"{self.n} objects need as many nodes, got {len(self.nodes)}")
        self.local = None
        ray.get([node.host.remote(key, cls, *args) for node, (cls, *args) in zip(self.nodes, factories)])

    def call(self, method: str, *args) -> list:
        if self.local is not None:
            return [getattr(o, method)(*args) for o in self.local]
        import ray

        return ray.get([node.call.remote(self.key, method, *args) for node in self.nodes])

    def close(self) -> None:
        if self.local is None:
            import ray

            ray.get([node.drop.remote(self.key) for node in self.nodes])
