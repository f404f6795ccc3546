"""A tiny decoder-only GPT (pre-LN, learned positions) with a KV cache, shared by every
technique that trains or serves a language model (DUO, SpecReason, Gatekeeper, FAL, ...).

Architecture variants plug in without forking the model: a block is built by the factory
registered as kind ``block`` under ``GPTConfig.block`` (``@register("block", "fal")`` over
``fn(cfg, layer) -> nn.Module`` whose forward is ``(x, cache=None, ctx=None)``), and each block
receives its layer index, so a variant can change any subset of layers. ``ctx`` is the forward's
:class:`BlockContext`: the only place blocks share per-forward state (FAL's first attention).

Incremental decoding: ``model(idx, cache=cache)`` appends the new keys/values to ``cache``
and positions continue from ``cache.length``; ``cache.crop(n)`` rolls back (speculative
decoding rejects drafted tokens that way).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from components.core.errors import require
from components.core.registry import get, lookup, register


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    context: int = 64
    dropout: float = 0.0
    block: str = "pre_ln"      # a registered block (kind "block")
    tie_embeddings: bool = True

    def check(self) -> "GPTConfig":
        require(self.vocab_size >= 2, "vocab_size", self.vocab_size, "at least 2")
        require(self.n_layer >= 1, "n_layer", self.n_layer, "a positive integer")
        require(self.n_head >= 1 and self.d_model % self.n_head == 0, "n_head", self.n_head,
                f"a positive divisor of d_model={self.d_model}")
        require(self.context >= 2, "context", self.context, "at least 2 tokens")
        require(0.0 <= self.dropout < 1.0, "dropout", self.dropout, "a probability in [0, 1)")
        get("block", self.block, key="block")  # ConfigError naming the registered blocks
        return self

    def to_dict(self) -> dict:
        return asdict(self)


#: named sizes; ``debug`` is what tests use
SIZES = {
    "debug": dict(n_layer=1, n_head=2, d_model=16, context=32),
    "tiny": dict(n_layer=1, n_head=2, d_model=32, context=64),
    "small": dict(n_layer=2, n_head=4, d_model=64, context=64),
    "base": dict(n_layer=4, n_head=4, d_model=128, context=128),
}


class BlockContext:
    """Per-forward state shared by the blocks of one GPT forward: FAL's first-attention signal a1.

    :meth:`GPT.forward` makes a fresh one per call and hands it to every block, so no block keeps a
    forward's tensors: a block recomputed in backward (activation checkpointing) reads the context
    of its own forward, not the latest one, and copies of a model carry no stale signal.
    """

    __slots__ = ("a1",)

    def __init__(self):
        self.a1: torch.Tensor | None = None


class KVCache:
    """Per-layer keys/values of the tokens seen so far, shape (B, H, T, head_dim) each."""

    def __init__(self, n_layer: int):
        self.k: list[torch.Tensor | None] = [None] * n_layer
        self.v: list[torch.Tensor | None] = [None] * n_layer

    @property
    def length(self) -> int:
        """Positions cached, as seen before a forward pass (layer 0 is extended first)."""
        return self.layer_length(0)

    def layer_length(self, layer: int) -> int:
        return 0 if self.k[layer] is None else self.k[layer].shape[2]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=2)
            v = torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v

    def crop(self, n: int) -> None:
        """Keep only the first ``n`` positions (drop rejected speculative tokens)."""
        require(0 <= n <= self.length, "n", n, f"a length in [0, {self.length}]")
        for i in range(len(self.k)):
            if self.k[i] is not None:
                self.k[i], self.v[i] = self.k[i][:, :, :n], self.v[i][:, :, :n]

    def clone(self) -> "KVCache":
        c = KVCache(len(self.k))
        c.k, c.v = list(self.k), list(self.v)  # tensors are never modified in place
        return c


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.d_head = cfg.n_head, cfg.d_model // cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, layer: int, cache: KVCache | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, self.d_head).transpose(1, 2) for t in (q, k, v))
        past = 0
        if cache is not None:
            past = cache.layer_length(layer)  # not cache.length: layer 0 was already extended
            k, v = cache.append(layer, k, v)
        drop = self.dropout if self.training else 0.0
        if past == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop)
        elif T == 1:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop)
        else:  # new token i sits at absolute position past+i and sees keys 0..past+i
            mask = torch.ones(T, past + T, dtype=torch.bool, device=x.device).tril(diagonal=past)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


@register("block", "pre_ln")
class PreLNBlock(nn.Module):
    """x + attn(LN(x)); x + MLP(LN(x)), MLP 4x wide with GELU."""

    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model), nn.Dropout(cfg.dropout))

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, ctx: BlockContext | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), self.layer, cache)
        return x + self.mlp(self.ln2(x))


@register("block", "parallel")
class ParallelBlock(PreLNBlock):
    """GPT-J/PaLM parallel block: x + attn(LN1 x) + MLP(LN2 x) (two LayerNorms, as FAL has)."""

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, ctx: BlockContext | None = None) -> torch.Tensor:
        return x + self.attn(self.ln1(x), self.layer, cache) + self.mlp(self.ln2(x))


@register("block", "fal")
class FALBlock(PreLNBlock):
    """First Attentions Last (arXiv 2510.14614): layer 0 is a pre-LN block whose attention output
    a1 is kept; every later layer is ``x + attn(LN1 x) + MLP(LN2(x + a1))``: its MLP reads a1
    instead of its own attention, so attention and MLP of a block are independent (one
    tensor-parallel all-reduce per block). Same parameters as ``pre_ln``. Layer 0 writes a1 into
    the forward's :class:`BlockContext`; later layers read it from there."""

    def first_signal(self, a1: torch.Tensor) -> torch.Tensor:
        return a1

    def later(self, x: torch.Tensor, a: torch.Tensor, a1: torch.Tensor) -> torch.Tensor:
        return x + a + self.mlp(self.ln2(x + a1))

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, ctx: BlockContext | None = None) -> torch.Tensor:
        a = self.attn(self.ln1(x), self.layer, cache)
        if self.layer > 0:
            if ctx is None or ctx.a1 is None:
                raise ValueError(f"FAL block layer {self.layer} needs the BlockContext into which its forward's "
                                 "layer 0 wrote a1 (run it through GPT.forward)")
            return self.later(x, a, ctx.a1)
        if ctx is not None:
            ctx.a1 = self.first_signal(a)
        x = x + a
        return x + self.mlp(self.ln2(x))


@register("block", "fal_plus")
class FALPlusBlock(FALBlock):
    """FAL+: the usual pre-LN block, with the normalised first attention LNf(a1) added to each later
    block's MLP input: ``h = x + attn(LN1 x)``, ``h + MLP(LN2(h + LNf(a1)))``. One extra LayerNorm
    (LNf, in layer 0); keeps the per-block dependency, so no communication is saved."""

    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__(cfg, layer)
        if layer == 0:
            self.ln_first = nn.LayerNorm(cfg.d_model)

    def first_signal(self, a1: torch.Tensor) -> torch.Tensor:
        return self.ln_first(a1)

    def later(self, x: torch.Tensor, a: torch.Tensor, a1: torch.Tensor) -> torch.Tensor:
        x = x + a
        return x + self.mlp(self.ln2(x + a1))


class GPT(nn.Module):
    """Token + position embeddings, ``n_layer`` blocks, final LayerNorm, LM head."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg.check()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        block = lookup("block", cfg.block, key="block")
        self.blocks = nn.ModuleList(block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.n_layer))
        if cfg.tie_embeddings:
            self.head.weight = self.tok.weight

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def num_params(self, non_embedding: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        return n - self.tok.weight.numel() - self.pos.weight.numel() if non_embedding else n

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None,
                loss_mask: torch.Tensor | None = None):
        """Logits (B, T, V); with ``targets`` also the mean cross-entropy (over ``loss_mask`` if given)."""
        B, T = idx.shape
        past = cache.length if cache is not None else 0
        if past + T > self.cfg.context:
            raise ValueError(f"sequence of {past + T} tokens exceeds the model's context of {self.cfg.context}")
        pos = torch.arange(past, past + T, device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        ctx = BlockContext()              # this forward's shared state, never kept on a module
        for blk in self.blocks:
            x = blk(x, cache, ctx)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="none")
        if loss_mask is None:
            return logits, ce.mean()
        m = loss_mask.reshape(-1).to(ce.dtype)
        return logits, (ce * m).sum() / m.sum().clamp_min(1.0)

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg.n_layer)

    @torch.no_grad()
    def generate(self, prompt: list[int], max_new: int, stop: set[int] | None = None,
                 cache: KVCache | None = None, temperature: float = 0.0,
                 generator: torch.Generator | None = None) -> list[int]:
        """Greedy (``temperature=0``) or sampled continuation of ``prompt`` with a KV cache.

        If ``cache`` is given it must hold a prefix of ``prompt``; only the rest is prefilled,
        and the cache ends holding prompt + generated tokens except the last one sampled.
        Stops after a token in ``stop`` (included in the output) or ``max_new`` tokens.
        """
        cache = cache if cache is not None else self.new_cache()
        todo = prompt[cache.length:]
        require(len(todo) >= 1, "prompt", len(prompt), "at least one token beyond the cached prefix")
        out: list[int] = []
        x = torch.tensor([todo], dtype=torch.long)
        for _ in range(max_new):
            logits = self(x, cache=cache)[0, -1]
            if temperature > 0:
                nxt = int(torch.multinomial(F.softmax(logits / temperature, -1), 1, generator=generator))
            else:
                nxt = int(logits.argmax())
            out.append(nxt)
            if stop and nxt in stop:
                break
            if cache.length + 1 > self.cfg.context:
                break
            x = torch.tensor([[nxt]], dtype=torch.long)
        return out


@torch.no_grad()
def evaluate_loss(model: GPT, data, context: int, batch: int, n_batches: int, seed: int = 0) -> float:
    """Mean next-token cross-entropy over ``n_batches`` fixed random windows of ``data``."""
    import numpy as np

    from components.data.char_corpus import sample_batch

    was = model.training
    model.eval()
    rng = np.random.default_rng(seed)
    tot = 0.0
    for _ in range(n_batches):
        x, y = sample_batch(data, batch, context, rng)
        tot += float(model(x, y)[1])
    model.train(was)
    return tot / n_batches
