"""A paged KV-block pool for the tiny GPT, vLLM-style: physical blocks of ``block_size`` token
positions (every layer's keys and values), refcounted, shared between block tables, copy-on-write
for a shared partial last block, and a memory budget enforced through an eviction callback.

A :class:`BlockTable` lists the physical blocks of one token sequence. :meth:`BlockPool.to_cache`
gathers them into a :class:`~components.models.gpt.KVCache`, so the model prefills only the
tokens after the table (a reused block skips their compute); :meth:`BlockPool.extend` writes the
new positions of a cache back into blocks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from components.core.errors import require
from components.models.gpt import KVCache


@dataclass
class BlockTable:
    blocks: list[int] = field(default_factory=list)
    n_tokens: int = 0


class BlockPool:
    """Physical blocks ``(n_layer, 2, n_head, block_size, d_head)`` with refcounts and a budget.

    ``evict()`` (set by the cache that owns the pool) is called when an allocation would exceed
    ``budget``; it frees blocks by releasing references and returns False when nothing can go.
    The allocation then proceeds over budget and is counted in ``overflows``.
    """

    def __init__(self, n_layer: int, n_head: int, d_head: int, block_size: int, budget: int | None = None):
        require(block_size >= 1, "block_size", block_size, "a positive number of tokens")
        require(budget is None or budget >= 1, "budget", budget, "a positive number of blocks or None")
        self.shape = (n_layer, 2, n_head, block_size, d_head)
        self.block_size, self.budget = block_size, budget
        self.data: dict[int, torch.Tensor] = {}
        self.ref: dict[int, int] = {}
        self._next = 0
        self.peak = 0
        self.overflows = 0
        self.allocated = 0
        self.evict: Callable[[], bool] = lambda: False

    @property
    def resident(self) -> int:
        return len(self.data)

    def alloc(self) -> int:
        while self.budget is not None and self.resident >= self.budget:
            if not self.evict():
                self.overflows += 1
                break
        bid = self._next
        self._next += 1
        self.data[bid] = torch.zeros(self.shape)
        self.ref[bid] = 1
        self.allocated += 1
        self.peak = max(self.peak, self.resident)
        return bid

    def incref(self, blocks: list[int]) -> None:
        for b in blocks:
            self.ref[b] += 1

    def decref(self, blocks: list[int]) -> None:
        for b in blocks:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                del self.ref[b], self.data[b]

    def fork(self, table: BlockTable | None) -> BlockTable:
        """A new table sharing every block of ``table`` (refcounts + 1)."""
        if table is None:
            return BlockTable()
        self.incref(table.blocks)
        return BlockTable(list(table.blocks), table.n_tokens)

    def release(self, table: BlockTable) -> None:
        self.decref(table.blocks)
        table.blocks, table.n_tokens = [], 0

    def to_cache(self, table: BlockTable | None) -> KVCache:
        """The table's positions as a KVCache (batch 1), gathered from the physical blocks."""
        n_layer = self.shape[0]
        cache = KVCache(n_layer)
        if table is None or table.n_tokens == 0:
            return cache
        stack = torch.stack([self.data[b] for b in table.blocks])          # (nb, L, 2, H, bs, dh)
        kv = stack.permute(1, 2, 3, 0, 4, 5).reshape(n_layer, 2, self.shape[2], -1, self.shape[4])
        kv = kv[:, :, :, :table.n_tokens]
        for layer in range(n_layer):
            cache.k[layer] = kv[layer, 0].unsqueeze(0)
            cache.v[layer] = kv[layer, 1].unsqueeze(0)
        return cache

    def extend(self, table: BlockTable, cache: KVCache) -> int:
        """Write positions ``table.n_tokens .. cache.length`` of ``cache`` into the table's blocks.

        A shared partial last block is copied first (copy-on-write); returns blocks allocated."""
        bs, start, end = self.block_size, table.n_tokens, cache.length
        require(end >= start, "cache", end, f"a cache holding at least the table's {start} tokens")
        new = 0
        if start % bs and self.ref[table.blocks[-1]] > 1:
            old = table.blocks[-1]
            self.ref[old] += 1                     # keep it alive if the allocation evicts
            bid = self.alloc()
            self.data[bid].copy_(self.data[old])
            self.decref([old, old])
            table.blocks[-1] = bid
            new += 1
        pos = start
        while pos < end:
            if pos % bs == 0:
                table.blocks.append(self.alloc())
                new += 1
            blk = self.data[table.blocks[-1]]
            n = min(bs - pos % bs, end - pos)
            o = pos % bs
            for layer in range(self.shape[0]):
                blk[layer, 0, :, o:o + n] = cache.k[layer][0, :, pos:pos + n]
                blk[layer, 1, :, o:o + n] = cache.v[layer][0, :, pos:pos + n]
            pos += n
        table.n_tokens = end
        return new
