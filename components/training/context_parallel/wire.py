"""What one ring hop carries, as real uint8 payloads, in both directions.

A hop carries the *wire variable* of a K or V block: the block itself (``kv: dense``) or its
r coefficients (``randproj`` / ``subspace``, see :mod:`.ring`), encoded by one codec:

- ``fp32``: the float32 bytes (uncompressed, exact);
- ``bf16``: bfloat16 (2 bytes a value);
- ``int8``: symmetric absmax int8 per bucket (``components.compression.torch_codecs``).

The same codec encodes the dK/dV (or dA) accumulators travelling back. The subspace index of
every token (one per token and head, shared by K and V) is packed into ceil(log2 M) bits
rounded up to 1/2/4/8 and counted in the forward payload.
"""
from __future__ import annotations

import math

import torch

from components.compression.torch_codecs import make_torch_codec, pack_bits, unpack_bits
from components.core.errors import require

CODECS = ("fp32", "bf16", "int8")


class Codec:
    """Encode a float tensor to one uint8 payload and back (shape kept by the caller)."""

    name = "fp32"

    def encode(self, w: torch.Tensor) -> torch.Tensor:
        return w.detach().to(torch.float32).contiguous().reshape(-1).view(torch.uint8).clone()

    def decode(self, payload: torch.Tensor, shape) -> torch.Tensor:
        return payload.view(torch.float32).reshape(shape).clone()

    def roundtrip(self, w: torch.Tensor) -> tuple[torch.Tensor, int]:
        """What the receiver decodes, and the payload bytes it cost."""
        p = self.encode(w)
        return self.decode(p, w.shape), int(p.numel())


class Bf16Codec(Codec):
    name = "bf16"

    def encode(self, w):
        return w.detach().to(torch.bfloat16).contiguous().reshape(-1).view(torch.uint8).clone()

    def decode(self, payload, shape):
        return payload.view(torch.bfloat16).to(torch.float32).reshape(shape)


class Int8Codec(Codec):
    """int8 absmax with one float32 scale per ``bucket`` values (the shared torch codec)."""

    name = "int8"

    def __init__(self, bucket: int = 128):
        self.c = make_torch_codec(8, bucket)

    def encode(self, w):
        return self.c.encode(w.detach().to(torch.float32).reshape(-1))

    def decode(self, payload, shape):
        return self.c.decode(payload, math.prod(shape)).reshape(shape)


def make_codec(name: str, bucket: int = 128, key: str = "codec") -> Codec:
    require(name in CODECS, key, name, "one of " + ", ".join(CODECS))
    return {"fp32": Codec, "bf16": Bf16Codec}[name]() if name != "int8" else Int8Codec(bucket)


def index_bits(M: int) -> int:
    """Bits per subspace index on the wire: 0 for M=1, else ceil(log2 M) rounded up to 1, 2, 4 or 8."""
    if M <= 1:
        return 0
    need = math.ceil(math.log2(M))
    return next(b for b in (1, 2, 4, 8) if b >= need)


def encode_index(idx: torch.Tensor, M: int) -> torch.Tensor:
    bits = index_bits(M)
    if bits == 0:
        return torch.empty(0, dtype=torch.uint8, device=idx.device)
    return pack_bits(idx.reshape(-1).to(torch.int32), bits)


def decode_index(payload: torch.Tensor, M: int, shape) -> torch.Tensor:
    bits = index_bits(M)
    if bits == 0:
        return torch.zeros(shape, dtype=torch.long, device=payload.device)
    return unpack_bits(payload, bits, math.prod(shape)).reshape(shape).to(torch.long)
