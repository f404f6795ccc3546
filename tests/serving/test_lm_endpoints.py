"""The SpecReason HTTP service on Ray Serve (127.0.0.1): answers valid requests, rejects bad ones, keeps serving."""
from __future__ import annotations

import pytest

from components.data import reasoning as R
from components.serving import reasoning_lms as L
from components.serving.app import deploy, post_json, undeploy
from components.serving.lms import load_lm


@pytest.fixture(scope="module")
def service(serve_instance):
    from components.serving.lm_deployments import build_app

    lms = L.train_reasoning_lms(L.ReasoningLMParams(small_steps=2, base_steps=2, batch=4, n_small_samples=2,
                                                    n_heldout=10, n_eval=1))
    for name in ("small", "base"):   # peaked logits: no float near-ties between batched and one-token passes
        lms[name]["state"] = {k: v * 8.0 for k, v in lms[name]["state"].items()}
    deploy(build_app(lms), name="specreason_test", route_prefix="/specreason")
    yield serve_instance.url("/specreason/solve"), lms
    undeploy("specreason_test")


def test_serve_binds_loopback_only(serve_instance):
    assert serve_instance.host == "127.0.0.1"


def test_valid_requests_for_every_method(service):
    url, lms = service
    base = load_lm(lms, "base")
    problem = "17|+1|*9|-7"
    ref = R.decode(base.generate(R.encode(problem + ">"), 20, stop={R.STOP_ID}))
    for method, extra in [("base", {}), ("small", {}), ("sd", {"gamma": 3}),
                          ("specreason", {"threshold": 10.0}), ("specreason", {"threshold": 0.0, "stack_sd": True})]:
        status, body = post_json(url, {"problem": problem, "method": method, "max_tokens": 20, **extra}, timeout_s=60)
        assert status == 200, body
        assert set(body) >= {"output", "steps", "answer", "tokens", "sim_latency_s", "wall_s"}
        assert "".join(body["steps"]) == body["output"] and len(R.encode(body["output"])) <= 20
        assert body["sim_latency_s"] > 0
        if method in ("base", "sd") or extra.get("threshold") == 10.0:   # all exact base greedy
            assert body["output"] == ref, (method, extra)
        if method == "specreason":
            assert body["judged_steps"] >= 1 and body["tokens"]["base_calls"] >= 1


@pytest.mark.parametrize("body, status", [
    ({}, 422),                                                    # missing problem
    ({"problem": "17&3"}, 422),                                   # not a problem
    ({"problem": "17|+1", "max_tokens": 100000}, 422),            # token budget above the cap
    ({"problem": "17|+1", "max_tokens": 0}, 422),
    ({"problem": "17" + "|+1" * 30}, 422),                        # prompt too long
    ({"problem": "17|+1", "threshold": "high"}, 422),             # wrong type
    ({"problem": "17|+1", "method": "magic"}, 422),               # unknown method
    ({"problem": "17|+1", "surprise": 1}, 422),                   # unknown key
    ({"problem": "17|+1|" + "x" * 4000}, 413),                    # oversized body
])
def test_invalid_requests_get_4xx_and_service_keeps_serving(service, body, status):
    url, _ = service
    got, detail = post_json(url, body)
    assert got == status, detail
    assert isinstance(detail, dict) and detail.get("detail")      # a readable message
    ok, _ = post_json(url, {"problem": "17|+1", "method": "base", "max_tokens": 8})
    assert ok == 200


def test_malformed_json_is_rejected(service):
    url, _ = service
    status, detail = post_json(url, None, raw=b"{not json")
    assert status == 422
