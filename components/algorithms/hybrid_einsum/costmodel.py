"""Calibrated cost prediction of pairwise einsum steps, and the density tracker of the hybrid.

Costs (seconds of CPU time on this machine, constants fitted by ``calibrate.fit_cost_model``):
- dense step (torch.einsum on a pair):  ``d0 + d1 * union_small + d2 * (inputs + output) + d3 * union_blas
  + d_big[size bucket of the output] * (inputs + output)`` (the last term for outputs past 2^16 entries),
  where ``union`` is the number of entries of the joint index space of the pair (the multiply-adds),
  counted as ``union_blas`` when the summed-out space per output entry is >= 16 (a matrix-product-like
  step that BLAS runs fast) and as ``union_small`` otherwise, and ``inputs + output`` the entries read
  and written;
- COO step (join + group-by):  ``c0 + c1 * (nnz_a * ndim_a + nnz_b * ndim_b) + c2 * join + c3 * join * ndim_out
  + c4 * join * log2(join)``,
  ``join`` the number of matching pairs;
- dense -> COO conversion of one tensor:  ``v0 + v1 * numel + v2 * nnz * ndim``;
- counting the non-zeros of a dense tensor:  ``k0 + k1 * numel``.

Non-zeros of tensors not yet computed are ESTIMATED under independence: a pair whose operands have
densities ``da``, ``db`` has ``join = nnz_a * nnz_b / |shared index space|`` matching pairs, and summing
``r`` join entries into one output entry leaves it non-zero with probability ``1 - (1 - d)^r``.
Non-zeros of tensors computed but not counted are BOUNDED from above (:func:`nnz_bound`): never more
than the output's entries, nor than the operand's non-zeros times the entries of the indices only the
other operand brings to the output.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass
class CostModel:
    d0: float = 8e-6        # dense step: fixed (s)
    d1: float = 1.0e-9      # per entry of the pair's joint index space (summed-out space per output entry < 16)
    d2: float = 3e-10       # per entry read + written
    d3: float = 4e-11       # per entry of the joint index space, matrix-product-like steps (BLAS)
    # extra per entry read + written for outputs past 2^16 entries, by size bucket (out of cache, DRAM, fresh pages)
    d_big: list = field(default_factory=lambda: [1e-10, 2e-10, 4e-10, 1e-9, 2e-9, 3e-9, 4e-9, 4e-9])
    c0: float = 6e-5        # COO step: fixed
    c1: float = 6e-9        # per (non-zero x index) of the operands
    c2: float = 6e-8        # per join pair
    c3: float = 2e-9        # per (join pair x output index)
    c4: float = 2e-9        # per (join pair x log2 join): the group-by sort
    v0: float = 1e-5        # conversion dense -> COO: fixed, per tensor
    v1: float = 1e-9        # per entry scanned
    v2: float = 6e-9        # per (non-zero x index) written
    k0: float = 2e-6        # count_nonzero: fixed
    k1: float = 3e-10       # per entry
    py_step: float = 3e-6   # one step of the forecast loop (Python)

    @classmethod
    def from_dict(cls, d: dict | None) -> "CostModel":
        if not d:
            return cls()
        return cls(**{k: ([float(x) for x in v] if isinstance(v, (list, tuple)) else float(v))
                      for k, v in d.items() if k in cls.__dataclass_fields__})

    def as_dict(self) -> dict:
        return asdict(self)

    def dense(self, union: float, io: float, out: float) -> float:
        _, small, io_, blas = dense_features(union, io, out)
        b = size_bucket(out)
        extra = self.d_big[b] * io if b >= 0 and self.d_big else 0.0
        return self.d0 + self.d1 * small + self.d2 * io_ + self.d3 * blas + extra

    def coo(self, in_work: float, join: float, ndim_out: int) -> float:
        return (self.c0 + self.c1 * in_work + self.c2 * join + self.c3 * join * ndim_out
                + self.c4 * join * math.log2(join + 2.0))

    def convert(self, numel: float, nnz: float, ndim: int) -> float:
        return self.v0 + self.v1 * numel + self.v2 * nnz * ndim

    def count(self, numel: float) -> float:
        return self.k0 + self.k1 * numel


BIG_FROM = 16                      # outputs past 2^16 entries pay a per-entry extra by size bucket
N_BUCKETS = 8                      # buckets (2^16, 2^17], ..., (2^23, inf)


def size_bucket(out: float) -> int:
    """-1 for outputs of at most 2^16 entries, else the bucket of log2(out) (0 .. N_BUCKETS - 1)."""
    if out <= 2 ** BIG_FROM:
        return -1
    return min(max(math.ceil(math.log2(out)) - BIG_FROM - 1, 0), N_BUCKETS - 1)


def dense_features(union: float, io: float, out: float) -> list[float]:
    """[1, union if the summed-out space per output entry < 16 else 0, io, union otherwise]."""
    blas = union / max(out, 1.0) >= 16
    return [1.0, 0.0 if blas else union, io, union if blas else 0.0]


def coo_features(in_work: float, join: float, ndim_out: int) -> list[float]:
    """[1, nnz x ndim of the operands, join pairs, join x output indices, join x log2(join) (the sort)]."""
    return [1.0, in_work, join, join * ndim_out, join * math.log2(join + 2.0)]


def spread(nnz: float, n_from: float, n_to: float) -> float:
    """Expected non-zeros after summing ``n_from`` entries (``nnz`` of them non-zero, placed
    independently) down to ``n_to`` entries: ``n_to * (1 - (1 - nnz/n_from)^(n_from/n_to))``."""
    if n_to >= n_from or nnz <= 0:
        return min(nnz, n_to)
    d = min(nnz / n_from, 1.0)
    if d >= 1.0:
        return n_to
    return n_to * -math.expm1((n_from / n_to) * math.log1p(-d))


@dataclass(frozen=True)
class PairShape:
    """Static sizes of one pairwise step (from the path and the index sizes only)."""
    numel_a: float           # entries of operand A's index space
    numel_b: float
    red_a: float             # entries after A's local pre-reduction (indices neither shared nor kept summed out)
    red_b: float
    ndim_a: int
    ndim_b: int
    shared: float            # entries of the shared index space
    union: float             # entries of the joint (reduced) index space
    out: float               # entries of the output
    ndim_out: int
    only_b_out: float        # entries of the output indices that only B brings
    only_a_out: float


def pair_shape(ta, tb, keep, sizes) -> PairShape:
    sa, sb, ks = set(ta), set(tb), set(keep)
    ka = [lab for lab in dict.fromkeys(ta) if lab in sb or lab in ks]
    kb = [lab for lab in dict.fromkeys(tb) if lab in sa or lab in ks]
    prod = lambda labs: float(math.prod(float(sizes[i]) for i in labs))  # noqa: E731
    return PairShape(prod(dict.fromkeys(ta)), prod(dict.fromkeys(tb)), prod(ka), prod(kb), len(ta), len(tb),
                     prod([lab for lab in ka if lab in sb]), prod(dict.fromkeys(ka + kb)), prod(keep), len(keep),
                     prod([lab for lab in keep if lab not in sa]), prod([lab for lab in keep if lab not in sb]))


def nnz_bound(ps: PairShape, bound_a: float, bound_b: float) -> float:
    """Upper bound on the output non-zeros of a pair from upper bounds on its operands' non-zeros.

    Every output non-zero is (A-part, B-only part) with the A-part taken from one non-zero row of the
    reduced A: at most ``nnz(A) * |B-only output indices|``; symmetrically for B; and at most the output
    size. Exact cancellation only removes entries, so the bound stays valid."""
    ra = min(bound_a, ps.red_a)
    rb = min(bound_b, ps.red_b)
    return min(ps.out, ra * ps.only_b_out, rb * ps.only_a_out)


def estimate_pair(cm: CostModel, ps: PairShape, nnz_a: float, nnz_b: float) -> tuple[float, float]:
    """(predicted COO seconds, estimated output non-zeros) of one pair under independence."""
    ra = spread(nnz_a, ps.numel_a, ps.red_a)
    rb = spread(nnz_b, ps.numel_b, ps.red_b)
    join = ra * rb / ps.shared
    out = spread(join, ps.union, ps.out)
    return cm.coo(nnz_a * ps.ndim_a + nnz_b * ps.ndim_b, join, ps.ndim_out), out
