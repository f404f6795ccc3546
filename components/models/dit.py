"""A tiny class-conditional DiT (Peebles & Xie, 2023) shared by the diffusion techniques
(Foresight's layer reuse, CompactFusion's patch-parallel runner).

Interface (stable; a change is written here first):

- ``DiTConfig`` / ``DiT``; ``frames > 1`` adds a temporal-attention sub-layer for short clips.
- ``model.embed(x, t, y) -> (h, c)``: tokens ``h`` [B, N, d] with positional embedding, and the
  conditioning ``c`` [B, d] (timestep + class; class id ``num_classes`` is the null class for CFG).
  Images: ``x`` [B, C, H, W], tokens row-major over patches (N = H*W/p^2). Clips: ``x``
  [B, F, C, H, W], tokens frame-major (N = F*S, S = patches per frame).
- ``model.blocks``: ``DiTBlock``s, each with ``forward(h, c) -> h'`` (adaLN-zero) and the split
  form a token-sharded runner uses: ``qkv(h, c) -> (q, k, v, state)`` for the tokens given and
  ``finish(h, c, attn_out, state) -> h'`` with ``finish(h, c, attend(q, k, v), state)`` equal to
  ``forward(h, c)`` bit for bit (forward is that composition). q/k/v are [B, heads, n, hd]
  (clips: [B*F, heads, s, hd], spatial attention is per frame); the token axis is -2, so a
  shard gathers K/V of all tokens along dim -2 and attends with its own q. A clip shard owns
  the same spatial positions in every frame (temporal attention runs inside ``finish``).
- ``block.forward_parts(h, c, spatial=None, temporal=None) -> (h', spatial, temporal)``: the
  attention increments (gate * attention output) returned, or reused when given (PAB-like).
- ``block.modulated(h, c)``: the adaLN-modulated input of the attention (TeaCache's signal).
- ``model.final(h, c) -> v``: final adaLN + linear + unpatchify, the velocity prediction.
- ``model(x, t, y) == model.final(run every block over model.embed(x, t, y))``.

Positional embeddings are fixed 2-D (+ temporal) sin-cos over *normalised* patch coordinates,
so the same weights run at another resolution (the adaptivity sweeps sample at 24x24 too).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from components.core.errors import require


@dataclass(frozen=True)
class DiTConfig:
    img_size: int = 16          # training resolution (height = width)
    channels: int = 1
    patch: int = 2
    d: int = 64
    heads: int = 4
    depth: int = 4
    num_classes: int = 10       # class id num_classes is the null (unconditional) class
    frames: int = 1             # > 1: clips with a temporal-attention sub-layer per block
    mlp_ratio: float = 4.0

    def check(self) -> "DiTConfig":
        require(self.patch >= 1 and self.img_size % self.patch == 0, "patch", self.patch,
                f"a positive divisor of img_size={self.img_size}")
        require(self.d >= 1, "d", self.d, "a positive width")
        require(self.heads >= 1 and self.d % self.heads == 0, "heads", self.heads, f"a positive divisor of d={self.d}")
        require(self.depth >= 1, "depth", self.depth, "a positive integer")
        require(self.num_classes >= 1, "num_classes", self.num_classes, "a positive integer")
        require(self.frames >= 1, "frames", self.frames, "a positive integer")
        require(self.channels >= 1, "channels", self.channels, "a positive integer")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The shared non-causal scaled-dot-product attention; tokens on dim -2."""
    return F.scaled_dot_product_attention(q, k, v)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def _sincos(pos: torch.Tensor, dim: int) -> torch.Tensor:
    """[n] positions -> [n, dim] sin/cos features (dim even)."""
    freqs = torch.exp(-math.log(10000.0) * torch.arange(dim // 2, dtype=torch.float32, device=pos.device)
                      / max(dim // 2, 1))
    ang = pos.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)


def pos_embed(d: int, grid: int, frames: int = 1, ref_grid: int | None = None) -> torch.Tensor:
    """[frames*grid*grid, d] fixed embedding; coordinates scaled to ``ref_grid`` (resolution-free)."""
    ref = ref_grid or grid
    coords = torch.arange(grid, dtype=torch.float32) * (ref / grid)
    dt = d // 4 * 2 if frames > 1 else 0              # temporal share of the features
    ds = (d - dt) // 4 * 2                            # per spatial axis (even)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    sp = torch.cat([_sincos(yy.flatten(), ds), _sincos(xx.flatten(), ds)], dim=1)   # [S, 2ds]
    pad = d - dt - 2 * ds
    sp = F.pad(sp, (0, pad))
    if frames == 1:
        return sp
    tp = _sincos(torch.arange(frames, dtype=torch.float32), dt)                     # [F, dt]
    return torch.cat([sp[None].expand(frames, -1, -1), tp[:, None].expand(-1, sp.shape[0], -1)],
                     dim=2).reshape(frames * sp.shape[0], d)


class TimestepEmbed(nn.Module):
    """t in [0, 1] -> sin-cos(1000 t) -> MLP."""

    def __init__(self, d: int, freq_dim: int = 64):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, d), nn.SiLU(), nn.Linear(d, d))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(_sincos(t * 1000.0, self.freq_dim))


class DiTBlock(nn.Module):
    """Spatial attention (+ temporal attention for clips) + MLP, each with adaLN-zero from c."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        d = cfg.d
        self.cfg, self.heads, self.temporal = cfg, cfg.heads, cfg.frames > 1
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.qkv_proj = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        hidden = int(d * cfg.mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, d))
        n_mod = 9 if self.temporal else 6
        if self.temporal:
            self.norm_t = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
            self.qkv_t = nn.Linear(d, 3 * d)
            self.proj_t = nn.Linear(d, d)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(d, n_mod * d))
        nn.init.zeros_(self.ada[1].weight)   # adaLN-zero: every block starts as the identity
        nn.init.zeros_(self.ada[1].bias)

    # ---------------------------------------------------------------- pieces
    def mod(self, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """shift/scale/gate for attention, MLP (and temporal attention), each [B, d]."""
        return self.ada(c).chunk(9 if self.temporal else 6, dim=1)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.heads, -1).transpose(1, 2)

    def _frames(self, x: torch.Tensor) -> torch.Tensor:
        """[B, F*s, d] -> [B*F, s, d] (spatial attention per frame)."""
        b, n, d = x.shape
        f = self.cfg.frames
        return x.reshape(b * f, n // f, d)

    def _qkv(self, h: torch.Tensor, m) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = modulate(self.norm1(h), m[0], m[1])
        if self.temporal:
            x = self._frames(x)
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
        return self._heads(q), self._heads(k), self._heads(v)

    def _spatial_delta(self, attn_out: torch.Tensor, h: torch.Tensor, m) -> torch.Tensor:
        o = attn_out.transpose(1, 2).reshape(h.shape)
        return m[2].unsqueeze(1) * self.proj(o)

    def _temporal_delta(self, h: torch.Tensor, m) -> torch.Tensor:
        b, n, d = h.shape
        f = self.cfg.frames
        x = modulate(self.norm_t(h), m[6], m[7])
        x = x.view(b, f, n // f, d).transpose(1, 2).reshape(b * (n // f), f, d)   # per position
        q, k, v = self.qkv_t(x).chunk(3, dim=-1)
        o = attend(self._heads(q), self._heads(k), self._heads(v)).transpose(1, 2).reshape(x.shape)
        o = self.proj_t(o).view(b, n // f, f, d).transpose(1, 2).reshape(b, n, d)
        return m[8].unsqueeze(1) * o

    def _mlp_delta(self, h: torch.Tensor, m) -> torch.Tensor:
        return m[5].unsqueeze(1) * self.mlp(modulate(self.norm2(h), m[3], m[4]))

    def _rest(self, h, m, spatial, temporal):
        h = h + spatial
        if self.temporal:
            if temporal is None:
                temporal = self._temporal_delta(h, m)
            h = h + temporal
        return h + self._mlp_delta(h, m), temporal

    # ---------------------------------------------------------------- public forms
    def modulated(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """The adaLN-modulated attention input (TeaCache's change signal)."""
        m = self.mod(c)
        return modulate(self.norm1(h), m[0], m[1])

    def qkv(self, h: torch.Tensor, c: torch.Tensor):
        """q, k, v of the given tokens and the state ``finish`` needs."""
        m = self.mod(c)
        q, k, v = self._qkv(h, m)
        return q, k, v, m

    def finish(self, h: torch.Tensor, c: torch.Tensor, attn_out: torch.Tensor, state) -> torch.Tensor:
        """Out-projection, gated residual, (temporal attention,) MLP for the given tokens."""
        return self._rest(h, state, self._spatial_delta(attn_out, h, state), None)[0]

    def forward(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        q, k, v, state = self.qkv(h, c)
        return self.finish(h, c, attend(q, k, v), state)

    def forward_parts(self, h: torch.Tensor, c: torch.Tensor, spatial: torch.Tensor | None = None,
                      temporal: torch.Tensor | None = None):
        """forward that returns (or reuses, when given) the gated attention increments."""
        m = self.mod(c)
        if spatial is None:
            q, k, v = self._qkv(h, m)
            spatial = self._spatial_delta(attend(q, k, v), h, m)
        out, temporal = self._rest(h, m, spatial, temporal)
        return out, spatial, temporal


class DiT(nn.Module):
    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.cfg = cfg.check()
        d, p, ch = cfg.d, cfg.patch, cfg.channels
        self.patch_embed = nn.Linear(ch * p * p, d)
        self.t_embed = TimestepEmbed(d)
        self.y_embed = nn.Embedding(cfg.num_classes + 1, d)
        self.blocks = nn.ModuleList(DiTBlock(cfg) for _ in range(cfg.depth))
        self.norm_f = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.ada_f = nn.Sequential(nn.SiLU(), nn.Linear(d, 2 * d))
        self.out = nn.Linear(d, ch * p * p)
        for z in (self.ada_f[1].weight, self.ada_f[1].bias, self.out.weight, self.out.bias):
            nn.init.zeros_(z)
        self._pos: dict[tuple[int, int, str], torch.Tensor] = {}

    @property
    def null_class(self) -> int:
        return self.cfg.num_classes

    def _pos_embed(self, grid: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """The fixed position table for a ``grid`` x ``grid`` (x frames) input, cached per device."""
        key = (grid, self.cfg.frames, str(device))
        if key not in self._pos:
            self._pos[key] = pos_embed(self.cfg.d, grid, self.cfg.frames, self.cfg.img_size // self.cfg.patch).to(device)
        return self._pos[key]

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        """[B, (F,) C, H, W] -> [B, N, C*p*p]."""
        p = self.cfg.patch
        if x.dim() == 4:
            x = x.unsqueeze(1)
        b, f, ch, hh, ww = x.shape
        x = x.reshape(b, f, ch, hh // p, p, ww // p, p).permute(0, 1, 3, 5, 2, 4, 6)
        return x.reshape(b, f * (hh // p) * (ww // p), ch * p * p)

    def unpatchify(self, tok: torch.Tensor, size: int) -> torch.Tensor:
        p, ch, f = self.cfg.patch, self.cfg.channels, self.cfg.frames
        g = size // p
        b = tok.shape[0]
        x = tok.reshape(b, f, g, g, ch, p, p).permute(0, 1, 4, 2, 5, 3, 6).reshape(b, f, ch, size, size)
        return x[:, 0] if f == 1 else x

    def embed(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        size = x.shape[-1]
        require(size % self.cfg.patch == 0, "img_size", size, f"a multiple of patch={self.cfg.patch}")
        h = self.patch_embed(self.patchify(x)) + self._pos_embed(size // self.cfg.patch, x.device).to(x.dtype)
        c = self.t_embed(t) + self.y_embed(y)
        return h, c

    def final(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.ada_f(c).chunk(2, dim=1)
        tok = self.out(modulate(self.norm_f(h), shift, scale))
        g2 = tok.shape[1] // self.cfg.frames
        return self.unpatchify(tok, int(round(math.sqrt(g2))) * self.cfg.patch)

    def run_blocks(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            h = blk(h, c)
        return h

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h, c = self.embed(x, t, y)
        return self.final(self.run_blocks(h, c), c)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
