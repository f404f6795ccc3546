"""Ring attention over P chunks (causal, online-softmax merge), vectorised in one process, and
the ``cp_ring`` GPT block that uses it.

Rank i holds chunk i (queries, its own K/V). Block j's wire variable leaves rank j and is
forwarded hop by hop to ranks j+1..P-1 (causal: earlier chunks only); every receiver decodes the
same payload. Rank i merges its own (diagonal, causally masked) block first, then the blocks in
arrival order i-1, ..., 0, carrying (running max, sum, output) in fp32 (:func:`rank_attention`). The
training ring and the rank actors give that softmax over the same blocks to one fused attention call
(:func:`rank_attention_fused`, flash attention on cpu, which tiles the keys the same online way): the
same result up to fp32 rounding (tests/training/test_context_parallel.py holds the two within 1e-5), without
eager passes over every 64x64 score tile, which had made the ring most of a training step. Backward: receivers keep
the blocks they decoded, so only the gradient accumulator of block j travels back, from rank
P-1 down to j, each rank adding its partial and re-encoding it (:class:`HopChain`); the owner
backpropagates the decoded sum. The actor ring (:mod:`.actors`) runs exactly these steps.

K/V on the wire (``kv``):
- ``dense``: the d_h-wide block itself (fp32 / bf16 / int8 codec);
- ``randproj``: a fixed random orthonormal basis P (d_h x r) per layer and head; the hop sends
  a = P^T k and the receiver uses P a (lossy: the model is not constrained); gradients travel
  as r coefficients too;
- ``subspace``: the model itself is reparameterised: a bank of M orthonormal bases U_m (QR
  retraction of free parameters: a point of a product of Stiefel manifolds) and maps A_m per
  layer and head; a router picks m(t) per token (hard top-1 forward, straight-through softmax
  backward, load-balancing penalty), k_t = U_m(t) A_m(t) x_t (same for v, one index for both).
  The hop sends a_t = A_m(t) x_t (r coefficients) plus m(t); the receiver rebuilds U_m(t) a_t,
  exact up to the codec. M=1 is a single learned subspace. The router learns through the
  owner's local path (the receivers see hard indices); U gets receivers' gradients locally.
The tiny GPT has learned absolute positions (no RoPE), so nothing position-dependent is applied
after decoding.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from components.core.registry import register
from components.training.context_parallel.wire import Codec, encode_index, make_codec

KV_MODES = ("dense", "randproj", "subspace")


@dataclass(frozen=True)
class RingSpec:
    """How a cp_ring block splits and compresses: P chunks, K/V mode, codec, r, M, router."""

    chunks: int = 4
    kv: str = "dense"
    codec: str = "fp32"
    r: int = 0               # coefficients per token and head (randproj / subspace)
    M: int = 1               # subspaces in the mixture (subspace)
    bucket: int = 128        # int8 values per scale
    balance: float = 0.01    # load-balancing penalty weight (M > 1)
    seed: int = 0            # the fixed random projection's seed


class HopChain(torch.autograd.Function):
    """Block j's wire variable as decoded by its ``n`` receivers (ranks j+1..j+n, in that order).

    Forward: one encode, the same decoded copy for every receiver. Backward: the accumulator
    starts at the last receiver and moves down the ring; each rank adds its partial, re-encodes
    and sends (n hops, each one payload), the owner gets the decoded sum.
    """

    @staticmethod
    def forward(ctx, w, n, codec, sink):
        dec, nbytes = codec.roundtrip(w)
        ctx.codec, ctx.sink, ctx.shape = codec, sink, w.shape
        sink.append(("fwd", nbytes, n))
        return tuple(dec.clone() for _ in range(n))

    @staticmethod
    def backward(ctx, *grads):
        acc, nbytes = None, 0
        for g in reversed(grads):                       # last receiver first
            part = g if acc is None else acc + g
            acc, nbytes = ctx.codec.roundtrip(part)
        ctx.sink.append(("bwd", nbytes, len(grads)))
        return acc, None, None, None


def block_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool):
    """One block's (output numerator, row max, row sum), fp32; ``causal`` masks the diagonal block."""
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        T = q.shape[-2]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    m = s.amax(dim=-1, keepdim=True).detach()           # any shift is exact; detached for stability
    p = torch.exp(s - m)
    return p @ v, m, p.sum(dim=-1, keepdim=True)


def merge(acc, blk):
    """Online-softmax merge of two partial results (o, m, l)."""
    if acc is None:
        return blk
    (o1, m1, l1), (o2, m2, l2) = acc, blk
    m = torch.maximum(m1, m2)
    a, b = torch.exp(m1 - m), torch.exp(m2 - m)
    return o1 * a + o2 * b, m, l1 * a + l2 * b


def rank_attention(q, k_own, v_own, received):
    """Rank i's output: its diagonal block, then ``received`` (k, v) blocks in arrival order."""
    acc = block_attend(q, k_own, v_own, causal=True)
    for k, v in received:
        acc = merge(acc, block_attend(q, k, v, causal=False))
    return acc[0] / acc[2]


def rank_attention_fused(q, k_own, v_own, received):
    """:func:`rank_attention` in one fused call: rank i's queries over the received blocks and its own
    (causal on the diagonal block), by ``F.scaled_dot_product_attention``. Each received block is its own
    tensor (the receiver's decoded copy), so the gradients still reach every hop of :class:`HopChain`.
    Every operand is contiguous, whatever the caller holds (the training ring's views of the whole
    sequence, an actor's own chunk): the kernel's rounding depends on the layout, and the actor check
    compares the two paths bit for bit."""
    keys = torch.cat([k for k, _ in received] + [k_own], dim=2)         # a contiguous copy, even of one block
    values = torch.cat([v for _, v in received] + [v_own], dim=2)
    Tq, Tk = q.shape[2], keys.shape[2]
    mask = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(diagonal=Tk - Tq)   # all received, own causal
    return F.scaled_dot_product_attention(q.contiguous(), keys, values, attn_mask=mask)


def ring_attention(q, k, v, chunks: int, wire_k=None, wire_v=None, expand=None, codec: Codec | None = None,
                   sink: list | None = None, fused: bool = True) -> torch.Tensor:
    """Causal attention of (B, H, T, d_h) tensors as a ring over ``chunks`` ranks.

    ``wire_k/wire_v`` (default: k, v) are what each block sends, ``expand(w, j, which)`` rebuilds
    the receiver's K or V of block j from the decoded wire variable (default: identity). ``fused``: each
    rank's attention by :func:`rank_attention_fused`, else merged block by block (:func:`rank_attention`).
    """
    T = q.shape[2]
    qs, ks, vs = (t.split(T // chunks, dim=2) for t in (q, k, v))
    wk = ks if wire_k is None else wire_k.split(T // chunks, dim=2)
    wv = vs if wire_v is None else wire_v.split(T // chunks, dim=2)
    codec = codec or Codec()
    sink = sink if sink is not None else []
    expand = expand or (lambda w, j, which: w)
    # inbox[i] = blocks rank i receives, in arrival order (i-1, i-2, ..., 0)
    inbox: list[list] = [[] for _ in range(chunks)]
    for j in range(chunks - 1):
        n = chunks - 1 - j
        dk = HopChain.apply(wk[j], n, codec, sink)
        dv = HopChain.apply(wv[j], n, codec, sink)
        for s in range(n):
            inbox[j + 1 + s].append((j, expand(dk[s], j, "k"), expand(dv[s], j, "v")))
    attend = rank_attention_fused if fused else rank_attention
    outs = [attend(qs[i], ks[i], vs[i], [(kk, vv) for _, kk, vv in sorted(inbox[i], key=lambda e: -e[0])])
            for i in range(chunks)]
    return torch.cat(outs, dim=2)


def expand_block(kv: str, basis, idx_block, w: torch.Tensor) -> torch.Tensor:
    """A receiver's K or V of one block from its decoded wire variable ``w``: the block itself
    (dense), P w (randproj, basis (H, d_h, r)), U_idx(t) w_t (subspace, basis (H, M, d_h, r))."""
    if kv == "dense":
        return w
    if kv == "randproj":
        return w @ basis.transpose(-1, -2).unsqueeze(0)
    hsel = torch.arange(basis.shape[0], device=basis.device).view(1, -1, 1)
    picked = basis[hsel, idx_block]                                                   # (B, H, Tc, d_h, r): U_m(t)
    # U_m(t) w_t elementwise over r (small: 1 or 2 here) rather than B*H*Tc matrix products of width r
    return (picked * w.unsqueeze(-2)).sum(-1)                                         # (B, H, Tc, d_h)


def make_expand(kv: str, basis_k, basis_v, idx, chunk: int):
    """``expand(w, j, "k" | "v")`` for :func:`ring_attention` (idx: the owner's, per token)."""
    def expand(w, j, which):
        ib = None if idx is None else idx[:, :, j * chunk:(j + 1) * chunk]
        return expand_block(kv, basis_k if which == "k" else basis_v, ib, w)
    return expand


def index_records(idx, M: int, chunks: int) -> list:
    """Sink records of the subspace index each forwarded block carries (once for its K and V)."""
    if idx is None or M <= 1:
        return []
    Tc = idx.shape[2] // chunks
    return [("idx", int(encode_index(idx[:, :, j * Tc:(j + 1) * Tc], M).numel()), chunks - 1 - j)
            for j in range(chunks - 1)]


def orthonormal(raw: torch.Tensor) -> torch.Tensor:
    """QR retraction of (..., d_h, r) free parameters onto the Stiefel manifold (sign-fixed)."""
    Q, R = torch.linalg.qr(raw)
    return Q * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1)).unsqueeze(-2)


class CPAttention(nn.Module):
    """Causal self-attention whose K/V travel a ring of ``spec.chunks`` ranks (see module doc)."""

    def __init__(self, cfg, layer: int, spec: RingSpec):
        super().__init__()
        self.spec, self.layer = spec, layer
        self.H, self.dh, d = cfg.n_head, cfg.d_model // cfg.n_head, cfg.d_model
        self.q = nn.Linear(d, d)
        self.proj = nn.Linear(d, d)
        self.codec = make_codec(spec.codec, spec.bucket)
        self.sink: list = []
        self.tau = 1.0
        self.aux = torch.zeros(())
        self.usage = None
        if spec.kv in ("dense", "randproj"):
            self.kv = nn.Linear(d, 2 * d)
        if spec.kv == "randproj":
            g = torch.Generator().manual_seed(10_007 * spec.seed + layer)
            for name in ("Pk", "Pv"):
                self.register_buffer(name, orthonormal(torch.randn(self.H, self.dh, spec.r, generator=g)))
        if spec.kv == "subspace":
            H, M, r = self.H, spec.M, spec.r
            self.A_k = nn.Parameter(torch.randn(H, M, r, d) * 0.02)
            self.A_v = nn.Parameter(torch.randn(H, M, r, d) * 0.02)
            self.U_k = nn.Parameter(torch.randn(H, M, self.dh, r))
            self.U_v = nn.Parameter(torch.randn(H, M, self.dh, r))
            self.router = nn.Linear(d, H * M) if M > 1 else None

    def _heads(self, t, B, T):
        return t.view(B, T, self.H, self.dh).transpose(1, 2)

    def qkv_wire(self, x: torch.Tensor):
        """q, local k, local v (B, H, T, d_h); the wire variables of K and V; the receivers' bases
        for K and V (None for dense) and the subspace index per token (None unless subspace)."""
        B, T, C = x.shape
        q = self._heads(self.q(x), B, T)
        mode = self.spec.kv
        if mode in ("dense", "randproj"):
            k, v = (self._heads(t, B, T) for t in self.kv(x).split(C, dim=2))
            if mode == "dense":
                return q, k, v, k, v, None, None, None
            return q, k, v, k @ self.Pk.unsqueeze(0), v @ self.Pv.unsqueeze(0), self.Pk, self.Pv, None
        M = self.spec.M
        Uk, Uv = orthonormal(self.U_k), orthonormal(self.U_v)                        # (H, M, d_h, r)
        ak = torch.einsum("btd,hmrd->bhtmr", x, self.A_k)
        av = torch.einsum("btd,hmrd->bhtmr", x, self.A_v)
        if M > 1:
            logits = self.router(x).view(B, T, self.H, M).transpose(1, 2)           # (B, H, T, M)
            soft = F.softmax(logits / self.tau, dim=-1)
            idx = soft.argmax(dim=-1)
            hard = F.one_hot(idx, M).to(x.dtype)
            gate = hard + soft - soft.detach()                                       # straight-through
            f = hard.mean(dim=(0, 2))                                                # (H, M) usage
            self.aux = M * (f * soft.mean(dim=(0, 2))).sum(-1).mean()
            self.usage = f.detach()
        else:
            idx = torch.zeros(B, self.H, T, dtype=torch.long, device=x.device)
            hard = gate = torch.ones(B, self.H, T, 1, device=x.device)
            self.aux, self.usage = torch.zeros((), device=x.device), torch.ones(self.H, 1, device=x.device)
        k = torch.einsum("bhtm,hmdr,bhtmr->bhtd", gate, Uk, ak)
        v = torch.einsum("bhtm,hmdr,bhtmr->bhtd", gate, Uv, av)
        wk = (hard.unsqueeze(-1) * ak).sum(-2)                                        # selected a_t, (B, H, T, r)
        wv = (hard.unsqueeze(-1) * av).sum(-2)
        return q, k, v, wk, wv, Uk, Uv, idx

    def forward(self, x: torch.Tensor, layer: int, cache=None) -> torch.Tensor:
        if cache is not None:
            raise ValueError("the cp_ring block trains and evaluates whole windows; it has no KV cache")
        B, T, C = x.shape
        P = self.spec.chunks
        if T % P:
            raise ValueError(f"{T} tokens do not split into {P} chunks")
        q, k, v, wk, wv, Bk, Bv, idx = self.qkv_wire(x)
        sink: list = []
        y = ring_attention(q, k, v, P, wk, wv, make_expand(self.spec.kv, Bk, Bv, idx, T // P), self.codec, sink)
        sink += index_records(idx, self.spec.M, P)
        self.sink = sink
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class CPBlock(nn.Module):
    """The pre-LN block of components.models.gpt with CPAttention in place of full attention."""

    def __init__(self, cfg, layer: int, spec: RingSpec):
        super().__init__()
        self.layer = layer
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = CPAttention(cfg, layer, spec)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model), nn.Dropout(cfg.dropout))

    def forward(self, x, cache=None, ctx=None):     # ctx: the GPT forward's BlockContext (unused)
        x = x + self.attn(self.ln1(x), self.layer, cache)
        return x + self.mlp(self.ln2(x))


_SPEC: contextvars.ContextVar[RingSpec] = contextvars.ContextVar("cp_ring_spec", default=RingSpec(chunks=1))


@register("block", "cp_ring", summary="pre-LN block with ring attention over compressed K/V chunks (context_parallel)")
def cp_ring_block(cfg, layer: int) -> CPBlock:
    return CPBlock(cfg, layer, _SPEC.get())


@contextlib.contextmanager
def ring_spec(spec: RingSpec):
    """Blocks built inside take ``spec`` (the block factory's signature is fixed: (cfg, layer))."""
    tok = _SPEC.set(spec)
    try:
        yield
    finally:
        _SPEC.reset(tok)


def build_model(vocab_size: int, n_layer: int, n_head: int, d_model: int, context: int, spec: RingSpec):
    """The shared GPT with ``cp_ring`` blocks configured by ``spec``."""
    from components.models.gpt import GPT, GPTConfig

    with ring_spec(spec):
        return GPT(GPTConfig(vocab_size=vocab_size, n_layer=n_layer, n_head=n_head, d_model=d_model,
                             context=context, block="cp_ring"))


def layer_stats(model) -> list[dict]:
    """Per attention layer, the last step's real payloads: bytes over all hops and one block's
    payload (K + V, plus the index forward), by direction, and the hops each direction made."""
    out = []
    for blk in model.blocks:
        sink = blk.attn.sink
        st = {}
        for d in ("fwd", "bwd"):
            recs = [(n, h) for kind, n, h in sink if kind == d]        # one record per K and per V
            st[f"{d}_bytes"] = sum(n * h for n, h in recs)
            st[f"{d}_hops"] = sum(h for _, h in recs) // 2
            st[f"{d}_block"] = 2 * max((n for n, _ in recs), default=0)
        idx = [(n, h) for kind, n, h in sink if kind == "idx"]
        st["idx_block"] = max((n for n, _ in idx), default=0)
        st["fwd_bytes"] += sum(n * h for n, h in idx)
        st["fwd_block"] += st["idx_block"]
        out.append(st)
    return out
