"""What crosses a pipeline boundary: one codec object per boundary, the same interface for all.

Forward, the sender maps its output ``y`` (B, T, d) to a tensor ``t = pre(y)`` and sends
``encode(t)`` (one ``uint8`` payload: its real bytes are what the link is charged); the receiver
decodes ``t_hat``, makes it a leaf that requires grad, and continues from ``x = post(t_hat)``.
Backward, the receiver sends ``encode_grad(t_hat.grad)`` and the sender calls
``t.backward(decode_grad(...))``. So autograd carries the gradient of exactly what was sent.

- ``fp32`` / ``bf16`` / ``int8``: ``t = y``; values as float32, bfloat16, or int8 absmax per token
  (``make_torch_codec(8, bucket=d)``); gradients the same way.
- ``topk``: ``t = y``; each token keeps its ``topk_keep`` largest |values| with their indices
  (:class:`~components.compression.torch_topk.TorchRowTopK`); gradients top-k'd with their own indices.
- ``naive``: ``t = y U`` (k values), ``x = t U^T``: a fixed projection of an unconstrained model (lossy).
- ``ssn``: ``t = (y - T_fix[tok]) U`` (k values) plus the token ids, ``x = t U^T + T_fix[tok]``:
  exact for the subspace-constrained model; the gradient ``dL/dt = (dL/dx) U`` is k values too.
"""
from __future__ import annotations

import math

import torch

from components.compression.torch_codecs import make_torch_codec
from components.compression.torch_topk import TorchRowTopK

CODECS = ("fp32", "bf16", "int8", "topk", "naive", "ssn")


class _Values:
    """float32 / bfloat16 bytes of a tensor, and back (shape given by the receiver)."""

    def __init__(self, dtype: str):
        self.dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]

    def encode(self, t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(self.dtype).contiguous().reshape(-1).view(torch.uint8)

    def decode(self, payload: torch.Tensor, shape) -> torch.Tensor:
        return payload.clone().view(self.dtype).to(torch.float32).view(shape)


class _Int8:
    def __init__(self, width: int):
        self.codec, self.width = make_torch_codec(8, bucket=width), width

    def encode(self, t):
        return self.codec.encode(t.detach().reshape(-1))

    def decode(self, payload, shape):
        return self.codec.decode(payload, math.prod(shape)).view(shape)


class _TopK:
    def __init__(self, keep: int, width: int, values: str):
        self.codec = TorchRowTopK(keep, width, values)

    def encode(self, t):
        return self.codec.encode(t)

    def decode(self, payload, shape):
        return self.codec.decode(payload, math.prod(shape[:-1])).view(shape)


class BoundaryCodec:
    """One stage boundary's codec; ``basis`` (d x k) and ``table`` (V x d) are the fixed constants."""

    def __init__(self, name: str, d: int, basis: torch.Tensor | None = None, table: torch.Tensor | None = None,
                 topk_keep: int = 4, wire_dtype: str = "fp32", vocab: int = 256):
        if name not in CODECS:
            raise ValueError(f"unknown boundary codec {name!r}; known: {', '.join(CODECS)}")
        self.name, self.d, self.basis, self.table = name, d, basis, table
        self.width = basis.shape[1] if name in ("naive", "ssn") else d
        if name == "int8":
            self.values = _Int8(d)
        elif name == "topk":
            self.values = _TopK(topk_keep, d, wire_dtype)
        else:
            self.values = _Values("bf16" if name == "bf16" else wire_dtype if name in ("naive", "ssn") else "fp32")
        self.tok_dtype = torch.uint8 if vocab <= 256 else torch.int16
        if name == "ssn" and table is None:
            raise ValueError("the ssn codec needs the fixed token table")

    def to(self, device) -> "BoundaryCodec":
        """The fixed constants on ``device``, in place (as ``nn.Module.to``): the payloads are made and read
        where the stage runs; the value codecs hold no tensors of their own."""
        self.basis = None if self.basis is None else self.basis.to(device)
        self.table = None if self.table is None else self.table.to(device)
        return self

    # --- forward -----------------------------------------------------------------------------
    def pre(self, y: torch.Tensor, tok: torch.Tensor | None) -> torch.Tensor:
        if self.name == "naive":
            return y @ self.basis
        if self.name == "ssn":
            return (y - self.table[tok]) @ self.basis
        return y

    def post(self, t_hat: torch.Tensor, tok: torch.Tensor | None) -> torch.Tensor:
        if self.name == "naive":
            return t_hat @ self.basis.T
        if self.name == "ssn":
            return t_hat @ self.basis.T + self.table[tok]
        return t_hat

    def encode(self, t: torch.Tensor, tok: torch.Tensor | None) -> torch.Tensor:
        """The forward payload: the coded values (and, for SSN, the token ids)."""
        p = self.values.encode(t)
        if self.name == "ssn":
            p = torch.cat([p, tok.to(self.tok_dtype).reshape(-1).view(torch.uint8)])
        return p

    def decode(self, payload: torch.Tensor, shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(t_hat, token ids or None) from a forward payload; ``shape`` = (B, T)."""
        tok = None
        if self.name == "ssn":
            nt = math.prod(shape) * self.tok_dtype.itemsize
            tok = payload[-nt:].clone().view(self.tok_dtype).to(torch.int64).view(shape)
            payload = payload[:-nt]
        return self.values.decode(payload, (*shape, self.width)), tok

    # --- backward ----------------------------------------------------------------------------
    def encode_grad(self, g: torch.Tensor) -> torch.Tensor:
        return self.values.encode(g)

    def decode_grad(self, payload: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
        return self.values.decode(payload, (*shape, self.width))

    def roundtrip(self, y: torch.Tensor, tok: torch.Tensor | None) -> tuple[torch.Tensor, int]:
        """What the receiver rebuilds from ``y`` and the forward payload's bytes (no autograd)."""
        with torch.no_grad():
            p = self.encode(self.pre(y, tok), tok)
            t_hat, tok2 = self.decode(p, tuple(y.shape[:2]))
            return self.post(t_hat, tok2 if tok2 is not None else tok), int(p.numel())
