"""One tensor-parallel rank of the shared GPT (Megatron split), for every registered TP block.

QKV and the MLP up-projection are column-parallel (rank r keeps heads ``r*H/tp ..`` and its slice of
the 4d hidden units), the attention output and MLP down-projection are row-parallel (their partial
sums are all-reduced by ``g``; their biases, replicated, are added after it). Embeddings, LayerNorms
and the tied LM head are replicated. Parameter names equal :class:`components.models.gpt.GPT`'s, so
:func:`shard_state` / :func:`gather_grads` map a full model to ranks and back.

All-reduces per forward (``g``) and backward (``f``), L layers: ``pre_ln`` and ``fal_plus`` 2L each
way (f after each LayerNorm, the standard placement); ``parallel`` L and ``fal`` L+1 (one ``f`` on the
block input before both LayerNorms, and ``fal``'s a1 all-reduced once in layer 0 and entered once
for all later layers). With ``f`` before a LayerNorm, that LayerNorm's weight gradients are partial
sums: ``parallel`` and ``fal`` sum them in one bucketed all-reduce per step (phase ``param``).
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from components.core.errors import require
from components.models.gpt import GPTConfig
from components.training.tensor_parallel.comm import Comm, copy_to, reduce_from

TP_BLOCKS = ("pre_ln", "parallel", "fal", "fal_plus")
PARTIAL_LN = {"parallel": ("ln1", "ln2"), "fal": ("ln1", "ln2")}     # LayerNorms behind one f


def check_tp(tp: int, cfg: GPTConfig, key: str = "tp") -> None:
    """A TP degree splits heads and MLP units evenly; the block must have a TP form; no dropout."""
    require(isinstance(tp, int) and tp >= 1 and cfg.n_head % tp == 0 and cfg.d_model % tp == 0, key, tp,
            f"a positive divisor of n_head={cfg.n_head} and d_model={cfg.d_model}")
    require(cfg.block in TP_BLOCKS, "block", cfg.block, "one of " + ", ".join(TP_BLOCKS) + " (blocks with a TP form)")
    require(cfg.dropout == 0.0, "dropout", cfg.dropout, "0 under tensor parallelism (ranks must draw the same masks)")


class TPBlock(nn.Module):
    """Rank-local attention heads and MLP units of one block; ``forward(x, first, comm)``."""

    def __init__(self, cfg: GPTConfig, layer: int, tp: int):
        super().__init__()
        self.kind, self.layer = cfg.block, layer
        d, dl, fl = cfg.d_model, cfg.d_model // tp, 4 * cfg.d_model // tp
        self.heads, self.d_head = cfg.n_head // tp, cfg.d_model // cfg.n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.Module()
        self.attn.qkv, self.attn.proj = nn.Linear(d, 3 * dl), nn.Linear(dl, d)
        self.mlp = nn.Sequential(nn.Linear(d, fl), nn.GELU(), nn.Linear(fl, d))
        if self.kind == "fal_plus" and layer == 0:
            self.ln_first = nn.LayerNorm(d)

    def attn_partial(self, h: torch.Tensor) -> torch.Tensor:
        B, T, _ = h.shape
        q, k, v = self.attn.qkv(h).split(self.heads * self.d_head, dim=2)
        q, k, v = (t.view(B, T, self.heads, self.d_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.linear(y.transpose(1, 2).reshape(B, T, -1), self.attn.proj.weight)

    def mlp_partial(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(self.mlp[1](self.mlp[0](h)), self.mlp[2].weight)

    def forward(self, x: torch.Tensor, first: dict, comm: Comm) -> torch.Tensor:
        b_attn, b_mlp = self.attn.proj.bias, self.mlp[2].bias
        if self.kind == "parallel" or (self.kind == "fal" and self.layer > 0):
            xf = copy_to(x, comm)
            m_in = xf if self.kind == "parallel" else xf + first["a1"]
            return x + reduce_from(self.attn_partial(self.ln1(xf)) + self.mlp_partial(self.ln2(m_in)), comm) \
                + b_attn + b_mlp
        if self.kind == "fal":                     # layer 0: a1 all-reduced, entered once for every later MLP
            xf = copy_to(x, comm)
            a = reduce_from(self.attn_partial(self.ln1(xf)), comm) + b_attn
            first["a1"] = copy_to(a, comm)
            return x + a + reduce_from(self.mlp_partial(self.ln2(xf + first["a1"])), comm) + b_mlp
        # pre_ln and fal_plus: the standard Megatron placement, f after each LayerNorm
        a = reduce_from(self.attn_partial(copy_to(self.ln1(x), comm)), comm) + b_attn
        h = x + a
        if self.kind == "fal_plus":
            if self.layer == 0:
                first["a1"] = self.ln_first(a)
            else:
                h_in = h + first["a1"]
                return h + reduce_from(self.mlp_partial(copy_to(self.ln2(h_in), comm)), comm) + b_mlp
        return h + reduce_from(self.mlp_partial(copy_to(self.ln2(h), comm)), comm) + b_mlp


class TPRankGPT(nn.Module):
    """Rank ``rank`` of ``tp``: replicated embeddings / final LayerNorm / tied head, TP blocks."""

    def __init__(self, cfg: GPTConfig, rank: int, tp: int, comm: Comm):
        super().__init__()
        check_tp(tp, cfg.check())
        self.cfg, self.rank, self.tp, self.comm = cfg, rank, tp, comm
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(TPBlock(cfg, i, tp) for i in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        first: dict = {}
        for blk in self.blocks:
            x = blk(x, first, self.comm)
        logits = F.linear(self.ln_f(x), self.tok.weight)
        return logits, F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    def sync_partial_grads(self) -> None:
        """One bucketed all-reduce of the LayerNorm gradients that are partial sums (``PARTIAL_LN``)."""
        names = PARTIAL_LN.get(self.cfg.block, ())
        ps = [p for blk in self.blocks for n in names for p in getattr(blk, n).parameters()]
        if not ps:
            return
        flat = self.comm.all_reduce(torch.cat([p.grad.reshape(-1) for p in ps]), "param")
        for p, g in zip(ps, flat.split([p.numel() for p in ps])):
            p.grad.copy_(g.view_as(p))


def is_sharded(name: str, cfg: GPTConfig, tp: int) -> bool:
    return _split(name, cfg, tp) is not None


def _split(name: str, cfg: GPTConfig, tp: int):
    """(dim, pieces) of a sharded parameter: pieces are ``(offset, size)`` per rank slot, or None."""
    d, f = cfg.d_model, 4 * cfg.d_model
    if name.endswith("attn.qkv.weight") or name.endswith("attn.qkv.bias"):
        return 0, [(s * d, d // tp) for s in range(3)]             # q, k, v sections, each by heads
    if name.endswith("attn.proj.weight"):
        return 1, [(0, d // tp)]
    if name.endswith("mlp.0.weight") or name.endswith("mlp.0.bias"):
        return 0, [(0, f // tp)]
    if name.endswith("mlp.2.weight"):
        return 1, [(0, f // tp)]
    return None


def shard_state(full: dict, cfg: GPTConfig, rank: int, tp: int) -> dict:
    """Rank ``rank``'s state dict from a full GPT state dict (the tied head is ``tok.weight``)."""
    out = {}
    for name, t in full.items():
        if name == "head.weight":
            continue
        sp = _split(name, cfg, tp)
        if sp is None:
            out[name] = t.clone()
            continue
        dim, pieces = sp
        out[name] = torch.cat([t.narrow(dim, off + rank * size, size) for off, size in pieces], dim).clone()
    return out


def gather_grads(per_rank: list[dict], cfg: GPTConfig, tp: int) -> dict:
    """Full-model gradients from every rank's named gradients (replicated ones from rank 0)."""
    out = {}
    for name in per_rank[0]:
        sp = _split(name, cfg, tp)
        if sp is None:
            out[name] = per_rank[0][name]
            continue
        dim, pieces = sp
        size = pieces[0][1]
        chunks = [g.split([size] * len(pieces), dim) for g in (r[name] for r in per_rank)]
        out[name] = torch.cat([chunks[r][s] for s in range(len(pieces)) for r in range(tp)], dim)
    return out
