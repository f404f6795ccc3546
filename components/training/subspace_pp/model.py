"""The pipelined GPT: the shared :class:`~components.models.gpt.GPT` cut into stages, and its
subspace-constrained (SSN) form.

Stage ``s`` holds blocks ``[s L/S, (s+1) L/S)``; stage 0 also embeds, the last stage also has the
final norm and the head (embeddings untied: they live on different stages). The SSN form follows
the reference ReparamSSN recipe: one fixed orthonormal basis ``U`` (d x k) and a fixed random token
table ``T_fix`` (V x d), seeded and identical on every stage. The embedding is
``x_0 = (E[tok] + P[pos]) U^T + T_fix[tok]`` with learnable ``E`` (V x k) and ``P`` (context x k),
and every output projection feeding the residual stream outside the last stage (attention out-proj,
MLP down-proj) is ``(W' h + b') U^T`` (:class:`SubspaceLinear`, zero-initialised). Then
``x - T_fix[tok]`` lies in span(U) after every block, so a boundary sends k coordinates plus the
token ids and the receiver rebuilds x exactly. Norms sit inside the branches, so they are harmless.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from components.models.gpt import GPT, GPTConfig
from components.training.on_device import device_of


def fixed_basis(d: int, k: int, seed: int) -> torch.Tensor:
    """Orthonormal d x k basis from a seeded Gaussian (QR): the one shared subspace S."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, k, generator=g, dtype=torch.float64))
    return q.to(torch.float32).contiguous()


def fixed_token_table(vocab: int, d: int, seed: int, std: float = 0.02) -> torch.Tensor:
    """The fixed (no-gradient) token table T_fix, seeded."""
    g = torch.Generator().manual_seed(seed + 1)
    return (torch.randn(vocab, d, generator=g) * std).contiguous()


class SubspaceLinear(nn.Module):
    """``y = (W' h + b') U^T``: a linear map whose output lies in span(U) (W' is k x in, zero-init)."""

    def __init__(self, d_in: int, basis: torch.Tensor):
        super().__init__()
        self.register_buffer("basis", basis, persistent=True)
        self.inner = nn.Linear(d_in, basis.shape[1])
        nn.init.zeros_(self.inner.weight)
        nn.init.zeros_(self.inner.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.inner(h) @ self.basis.T


class Embed(nn.Module):
    """Stage 0's input map: the GPT's token + learned position embedding (dense)."""

    def __init__(self, gpt: GPT):
        super().__init__()
        self.tok, self.pos = gpt.tok, gpt.pos

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))


class SubspaceEmbed(nn.Module):
    """SSN's input map: ``(E[tok] + P[pos]) U^T + T_fix[tok]``."""

    def __init__(self, vocab: int, context: int, basis: torch.Tensor, table: torch.Tensor):
        super().__init__()
        k = basis.shape[1]
        self.register_buffer("basis", basis, persistent=True)
        self.register_buffer("table", table, persistent=True)
        self.coef = nn.Embedding(vocab, k)
        self.pos = nn.Embedding(context, k)
        nn.init.normal_(self.coef.weight, 0.0, 0.02)
        nn.init.normal_(self.pos.weight, 0.0, 0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        c = self.coef(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return c @ self.basis.T + self.table[idx]


class Stage(nn.Module):
    """One pipeline stage: optional embedding, its blocks, optional final norm + head."""

    def __init__(self, embed: nn.Module | None, blocks: list[nn.Module], ln_f: nn.Module | None,
                 head: nn.Module | None):
        super().__init__()
        self.embed = embed
        self.blocks = nn.ModuleList(blocks)
        self.ln_f, self.head = ln_f, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: token ids (stage 0) or the residual stream; returns the stream or the logits."""
        if self.embed is not None:
            x = self.embed(x)
        for blk in self.blocks:
            x = blk(x)
        if self.head is not None:
            x = self.head(self.ln_f(x))
        return x


def build_stages(cfg: GPTConfig, stages: int, seed: int, k: int, ssn: bool = False,
                 basis_seed: int = 1234) -> tuple[list[Stage], dict]:
    """The GPT (seeded init, on cpu: the same weights and constants whatever device the stages then run
    on) cut into ``stages`` stages; with ``ssn`` its subspace-constrained form.

    Returns the stages and the fixed constants ``{"basis": U (d x k), "table": T_fix}`` (U also
    serves the naive-projection codec; T_fix is None for the dense model).
    """
    torch.manual_seed(seed)
    gpt = GPT(cfg)
    d = cfg.d_model
    basis = fixed_basis(d, k, basis_seed)
    table = None
    per = cfg.n_layer // stages
    embed: nn.Module = Embed(gpt)
    if ssn:
        table = fixed_token_table(cfg.vocab_size, d, basis_seed)
        embed = SubspaceEmbed(cfg.vocab_size, cfg.context, basis, table)
        for layer, blk in enumerate(gpt.blocks):
            if layer < (stages - 1) * per:    # blocks whose output crosses a boundary
                blk.attn.proj = SubspaceLinear(d, basis)
                blk.mlp[2] = SubspaceLinear(blk.mlp[2].in_features, basis)
    out = []
    for s in range(stages):
        out.append(Stage(embed if s == 0 else None, list(gpt.blocks[s * per:(s + 1) * per]),
                         gpt.ln_f if s == stages - 1 else None, gpt.head if s == stages - 1 else None))
    return out, {"basis": basis, "table": table}


def reference_loss(stages: list[Stage], idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The same model in one process, no boundaries, on the stages' device (``idx``, ``targets`` drawn on
    cpu are moved there): mean next-token cross-entropy."""
    x = idx.to(device_of(stages[0]))
    for st in stages:
        x = st(x)
    return F.cross_entropy(x.reshape(-1, x.size(-1)), targets.to(x.device).reshape(-1))
