"""Pluggable policies: placement (Arnold: which node runs which DP x PP cell) and allocation (Mozart:
which package holds which expert). A policy registers under a kind and a name; techniques look it up
by the name a config gives, so a new policy is one decorated function and no other edit."""
from __future__ import annotations

from typing import Callable

from components.core.errors import ConfigError

POLICIES: dict[str, dict[str, Callable]] = {"placement": {}, "allocation": {}}


def policy(kind: str, name: str):
    """Register ``fn`` as policy ``name`` of ``kind`` ('placement' or 'allocation')."""

    def deco(fn):
        POLICIES[kind][name] = fn
        return fn

    return deco


def get_policy(kind: str, name: str, key: str = "policy") -> Callable:
    if name not in POLICIES[kind]:
        raise ConfigError(key, name, f"a {kind} policy: " + ", ".join(sorted(POLICIES[kind])))
    return POLICIES[kind][name]


def names(kind: str) -> list[str]:
    return sorted(POLICIES[kind])
