"""The DiT service on Ray Serve: a PNG per request with the policy's skip fraction, Foresight
skips where full compute does not, bad bodies get 422/413/400 and the replica keeps serving, a
loopback load test. Marked slow (Serve start + deploy)."""
import base64

import pytest
import torch

from components.diffusion.serve import build_app
from components.models.dit import DiT, DiTConfig
from components.serving.app import deploy, post_json, undeploy
from components.serving.loadtest import run_load_test

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def url(serve_instance):
    torch.manual_seed(0)
    m = DiT(DiTConfig(img_size=8, patch=2, d=16, heads=2, depth=3))
    deploy(build_app({"config": m.cfg.to_dict(), "state": m.state_dict()}), name="test_diffusion", route_prefix="/t_diffusion")
    yield serve_instance.url("/t_diffusion/sample")
    undeploy("test_diffusion")


def test_png_and_skip_fraction_per_policy(url):
    # Execute
    s1, full = post_json(url, {"label": 3, "n": 2, "steps": 12, "policy": "full"}, timeout_s=60)
    s2, fs = post_json(url, {"label": 3, "n": 2, "steps": 12, "policy": "foresight",
                             "params": {"lam": 1e3, "warmup": 3, "interval": 2, "last_full": 1}}, timeout_s=60)
    # Assert
    assert s1 == s2 == 200
    assert base64.b64decode(full["png_base64"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert full["skip_fraction"] == 0.0 and fs["skip_fraction"] > 0


@pytest.mark.parametrize("body,status", [
    ({"label": 1, "policy": "deepcache"}, 422),                  # unknown policy
    ({"label": 1, "params": {"lam": -1.0}}, 422),                # lambda < 0
    ({"label": 1, "params": {"interval": 0}}, 422),              # R < 1
    ({"label": 1, "steps": 10_000}, 422),                        # unbounded work
    ({"label": 1, "extra": "x" * 5000}, 413),                    # over the byte limit
    ({"label": 42}, 400),                                        # not one of the model's classes
])
def test_bad_bodies_rejected_and_service_keeps_serving(url, body, status):
    got, out = post_json(url, body)
    assert got == status and "error" in out
    ok, _ = post_json(url, {"label": 0, "n": 1, "steps": 4})
    assert ok == 200


def test_loopback_load_test(url):
    # Execute
    r = run_load_test(url, [{"label": k, "n": 1, "steps": 8, "policy": "foresight",
                             "params": {"warmup": 2, "last_full": 1}} for k in range(4)],
                      n_requests=20, concurrency=2, max_seconds=60, warmup=2, timeout_s=30)
    # Assert
    assert r.n_ok == r.n_sent == 20 and r.n_err == 0
