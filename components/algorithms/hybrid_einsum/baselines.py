"""The einsum implementations users would reach for, run on the same instances.

- ``numpy_oe``: ``opt_einsum.contract`` with the numpy backend and OUR path (numpy.einsum/tensordot per pair);
- ``torch_einsum``: plain ``torch.einsum`` (torch computes its own path via opt_einsum; <= 52 indices);
- ``pydata_sparse``: ``opt_einsum.contract(backend="sparse")`` on pydata ``sparse.COO`` operands with
  our path. Its tensordot linearises the indices of each operand into a 2-d CSR matrix, so a step
  whose index space passes 2^31 entries is skipped (it allocates an indptr of that length: the spec
  sheet saw MemoryError at GRID-EQ(28)); reported as status ``skipped``.
All three honour the dense memory cap: a path whose largest dense intermediate passes the cap is
reported ``exceeded`` (numpy/torch) without running.
"""
from __future__ import annotations

import numpy as np
import torch

from components.algorithms.hybrid_einsum.coo import MemoryCapExceeded
from components.algorithms.hybrid_einsum.expression import Plan

LIBRARIES = ("numpy_oe", "torch_einsum", "pydata_sparse")


class Unsupported(RuntimeError):
    """The library cannot run this instance (index-letter limit, index space too large)."""


def _largest_step_space(p: Plan) -> float:
    """Largest product of all index sizes touched by one pairwise step (pydata's linearised space)."""
    terms = list(p.expr.terms)
    worst = 1.0
    from components.algorithms.hybrid_einsum.expression import step_keep

    for picked in p.path:
        labs = set()
        for i in picked:
            labs.update(terms[i])
        worst = max(worst, float(np.prod([float(p.expr.sizes[i]) for i in labs])))
        keep = step_keep(terms, picked, p.expr.output)
        for i in sorted(picked, reverse=True):
            del terms[i]
        terms.append(keep)
    return worst


def run_library(name: str, p: Plan, arrays: list[np.ndarray], memory_cap_bytes: float):
    """Evaluate the planned expression with one library; returns a dense numpy result."""
    import opt_einsum as oe

    expr = p.expr.canonical()
    if name in ("numpy_oe", "torch_einsum") and p.largest_intermediate * 8 > memory_cap_bytes:
        raise MemoryCapExceeded(name, -1, p.largest_intermediate * 8, memory_cap_bytes)
    if name == "numpy_oe":
        return np.asarray(oe.contract(expr, *arrays, optimize=p.path, backend="numpy"))
    if name == "torch_einsum":
        labels = {ch for ch in expr if ch not in ",->"}
        if len(labels) > 52:
            raise Unsupported(f"torch.einsum takes at most 52 index letters ({len(labels)} here)")
        letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
        m = {ch: letters[i] for i, ch in enumerate(sorted(labels))}
        sub = "".join(m.get(ch, ch) for ch in expr)
        return torch.einsum(sub, *[torch.from_numpy(a) for a in arrays]).numpy()
    if name == "pydata_sparse":
        import sparse

        if _largest_step_space(p) > 2 ** 31:
            raise Unsupported("a pairwise step's index space passes 2^31 (pydata's CSR indptr would not fit)")
        ops = [sparse.COO.from_numpy(a) for a in arrays]
        out = oe.contract(expr, *ops, optimize=p.path, backend="sparse")
        return out.todense() if hasattr(out, "todense") else np.asarray(out)
    raise ValueError(f"unknown library {name!r}; known: {', '.join(LIBRARIES)}")
