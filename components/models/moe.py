"""A tiny mixture-of-experts language model (byte-level, causal) whose router decisions serve as
real routing traces: ``layers`` blocks of attention + a top-k MoE FFN with a Switch-style
load-balancing loss. Small enough to train a few hundred steps on 2 CPU cores."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MoEConfig:
    vocab: int = 256
    d: int = 128
    heads: int = 4
    layers: int = 4
    experts: int = 16
    top_k: int = 2
    ffn: int = 256
    seq: int = 64
    aux_weight: float = 0.01


class MoEFFN(nn.Module):
    """Top-k routed experts; records the chosen expert ids of the last forward in ``last_topk``."""

    def __init__(self, c: MoEConfig):
        super().__init__()
        self.k, self.E = c.top_k, c.experts
        self.router = nn.Linear(c.d, c.experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(c.experts, c.d, c.ffn) * c.d ** -0.5)
        self.w2 = nn.Parameter(torch.randn(c.experts, c.ffn, c.d) * c.ffn ** -0.5)
        self.last_topk: torch.Tensor | None = None
        self.aux = torch.tensor(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        h = x.reshape(-1, D)
        probs = F.softmax(self.router(h), dim=-1)
        w, idx = probs.topk(self.k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        self.last_topk = idx.detach()
        out = torch.zeros_like(h)
        for e in range(self.E):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel():
                y = F.gelu(h[tok] @ self.w1[e]) @ self.w2[e]
                out.index_add_(0, tok, y * w[tok, slot, None])
        frac = F.one_hot(idx, self.E).float().sum(1).mean(0) / self.k      # share of tokens per expert
        self.aux = self.E * (frac * probs.mean(0)).sum()                    # Switch load-balancing loss
        return out.reshape(B, T, D)


class Block(nn.Module):
    def __init__(self, c: MoEConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(c.d), nn.LayerNorm(c.d)
        self.attn = nn.MultiheadAttention(c.d, c.heads, batch_first=True)
        self.moe = MoEFFN(c)
        self.register_buffer("mask", torch.triu(torch.ones(c.seq, c.seq, dtype=torch.bool), 1), persistent=False)

    def forward(self, x):
        T = x.shape[1]
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask[:T, :T], need_weights=False)[0]
        return x + self.moe(self.ln2(x))


class TinyMoELM(nn.Module):
    def __init__(self, c: MoEConfig):
        super().__init__()
        self.c = c
        self.emb = nn.Embedding(c.vocab, c.d)
        self.pos = nn.Parameter(torch.zeros(c.seq, c.d))
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.ln = nn.LayerNorm(c.d)
        self.head = nn.Linear(c.d, c.vocab, bias=False)

    def forward(self, ids: torch.Tensor):
        x = self.emb(ids) + self.pos[: ids.shape[1]]
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        aux = sum(b.moe.aux for b in self.blocks)
        return logits, aux

    def routing(self) -> list[torch.Tensor]:
        """Top-k expert ids per layer from the last forward, each [tokens, k]."""
        return [b.moe.last_topk for b in self.blocks]


def train_and_trace(text: str, c: MoEConfig, steps: int, batch: int, profile_tokens: int, eval_tokens: int,
                    seed: int = 0, lr: float = 3e-3) -> dict:
    """Train on the first 80% of ``text`` (bytes), then record routing on disjoint held-out windows:
    a profiling split and an evaluation split. Returns numpy traces per layer and the loss curve."""
    import numpy as np

    torch.manual_seed(seed)
    data = torch.tensor(list(text.encode("utf-8", "ignore")), dtype=torch.long)
    cut = int(0.8 * len(data))
    train, held = data[:cut], data[cut:]
    model = TinyMoELM(c)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        starts = torch.randint(0, len(train) - c.seq - 1, (batch,), generator=g)
        x = torch.stack([train[s:s + c.seq] for s in starts])
        y = torch.stack([train[s + 1:s + c.seq + 1] for s in starts])
        logits, aux = model(x)
        loss = F.cross_entropy(logits.reshape(-1, c.vocab), y.reshape(-1))
        opt.zero_grad()
        (loss + c.aux_weight * aux).backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()

    def trace(lo: int, n_tokens: int):
        n_win = -(-n_tokens // c.seq)
        span = held[lo:]
        starts = torch.linspace(0, len(span) - c.seq - 1, n_win).long()
        x = torch.stack([span[s:s + c.seq] for s in starts])
        with torch.no_grad():
            model(x)
        return [r.numpy().astype(np.int64)[:n_tokens] for r in model.routing()]

    half = len(held) // 2
    return {"profile": trace(0, profile_tokens), "eval": trace(half, eval_tokens), "losses": losses,
            "experts": c.experts, "top_k": c.top_k, "layers": c.layers}
