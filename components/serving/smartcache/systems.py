"""The caches compared, each replaying turns through the same LM engine and block pool.

- ``none``: every turn prefills the session's whole history + query; its blocks are freed after.
- ``prefix`` (vLLM automatic prefix caching): full blocks keyed by the hash of the block-aligned
  token prefix (chained hashes), reused for the longest cached prefix, retained after the request;
  under a budget, unreferenced leaf blocks are evicted by the eviction policy (LRU by default).
- ``semantic_query`` (GPTCache-like): embed the latest query; a cached answer is returned when the
  top-1 cosine >= tau; otherwise the LM answers as in ``none`` and the answer is cached.
- ``semantic_context``: the same keyed by normalise(2 e_q + e_{t-1} + e_{t-2}), the query and the
  session's last two queries (a mean of per-turn embeddings: every text is embedded once, in prepare).
- ``smartcache``: the semantic forest, attention-based topic-shift detection, the two-level map
  session -> node -> shared blocks, and an eviction policy over free forest leaves.

A turn's ``prompt`` is the context the answer is conditioned on plus the query; ``computed`` the
prefill tokens actually run (reuse skips the rest).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.data.conversations import Turn
from components.models.gpt import KVCache
from components.serving.smartcache.engine import Engine
from components.serving.smartcache.eviction import Stats, StepWeights, policy
from components.serving.smartcache.forest import Forest, Index, Node
from components.serving.smartcache.kvpool import BlockTable


@dataclass
class TurnOut:
    answer: str
    hit: bool
    prompt: int             # tokens of context + query
    computed: int           # prefill tokens run
    decoded: int            # decode tokens run
    embedded: bool          # an embedding lookup was made
    shift_pred: bool | None = None
    node: int = -1
    reuse: int = -1         # ticks since the hit entry's previous access (-1: not a hit)
    rho: float = float("nan")   # attention mass of the query onto the history (SmartCache detection)
    scope: int = -2             # SmartCache: the node whose children the lookup searched (-1: the roots)


class System:
    name = "base"

    def __init__(self, engine: Engine, emb: dict, cfg):
        self.engine, self.emb, self.cfg = engine, emb, cfg
        self.tok, self.pool = engine.tok, engine.pool
        self.hist: dict[int, list[int]] = {}
        self.queries: dict[int, list[str]] = {}
        self.now = 0
        self.policy = policy(cfg.eviction)
        self.weights = StepWeights(**cfg.step).check()
        self.pool.evict = self.evict_one

    def evict_one(self) -> bool:
        return False

    def end(self, sid: int) -> None:
        self.hist.pop(sid, None)
        self.queries.pop(sid, None)

    def _usage(self) -> tuple[int, int]:
        u = self.engine.usage
        return u.prefill["lm"], u.decode["lm"]

    def lm_turn(self, sid: int, query: str) -> TurnOut:
        """Answer with the whole own history recomputed (no KV reuse); blocks freed afterwards."""
        hist = self.hist.setdefault(sid, [self.tok.bos])
        prompt = hist + self.tok.query_tokens(query)
        p0, d0 = self._usage()
        cache = KVCache(self.engine.model.cfg.n_layer)
        logits, _ = self.engine.prefill(cache, prompt)
        out = self.engine.decode(cache, logits)
        table = BlockTable()
        self.pool.extend(table, cache)
        self.pool.release(table)
        hist += self.tok.query_tokens(query) + out
        p1, d1 = self._usage()
        return TurnOut(self.engine.answer_text(out), False, len(prompt), p1 - p0, d1 - d0, False)

    def record(self, sid: int, query: str, answer: str) -> None:
        self.hist.setdefault(sid, [self.tok.bos]).extend(self.tok.turn_tokens(query, answer))
        self.queries.setdefault(sid, []).append(query)


class NoCache(System):
    name = "none"

    def turn(self, t: Turn) -> TurnOut:
        return self.lm_turn(t.session, t.query)


class PrefixCache(System):
    """Chained block hashes -> physical block; entries hold one reference each."""

    name = "prefix"

    def __init__(self, *a):
        super().__init__(*a)
        self.map: dict[int, int] = {}                  # hash -> block id
        self.meta: dict[int, list] = {}                # hash -> [parent hash, n_children, last, hits]

    def evict_one(self) -> bool:
        cands = [Stats(h, m[2], m[3]) for h, m in self.meta.items()
                 if m[1] == 0 and self.pool.ref[self.map[h]] == 1]
        if not cands:
            return False
        h = self.policy(cands, self.now, self.weights).key
        parent = self.meta.pop(h)[0]
        if parent in self.meta:
            self.meta[parent][1] -= 1
        self.pool.decref([self.map.pop(h)])
        return True

    def turn(self, t: Turn) -> TurnOut:
        self.now += 1
        bs = self.pool.block_size
        hist = self.hist.setdefault(t.session, [self.tok.bos])
        prompt = hist + self.tok.query_tokens(t.query)
        hashes, h = [], 0
        for i in range(len(prompt) // bs):
            h = hash((h, tuple(prompt[i * bs:(i + 1) * bs])))
            hashes.append(h)
        reused = []
        for h in hashes[:(len(prompt) - 1) // bs]:      # at least one prompt token is computed
            if h not in self.map:
                break
            reused.append(self.map[h])
            self.meta[h][2] = self.now
            self.meta[h][3] += 1
        table = BlockTable(list(reused), len(reused) * bs)
        self.pool.incref(reused)
        p0, d0 = self._usage()
        cache = self.pool.to_cache(table)
        logits, _ = self.engine.prefill(cache, prompt[table.n_tokens:])
        out = self.engine.decode(cache, logits)
        self.pool.extend(table, cache)
        full = prompt + out
        h = 0
        for i in range(len(full) // bs):
            parent, h = h, hash((h, tuple(full[i * bs:(i + 1) * bs])))
            if h not in self.map:
                self.map[h] = table.blocks[i]
                self.pool.incref([table.blocks[i]])
                self.meta[h] = [parent, 0, self.now, 0]
                if parent in self.meta:
                    self.meta[parent][1] += 1
        self.pool.release(table)
        hist += self.tok.query_tokens(t.query) + out
        p1, d1 = self._usage()
        return TurnOut(self.engine.answer_text(out), bool(reused), len(prompt), p1 - p0, d1 - d0, False,
                       reuse=-1)


class SemanticCache(System):
    """Answer cache keyed by an embedding (query only, or query + last two queries)."""

    def __init__(self, engine, emb, cfg, context: bool):
        super().__init__(engine, emb, cfg)
        self.context = context
        self.name = "semantic_context" if context else "semantic_query"
        self.index = Index(next(iter(emb.values())).shape[0])
        self.answers: list[str] = []
        self.last: list[int] = []

    def key(self, t: Turn) -> np.ndarray:
        e = self.emb[t.query]
        if self.context:
            e = 2 * e + sum(self.emb[q] for q in self.queries.get(t.session, [])[-2:])
            e = e / np.linalg.norm(e)
        return e

    def turn(self, t: Turn) -> TurnOut:
        self.now += 1
        e = self.key(t)
        top = self.index.top(e, 1)
        if top and top[0][1] >= self.cfg.tau_sim:
            key = top[0][0]
            ans = self.answers[key]
            reuse = self.now - self.last[key]
            self.last[key] = self.now
            prompt = len(self.hist.get(t.session, [self.tok.bos])) + len(self.tok.query_tokens(t.query))
            self.record(t.session, t.query, ans)
            return TurnOut(ans, True, prompt, 0, 0, True, node=key, reuse=reuse)
        out = self.lm_turn(t.session, t.query)
        self.queries.setdefault(t.session, []).append(t.query)
        self.index.add(len(self.answers), e)
        self.answers.append(out.answer)
        self.last.append(self.now)
        out.embedded = True
        return out


class SmartCache(System):
    """Semantic forest + shift detection + session -> node -> shared KV blocks (see the module docstring)."""

    name = "smartcache"

    def __init__(self, *a):
        super().__init__(*a)
        d = next(iter(self.emb.values())).shape[0]
        self.forest = Forest(d, self.cfg.tau_sim_smart, guard=self.cfg.guard)
        self.cur: dict[int, Node] = {}
        self.own: dict[int, BlockTable] = {}            # share_kv=False: each session's private copy

    # ---------------------------------------------------------------- two-level map
    def _attach(self, sid: int, n: Node) -> None:
        old = self.cur.get(sid)
        if old is not None:
            old.active -= 1
        n.active += 1
        self.cur[sid] = n
        if not self.cfg.share_kv:                      # private copy of the node's blocks (no compute)
            if sid in self.own:
                self.pool.release(self.own[sid])
            self.own[sid] = self._copy(n.table)

    def _copy(self, table: BlockTable) -> BlockTable:
        out = BlockTable()
        self.pool.extend(out, self.pool.to_cache(table))
        return out

    def _context(self, sid: int) -> BlockTable | None:
        if sid not in self.cur:
            return None
        return self.cur[sid].table if self.cfg.share_kv else self.own[sid]

    def end(self, sid: int) -> None:
        n = self.cur.pop(sid, None)
        if n is not None:
            n.active -= 1
        if sid in self.own:
            self.pool.release(self.own.pop(sid))

    def evict_one(self) -> bool:
        cands = self.forest.evictable()
        if not cands:
            return False
        key = self.policy([n.stats() for n in cands], self.now, self.weights).key
        n = self.forest.nodes[key]
        self.forest.remove(n)
        self.pool.release(n.table)
        return True

    # ---------------------------------------------------------------- lookup (Algorithm 1)
    def turn(self, t: Turn) -> TurnOut:
        self.now += 1
        sid, e = t.session, self.emb[t.query]
        q = self.tok.query_tokens(t.query)
        ctx = self._context(sid)
        p0, d0 = self._usage()
        had = sid in self.cur
        cache, logits, shift, rho = None, None, not had, float("nan")
        if not shift and self.cfg.detect:
            cache = self.pool.to_cache(ctx)
            logits, rho = self.engine.prefill(cache, q, want_rho=True)
            shift = rho < self.cfg.tau_ctx
        under = None if shift else self.cur[sid]
        node, _ = self.forest.lookup(under, e, t.query)
        scope = -1 if under is None else under.key
        prompt = (ctx.n_tokens if ctx is not None and not shift else 1) + len(q)
        if node is not None:
            reuse = self.now - node.last
            self.forest.hit(node, self.now)
            self._attach(sid, node)
            p1, d1 = self._usage()
            return TurnOut(node.answer, True, prompt, p1 - p0, d1 - d0, True,
                           shift if had else None, node.key, reuse, rho, scope)
        if shift:                                       # a new root: the context restarts
            ctx, cache = None, KVCache(self.engine.model.cfg.n_layer)
            logits, _ = self.engine.prefill(cache, [self.tok.bos] + q)
        elif cache is None:                             # no detection pass ran: prefill q now
            cache = self.pool.to_cache(ctx)
            logits, _ = self.engine.prefill(cache, q)
        out = self.engine.decode(cache, logits)
        table = self.pool.fork(ctx) if self.cfg.share_kv else BlockTable()
        self.pool.extend(table, cache)
        answer = self.engine.answer_text(out)
        parent = None if shift else self.cur[sid]
        pred = shift if had else None
        n = self.forest.add(parent, t.query, e, answer, table, self.now)
        self._attach(sid, n)
        p1, d1 = self._usage()
        return TurnOut(answer, False, prompt, p1 - p0, d1 - d0, True, pred, n.key, rho=rho, scope=scope)


def make_system(engine: Engine, emb: dict, cfg) -> System:
    s = cfg.system
    if s == "none":
        return NoCache(engine, emb, cfg)
    if s == "prefix":
        return PrefixCache(engine, emb, cfg)
    if s in ("semantic_query", "semantic_context"):
        return SemanticCache(engine, emb, cfg, context=s == "semantic_context")
    return SmartCache(engine, emb, cfg)
