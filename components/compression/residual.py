"""Residual compression with error feedback for streams that change a little at every step.

A *stream* is one tensor sent again and again (CompactFusion: the K or V of one layer, one source
rank and one CFG branch at every denoising step). Sender and receiver each keep a **base** ``b``:

- warm-up (the first ``warmup`` sends): ``x`` goes uncompressed (``warmup_codec``); both set ``b``
  to what the receiver decoded;
- then ``c = Q(x - b)``, the receiver rebuilds ``x_hat = b + Q^-1(c)`` and sets ``b <- x_hat``.
  With error feedback the sender runs the same decode and sets ``b <- x_hat`` too, so this step's
  quantisation error is part of the next residual and is corrected there; without it (``ef=False``,
  the ablation) the sender keeps ``b <- x`` and the two bases drift apart;
- ``order=0`` (naive) compresses ``x`` itself and keeps no base.

Matrix codecs take ``[S, N, C]`` float32 (S independent streams of N tokens x C channels) to one
``uint8`` payload; bytes are what the payload holds. ``fp32`` / ``int8`` / ``sign`` are the shared
packed codecs of :mod:`components.compression.torch_codecs` on each token's C values (one bucket
per token); ``binary`` and ``int2`` are CompactFusion's: signs (or 2-bit levels) packed with
:func:`pack_bits` and a scale per (token, channel) from fp16 factors computed in fp32 (``rank1``:
``s[n, c] = m_c * u_n`` with ``m_c`` the channel's mean |x| and ``u_n`` the token's mean |x| over
the mean of those; ``channel``: ``m_c`` alone); ``lowrank`` is ``x ~ U V`` of rank ``r`` from
subspace iteration, U and V sent in fp16.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from components.compression.torch_codecs import TorchAbsmax, TorchCodec, TorchScaledSign, pack_bits, unpack_bits
from components.core.errors import require
from components.core.registry import add

_F16_MAX = 65504.0


def _f16(t: torch.Tensor) -> torch.Tensor:
    """fp32 -> fp16 without overflow (scales are computed in fp32, then cast)."""
    return t.clamp(-_F16_MAX, _F16_MAX).to(torch.float16)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _split(payload: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    out, at = [], 0
    for n in sizes:
        out.append(payload[at:at + n])
        at += n
    return out


class MatrixCodec:
    """``encode([S, N, C] fp32) -> uint8 payload``; ``decode(payload, shape) -> fp32``."""

    name = "?"
    lossless = False

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # abstract: every codec below implements it

    def decode(self, payload: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
        raise NotImplementedError  # abstract

    def payload_bytes(self, shape: tuple[int, int, int]) -> int:
        """Bytes of one payload of ``shape`` (exact; tests check it against encode)."""
        raise NotImplementedError  # abstract

    def roundtrip(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        p = self.encode(x)
        return self.decode(p, tuple(x.shape)), int(p.numel())


class _PerToken(MatrixCodec):
    """A shared 1-D torch codec on the flattened matrix with one bucket per token (C values)."""

    def __init__(self, make):
        self.make = make

    def encode(self, x):
        return self.make(x.shape[-1]).encode(x.reshape(-1))

    def decode(self, payload, shape):
        return self.make(shape[-1]).decode(payload, math.prod(shape)).reshape(shape)

    def payload_bytes(self, shape):
        return self.make(shape[-1]).payload_bytes(math.prod(shape))


class Fp32(_PerToken):
    name, lossless = "fp32", True

    def __init__(self):
        super().__init__(lambda c: TorchCodec())


class Int8(_PerToken):
    name = "int8"

    def __init__(self):
        super().__init__(lambda c: TorchAbsmax(8, c))


class Sign(_PerToken):
    name = "sign"

    def __init__(self):
        super().__init__(lambda c: TorchScaledSign(c))


class Fp16(MatrixCodec):
    name = "fp16"

    def encode(self, x):
        return _bytes(_f16(x)).clone()

    def decode(self, payload, shape):
        return payload.view(torch.float16).to(torch.float32).reshape(shape)

    def payload_bytes(self, shape):
        return 2 * math.prod(shape)


class _Scaled(MatrixCodec):
    """Codes times a per-(token, channel) magnitude from fp16 factors (CompactFusion's scale)."""

    bits = 1

    def __init__(self, scale: str = "rank1"):
        require(scale in ("rank1", "channel"), "scale", scale, "rank1 or channel")
        self.scale = scale

    def _factors(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x.abs()
        m = _f16(a.mean(dim=1))                                       # [S, C] channel mean |x|
        if self.scale == "channel":
            return m, torch.empty(0, dtype=torch.float16, device=x.device)
        tok = a.mean(dim=2)                                           # [S, N] token mean |x|
        mean = tok.mean(dim=1, keepdim=True)
        u = torch.where(mean > 0, tok / torch.where(mean > 0, mean, torch.ones_like(mean)), torch.zeros_like(tok))
        return m, _f16(u)

    @staticmethod
    def _magnitude(m: torch.Tensor, u: torch.Tensor, shape) -> torch.Tensor:
        s = m.to(torch.float32).view(shape[0], 1, shape[2])
        return s if u.numel() == 0 else s * u.to(torch.float32).view(shape[0], shape[1], 1)

    def _sizes(self, shape) -> list[int]:
        S, N, C = shape
        return [math.ceil(S * N * C * self.bits / 8), 2 * S * C, 2 * S * N if self.scale == "rank1" else 0]

    def payload_bytes(self, shape):
        return sum(self._sizes(shape))

    def _codes(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # abstract

    def _levels(self, codes: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # abstract

    def encode(self, x):
        m, u = self._factors(x)
        s = self._magnitude(m, u, tuple(x.shape))
        return torch.cat([pack_bits(self._codes(x, s).reshape(-1), self.bits), _bytes(m), _bytes(u)])

    def decode(self, payload, shape):
        codes, m, u = _split(payload, self._sizes(shape))
        S, N, C = shape
        m = m.clone().view(torch.float16)
        u = u.clone().view(torch.float16)
        s = self._magnitude(m, u, shape)
        return self._levels(unpack_bits(codes, self.bits, S * N * C).view(S, N, C), s)


class Binary(_Scaled):
    """1 bit: sign (0 counts as +) times the scale."""

    name, bits = "binary", 1

    def _codes(self, x, s):
        return (x >= 0).to(torch.int32)

    def _levels(self, codes, s):
        return (codes.to(torch.float32) * 2 - 1) * s


class Int2(_Scaled):
    """2 bits: levels {-2s, -s/2, +s/2, +2s}, thresholds at 0 and +-s (CompactFusion's INT2)."""

    name, bits = "int2", 2
    _LEVELS = torch.tensor([-2.0, -0.5, 0.5, 2.0])

    def _codes(self, x, s):
        return torch.where(x >= 0, torch.where(x > s, 3, 2), torch.where(x < -s, 0, 1)).to(torch.int32)

    def _levels(self, codes, s):
        return self._LEVELS.to(codes.device)[codes.long()] * s


class LowRank(MatrixCodec):
    """``x ~ U V`` of rank ``r`` (subspace iteration from a fixed start), U and V in fp16."""

    name = "lowrank"

    def __init__(self, rank: int = 8, iters: int = 2):
        require(isinstance(rank, int) and rank >= 1, "rank", rank, "a positive integer")
        require(isinstance(iters, int) and iters >= 1, "iters", iters, "a positive integer")
        self.rank, self.iters = rank, iters

    def _r(self, shape) -> int:
        return min(self.rank, shape[1], shape[2])

    def encode(self, x):
        S, N, C = x.shape
        r = self._r(x.shape)
        g = torch.Generator().manual_seed(1234)
        q = torch.linalg.qr(x @ torch.randn(S, C, r, generator=g).to(x.device))[0]       # [S, N, r]
        for _ in range(self.iters):
            q = torch.linalg.qr(x @ (x.transpose(1, 2) @ q))[0]
        v = q.transpose(1, 2) @ x                                                        # [S, r, C]
        return torch.cat([_bytes(_f16(q)), _bytes(_f16(v))])

    def decode(self, payload, shape):
        S, N, C = shape
        r = self._r(shape)
        q, v = _split(payload, [2 * S * N * r, 2 * S * r * C])
        q = q.clone().view(torch.float16).to(torch.float32).view(S, N, r)
        v = v.clone().view(torch.float16).to(torch.float32).view(S, r, C)
        return q @ v

    def payload_bytes(self, shape):
        S, N, C = shape
        return 2 * S * self._r(shape) * (N + C)


CODECS = {"fp32": Fp32, "fp16": Fp16, "int8": Int8, "sign": Sign, "binary": Binary, "int2": Int2,
          "lowrank": LowRank}
_SUMMARIES = {"fp32": "fp32, lossless", "fp16": "fp16 cast (the synchronous baseline's wire format)",
              "int8": "8-bit absmax per token", "sign": "scaled sign per token (1 bit + one scale per token)",
              "binary": "CompactFusion 1-bit: sign times a rank-1 (token x channel) or per-channel fp16 scale",
              "int2": "CompactFusion INT2: levels {-2s, -s/2, +s/2, +2s} around the same scale",
              "lowrank": "CompactFusion low-rank: rank-r factors of the matrix, fp16"}
for _name, _cls in CODECS.items():     # listed by `dtlab list matrix_codec`
    add("matrix_codec", _name, _cls, _SUMMARIES[_name])


def make_matrix_codec(name: str, key: str = "codec", **kw) -> MatrixCodec:
    """A codec by name (one ConfigError naming the known ones for an unknown name)."""
    require(name in CODECS, key, name, "one of " + ", ".join(CODECS))
    return CODECS[name](**kw)


@dataclass(frozen=True)
class StreamSpec:
    """How a stream travels: codec, residual ``order`` (0 naive, 1 residual), EF, warm-up sends."""

    codec: str = "binary"
    order: int = 1
    ef: bool = True
    warmup: int = 1
    warmup_codec: str = "fp16"
    rank: int = 8                 # lowrank only
    scale: str = "rank1"          # binary / int2 only

    def check(self, key: str = "") -> "StreamSpec":
        pre = f"{key}." if key else ""
        require(self.codec in CODECS, f"{pre}codec", self.codec, "one of " + ", ".join(CODECS))
        require(self.warmup_codec in CODECS, f"{pre}warmup_codec", self.warmup_codec, "one of " + ", ".join(CODECS))
        require(self.order in (0, 1), f"{pre}order", self.order, "0 (compress x itself) or 1 (residual)")
        require(isinstance(self.warmup, int) and self.warmup >= 0, f"{pre}warmup", self.warmup,
                "a non-negative integer (uncompressed first sends)")
        require(self.order == 0 or self.warmup >= 1, f"{pre}warmup", self.warmup,
                ">= 1 for a residual stream (the bases start from an uncompressed send)")
        require(isinstance(self.rank, int) and self.rank >= 1, f"{pre}rank", self.rank, "a positive integer")
        require(self.scale in ("rank1", "channel"), f"{pre}scale", self.scale, "rank1 or channel")
        return self

    def codecs(self) -> tuple[MatrixCodec, MatrixCodec]:
        kw = {"lowrank": {"rank": self.rank}, "binary": {"scale": self.scale}, "int2": {"scale": self.scale}}
        return make_matrix_codec(self.codec, **kw.get(self.codec, {})), make_matrix_codec(self.warmup_codec)


@dataclass
class Message:
    """One send: ``mode`` raw (warm-up) / res (residual) / naive, the payload, the tensor shape."""

    mode: str
    payload: torch.Tensor
    shape: tuple[int, int, int]

    @property
    def nbytes(self) -> int:
        return int(self.payload.numel())


class ResidualSender:
    """The sending side of one stream; ``base`` is what it believes the receiver holds."""

    def __init__(self, spec: StreamSpec):
        self.spec = spec
        self.codec, self.warm = spec.codecs()
        self.base: torch.Tensor | None = None
        self.sent = 0

    def send(self, x: torch.Tensor) -> Message:
        shape = tuple(x.shape)
        sp = self.spec
        if self.sent < sp.warmup:
            p = self.warm.encode(x)
            msg = Message("raw", p, shape)
            if sp.order == 1:
                self.base = self.warm.decode(p, shape) if sp.ef else x.clone()
        elif sp.order == 0:
            msg = Message("naive", self.codec.encode(x), shape)
        else:
            p = self.codec.encode(x - self.base)
            msg = Message("res", p, shape)
            self.base = self.base + self.codec.decode(p, shape) if sp.ef else x.clone()
        self.sent += 1
        return msg


class ResidualReceiver:
    """The receiving side of one stream: rebuilds x_hat and keeps its base."""

    def __init__(self, spec: StreamSpec):
        self.spec = spec
        self.codec, self.warm = spec.codecs()
        self.base: torch.Tensor | None = None

    def receive(self, msg: Message) -> torch.Tensor:
        if msg.mode == "raw":
            x = self.warm.decode(msg.payload, msg.shape)
            if self.spec.order == 1:
                self.base = x
            return x
        if msg.mode == "naive":
            return self.codec.decode(msg.payload, msg.shape)
        self.base = self.base + self.codec.decode(msg.payload, msg.shape)
        return self.base
