"""The Gatekeeper cascade on Ray Serve: the small deployment answers, or forwards to the large one.

Two deployments, each its own replica set (scaled independently):

- :class:`LargeClassifier` holds the large CNN behind a handle (``predict``): the cascade's
  deferral target. :class:`LargeService` is the same model on HTTP (``POST /classify``), the
  large-only baseline (Serve allows one FastAPI ingress per application).
- :class:`CascadeClassifier` holds the (Gatekeeper-tuned) small MLP and a handle to the large
  deployment. Per image it computes g(x) = max softmax probability; images with g < tau are sent
  in one batch to the large deployment, the rest are answered locally. It counts requests,
  images and deferrals (``stats``) and charges a :class:`~components.serving.cost.Usage`.

Bodies (``DigitsRequest``): 1..``MAX_IMAGES`` images of 64 pixels in [0, 1]; anything else is a
422 (413 above the byte limit) and the replicas keep serving. Build the apps with
:func:`cascade_app` / :func:`large_app` and deploy them with ``components.serving.app.deploy``::

    deploy(cascade_app(small_state, large_state, tau, hidden=16), name="gk_cascade", route_prefix="/cascade")
    post_json(info.url("/cascade/classify"), {"images": [[0.0] * 64]})
    # -> {"labels": [..], "confidence": [..], "deferred": [..], "model": ["small" | "large", ..]}
"""
from typing import Annotated

import torch
from pydantic import Field
from ray import serve

from components.serving.app import TINY_REPLICA, BoundedModel, RequestModel, make_api
from components.serving.cost import Usage
from components.serving.gatekeeper import digits as D

MAX_IMAGES = 64
Pixel = Annotated[float, Field(ge=0.0, le=1.0)]
Image = Annotated[list[Pixel], Field(min_length=64, max_length=64)]
MAX_BODY_BYTES = MAX_IMAGES * 64 * 24 + 1024     # generous for 64 images of JSON floats


class DigitsRequest(RequestModel):
    images: list[Image] = Field(min_length=1, max_length=MAX_IMAGES)


class DigitsResponse(BoundedModel):
    labels: list[int]
    confidence: list[float]
    deferred: list[bool]
    model: list[str]


cascade_api = make_api("gatekeeper cascade", max_body_bytes=MAX_BODY_BYTES)
large_api = make_api("large classifier", max_body_bytes=MAX_BODY_BYTES)


def _load(model, state):
    torch.set_num_threads(1)
    model.load_state_dict(state)
    return model.eval()


class _Large:
    def __init__(self, large_state: dict):
        self.model = _load(D.LargeCNN(), large_state)
        self.items = 0

    def predict(self, images: list[list[float]]) -> list[int]:
        """Labels for a batch of images (the cascade's deferrals arrive here)."""
        self.items += len(images)
        with torch.no_grad():
            return self.model(torch.tensor(images, dtype=torch.float32)).argmax(1).tolist()

    def stats(self) -> dict:
        return {"items": self.items}


@serve.deployment(ray_actor_options=TINY_REPLICA)
class LargeClassifier(_Large):
    """The large model behind a handle: the cascade's deferral target."""


@serve.deployment(ray_actor_options=TINY_REPLICA)
@serve.ingress(large_api)
class LargeService(_Large):
    """The large model on HTTP: the large-only baseline service (one hop, like the cascade's fast path)."""

    @large_api.post("/classify")
    def classify(self, req: DigitsRequest) -> DigitsResponse:
        with torch.no_grad():
            p = torch.softmax(self.model(torch.tensor(req.images, dtype=torch.float32)), -1)
        self.items += len(req.images)
        conf, labels = p.max(1)
        n = len(req.images)
        return DigitsResponse(labels=labels.tolist(), confidence=conf.tolist(), deferred=[False] * n, model=["large"] * n)


@serve.deployment(ray_actor_options=TINY_REPLICA)
@serve.ingress(cascade_api)
class CascadeClassifier:
    def __init__(self, small_state: dict, large, tau: float, hidden: int = 16, temperature: float = 1.0):
        self.model = _load(D.SmallMLP(hidden), small_state)
        self.large, self.tau, self.temperature = large, float(tau), float(temperature)
        self.usage = Usage()
        self.requests = self.items = self.deferred = 0

    async def answer(self, images: list[list[float]]) -> DigitsResponse:
        with torch.no_grad():
            p = torch.softmax(self.model(torch.tensor(images, dtype=torch.float32)) / self.temperature, -1)
        conf, labels = p.max(1)
        defer = (conf < self.tau).tolist()
        labels = labels.tolist()
        idx = [i for i, d in enumerate(defer) if d]
        self.usage.charge("small", decode=len(images))
        if idx:
            large_labels = await self.large.predict.remote([images[i] for i in idx])
            self.usage.charge("large", decode=len(idx))
            for i, lab in zip(idx, large_labels):
                labels[i] = int(lab)
        self.requests += 1
        self.items += len(images)
        self.deferred += len(idx)
        return DigitsResponse(labels=labels, confidence=conf.tolist(), deferred=defer,
                              model=["large" if d else "small" for d in defer])

    @cascade_api.post("/classify")
    async def classify(self, req: DigitsRequest) -> DigitsResponse:
        return await self.answer(req.images)

    def stats(self) -> dict:
        return {"requests": self.requests, "items": self.items, "deferred": self.deferred,
                "deferral_rate": self.deferred / self.items if self.items else 0.0, "usage": self.usage.to_dict()}


def large_app(large_state: dict):
    return LargeService.bind(large_state)


def cascade_app(small_state: dict, large_state: dict, tau: float, hidden: int = 16, temperature: float = 1.0):
    return CascadeClassifier.bind(small_state, LargeClassifier.bind(large_state), tau, hidden, temperature)
