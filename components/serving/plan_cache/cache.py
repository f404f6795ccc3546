"""The caches of Agentic Plan Caching and its baselines.

- :class:`PlanCache`: normalised intent keyword -> entry ``{keyword, task, template}``, exact-match
  lookup, LRU eviction at ``capacity``; ``put`` is last-writer-wins and idempotent (concurrent
  workers may induce the same keyword at once).
- :func:`induce_template`: rule-based template induction from a successful run: every literal of
  the question that the plan uses (companies, years, a named line item) becomes a slot, named by
  order of first appearance in the question (``<C> <C2> <Y1> <Y2> <I>``); :func:`leaked_literals`
  checks that none survives.
- :class:`VectorIndex`: cosine nearest neighbour over unit vectors (the semantic caches keyed by the
  full query embedding).
"""
from __future__ import annotations

import re
from collections import OrderedDict

import numpy as np

from components.core.errors import require
from components.data import agent_tasks as A

_PARENS = re.compile(r"\([^)]*\)")
_PUNCT = re.compile(r"[^\w\s]")


def normalise_keyword(text: str) -> str:
    """Lowercase, drop parenthesised text and punctuation, collapse whitespace (the paper's rule)."""
    return " ".join(_PUNCT.sub(" ", _PARENS.sub(" ", text.lower())).split())


class PlanCache:
    """Keyword -> plan-template entry with exact-match lookup and LRU eviction."""

    def __init__(self, capacity: int = 1024):
        require(capacity >= 1, "capacity", capacity, "a positive number of entries")
        self.capacity = capacity
        self.entries: OrderedDict[str, dict] = OrderedDict()
        self.evictions = 0

    def get(self, keyword: str) -> dict | None:
        key = normalise_keyword(keyword)
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def put(self, keyword: str, task: str, template: str) -> dict:
        key = normalise_keyword(keyword)
        self.entries.pop(key, None)            # last writer wins; the same entry twice is one entry
        entry = {"keyword": key, "task": task, "template": template}
        self.entries[key] = entry
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)
            self.evictions += 1
        return entry

    def __len__(self) -> int:
        return len(self.entries)


def _slot_map(question: str) -> dict[str, str]:
    """Literal -> slot for the entities a question names, in order of first appearance."""
    words = question.split()
    comps = [w for w in dict.fromkeys(words) if w in A.COMPANIES]
    years = [w for w in dict.fromkeys(words) if w in A.YEARS]
    out = {c: s for c, s in zip(comps, ("<C>", "<C2>"))}
    out |= {y: s for y, s in zip(years, ("<Y1>", "<Y2>"))}
    padded = f" {question} "
    for item, phrase in A.ITEMS.items():
        if f" {phrase} " in padded:
            out.setdefault(item, "<I>")
    return out


def induce_template(question: str, plan: str) -> tuple[str, str]:
    """(abstracted task, plan template): the question's literals replaced by slots in both."""
    slots = _slot_map(question)
    task = question
    for item, slot in slots.items():
        task = f" {task} ".replace(f" {A.ITEMS.get(item, item)} ", f" {slot} ").strip()
    return task, " ".join(slots.get(w, w) for w in plan.split())


def leaked_literals(question: str, template: str) -> list[str]:
    """Entity literals of ``question`` that survive in ``template`` (must be empty)."""
    words = set(template.split())
    return sorted(lit for lit in _slot_map(question) if lit in words)


class VectorIndex:
    """Unit vectors with payloads; :meth:`nearest` returns (cosine, payload) of the best match."""

    def __init__(self, dim: int, capacity: int = 100_000):
        self.vecs = np.zeros((min(capacity, 1024), dim), np.float32)
        self.payloads: list = []
        self.capacity = capacity

    def add(self, vec: np.ndarray, payload) -> None:
        if len(self.payloads) >= self.capacity:
            return
        if len(self.payloads) == len(self.vecs):
            self.vecs = np.concatenate([self.vecs, np.zeros_like(self.vecs)])
        self.vecs[len(self.payloads)] = vec
        self.payloads.append(payload)

    def nearest(self, vec: np.ndarray) -> tuple[float, object]:
        if not self.payloads:
            return -1.0, None
        sims = self.vecs[:len(self.payloads)] @ vec
        j = int(np.argmax(sims))
        return float(sims[j]), self.payloads[j]

    def __len__(self) -> int:
        return len(self.payloads)
