"""Serving techniques that run as standing HTTP services (``dtlab serve NAME``).

A service names the experiment whose prepare cache holds its models, the prepare entry, how to
build the Ray Serve application from that entry's output, where it is mounted, and an example
body (printed for the user and used by the CLI test). Models come from the same cache the
experiment uses, so ``dtlab run experiment=NAME`` and ``dtlab serve NAME`` serve the same weights.

Each service registers where its application is built, for example::

    register("service", "specreason", summary=SPECREASON.summary)(SPECREASON)

and is found with ``lookup("service", name)``; ``dtlab list service`` lists them.
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

    @property
    def fn(self) -> Callable[[Any], Any]:
        """The builder, where the registry looks for the file that defines the service."""
        return self.build
