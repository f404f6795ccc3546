"""Row-wise top-k on torch tensors with the real wire payload: values plus their indices.

Pipeline boundaries send one activation (or activation-gradient) row per token; this keeps the
``keep`` largest-magnitude coordinates of every row (:class:`~components.compression.sparsifiers.RowTopK`,
torch backend: the same codec as the numpy ``top_k``) and packs them as one ``uint8`` payload:
the values (float32 or bfloat16 bytes) then the column indices (uint8 when the row has at most
256 columns, else int16). The payload's length is exactly :meth:`TorchRowTopK.payload_bytes`.
"""
from __future__ import annotations

import torch

from components.compression.sparsifiers import RowTopK, sparse_wire_bits
from components.core.errors import require

_VALUE_BYTES = {"fp32": 4, "bf16": 2}
_VALUE_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16}


class TorchRowTopK:
    """Keep the ``keep`` largest |x| of each row of a (rows, width) tensor; decode to a dense tensor."""

    def __init__(self, keep: int, width: int, values: str = "fp32"):
        require(isinstance(width, int) and width >= 1, "width", width, "a positive integer")
        require(isinstance(keep, int) and 1 <= keep <= width, "keep", keep, f"an integer in [1, {width}]")
        require(values in _VALUE_BYTES, "values", values, "fp32 or bf16")
        self.keep, self.width, self.values = keep, width, values
        self.index_dtype = torch.uint8 if width <= 256 else torch.int16
        require(width <= 2 ** 15, "width", width, "at most 32768 columns (int16 indices)")
        self.codec = RowTopK(keep, "torch")

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        vals, idx = self.codec.encode(x.detach().reshape(-1, self.width).to(torch.float32))
        vals = vals.to(_VALUE_DTYPE[self.values]).contiguous()
        return torch.cat([vals.reshape(-1).view(torch.uint8), idx.to(self.index_dtype).reshape(-1).view(torch.uint8)])

    def decode(self, payload: torch.Tensor, rows: int) -> torch.Tensor:
        """The dense (rows, width) float32 tensor: kept values at their columns, zeros elsewhere."""
        nv = rows * self.keep * _VALUE_BYTES[self.values]
        vals = payload[:nv].clone().view(_VALUE_DTYPE[self.values]).to(torch.float32).view(rows, self.keep)
        idx = payload[nv:].clone().view(self.index_dtype).to(torch.int64).view(rows, self.keep)
        return self.codec.decode(vals, idx, self.width)

    def payload_bytes(self, rows: int) -> int:
        return sparse_wire_bits(rows * self.keep, 8 * _VALUE_BYTES[self.values], 8 * self.index_dtype.itemsize) // 8

    def __repr__(self) -> str:
        return f"TorchRowTopK(keep={self.keep}, width={self.width}, values={self.values})"
