"""Serving techniques that run as standing HTTP services (``dtlab serve NAME``).

A service names the experiment whose prepare cache holds its models, the prepare entry, how to
build the Ray Serve application from that entry's output, where it is mounted, and an example
body (printed for the user and used by the CLI test). Models come from the same cache the
experiment uses, so ``dtlab run experiment=NAME`` and ``dtlab serve NAME`` serve the same weights.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Service:
    experiment: str
    prepare: str                       # prepare entry name in the experiment
    build: Callable[[Any], Any]        # prepare output -> bound Serve application
    route_prefix: str
    endpoint: str                      # POST path under the prefix
    example: dict
    summary: str


def _specreason_app(lms):
    from components.serving.lm_deployments import build_app

    return build_app(lms)


SERVICES = {
    "specreason": Service(
        experiment="specreason", prepare="lms", build=_specreason_app, route_prefix="/specreason",
        endpoint="/solve", example={"problem": "17|+1|*9|-7|+3|*2|-6", "method": "specreason", "threshold": 7},
        summary="SmallLM + BaseLM deployments under a controller: specreason, base, small or sd per request"),
}
