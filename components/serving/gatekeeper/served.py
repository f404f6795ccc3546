"""Technique ``gatekeeper_served``: the Gatekeeper cascade deployed on Ray Serve and load-tested.

On its seed's prepared cascade it fine-tunes the small model with the Gatekeeper loss (the same run
as the ``gatekeeper`` technique), picks tau on validation for the target deferral ratio, deploys
the cascade (small deployment -> large deployment handle) and the large-only service, then:

- sends the whole test split through the cascade over HTTP and checks every answer against the
  offline cascade (``agreement``; 1.0 = identical), and reports the served deferral ratio;
- sends one malformed body and checks the 422 (``rejects_invalid``) while the service keeps answering;
- load-tests cascade vs large-only from a second process on loopback (bounded count and time):
  throughput, p50/p99 latency; and prices both with the per-model token cost (simulated seconds
  per image: c_S + r c_L vs c_L).
"""
import os
from dataclasses import dataclass

import numpy as np
import torch

from components.core.errors import require
from components.core.registry import technique
from components.core.result import Result
from components.serving.app import deploy, post_json, serve_session, undeploy
from components.serving.cost import Usage
from components.serving.gatekeeper.cascade import Stage2, model_costs, run_arm
from components.serving.gatekeeper.metrics import threshold_for_ratio
from components.serving.loadtest import run_load_test


@dataclass
class ServedParams(Stage2):
    alpha: float = 0.5
    target_ratio: float = 0.2          # tau = this quantile of validation confidence
    batch_images: int = 8              # images per HTTP request
    n_requests: int = 300              # load test: per service
    concurrency: int = 4
    max_seconds: float = 20.0

    def check(self):
        super().check()
        require(0 < self.alpha < 1, "alpha", self.alpha, "a weight in (0, 1)")
        require(0 < self.target_ratio < 1, "target_ratio", self.target_ratio, "a deferral ratio in (0, 1)")
        require(1 <= self.batch_images <= 64, "batch_images", self.batch_images, "an integer in [1, 64]")
        require(1 <= self.n_requests <= 20000, "n_requests", self.n_requests, "an integer in [1, 20000]")
        require(1 <= self.concurrency <= 32, "concurrency", self.concurrency, "an integer in [1, 32]")
        require(0 < self.max_seconds <= 300, "max_seconds", self.max_seconds, "seconds in (0, 300]")


@technique("gatekeeper_served", family="serving", params=ServedParams, inputs=("digits",),
           summary="The Gatekeeper cascade on Ray Serve (small deployment answers or forwards to the large deployment "
                   "handle): served = offline answers, 4xx on bad bodies, load test cascade vs large-only.")
def run_served(p: ServedParams, ctx) -> Result:
    torch.set_num_threads(1)
    prep = ctx.input("digits")
    split = prep["split"]
    model, _, pv, pt = run_arm(prep, "gatekeeper", p, p.alpha)
    tau = threshold_for_ratio(pv.max(1), p.target_ratio)
    defer = pt.max(1) < tau
    offline = np.where(defer, prep["large_test_pred"], pt.argmax(1))
    small_state = {k: v.clone() for k, v in model.state_dict().items()}
    x = split.x_test.astype(float)
    batches = [x[i:i + p.batch_images].tolist() for i in range(0, len(x), p.batch_images)]
    bodies = [{"images": b} for b in batches]
    tag = f"{ctx.variant}"[:32] + f"_{os.getpid()}"      # unique per process: multirun jobs share one Serve
    from components.serving.gatekeeper.serving import cascade_app, large_app

    with serve_session() as info:
        deploy(large_app(prep["large_state"]), name=f"gk_large_{tag}", route_prefix=f"/gk_large_{tag}")
        handle = deploy(cascade_app(small_state, prep["large_state"], tau, prep["small_hidden"]),
                        name=f"gk_cascade_{tag}", route_prefix=f"/gk_cascade_{tag}")
        try:
            url_c, url_l = info.url(f"/gk_cascade_{tag}/classify"), info.url(f"/gk_large_{tag}/classify")
            served, served_defer = [], []
            for i, body in enumerate(bodies):
                status, out = post_json(url_c, body, timeout_s=30)
                require(status == 200, "served", (status, out), "HTTP 200 from the cascade")
                served += out["labels"]
                served_defer += out["deferred"]
                ctx.progress(i + 1, len(bodies) + 2)
            bad_status, _ = post_json(url_c, {"images": [[2.0] * 64]})
            ok_after, _ = post_json(url_c, bodies[0])
            stats = handle.stats.remote().result(timeout_s=30)
            lt_c = run_load_test(url_c, bodies, p.n_requests, p.concurrency, p.max_seconds)
            ctx.progress(len(bodies) + 1, len(bodies) + 2)
            lt_l = run_load_test(url_l, bodies, p.n_requests, p.concurrency, p.max_seconds)
        finally:
            undeploy(f"gk_cascade_{tag}")
            undeploy(f"gk_large_{tag}")
    served = np.array(served)
    costs = model_costs(prep)
    usage = Usage.from_dict(stats["usage"])
    n = len(x)
    large_only = Usage()
    large_only.charge("large", decode=n, calls=n)
    metrics = {
        "agreement": float((served == offline).mean()),
        "deferral_agreement": float((np.array(served_defer) == defer).mean()),
        "served_deferral": float(np.mean(served_defer)), "offline_deferral": float(defer.mean()),
        "served_joint_acc": float((served == split.y_test).mean()), "large_acc": float((prep["large_test_pred"] == split.y_test).mean()),
        "small_acc": float((pt.argmax(1) == split.y_test).mean()), "tau": float(tau),
        "rejects_invalid": float(bad_status == 422 and ok_after == 200),
        "sim_s_per_image": usage.sim_latency_s(costs) / stats["items"],
        "large_sim_s_per_image": large_only.sim_latency_s(costs) / n,
    }
    metrics["sim_cost_ratio"] = metrics["sim_s_per_image"] / metrics["large_sim_s_per_image"]
    for name, lt in (("cascade", lt_c), ("large", lt_l)):
        metrics.update({f"{name}_rps": lt.throughput_rps, f"{name}_p50_ms": lt.p50_ms, f"{name}_p99_ms": lt.p99_ms,
                        f"{name}_errors": float(lt.n_err), f"{name}_requests": float(lt.n_ok)})
    metrics["throughput_ratio"] = lt_c.throughput_rps / max(lt_l.throughput_rps, 1e-9)
    return Result(metrics=metrics, tables={"load_test": [lt_c.to_dict(), lt_l.to_dict()]},
                  info={"serve_port": info.port, "tau": float(tau), "stats": stats})
