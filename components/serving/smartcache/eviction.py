"""Eviction policies for cache entries (semantic-forest leaves or prefix-cache blocks), registered as
kind ``eviction_policy`` (``dtlab list eviction_policy``): each picks the victim among evictable
candidates from their statistics.

- ``lru``: least recently accessed first.
- ``lfu``: fewest hits first, LRU among ties.
- ``step`` (SmartCache's semantics-aware tiered policy): tier 0 = roots and nodes with at least
  ``m`` active sessions, tier 1 = nodes hit within the last ``recent`` accesses, tier 2 = the
  rest (cold leaves). Evict from the highest tier number first, then lowest priority
  P = w1 log(1 + subtree_hits) + w2 active - w3 depth - w4 age/age_unit, then LRU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from components.core.errors import require
from components.core.registry import lookup, register


@dataclass
class Stats:
    """What a policy may look at; ``last`` and ``last_hit`` are logical clock ticks (-1: never hit)."""

    key: int
    last: int
    hits: int = 0
    subtree_hits: int = 0
    active: int = 0
    depth: int = 0
    root: bool = False
    last_hit: int = -1


@dataclass(frozen=True)
class StepWeights:
    m: int = 2
    recent: int = 200
    w1: float = 1.0
    w2: float = 1.0
    w3: float = 0.5
    w4: float = 1.0
    age_unit: float = 500.0

    def check(self) -> "StepWeights":
        require(self.m >= 1, "step.m", self.m, "a positive number of sessions")
        require(self.recent >= 1, "step.recent", self.recent, "a positive number of clock ticks")
        require(self.age_unit > 0, "step.age_unit", self.age_unit, "a positive number of ticks")
        return self


@register("eviction_policy", "lru", summary="least recently accessed first")
def lru(cands: list[Stats], now: int, w: StepWeights | None = None) -> Stats:
    """Least recently accessed."""
    return min(cands, key=lambda s: (s.last, s.key))


@register("eviction_policy", "lfu", summary="fewest hits first, LRU among ties")
def lfu(cands: list[Stats], now: int, w: StepWeights | None = None) -> Stats:
    """Fewest hits, LRU among ties."""
    return min(cands, key=lambda s: (s.hits, s.last, s.key))


def step_tier(s: Stats, now: int, w: StepWeights) -> int:
    if s.root or s.active >= w.m:
        return 0
    if s.last_hit >= 0 and now - s.last_hit <= w.recent:
        return 1
    return 2


def step_priority(s: Stats, now: int, w: StepWeights) -> float:
    return (w.w1 * math.log1p(s.subtree_hits) + w.w2 * s.active - w.w3 * s.depth
            - w.w4 * (now - s.last) / w.age_unit)


@register("eviction_policy", "step", summary="SmartCache's STEP: semantic tiers, then priority, then LRU")
def step(cands: list[Stats], now: int, w: StepWeights | None = None) -> Stats:
    w = w or StepWeights()
    return min(cands, key=lambda s: (-step_tier(s, now, w), step_priority(s, now, w), s.last, s.key))


def policy(name: str):
    """The registered policy ``name``; ConfigError naming the known ones otherwise."""
    return lookup("eviction_policy", name, key="eviction")
