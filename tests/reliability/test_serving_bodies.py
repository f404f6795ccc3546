"""Every HTTP endpoint's request body, fuzzed: each request schema (a RequestModel) gets generated
bad bodies (wrong type, a string for a number, "yes" for a boolean, NaN, +-inf, negative, huge,
empty, unknown key, missing required key) through the real FastAPI stack of `make_api` (its 422
handler and body limit, driven as ASGI, no Ray); each must answer 4xx with a readable detail,
never 5xx. The deployed services' bad-body and load tests live in tests/serving."""
import asyncio
import json
import math

import pytest
from pydantic import BaseModel

from components.diffusion.serve import PolicyParams, SampleRequest
from components.serving.app import RequestModel, make_api
from components.serving.gatekeeper.serving import DigitsRequest
from components.serving.lm_deployments import SolveRequest
from components.serving.plan_cache.serving import PlanRequest
from components.serving.smartcache.service import ChatRequest

VALID = {SolveRequest: {"problem": "17|+1|*9|-7"}, DigitsRequest: {"images": [[0.5] * 64]},
         ChatRequest: {"session": "u1", "query": "what is the colour of Lumtha ?"},
         PlanRequest: {"question": "what is the current ratio of acme in 2021 ?"},
         SampleRequest: {"label": 3, "n": 2, "steps": 4, "policy": "foresight", "params": {"lam": 1.0}},
         PolicyParams: {"lam": 1.0, "interval": 3}}   # nested in SampleRequest; also posted alone here


def _post(app, path: str, raw: bytes) -> tuple[int, dict]:
    """One POST through the ASGI app: (status, JSON body)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "path": path,
             "raw_path": path.encode(), "query_string": b"", "root_path": "", "scheme": "http",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1),
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]}
    sent, out = False, {"status": None, "body": b""}

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(msg):
        if msg["type"] == "http.response.start":
            out["status"] = msg["status"]
        elif msg["type"] == "http.response.body":
            out["body"] += msg.get("body", b"")

    asyncio.run(app(scope, receive, send))
    return out["status"], json.loads(out["body"] or b"{}")


def _app(model: type[BaseModel]):
    api = make_api(f"fuzz {model.__name__}", max_body_bytes=64 * 1024)

    @api.post("/run")
    def run(body: model) -> dict:  # type: ignore[valid-type]
        return {"ok": True}

    return api


def _bad_bodies(model: type[BaseModel]) -> list[tuple[str, dict]]:
    valid = VALID[model]
    out = [("unknown_key", {**valid, "zz_surprise": 1}), ("list_body", [valid])]
    if any(f.is_required() for f in model.model_fields.values()):   # all-default schemas accept {}
        out.append(("empty_body", {}))
    for name, f in model.model_fields.items():
        tp = f.annotation
        muts = {"object": {"a": 1}, "null": None}
        if tp in (int, float):
            muts.update({"string_number": "7", "bool": True, "nan": math.nan, "inf": math.inf, "-inf": -math.inf,
                         "huge": 1e300})
            if tp is int:
                muts["fraction"] = 1.5
        elif tp is bool:
            muts.update({"yes": "yes", "string_true": "true", "one": 1})
        elif tp is str:
            muts.update({"number": 7, "huge": "x" * 60000})
        else:
            muts.update({"string": "zz", "number": 7, "empty_list": []})
        for label, value in muts.items():
            if name not in valid and label == "null" and f.default is None:
                continue
            out.append((f"{name}.{label}", {**valid, name: value}))
    return out


CASES = [(m, label, body) for m in VALID for label, body in _bad_bodies(m)]


def test_every_request_schema_is_covered():
    assert set(RequestModel.__subclasses__()) - {m for m in VALID} == set()


def test_valid_bodies_pass():
    for model, body in VALID.items():
        assert _post(_app(model), "/run", json.dumps(body).encode())[0] == 200


@pytest.mark.parametrize("model, label, body", CASES, ids=[f"{m.__name__}.{lb}" for m, lb, _ in CASES])
def test_bad_body_is_4xx_with_detail(model, label, body):
    # Execute
    status, detail = _post(_app(model), "/run", json.dumps(body, allow_nan=True).encode())
    # Assert
    assert 400 <= status < 500, (status, detail)
    assert detail.get("detail")
