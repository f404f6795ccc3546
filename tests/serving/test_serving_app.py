"""The Serve plumbing: loopback start, deploy, bounded bodies (4xx and keep serving), handles."""

import pytest
from pydantic import Field
from ray import serve

from components.core.errors import ConfigError
from components.serving.app import (TINY_REPLICA, BoundedModel, deploy, make_api, post_json,
                                    start_serve, undeploy)


class SumIn(BoundedModel):
    values: list[float] = Field(min_length=1, max_length=8)
    scale: float = Field(default=1.0, ge=0.0, le=10.0)


api = make_api("sum_test", max_body_bytes=512)


@serve.deployment(ray_actor_options=TINY_REPLICA)
@serve.ingress(api)
class Summer:
    @api.post("/total")
    def total(self, req: SumIn) -> dict:
        if any(v != v for v in req.values):
            raise ValueError("values: NaN is not a number we can add")
        return {"sum": req.scale * sum(req.values)}

    def direct(self, xs: list[float]) -> float:
        return float(sum(xs))


@pytest.fixture(scope="module")
def summer(serve_instance):
    handle = deploy(Summer.bind(), name="test_sum", route_prefix="/sum")
    yield serve_instance.url("/sum/total"), handle
    undeploy("test_sum")


def test_serve_listens_on_loopback_only(serve_instance):
    assert serve_instance.host == "127.0.0.1" and serve_instance.port > 0
    again = start_serve()              # a second start reuses the running instance
    assert again.port == serve_instance.port


def test_valid_request_answers(summer):
    url, _ = summer
    assert post_json(url, {"values": [1, 2, 3.5], "scale": 2}) == (200, {"sum": 13.0})


@pytest.mark.parametrize("body,raw,status,needle", [
    ({"values": []}, None, 422, "values"),                          # below min length
    ({"values": list(range(9))}, None, 422, "at most 8"),            # above max length
    ({"values": [1], "scale": 11}, None, 422, "scale"),              # out of range
    ({"values": [1], "junk": 1}, None, 422, "junk"),                 # unknown key
    ({"values": "abc"}, None, 422, "values"),                        # wrong type
    (None, b"{not json", 422, "JSON"),                               # malformed JSON
    (None, b'{"values": [' + b"1," * 400 + b"1]}", 413, "too large"),  # oversized body
])
def test_invalid_requests_get_4xx_and_service_keeps_serving(summer, body, raw, status, needle):
    url, _ = summer
    got, payload = post_json(url, body, raw=raw)
    assert got == status
    assert needle.lower() in str(payload).lower()
    assert post_json(url, {"values": [4]}) == (200, {"sum": 4.0})


def test_handler_value_error_is_400(summer):
    url, _ = summer
    got, payload = post_json(url, None, raw=b'{"values": [NaN]}')
    assert got == 400 and "NaN" in str(payload)


def test_handle_call_without_http(summer):
    _, handle = summer
    assert handle.direct.remote([1.0, 2.0]).result(timeout_s=30) == 3.0


def test_bad_route_prefix_is_config_error(serve_instance):
    with pytest.raises(ConfigError):
        deploy(Summer.bind(), name="bad", route_prefix="nope")


def _asgi_post(app, path: str, body: bytes) -> tuple[int, dict]:
    """One POST through an ASGI app in process (no server, no network): (status, headers)."""
    import asyncio

    sent: list[dict] = []
    msgs = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return msgs.pop(0) if msgs else {"type": "http.disconnect"}

    async def send(msg):
        sent.append(msg)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}


def test_debug_flavour_is_in_every_response_header(monkeypatch):
    """`dtlab serve ... debug=true` serves tiny models: each response (errors too) says so."""
    from components.serving.app import FLAVOUR_ENV

    # Prepare: an API with one route
    api = make_api("flavour", max_body_bytes=128)

    @api.post("/run")
    def run(req: SumIn) -> dict:
        return {"sum": sum(req.values)}

    # Execute / Assert: no flavour set, no header; debug set: on a 200, a 422 and a 413
    monkeypatch.delenv(FLAVOUR_ENV, raising=False)
    status, headers = _asgi_post(api, "/run", b'{"values": [1]}')
    assert status == 200 and "x-dtlab-flavour" not in headers
    monkeypatch.setenv(FLAVOUR_ENV, "debug")
    for body, want in ((b'{"values": [1]}', 200), (b'{"values": []}', 422), (b'{"values": [' + b"1," * 80 + b'1]}', 413)):
        status, headers = _asgi_post(api, "/run", body)
        assert status == want and headers.get("x-dtlab-flavour") == "debug", (status, headers)


def test_sigterm_and_sighup_stop_a_service_as_ctrl_c_does():
    import os
    import signal

    from components.serving.app import _StopOnSignal

    before = signal.getsignal(signal.SIGTERM)
    with _StopOnSignal() as stop:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), sig)  # the handler runs in this thread before os.kill returns to the test
        assert stop.received == ["SIGTERM", "SIGHUP"]
    assert signal.getsignal(signal.SIGTERM) is before
