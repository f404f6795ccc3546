"""The public einsum: one opt_einsum path, pairwise steps in dense (torch), COO (numpy) or hybrid.

Hybrid rule (one-way switch, dense -> COO):
- before a dense step, if its output would exceed the memory cap, switch (reason ``cap``);
- after a dense step, if the size-weighted density of ALL remaining tensors
  (sum nnz / sum numel over intermediates and untouched inputs) is below ``tau``, switch
  (reason ``density``). Switching converts every remaining tensor to COO; it never switches back.
``tau`` defaults to the value calibrated on this machine (``calibrate.py``), else 1e-2.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from components.algorithms.hybrid_einsum.coo import COO, MemoryCapExceeded, pair, unary
from components.algorithms.hybrid_einsum.expression import Plan, check_operands, plan, step_keep
from components.core.errors import require

REPRESENTATIONS = ("hybrid", "dense", "coo")
DEFAULT_TAU = 1e-2
DEFAULT_CAP = 4 * 2 ** 30          # bytes of one intermediate
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class Step:
    step: int
    representation: str               # representation the step ran in
    numel: float                      # entries of the dense intermediate (product of kept dims)
    nnz: int
    density: float                    # nnz / numel of this intermediate
    remaining_density: float          # size-weighted density of all tensors left after the step
    nbytes: float                     # bytes actually held (dense numel*8, COO nnz*(8+8*ndim))
    seconds: float


@dataclass
class EinsumRun:
    result: object                    # numpy array (dense) or COO
    trace: list[Step] = field(default_factory=list)
    switched_at: int | None = None    # index of the first COO step of a hybrid run
    switch_reason: str | None = None  # 'density' | 'cap'
    seconds: float = 0.0

    @property
    def peak_bytes(self) -> float:
        return max((s.nbytes for s in self.trace), default=0.0)

    def densities(self) -> tuple[float, float]:
        """(min, avg) intermediate density, avg = sum nnz / sum numel (the benchmark's definition)."""
        if not self.trace:
            return math.nan, math.nan
        return (min(s.density for s in self.trace),
                sum(s.nnz for s in self.trace) / max(sum(s.numel for s in self.trace), 1.0))


def _dense_pair(ops: list, terms: list[tuple[int, ...]], keep: tuple[int, ...]):
    labels = list(dict.fromkeys([i for t in terms for i in t] + list(keep)))
    require(len(labels) <= 52, "expr", f"{len(labels)} indices in one step", "at most 52 indices per pairwise step")
    m = {lab: _LETTERS[j] for j, lab in enumerate(labels)}
    sub = ",".join("".join(m[i] for i in t) for t in terms) + "->" + "".join(m[i] for i in keep)
    return torch.einsum(sub, *ops)


def _numel(keep, sizes) -> float:
    return float(np.prod([float(sizes[i]) for i in keep])) if keep else 1.0


def contract(p: Plan, arrays: list[np.ndarray], representation: str = "hybrid", tau: float | None = None,
             memory_cap_bytes: float = DEFAULT_CAP, output: Literal["dense", "coo"] = "dense",
             measure_density: bool = True) -> EinsumRun:
    """Run a planned contraction; raises MemoryCapExceeded when a dense (or COO) intermediate passes the cap.

    ``measure_density=False`` skips counting non-zeros after static dense steps (timing runs); the
    hybrid always counts, since its rule needs the counts."""
    measure_density = measure_density or representation == "hybrid"
    require(representation in REPRESENTATIONS, "representation", representation, "one of hybrid, dense, coo")
    require(output in ("dense", "coo"), "output", output, "'dense' or 'coo'")
    tau = DEFAULT_TAU if tau is None else float(tau)
    require(0 <= tau <= 1, "tau", tau, "a density threshold in [0, 1]")
    require(memory_cap_bytes > 0, "memory_cap_bytes", memory_cap_bytes, "a positive number of bytes")
    ex = p.expr
    sizes = ex.sizes
    t0 = time.perf_counter()
    terms = list(ex.terms)
    mode = "coo" if representation == "coo" else "dense"
    if mode == "dense":
        ops: list = [torch.from_numpy(np.asarray(a, order="C")) for a in arrays]
        nnz = [int(np.count_nonzero(a)) for a in arrays] if (measure_density or representation == "hybrid") \
            else [-1] * len(arrays)
    else:
        ops = [COO.from_dense(a) for a in arrays]
        nnz = [o.nnz for o in ops]
    numel = [float(a.size) for a in arrays]
    run = EinsumRun(None)
    for s, picked in enumerate(p.path):
        ts = time.perf_counter()
        keep = step_keep(terms, picked, ex.output)
        if len(terms) == len(picked):      # last step: straight to the output labels
            keep = ex.output
        out_numel = _numel(keep, sizes)
        if mode == "dense" and out_numel * 8 > memory_cap_bytes:
            if representation == "dense":
                raise MemoryCapExceeded("dense", s, out_numel * 8, memory_cap_bytes)
            mode = "coo"
            run.switched_at, run.switch_reason = s, "cap"
            ops = [COO.from_dense(o) for o in ops]
        sel = [ops[i] for i in picked]
        sel_t = [terms[i] for i in picked]
        if mode == "dense":
            new = _dense_pair(sel, sel_t, keep)
            new_nnz = int(torch.count_nonzero(new)) if measure_density else -1
            nbytes = out_numel * new.element_size()
        else:
            if len(sel) == 1:
                new = unary(sel[0], sel_t[0], keep, sizes)
            else:
                new = pair(sel[0], sel_t[0], sel[1], sel_t[1], keep, sizes, memory_cap_bytes, s)
                for extra, et in zip(sel[2:], sel_t[2:]):     # opt_einsum may pick >2 operands (rare)
                    new = pair(new, keep, extra, et, keep, sizes, memory_cap_bytes, s)
            if new.nbytes > memory_cap_bytes:
                raise MemoryCapExceeded("coo", s, new.nbytes, memory_cap_bytes)
            new_nnz = new.nnz
            nbytes = float(new.nbytes)
        for i in sorted(picked, reverse=True):
            del ops[i], terms[i], nnz[i], numel[i]
        ops.append(new)
        terms.append(keep)
        nnz.append(new_nnz)
        numel.append(out_numel)
        rem = sum(nnz) / max(sum(numel), 1.0)
        run.trace.append(Step(s, mode, out_numel, new_nnz, new_nnz / out_numel, rem, nbytes, time.perf_counter() - ts))
        if representation == "hybrid" and mode == "dense" and s < len(p.path) - 1 and rem < tau:
            mode = "coo"
            run.switched_at, run.switch_reason = s + 1, "density"
            ops = [COO.from_dense(o) for o in ops]
    final, ft = ops[-1], terms[-1]
    if ft != ex.output:                     # e.g. a single-operand expression whose path did not reorder
        final = unary(final, ft, ex.output, sizes) if isinstance(final, COO) else _dense_pair([final], [ft], ex.output)
    if output == "coo":
        run.result = final if isinstance(final, COO) else COO.from_dense(final)
    else:
        if isinstance(final, COO):
            need = _numel(ex.output, sizes) * final.values.itemsize
            if need > memory_cap_bytes:
                raise MemoryCapExceeded(mode, len(p.path), need, memory_cap_bytes)
            run.result = final.todense()
        else:
            run.result = final.numpy()
    run.seconds = time.perf_counter() - t0
    return run


def einsum(expr: str, *tensors, representation: Literal["hybrid", "dense", "coo"] = "hybrid",
           output: Literal["dense", "coo"] = "dense", tau: float | None = None,
           memory_cap_bytes: float = DEFAULT_CAP, optimize: str = "greedy", return_trace: bool = False):
    """Evaluate ``expr`` on ``tensors`` (numpy arrays or torch tensors) along one opt_einsum path.

    representation: ``dense`` (torch pairwise steps), ``coo`` (numpy join + group-by) or ``hybrid``
    (dense, switching one way to COO when the remaining tensors get sparse, see the module docstring).
    output: ``dense`` returns a numpy array, ``coo`` a :class:`COO`. With ``return_trace=True``
    returns ``(result, EinsumRun)``; the run holds the per-step density trace and the switch point.
    Raises ConfigError on a malformed expression or mismatched shapes, and
    MemoryCapExceeded when an intermediate would pass ``memory_cap_bytes``.
    """
    arrays = check_operands(tensors)
    p = plan(expr, [a.shape for a in arrays], optimize)
    run = contract(p, arrays, representation, tau, memory_cap_bytes, output)
    return (run.result, run) if return_trace else run.result
