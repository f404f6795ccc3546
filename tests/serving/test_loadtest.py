"""The load-test client: bounded by count and by time, from a second process, loopback only."""
from pydantic import Field
from ray import serve

import pytest

from components.core.errors import ConfigError
from components.serving.app import TINY_REPLICA, BoundedModel, deploy, make_api, undeploy
from components.serving.loadtest import run_load_test

api = make_api("loadtest_echo", max_body_bytes=1024)


class PingIn(BoundedModel):
    n: int = Field(ge=0, le=100)


@serve.deployment(ray_actor_options=TINY_REPLICA)
@serve.ingress(api)
class Ping:
    @api.post("/ping")
    def ping(self, req: PingIn) -> dict:
        return {"n": req.n + 1}


@pytest.fixture(scope="module")
def ping_url(serve_instance):
    deploy(Ping.bind(), name="test_loadtest", route_prefix="/lt")
    yield serve_instance.url("/lt/ping")
    undeploy("test_loadtest")


def test_count_bounded_load_test_reports_latency(ping_url):
    res = run_load_test(ping_url, [{"n": 1}, {"n": 2}], n_requests=60, concurrency=3, max_seconds=30)
    assert res.n_sent == res.n_ok == 60 and res.stopped_by == "count"
    assert res.status_counts == {"200": 60}
    assert 0 < res.p50_ms <= res.p99_ms <= res.max_ms
    assert res.throughput_rps > 0


def test_time_bounded_and_errors_counted(ping_url):
    # every body is invalid (n > 100): all 422, counted as errors; the time bound stops it
    res = run_load_test(ping_url, [{"n": 1000}], n_requests=100_000, concurrency=2, max_seconds=1.0, warmup=0)
    assert res.stopped_by == "time" and res.n_ok == 0
    assert res.n_err == res.n_sent == res.status_counts["422"] > 0
    assert res.elapsed_s < 5


@pytest.mark.parametrize("kw", [{"url": "http://10.0.0.1:8000/x"}, {"n_requests": 0}, {"max_seconds": 0}])
def test_bad_arguments_rejected(kw):
    args = {"url": "http://127.0.0.1:9/x", "bodies": [{}], "n_requests": 1, "max_seconds": 1.0} | kw
    with pytest.raises(ConfigError):
        run_load_test(**args)
