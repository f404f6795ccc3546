"""Coordinate-list (COO) tensors and their pairwise contraction: a relational join on the shared
indices followed by a group-by on the kept ones, all vectorised numpy on sorted int64 keys.

Join: encode the shared coordinates of each side as one int64 key (mixed radix; when the product
of the dimensions would overflow, rows are mapped to dense ids with ``np.unique`` instead), sort
B's keys, find each A row's matching range with ``np.searchsorted``, expand the pairs with
``np.repeat`` + a cumulative offset, multiply the values. Group-by: key the kept coordinates,
sort, ``np.add.reduceat`` over runs of equal keys; exact zeros are dropped.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_MAXKEY = 2 ** 62


class MemoryCapExceeded(MemoryError):
    """An intermediate would exceed the memory cap; reported as status 'exceeded', never a crash."""

    def __init__(self, representation: str, step: int, nbytes: float, cap: float):
        self.representation, self.step, self.nbytes, self.cap = representation, step, float(nbytes), float(cap)
        super().__init__(f"{representation} intermediate at step {step} needs {nbytes / 2**20:.1f} MiB "
                         f"> cap {cap / 2**20:.1f} MiB")

    def __reduce__(self):  # rebuilt from its fields: it crosses Ray task boundaries
        return type(self), (self.representation, self.step, self.nbytes, self.cap), self.__dict__ or None


@dataclass
class COO:
    coords: np.ndarray     # int64 (nnz, ndim)
    values: np.ndarray     # float64 or complex128 (nnz,)
    shape: tuple[int, ...]

    @property
    def nnz(self) -> int:
        return int(self.values.shape[0])

    @property
    def nbytes(self) -> int:
        return self.nnz * (self.values.itemsize + 8 * len(self.shape))

    @classmethod
    def from_dense(cls, a) -> "COO":
        a = a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)
        if a.ndim == 0:
            v = a.reshape(1)
            keep = v != 0
            return cls(np.zeros((int(keep.sum()), 0), np.int64), np.ascontiguousarray(v[keep]), ())
        flat = np.ascontiguousarray(a).reshape(-1)
        idx = np.flatnonzero(flat)            # one scan, then unravel: no n-d fancy indexing
        coords = np.stack(np.unravel_index(idx, a.shape), 1).astype(np.int64, copy=False)
        return cls(np.ascontiguousarray(coords), flat[idx], tuple(a.shape))

    def todense(self) -> np.ndarray:
        out = np.zeros(self.shape, self.values.dtype)
        if self.nnz:
            if len(self.shape):
                np.add.at(out, tuple(self.coords.T), self.values)
            else:
                out[()] = self.values.sum()
        return out


def encode(cols: np.ndarray, dims: tuple[int, ...]) -> np.ndarray | None:
    """Mixed-radix int64 key of each row of ``cols`` (nnz, m); None if the key space overflows."""
    if len(dims) == 0:
        return np.zeros(cols.shape[0], np.int64)
    if float(np.prod([float(d) for d in dims])) >= _MAXKEY:
        return None
    key = cols[:, 0].astype(np.int64, copy=True)
    for j in range(1, len(dims)):
        key *= dims[j]
        key += cols[:, j]
    return key


def row_ids(cols: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """A key per row that is equal exactly when the rows are: mixed radix, or dense ids on overflow."""
    key = encode(cols, dims)
    if key is None:
        _, key = np.unique(cols, axis=0, return_inverse=True)
        key = key.reshape(-1).astype(np.int64)
    return key


def group_sum(coords: np.ndarray, values: np.ndarray, shape: tuple[int, ...]) -> COO:
    """Sum values with equal coordinates; drop exact zeros."""
    if values.shape[0] == 0:
        return COO(coords.reshape(0, len(shape)), values, shape)
    if len(shape) == 0:
        s = values.sum()
        return COO(np.zeros((1 if s != 0 else 0, 0), np.int64), np.array([s])[: 1 if s != 0 else 0], shape)
    key = row_ids(coords, shape)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    starts = np.concatenate(([0], np.flatnonzero(ks[1:] != ks[:-1]) + 1))
    vals = np.add.reduceat(values[order], starts)
    cs = coords[order[starts]]
    nz = vals != 0
    return COO(np.ascontiguousarray(cs[nz]), np.ascontiguousarray(vals[nz]), shape)


def unary(t: COO, term: tuple[int, ...], keep: tuple[int, ...], sizes: dict[int, int]) -> COO:
    """Diagonals (repeated labels) and sums over labels not in ``keep``; result ordered as ``keep``."""
    c = t.coords
    v = t.values
    first: dict[int, int] = {}
    mask = None
    for j, lab in enumerate(term):
        if lab in first:
            m = c[:, j] == c[:, first[lab]]
            mask = m if mask is None else (mask & m)
        else:
            first[lab] = j
    if mask is not None:
        c, v = c[mask], v[mask]
    cols = [first[lab] for lab in keep]
    out_c = c[:, cols] if cols else np.zeros((c.shape[0], 0), np.int64)
    shape = tuple(sizes[lab] for lab in keep)
    if len(keep) == len(first) and mask is None and cols == list(range(len(term))):
        return COO(out_c, v, shape)
    return group_sum(out_c, v, shape)


def pair(a: COO, ta: tuple[int, ...], b: COO, tb: tuple[int, ...], keep: tuple[int, ...], sizes: dict[int, int],
         cap_bytes: float = float("inf"), step: int = 0) -> COO:
    """Contract two COO tensors (terms ``ta``, ``tb``) into the labels ``keep``."""
    sb, sa = set(tb), set(ta)
    keep_set = set(keep)
    # 1) pre-reduce each side: diagonals, and labels neither shared nor kept are summed out now
    ka = tuple(dict.fromkeys(lab for lab in ta if lab in sb or lab in keep_set))
    kb = tuple(dict.fromkeys(lab for lab in tb if lab in sa or lab in keep_set))
    if ka != ta:
        a, ta = unary(a, ta, ka, sizes), ka
    if kb != tb:
        b, tb = unary(b, tb, kb, sizes), kb
    shared = tuple(lab for lab in ta if lab in sb)
    dims_s = tuple(sizes[lab] for lab in shared)
    ia_s = [ta.index(lab) for lab in shared]
    ib_s = [tb.index(lab) for lab in shared]
    # 2) join keys in one key space
    key_a = encode(a.coords[:, ia_s], dims_s)
    key_b = encode(b.coords[:, ib_s], dims_s)
    if key_a is None:
        both = np.concatenate([a.coords[:, ia_s], b.coords[:, ib_s]])
        _, inv = np.unique(both, axis=0, return_inverse=True)
        inv = inv.reshape(-1).astype(np.int64)
        key_a, key_b = inv[: a.nnz], inv[a.nnz:]
    ob = np.argsort(key_b, kind="stable")
    kbs = key_b[ob]
    lo = np.searchsorted(kbs, key_a, "left")
    hi = np.searchsorted(kbs, key_a, "right")
    cnt = hi - lo
    total = int(cnt.sum())
    out_shape = tuple(sizes[lab] for lab in keep)
    per = a.values.itemsize + 8 * (len(keep) + 2)
    if total * per > cap_bytes:
        raise MemoryCapExceeded("coo", step, total * per, cap_bytes)
    if total == 0:
        return COO(np.zeros((0, len(keep)), np.int64), np.zeros(0, np.result_type(a.values, b.values)), out_shape)
    ia = np.repeat(np.arange(a.nnz), cnt)
    offs = np.cumsum(cnt) - cnt
    ib = ob[np.repeat(lo, cnt) + (np.arange(total) - np.repeat(offs, cnt))]
    vals = a.values[ia] * b.values[ib]
    # 3) group-by on the kept labels. The key is built from per-side partial keys (computed on the
    #    nnz rows of A and B, not on the join), and coordinates only for the surviving groups.
    from_a = [lab for lab in keep if lab in ta]
    from_b = [lab for lab in keep if lab not in ta]
    dims_a = tuple(sizes[lab] for lab in from_a)
    dims_b = tuple(sizes[lab] for lab in from_b)
    ca = a.coords[:, [ta.index(lab) for lab in from_a]]
    cb = b.coords[:, [tb.index(lab) for lab in from_b]]
    span_b = float(np.prod([float(d) for d in dims_b])) if dims_b else 1.0
    span = (float(np.prod([float(d) for d in dims_a])) if dims_a else 1.0) * span_b
    if span < _MAXKEY:
        key = encode(ca, dims_a)[ia] * int(span_b) + encode(cb, dims_b)[ib]
        order = np.argsort(key, kind="stable")
        ks = key[order]
        starts = np.concatenate(([0], np.flatnonzero(ks[1:] != ks[:-1]) + 1))
        sums = np.add.reduceat(vals[order], starts)
        rep = order[starts]
        nz = sums != 0
        rep, sums = rep[nz], sums[nz]
        cols = np.concatenate([ca[ia[rep]], cb[ib[rep]]], axis=1)
        pos = {lab: j for j, lab in enumerate(from_a + from_b)}
        cols = cols[:, [pos[lab] for lab in keep]] if len(keep) else cols
        return COO(np.ascontiguousarray(cols, dtype=np.int64), np.ascontiguousarray(sums), out_shape)
    coords = np.concatenate([ca[ia], cb[ib]], axis=1)          # key space too large: generic group-by
    pos = {lab: j for j, lab in enumerate(from_a + from_b)}
    coords = coords[:, [pos[lab] for lab in keep]] if len(keep) else coords
    return group_sum(coords, vals, out_shape)
