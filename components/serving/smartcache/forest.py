"""The semantic forest: nodes are conversation turns (canonical query, answer, handle to the KV
blocks of the canonical path root -> node); roots in a global faiss index, each node's children in
its own local index. A hit needs cosine >= ``tau`` and the entity guard: the capitalised words and
numbers of the query and of the node's query must be equal (MiniLM scores "colour of Zorvan" and
"colour of Mekla" close; the sheet's main false-hit source)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import faiss
import numpy as np

from components.serving.smartcache.eviction import Stats
from components.serving.smartcache.kvpool import BlockTable

_ENT = re.compile(r"\b(?:[A-Z]\w*|\d+(?:\.\d+)?)\b")


def entities(text: str) -> frozenset:
    """Capitalised words and numbers: the guard's view of what a query is about."""
    return frozenset(_ENT.findall(text))


class Index:
    """Inner-product faiss index over unit vectors with ids, add/remove, top-k."""

    def __init__(self, d: int):
        self.ix = faiss.IndexIDMap2(faiss.IndexFlatIP(d))

    def __len__(self) -> int:
        return self.ix.ntotal

    def add(self, key: int, e: np.ndarray) -> None:
        self.ix.add_with_ids(e[None].astype(np.float32), np.array([key], np.int64))

    def remove(self, key: int) -> None:
        self.ix.remove_ids(np.array([key], np.int64))

    def top(self, e: np.ndarray, k: int) -> list[tuple[int, float]]:
        if len(self) == 0:
            return []
        d, i = self.ix.search(e[None].astype(np.float32), min(k, len(self)))
        return [(int(a), float(b)) for a, b in zip(i[0], d[0]) if a >= 0]


@dataclass(eq=False)
class Node:
    key: int
    text: str
    emb: np.ndarray
    answer: str
    parent: "Node | None"
    table: BlockTable | None
    depth: int
    children: dict = field(default_factory=dict)        # key -> Node
    index: Index | None = None
    hits: int = 0
    subtree_hits: int = 0
    active: int = 0
    last: int = 0
    last_hit: int = -1

    def stats(self) -> Stats:
        return Stats(self.key, self.last, self.hits, self.subtree_hits, self.active, self.depth,
                     self.parent is None, self.last_hit)


class Forest:
    def __init__(self, d: int, tau: float, guard: bool = True, k: int = 4):
        self.d, self.tau, self.guard, self.k = d, tau, guard, k
        self.roots = Index(d)
        self.nodes: dict[int, Node] = {}
        self._next = 0

    def lookup(self, under: Node | None, e: np.ndarray, text: str) -> tuple[Node | None, float]:
        """Best node among ``under``'s children (roots if None) passing tau and the guard."""
        ix = self.roots if under is None else under.index
        best = 0.0
        for key, score in (ix.top(e, self.k) if ix is not None else []):
            best = max(best, score)
            n = self.nodes[key]
            if score >= self.tau and (not self.guard or entities(n.text) == entities(text)):
                return n, score
        return None, best

    def add(self, parent: Node | None, text: str, e: np.ndarray, answer: str, table: BlockTable | None,
            now: int) -> Node:
        n = Node(self._next, text, e, answer, parent, table, 0 if parent is None else parent.depth + 1, last=now)
        self._next += 1
        self.nodes[n.key] = n
        if parent is None:
            self.roots.add(n.key, e)
        else:
            if parent.index is None:
                parent.index = Index(self.d)
            parent.index.add(n.key, e)
            parent.children[n.key] = n
        return n

    def hit(self, n: Node, now: int) -> None:
        n.hits += 1
        n.last = n.last_hit = now
        a = n
        while a is not None:
            a.subtree_hits += 1
            a = a.parent

    def evictable(self) -> list[Node]:
        """Leaves no session stands on: evicting them never strands a descendant's shared blocks."""
        return [n for n in self.nodes.values() if not n.children and n.active == 0]

    def remove(self, n: Node) -> None:
        assert not n.children and n.active == 0, "only free leaves are evicted"
        if n.parent is None:
            self.roots.remove(n.key)
        else:
            n.parent.index.remove(n.key)
            del n.parent.children[n.key]
        del self.nodes[n.key]
