"""The tiny DiT as a Ray Serve service (``dtlab serve diffusion``): ``POST /diffusion/sample``
with a class label, a seed, the step count, the CFG scale and a reuse policy with its parameters
(Foresight or a baseline, per request); the reply is the sample grid as a base64 PNG with the
skip fraction and the wall time. The model is the ``model`` entry of the ``foresight``
experiment's prepare cache, so ``dtlab run experiment=foresight`` and this serve the same weights.

Bodies are bounded pydantic models: 422 on malformed ones (unknown keys, wrong types, values out
of range), 413 above 4 KiB; the replica keeps serving.

No ``from __future__ import annotations`` here: FastAPI must resolve the body types in the replica.
"""
import base64
import io
import threading
import time
from typing import Literal

import torch
from pydantic import Field
from ray import serve

from components.core.registry import register
from components.diffusion.foresight.policies import PAB, Foresight, StaticN, TeaCache
from components.diffusion.prepare import load_dit
from components.diffusion.sampling import BlockRunner, sample
from components.serving.app import TINY_REPLICA, BoundedModel, RequestModel, make_api
from components.serving.services import Service


class PolicyParams(RequestModel):
    lam: float = Field(1.0, ge=0, le=1e4)
    warmup: int = Field(8, ge=2, le=100)
    interval: int = Field(2, ge=1, le=100)
    last_full: int = Field(5, ge=0, le=100)
    mode: Literal["prefix", "per_layer"] = "prefix"
    n: int = Field(2, ge=1, le=100)
    delta: float = Field(0.1, ge=0, le=100)
    spatial: int = Field(2, ge=1, le=100)


class SampleRequest(RequestModel):
    label: int = Field(ge=0, le=99)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    n: int = Field(4, ge=1, le=16)
    steps: int = Field(50, ge=2, le=100)
    cfg_scale: float = Field(2.0, ge=0, le=10)
    policy: Literal["full", "foresight", "static", "teacache", "pab"] = "foresight"
    params: PolicyParams = Field(default_factory=PolicyParams)


class SampleResponse(BoundedModel):
    png_base64: str
    skip_fraction: float
    wall_s: float
    policy: str
    steps: int


def runner_for(req: SampleRequest) -> BlockRunner:
    """The request's policy with its parameters (TeaCache unscaled: no calibration per request)."""
    p = req.params
    return {"full": BlockRunner, "foresight": lambda: Foresight(p.lam, p.warmup, p.interval, p.last_full, p.mode),
            "static": lambda: StaticN(p.n), "teacache": lambda: TeaCache(p.delta),
            "pab": lambda: PAB(p.spatial)}[req.policy]()


def png_row(x: torch.Tensor) -> bytes:
    """Samples [n, 1, H, W] (clips: their middle frame) in [-1, 1] side by side, 4x upscaled, as PNG."""
    from PIL import Image

    if x.dim() == 5:
        x = x[:, x.shape[1] // 2]
    row = torch.cat(list(x[:, 0].clamp(-1, 1)), dim=-1)
    img = Image.fromarray(((row + 1) * 127.5).to(torch.uint8).numpy())
    buf = io.BytesIO()
    img.resize((img.width * 4, img.height * 4), Image.NEAREST).save(buf, format="PNG")
    return buf.getvalue()


api = make_api("diffusion", max_body_bytes=4096)


@serve.deployment(ray_actor_options=TINY_REPLICA)
@serve.ingress(api)
class DiTSampler:
    def __init__(self, prepared: dict):
        torch.set_num_threads(1)
        self.model = load_dit(prepared)
        self.lock = threading.Lock()   # one sampling at a time per replica (1 thread)

    def generate(self, req: SampleRequest) -> SampleResponse:
        cfg = self.model.cfg
        if req.label >= cfg.num_classes:
            raise ValueError(f"label: the model has {cfg.num_classes} classes (0..{cfg.num_classes - 1})")
        g = torch.Generator().manual_seed(req.seed)
        shape = (req.n, cfg.channels, cfg.img_size, cfg.img_size)
        if cfg.frames > 1:
            shape = (req.n, cfg.frames) + shape[1:]
        noise, y = torch.randn(shape, generator=g), torch.full((req.n,), req.label)
        runner = runner_for(req)
        t0 = time.perf_counter()
        with self.lock:
            x = sample(self.model, noise, y, req.steps, req.cfg_scale, runner)
        return SampleResponse(png_base64=base64.b64encode(png_row(x)).decode(), skip_fraction=runner.skip_fraction,
                              wall_s=time.perf_counter() - t0, policy=req.policy, steps=req.steps)

    @api.post("/sample")
    def post_sample(self, req: SampleRequest) -> SampleResponse:
        return self.generate(req)


def build_app(prepared: dict):
    return DiTSampler.options(name="DiTSampler").bind(prepared)


DIFFUSION = Service(
    experiment="foresight", prepare="model", build=build_app, route_prefix="/diffusion", endpoint="/sample",
    example={"label": 3, "seed": 0, "n": 4, "steps": 50, "policy": "foresight", "params": {"lam": 1.0}},
    summary="Class-conditional samples of the tiny DiT as a PNG, with a reuse policy (Foresight, Static-N, ...) per request")
register("service", "diffusion", summary=DIFFUSION.summary)(DIFFUSION)
