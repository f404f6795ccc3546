"""The Gatekeeper cascade on Ray Serve: valid requests answered (small or forwarded to the large
deployment), invalid ones rejected with 4xx while the service keeps serving; and the debug
flavour of the whole experiment through the DAG."""
import numpy as np
import pytest
import torch

from components.serving.app import deploy, post_json, undeploy
from components.serving.gatekeeper import digits as D
from components.serving.gatekeeper.serving import MAX_IMAGES, cascade_app, large_app


@pytest.fixture(scope="module")
def cascade(serve_instance):
    torch.manual_seed(0)
    small, large = D.SmallMLP(16), D.LargeCNN()
    x = np.random.default_rng(0).random((12, 64)).astype(np.float32)
    conf = D.softmax(D.logits_of(small, x)).max(1)
    tau = float(np.median(conf))                    # about half the images are deferred
    handle = deploy(cascade_app(small.state_dict(), large.state_dict(), tau), name="test_gk_cascade",
                    route_prefix="/t_cascade")
    deploy(large_app(large.state_dict()), name="test_gk_large", route_prefix="/t_large")
    yield {"url": serve_instance.url("/t_cascade/classify"), "large_url": serve_instance.url("/t_large/classify"),
           "handle": handle, "x": x, "small": small, "large": large, "tau": tau}
    undeploy("test_gk_cascade")
    undeploy("test_gk_large")


def test_cascade_answers_small_or_forwards_to_large(cascade):
    x = cascade["x"]
    status, out = post_json(cascade["url"], {"images": x.tolist()})
    assert status == 200
    p = D.softmax(D.logits_of(cascade["small"], x))
    defer = p.max(1) < cascade["tau"]
    assert 0 < defer.sum() < len(x)
    expected = np.where(defer, D.logits_of(cascade["large"], x).argmax(1), p.argmax(1))
    assert out["labels"] == expected.tolist()
    assert out["deferred"] == defer.tolist()
    assert out["model"] == ["large" if d else "small" for d in defer]
    stats = cascade["handle"].stats.remote().result(timeout_s=30)
    assert stats["deferred"] >= defer.sum() and stats["usage"]["decode"]["large"] == stats["deferred"]
    status, out = post_json(cascade["large_url"], {"images": x[:3].tolist()})
    assert status == 200 and out["model"] == ["large"] * 3


@pytest.mark.parametrize("body,status", [
    ({"images": [[0.5] * 63]}, 422),                       # wrong image size
    ({"images": [[1.5] * 64]}, 422),                       # pixel out of [0, 1]
    ({"images": []}, 422),                                 # no image
    ({"images": [[0.5] * 64] * (MAX_IMAGES + 1)}, None),   # too many images: 422 or 413 (byte limit)
    ({"images": [[0.5] * 64], "tau": 0.0}, 422),           # unknown key
    ({"pixels": [0.5] * 64}, 422),                         # missing field
])
def test_invalid_bodies_rejected_and_service_keeps_serving(cascade, body, status):
    got, out = post_json(cascade["url"], body)
    assert got == status if status else got in (413, 422)
    assert "error" in out and out["detail"]
    ok, _ = post_json(cascade["url"], {"images": cascade["x"][:2].tolist()})
    assert ok == 200


@pytest.mark.slow   # training + Serve deployments, ~40 s: runs in `make bench` (keeps `make test` in its 15 minutes)
def test_debug_experiment_end_to_end(run_experiment, mlflow_client, serve_instance):
    out = run_experiment("gatekeeper")
    assert not out.failed, out.failed
    names = {"untuned", "ce_continued", "temperature", "gatekeeper", "alpha_sweep", "served"}
    assert names <= set(out.variants)
    for c in out.claims:                                 # every claim was computed (holds or not)
        assert not c.skipped and c.error in ("", None), (c.name, c.error)
    assert set(out.variants["gatekeeper"].seeds) == {0, 1} and set(out.variants["served"].seeds) == {0}
    assert set(out.variants["lm_untuned"].seeds) == {0}                # deterministic: one seed
    served = out.variants["served"].result.metrics
    assert served["agreement"] == 1.0 and served["rejects_invalid"] == 1.0
    runs = mlflow_client.search_runs([out.experiment_id], f"tags.mlflow.parentRunId = '{out.parent_run_id}'")
    assert {r.data.tags["variant"] for r in runs} >= names
    gk = next(r for r in runs if r.data.tags["variant"] == "gatekeeper")
    assert {"s_d", "s_d_se", "s_o", "auroc", "small_acc", "joint_acc_r20"} <= set(gk.data.metrics)
