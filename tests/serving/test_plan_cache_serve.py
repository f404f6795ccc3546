"""The plan-cache agent on Ray Serve (valid requests answered, the cache filled across requests, bad
bodies 422/413 while the replica keeps serving) and the debug experiment through the DAG."""
import pytest

from components.data import agent_tasks as A
from components.models.gpt import GPT, GPTConfig
from components.serving.app import deploy, post_json, undeploy
from components.serving.plan_cache.prepare import CONTEXT
from components.serving.plan_cache.serving import build_app


@pytest.fixture(scope="module")
def url(serve_instance):
    def lm(d):   # untrained tiny GPTs: plans are junk, but every request must still be answered
        m = GPT(GPTConfig(vocab_size=len(A.VOCAB), context=CONTEXT, n_layer=1, n_head=2, d_model=d))
        return {"config": m.cfg.to_dict(), "state": m.state_dict()}

    deploy(build_app({"large": lm(32), "small": lm(16)}), name="test_plan_cache", route_prefix="/t_plan_cache")
    yield serve_instance.url("/t_plan_cache/run")
    undeploy("test_plan_cache")


def test_served_agent_answers_and_counts_tokens(url):
    status, out = post_json(url, {"question": "what is the current ratio of acme in 2021 ?"})
    assert status == 200, out
    assert set(out) == {"plan", "answer", "hit", "keyword", "tokens", "cost_s", "cache_entries"}
    assert out["tokens"]["small_calls"] >= 1 and out["cost_s"] > 0       # the keyword call is always charged


@pytest.mark.parametrize("body,status", [
    ({"question": "what is the current ratio of zorblax in 2021 ?"}, 422),   # word outside the vocabulary
    ({"question": ""}, 422),
    ({"question": 7}, 422),                                                  # wrong type
    ({"question": "acme", "method": "large"}, 422),                          # unknown key
    ({"question": "acme " * 400}, 413),                                      # over the byte limit
])
def test_bad_bodies_rejected_and_service_keeps_serving(url, body, status):
    got, out = post_json(url, body)
    assert got == status and out["detail"], out
    assert post_json(url, {"question": "compute the roe for hooli , fiscal 2020"})[0] == 200


def test_debug_experiment_end_to_end(run_experiment):
    out = run_experiment("plan_cache")
    assert not out.failed, out.failed
    assert {"always_large", "small_only", "answer_cache", "query_plan_cache", "apc"} <= set(out.variants)
    for c in out.claims:
        assert not c.skipped and c.error in ("", None), (c.name, c.error)
    m = out.variants["apc"].result.metrics
    assert {"accuracy", "cost_ratio_vs_large", "cache_hit_ratio", "overhead_share"} <= set(m)
    assert out.variants["always_large"].result.metrics["cache_hit_ratio"] == 0.0
