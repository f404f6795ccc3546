"""Bucketed gradient codecs on torch tensors that produce the real packed wire payload.

The numpy codecs in :mod:`components.compression.quantizers` give the decoded vector and a bit
count; a DDP communication hook must put actual bytes on a gloo collective, so these encode a flat
float tensor to one ``uint8`` payload (packed codes, then one float32 scale per bucket) and decode
it back. Bit accounting follows the numpy convention: ``bits`` per coordinate plus one 32-bit scale
per bucket; the payload only rounds the packed codes up to whole bytes.

``make_torch_codec(bits, bucket)``: 32 = no compression (float32), 8/4/2 = symmetric absmax per
bucket (round to nearest), 1 = sign times the bucket's mean |g| (zeros go to +), 0 = nothing sent.
Each codec is registered as kind ``torch_codec`` (``dtlab list torch_codec``); configs pick one by bits.
"""
from __future__ import annotations

import math

import torch

from components.core.errors import require
from components.core.registry import register

ALLOWED_BITS = (0, 1, 2, 4, 8)


def _pad_to(t: torch.Tensor, multiple: int) -> torch.Tensor:
    pad = (-t.numel()) % multiple
    return torch.cat([t, t.new_zeros(pad)]) if pad else t


def pack_bits(u: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack unsigned codes ``0 <= u < 2**bits`` (bits in 1, 2, 4, 8) into bytes, little end first."""
    if bits == 8:
        return u.to(torch.uint8)
    per = 8 // bits
    u = _pad_to(u.to(torch.int32), per).view(-1, per)
    shifts = torch.arange(per, dtype=torch.int32, device=u.device) * bits
    return (u << shifts).sum(dim=1).to(torch.uint8)


def unpack_bits(b: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: the first ``n`` codes as int32."""
    if bits == 8:
        return b[:n].to(torch.int32)
    per = 8 // bits
    shifts = torch.arange(per, dtype=torch.int32, device=b.device) * bits
    u = (b.to(torch.int32).unsqueeze(1) >> shifts) & ((1 << bits) - 1)
    return u.reshape(-1)[:n]


@register("torch_codec", "fp32", summary="no compression: the float32 bytes (bits=32)")
class TorchCodec:
    """Encode a 1-D float tensor to a uint8 payload and back; ``payload_bytes(n)`` is exact."""

    bits = 32
    bucket = 0

    def encode(self, g: torch.Tensor) -> torch.Tensor:
        return g.detach().to(torch.float32).contiguous().view(torch.uint8).clone()

    def decode(self, payload: torch.Tensor, n: int) -> torch.Tensor:
        return payload.view(torch.float32)[:n].clone()

    def payload_bytes(self, n: int) -> int:
        return 4 * n

    def wire_bits(self, n: int) -> int:
        """Bits on the wire by the shared convention (codes + 32-bit scales)."""
        return 32 * n

    def roundtrip(self, g: torch.Tensor) -> tuple[torch.Tensor, int]:
        """What the receiver reconstructs, and the payload bytes it cost."""
        p = self.encode(g)
        return self.decode(p, g.numel()), int(p.numel())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bits={self.bits}, bucket={self.bucket})"


@register("torch_codec", "absmax", summary="b-bit symmetric absmax per bucket, packed (bits=8, 4, 2)")
class TorchAbsmax(TorchCodec):
    """b-bit symmetric absmax per bucket: levels ``scale * j / L``, ``|j| <= L = 2**(b-1) - 1``."""

    def __init__(self, bits: int = 4, bucket: int = 128):
        require(bits in (2, 4, 8), "bits", bits, "2, 4 or 8 for the absmax codec")
        require(isinstance(bucket, int) and bucket >= 1, "bucket", bucket, "a positive integer")
        self.bits, self.bucket = bits, bucket
        self.levels = 2 ** (bits - 1) - 1

    def _n_buckets(self, n: int) -> int:
        return math.ceil(n / self.bucket)

    def encode(self, g):
        b = _pad_to(g.detach().to(torch.float32).reshape(-1), self.bucket).view(-1, self.bucket)
        scale = b.abs().amax(dim=1, keepdim=True)
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = torch.round(b / safe * self.levels).to(torch.int32) + self.levels  # 0 .. 2L
        codes = pack_bits(q.reshape(-1), self.bits)
        return torch.cat([codes, scale.reshape(-1).contiguous().view(torch.uint8)])

    def decode(self, payload, n):
        nb = self._n_buckets(n)
        code_bytes = payload.numel() - 4 * nb
        scale = payload[code_bytes:].clone().view(torch.float32).view(-1, 1)
        q = unpack_bits(payload[:code_bytes], self.bits, nb * self.bucket).view(nb, self.bucket) - self.levels
        return (q.to(torch.float32) / self.levels * scale).reshape(-1)[:n]

    def payload_bytes(self, n):
        nb = self._n_buckets(n)
        return math.ceil(nb * self.bucket * self.bits / 8) + 4 * nb

    def wire_bits(self, n):
        return n * self.bits + 32 * self._n_buckets(n)


@register("torch_codec", "sign", summary="1 bit: sign times the bucket's mean |g|, packed (bits=1)")
class TorchScaledSign(TorchCodec):
    """1 bit: sign(g) (0 counts as +) times the mean |g| of its bucket (tail bucket: its real length)."""

    bits = 1

    def __init__(self, bucket: int = 128):
        require(isinstance(bucket, int) and bucket >= 1, "bucket", bucket, "a positive integer")
        self.bucket = bucket

    def _n_buckets(self, n: int) -> int:
        return math.ceil(n / self.bucket)

    def encode(self, g):
        g = g.detach().to(torch.float32).reshape(-1)
        n = g.numel()
        b = _pad_to(g, self.bucket).view(-1, self.bucket)
        counts = torch.full((b.shape[0],), float(self.bucket), device=b.device)
        counts[-1] = n - (b.shape[0] - 1) * self.bucket
        scale = b.abs().sum(dim=1) / counts
        codes = pack_bits((b.reshape(-1) >= 0).to(torch.int32), 1)
        return torch.cat([codes, scale.contiguous().view(torch.uint8)])

    def decode(self, payload, n):
        nb = self._n_buckets(n)
        code_bytes = payload.numel() - 4 * nb
        scale = payload[code_bytes:].clone().view(torch.float32).view(-1, 1)
        s = unpack_bits(payload[:code_bytes], 1, nb * self.bucket).view(nb, self.bucket).to(torch.float32) * 2 - 1
        return (s * scale).reshape(-1)[:n]

    def payload_bytes(self, n):
        nb = self._n_buckets(n)
        return math.ceil(nb * self.bucket / 8) + 4 * nb

    def wire_bits(self, n):
        return n + 32 * self._n_buckets(n)


@register("torch_codec", "zero", summary="sends nothing; the receiver sees zeros (bits=0)")
class TorchZeroBit(TorchCodec):
    """Sends nothing; the receiver sees zeros (DUO-0bit: no tentative update)."""

    bits = 0

    def encode(self, g):
        return torch.empty(0, dtype=torch.uint8, device=g.device)

    def decode(self, payload, n):
        return torch.zeros(n, dtype=torch.float32, device=payload.device)

    def payload_bytes(self, n):
        return 0

    def wire_bits(self, n):
        return 0


def check_codec(bits: int, bucket: int, key: str = "") -> None:
    """ConfigError unless ``bits`` is 32 or in ALLOWED_BITS and ``bucket`` is positive."""
    pre = f"{key}." if key else ""
    require(isinstance(bits, int) and (bits == 32 or bits in ALLOWED_BITS), f"{pre}bits", bits,
            "one of 0, 1, 2, 4, 8 (or 32 = uncompressed)")
    require(isinstance(bucket, int) and bucket >= 1, f"{pre}bucket", bucket, "a positive integer (values per scale)")


def make_torch_codec(bits: int, bucket: int = 128) -> TorchCodec:
    check_codec(bits, bucket)
    if bits == 32:
        return TorchCodec()
    if bits == 0:
        return TorchZeroBit()
    if bits == 1:
        return TorchScaledSign(bucket)
    return TorchAbsmax(bits, bucket)
