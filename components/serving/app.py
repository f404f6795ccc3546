"""Ray Serve plumbing shared by every serving technique: start/stop Serve on loopback, deploy an
application, and one convention for validated HTTP bodies.

Usage::

    from ray import serve
    from components.serving.app import (RequestModel, TINY_REPLICA, deploy, make_api, post_json,
                                         serve_session)
    from pydantic import Field

    class EchoIn(RequestModel):                 # extra keys rejected; bound every size
        text: str = Field(min_length=1, max_length=256)
        max_tokens: int = Field(default=16, ge=1, le=64)

    api = make_api("echo", max_body_bytes=4096)  # 413 above the byte limit, 422 on bad bodies

    @serve.deployment(ray_actor_options=TINY_REPLICA)   # num_cpus=0: never blocks a variant's CPU
    @serve.ingress(api)
    class Echo:
        @api.post("/run")                         # name routes; a bare "/" answers 307 to "prefix/"
        def echo(self, req: EchoIn) -> dict:
            return {"text": req.text[: req.max_tokens]}

    with serve_session() as s:                   # Ray must be initialised (ray.init or the DAG's session)
        deploy(Echo.bind(), name="echo", route_prefix="/echo")
        status, body = post_json(s.url("/echo/run"), {"text": "hi"})   # -> 200, {"text": "hi"}
        status, body = post_json(s.url("/echo/run"), {"text": ""})     # -> 422, {"error": ..., "detail": [...]}

- Serve listens on 127.0.0.1 only, on a free port picked here (other helpers' Ray sessions and
  Serve instances share the machine). One Serve instance per Ray cluster: :func:`start_serve`
  reuses a running one (its port is kept in Ray's internal KV) and then does not own it, so
  :func:`serve_session` stops Serve only if it started it. Tests share one instance per session
  (fixture ``serve_instance`` in tests/serving/conftest.py).
- Deployment handles: ``deploy`` returns the ingress deployment's ``DeploymentHandle``;
  ``handle.method.remote(...).result()`` calls it without HTTP. A deployment calls another by
  taking its bound application as an init argument (it arrives as a handle): model composition.
- Bodies: subclass :class:`BoundedModel` (``extra="forbid"``) and bound every string and list
  (``max_length``) and every number (``ge``/``le``). :func:`make_api` returns a FastAPI app whose
  body-size middleware answers 413 before parsing, and whose validation handler answers 422 with
  one readable line per bad field; the replica keeps serving either way. Name routes
  (``@api.post("/run")``): a bare ``"/"`` under a prefix answers 307. Do not put
  ``from __future__ import annotations`` in a module that defines an ingress class: FastAPI
  then cannot resolve the body type inside the replica and treats it as a query parameter.
- Flavour: a service started with ``debug=true`` serves the debug flavour's tiny models; every
  response of a :func:`make_api` app then carries the header ``x-dtlab-flavour: debug`` (the
  response bodies are strict schemas with no metadata field), and `dtlab serve` prints a DEBUG line.
"""
from __future__ import annotations

import gc
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict

from components.core.errors import require

HOST = "127.0.0.1"
TINY_REPLICA = {"num_cpus": 0}          # ray_actor_options for tiny CPU models: take no CPU slot
DEFAULT_MAX_BODY_BYTES = 64 * 1024
QUIET_LOGS = {"log_level": "WARNING", "enable_access_log": False}   # no per-request lines on the driver
_KV_PORT = b"dtlab.serve.port"
FLAVOUR_ENV = "DTLAB_SERVE_FLAVOUR"    # set by `dtlab serve ... debug=true` before Ray starts; replicas inherit it


# ------------------------------------------------------------------------------ schemas and API
class BoundedModel(BaseModel):
    """Base for request/response bodies: unknown keys are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class RequestModel(BoundedModel):
    """Base for request bodies: also strict types (``"7"`` is not a number, ``"yes"`` not a
    boolean, ``1`` not ``true``; an integer is a valid float), so a client's type error is a 422."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _field_errors(errors: list[dict]) -> list[str]:
    out = []
    for e in errors[:20]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        out.append(f"{loc}: {e.get('msg', 'invalid')}")
    return out


class _BodyLimit:
    """ASGI middleware: answer 413 once a request body exceeds ``max_bytes`` (declared or streamed)."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._reject(send, int(declared))
        body, more = bytearray(), True
        while more:  # read the whole (bounded) body first so an oversized stream is refused cleanly
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > self.max_bytes:
                return await self._reject(send, len(body))
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        return await self.app(scope, replay, send)

    async def _reject(self, send, n: int):
        payload = json.dumps({"error": "request body too large",
                              "detail": [f"body: {n} bytes > limit {self.max_bytes} bytes"]}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})


class _Flavour:
    """ASGI middleware: ``x-dtlab-flavour: <flavour>`` on every response while the replica's
    environment names one (``DTLAB_SERVE_FLAVOUR``), so a client can tell the tiny debug models'
    answers from the experiment's."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        flavour = os.environ.get(FLAVOUR_ENV)
        if scope["type"] != "http" or not flavour:
            return await self.app(scope, receive, send)

        async def tagged(msg):
            if msg["type"] == "http.response.start":
                msg = {**msg, "headers": [*msg.get("headers", []), (b"x-dtlab-flavour", flavour.encode())]}
            await send(msg)

        return await self.app(scope, receive, tagged)


def make_api(title: str, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES):
    """A FastAPI app for ``@serve.ingress``: 413 above ``max_body_bytes``, 422 with readable
    per-field messages on malformed JSON or schema violations, 400 on a handler's ValueError."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    require(max_body_bytes >= 64, "max_body_bytes", max_body_bytes, "at least 64 bytes")
    api = FastAPI(title=title)
    api.add_middleware(_BodyLimit, max_bytes=max_body_bytes)
    api.add_middleware(_Flavour)  # outermost: 413s and 422s are tagged too

    @api.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return JSONResponse(status_code=422, content={"error": "invalid request body",
                                                      "detail": _field_errors(exc.errors())})

    @api.exception_handler(ValueError)
    async def _bad_value(request: Request, exc: ValueError):
        return JSONResponse(status_code=400, content={"error": "bad request", "detail": [str(exc)]})

    @api.get("/healthz")
    def _health() -> dict:
        return {"ok": True}

    return api


# ------------------------------------------------------------------------------ Serve lifecycle
@dataclass(frozen=True)
class ServeInfo:
    host: str
    port: int
    owned: bool          # True: this process started Serve and stop_serve() will shut it down

    def url(self, route: str = "/") -> str:
        return f"http://{self.host}:{self.port}/{route.lstrip('/')}"


_OWNED: ServeInfo | None = None


def free_port(host: str = HOST) -> int:
    """A TCP port free on ``host`` right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _controller_alive() -> bool:
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    try:
        ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        return True
    except ValueError:
        return False


def _kv():
    from ray.experimental import internal_kv

    return internal_kv


def running_port() -> int | None:
    """The HTTP port of the Serve instance running in this Ray cluster (None if Serve is down)."""
    if not _controller_alive():
        return None
    raw = _kv()._internal_kv_get(_KV_PORT)
    return int(raw) if raw else None


def start_serve(port: int | None = None) -> ServeInfo:
    """Start Ray Serve on 127.0.0.1 in the current Ray session, or reuse the one running there.

    ``port=None`` picks a free port. Ray must already be initialised (the DAG's or a test's
    session); starting Ray here would hide a session mix-up.
    """
    global _OWNED
    import ray
    from ray import serve

    require(ray.is_initialized(), "ray", "not initialised", "an initialised Ray session (ray.init first)")
    if _OWNED is not None and _controller_alive():
        return _OWNED
    existing = running_port()
    if existing is not None:
        return ServeInfo(HOST, existing, owned=False)
    port = port or free_port()
    serve.start(http_options={"host": HOST, "port": port}, proxy_location="HeadOnly", logging_config=QUIET_LOGS)
    _kv()._internal_kv_put(_KV_PORT, str(port).encode(), overwrite=True)
    _OWNED = ServeInfo(HOST, port, owned=True)
    # the proxy answers 503 ("route table not populated") until the first app is deployed
    wait_http(_OWNED.url("/-/routes"), timeout_s=30, ok_statuses=(200, 503))
    return _OWNED


def stop_serve(force: bool = False, timeout_s: float = 60.0) -> None:
    """Shut Serve down if this process started it (or ``force``); deletes every application.

    Ray Serve's ``serve.shutdown()`` waits inside the controller's ``graceful_shutdown`` call,
    which only ends when the controller kills itself; with the controller's unlimited task
    retries the driver then prints ``(raylet) Task ServeController.graceful_shutdown failed ...
    will be retried``. Here the controller is told to shut down without a waiting call, its end
    is polled (``timeout_s``), and ``serve.shutdown()`` then only drops the client.
    """
    global _OWNED
    import ray
    from ray import serve
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    if _OWNED is None and not force:
        return
    try:
        try:
            controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        except ValueError:
            controller = None
        if controller is not None:
            deadline = time.monotonic() + timeout_s
            ray.get(controller.graceful_shutdown.remote(wait=False), timeout=timeout_s)
            while _controller_alive() and time.monotonic() < deadline:
                time.sleep(0.2)
        serve.shutdown()
    finally:
        try:
            _kv()._internal_kv_del(_KV_PORT)
        except Exception:  # noqa: BLE001 - Ray may already be gone at interpreter exit
            pass
        _OWNED = None


@contextmanager
def serve_session(port: int | None = None) -> Iterator[ServeInfo]:
    """Serve for the duration of a ``with`` block; shut down on exit only if started here."""
    info = start_serve(port)
    try:
        yield info
    finally:
        if info.owned:
            stop_serve()


def deploy(app, name: str, route_prefix: str | None, timeout_s: float = 60.0):
    """Deploy ``app`` (a bound deployment) as application ``name`` at ``route_prefix`` (None:
    handle only, no HTTP route). Waits until it is running; returns its ingress handle."""
    from ray import serve

    require(route_prefix is None or route_prefix.startswith("/"), "route_prefix", route_prefix,
            "a path starting with '/' (or None for handle-only)")
    handle = serve.run(app, name=name, route_prefix=route_prefix, blocking=False, logging_config=QUIET_LOGS)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        st = serve.status().applications.get(name)
        if st is not None and str(st.status).endswith("RUNNING"):
            if route_prefix is not None:
                _wait_route(route_prefix, deadline)
            return handle
        if st is not None and str(st.status).endswith("DEPLOY_FAILED"):
            raise RuntimeError(f"application {name!r} failed to deploy: {st.message}")
        time.sleep(0.1)
    raise TimeoutError(f"application {name!r} not running after {timeout_s:.0f} s")


def _wait_route(route_prefix: str, deadline: float) -> None:
    """Wait until the HTTP proxy's route table lists ``route_prefix``."""
    port = running_port()
    if port is None:
        return
    url = f"http://{HOST}:{port}/-/routes"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if route_prefix in json.loads(r.read()):
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"route {route_prefix!r} not in the proxy's route table in time")


def undeploy(name: str) -> None:
    from ray import serve

    serve.delete(name, _blocking=True)


class _StopOnSignal:
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, as Ctrl-C does, so a service
    stops through one path. :meth:`install` again after ``ray.init``, which puts Ray's own handler
    there (it prints a C++ stack trace and kills the driver without stopping anything in order)."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.received: list[str] = []

    def _raise(self, signum, frame):
        self.received.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    def install(self) -> None:
        for sig in self.SIGNALS:
            signal.signal(sig, self._raise)

    def __enter__(self):
        self.old = {sig: signal.getsignal(sig) for sig in self.SIGNALS}
        self.install()
        return self

    def __exit__(self, *exc):
        for sig, h in self.old.items():
            signal.signal(sig, h)


def serve_until_stopped(app_factory, name: str, route_prefix: str, endpoint: str, example: dict, cluster: dict,
                        port: int | None = None, flavour: str | None = None, out=print) -> None:
    """`dtlab serve`: start Ray (``cluster``), deploy ``app_factory()`` as ``dtlab_<name>``, print its URL and a
    curl line, serve until Ctrl-C, SIGTERM or SIGHUP, then stop in order and say so in one line.

    ``flavour="debug"``: a DEBUG line says the tiny models answer, and every response carries
    ``x-dtlab-flavour: debug`` (the variable is set before Ray starts, so the replicas inherit it).
    Stopping: in a Ray session started here, ``ray.shutdown()`` ends Serve with every other actor;
    Serve's own graceful teardown (replica drains, proxies) only slows the stop down. On a cluster
    that lives on (an attached head), the application is deleted and Serve stopped if started here.
    """
    import ray

    from components.core.raytools import init_ray

    if flavour:
        os.environ[FLAVOUR_ENV] = flavour
    mode, t_stop = None, None
    with _StopOnSignal() as signals:
        try:
            mode = init_ray(cluster)["mode"]
            signals.install()
            info = start_serve(port)
            deploy(app_factory(), name=f"dtlab_{name}", route_prefix=route_prefix)
            url = info.url(route_prefix + endpoint)
            # what is loaded now lives as long as the service: out of the collector's way, so neither its
            # periodic full passes nor the interpreter's last one at exit walk it (that last pass took
            # 14 s after a 2 s stop of the specreason service on 2 busy cores)
            gc.freeze()
            if flavour == "debug":
                out(f"DEBUG: debug=true serves the debug flavour's tiny models (their answers are not the "
                    f"experiment's); responses carry x-dtlab-flavour: debug")
            out(f"serving {name} at {url}\n  curl -s -X POST {url} -H 'content-type: application/json' "
                f"-d '{json.dumps(example)}'\nCtrl-C stops it.")
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            t_stop = time.monotonic()
            try:
                if ray.is_initialized() and mode not in (None, "embedded"):
                    try:
                        undeploy(f"dtlab_{name}")
                    finally:
                        stop_serve()
            finally:
                ray.shutdown()
    why = signals.received[-1] if signals.received else "Ctrl-C"
    out(f"dtlab serve {name}: stopped by {why} ({time.monotonic() - t_stop:.1f} s)")


# ------------------------------------------------------------------------------ tiny HTTP client
def post_json(url: str, body: Any, timeout_s: float = 10.0, raw: bytes | None = None) -> tuple[int, Any]:
    """POST ``body`` as JSON (or ``raw`` bytes) and return (status, decoded JSON or text)."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            status, payload = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, payload = e.code, e.read()
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode(errors="replace")


def wait_http(url: str, timeout_s: float = 30.0, ok_statuses: tuple[int, ...] = (200,)) -> None:
    """Poll ``url`` with GET until it answers one of ``ok_statuses``."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status in ok_statuses:
                    return
                last = r.status
        except urllib.error.HTTPError as e:
            last = e.code
            if e.code in ok_statuses:
                return
        except OSError as e:
            last = e
        time.sleep(0.1)
    raise TimeoutError(f"{url} not answering after {timeout_s:.0f} s (last: {last})")
