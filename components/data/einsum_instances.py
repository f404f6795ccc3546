"""Einsum instances generated here (nothing downloaded), with known answers where one exists.

Families (as in the einsum benchmark, at laptop scale):
- ``gap``: GRID-EQ(n) (n x n grid of binary variables, an equality tensor per edge, scalar output:
  the count is 2; any path has a ~2^n dense intermediate, COO never more than 2 non-zeros) and
  equality chains with every index in the output (dense 2^n output, COO 2 entries).
- ``wmc``: weighted model counting of random 3-CNF and structured CNF (pigeonhole, parity rings),
  one tensor per clause (all ones except a 0 at the falsifying assignment) plus a [1-w, w] weight
  vector per variable, converted like einsum_benchmark's ``converters.model_counting``.
- ``pgm``: graphical models with determinism: hard-core model on an L x L grid, random factor graphs
  with a fraction p0 of zero factor entries.
- ``dense``: controls without zeros: random 3-regular tensor networks, matrix chains, 2-d lattices.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np


def sym(i: int) -> str:
    import opt_einsum as oe

    return oe.get_symbol(i)


@dataclass
class Instance:
    name: str
    family: str
    expr: str
    tensors: list[np.ndarray]
    expected: object = None           # exact answer (scalar, or dict coord -> value for sparse outputs)
    info: dict = field(default_factory=dict)


def _eq(n: int = 2) -> np.ndarray:
    return np.eye(n)


# ------------------------------------------------------------------------------------------ gap
def grid_eq(n: int) -> Instance:
    """GRID-EQ(n): equality tensors on the edges of an n x n grid of binary variables -> 2."""
    v = lambda r, c: r * n + c  # noqa: E731
    terms = []
    for r in range(n):
        for c in range(n):
            if c + 1 < n:
                terms.append(sym(v(r, c)) + sym(v(r, c + 1)))
            if r + 1 < n:
                terms.append(sym(v(r, c)) + sym(v(r + 1, c)))
    return Instance(f"grid_eq_{n}", "gap", ",".join(terms) + "->", [_eq() for _ in terms], 2.0, {"n": n})


def chain_eq(n: int) -> Instance:
    """Equality chain over n binary variables with every index kept: dense 2^n, two non-zeros."""
    terms = [sym(i) + sym(i + 1) for i in range(n - 1)]
    out = "".join(sym(i) for i in range(n))
    return Instance(f"chain_eq_{n}", "gap", ",".join(terms) + "->" + out, [_eq() for _ in terms],
                    {(0,) * n: 1.0, (1,) * n: 1.0}, {"n": n})


# ------------------------------------------------------------------------------------------ wmc
def cnf_instance(name: str, n_vars: int, clauses: list[list[int]], rng, family: str = "wmc") -> Instance:
    """Weighted model count: clause tensors + per-variable weights [1-w, w] (w uniform in [0.2, 0.8])."""
    terms, tensors = [], []
    for cl in clauses:
        vars_ = [abs(l) - 1 for l in cl]
        if len(set(vars_)) < len(vars_):                      # x or not x: tautology / merged literal
            continue
        t = np.ones((2,) * len(cl))
        t[tuple(0 if l > 0 else 1 for l in cl)] = 0.0         # the one falsifying assignment
        terms.append("".join(sym(v) for v in vars_))
        tensors.append(t)
    w = rng.uniform(0.2, 0.8, n_vars)
    for v in range(n_vars):
        terms.append(sym(v))
        tensors.append(np.array([1 - w[v], w[v]]))
    expected = brute_force_wmc(n_vars, clauses, w) if n_vars <= 20 else None
    return Instance(name, family, ",".join(terms) + "->", tensors, expected, {"vars": n_vars, "clauses": len(clauses)})


def brute_force_wmc(n_vars: int, clauses: list[list[int]], w: np.ndarray) -> float:
    """Sum over all 2^n assignments of prod weights * [all clauses satisfied] (vectorised)."""
    x = ((np.arange(2 ** n_vars)[:, None] >> np.arange(n_vars)[None, :]) & 1).astype(bool)
    ok = np.ones(len(x), bool)
    for cl in clauses:
        sat = np.zeros(len(x), bool)
        for l in cl:
            sat |= x[:, abs(l) - 1] if l > 0 else ~x[:, abs(l) - 1]
        ok &= sat
    weight = np.where(x, w[None, :], 1 - w[None, :]).prod(1)
    return float(weight[ok].sum())


def random_3cnf(n_vars: int, ratio: float, seed: int) -> Instance:
    rng = np.random.default_rng(seed)
    m = int(round(ratio * n_vars))
    clauses = []
    for _ in range(m):
        vs = rng.choice(n_vars, 3, replace=False) + 1
        clauses.append([int(v) if rng.random() < 0.5 else -int(v) for v in vs])
    return cnf_instance(f"wmc_3cnf_n{n_vars}_r{ratio}_s{seed}", n_vars, clauses, rng)


def pigeonhole(holes: int, seed: int = 0) -> Instance:
    """PHP(holes+1, holes): unsatisfiable, count 0 (every intermediate eventually empties)."""
    p = holes + 1
    var = lambda i, j: i * holes + j + 1  # noqa: E731
    clauses = [[var(i, j) for j in range(holes)] for i in range(p)]
    clauses += [[-var(i, j), -var(k, j)] for j in range(holes) for i in range(p) for k in range(i + 1, p)]
    return cnf_instance(f"wmc_pigeonhole_{holes}", p * holes, clauses, np.random.default_rng(seed))


def parity_ring(n: int, seed: int = 0) -> Instance:
    """x_i xor x_{i+1} xor x_{i+2} = 1 around a ring, as CNF (4 clauses per constraint)."""
    clauses = []
    for i in range(n):
        a, b, c = i + 1, (i + 1) % n + 1, (i + 2) % n + 1
        for signs in itertools.product([1, -1], repeat=3):
            # forbid assignments with even parity: the clause falsified exactly by one of them
            bits = [1 if s < 0 else 0 for s in signs]          # falsifying assignment of this clause
            if sum(bits) % 2 == 0:
                clauses.append([signs[0] * a, signs[1] * b, signs[2] * c])
    return cnf_instance(f"wmc_parity_ring_{n}", n, clauses, np.random.default_rng(seed))


# ------------------------------------------------------------------------------------------ pgm
def hardcore_grid(L: int, lam: float = 1.0) -> Instance:
    """Hard-core (independent set) model on an L x L grid: pair factor [[1,1],[1,0]], vertex [1, lam]."""
    v = lambda r, c: r * L + c  # noqa: E731
    terms, tensors = [], []
    pairf = np.array([[1.0, 1.0], [1.0, 0.0]])
    for r in range(L):
        for c in range(L):
            for dr, dc in ((0, 1), (1, 0)):
                if r + dr < L and c + dc < L:
                    terms.append(sym(v(r, c)) + sym(v(r + dr, c + dc)))
                    tensors.append(pairf)
            terms.append(sym(v(r, c)))
            tensors.append(np.array([1.0, lam]))
    return Instance(f"pgm_hardcore_{L}", "pgm", ",".join(terms) + "->", tensors, None, {"L": L})


def random_factor_graph(n_vars: int, n_factors: int, p0: float, seed: int, arity=(2, 3), domain=(2, 3)) -> Instance:
    """Random factors over random variable subsets; a fraction p0 of factor entries set to 0."""
    rng = np.random.default_rng(seed)
    dom = rng.integers(domain[0], domain[1] + 1, n_vars)
    terms, tensors = [], []
    for _ in range(n_factors):
        k = int(rng.integers(arity[0], arity[1] + 1))
        vs = rng.choice(n_vars, k, replace=False)
        t = rng.uniform(0.5, 1.5, tuple(int(dom[v]) for v in vs))
        t[rng.random(t.shape) < p0] = 0.0
        terms.append("".join(sym(int(v)) for v in vs))
        tensors.append(t)
    for v in range(n_vars):                                   # every variable appears (unary prior)
        terms.append(sym(v))
        tensors.append(rng.uniform(0.5, 1.5, int(dom[v])))
    return Instance(f"pgm_factor_n{n_vars}_m{n_factors}_p{p0}_s{seed}", "pgm", ",".join(terms) + "->", tensors, None,
                    {"p0": p0})


# ------------------------------------------------------------------------------------------ dense
def random_regular(n_nodes: int, reg: int, d_min: int, d_max: int, seed: int) -> Instance:
    """Random reg-regular graph: one Gaussian tensor per node, one bond per edge (dims d_min..d_max)."""
    rng = np.random.default_rng(seed)
    for _ in range(1000):                                    # configuration model, retry on loops/multi-edges
        stubs = rng.permutation(np.repeat(np.arange(n_nodes), reg))
        edges = stubs.reshape(-1, 2)
        if (edges[:, 0] != edges[:, 1]).all() and len({tuple(sorted(e)) for e in edges.tolist()}) == len(edges):
            break
    dims = rng.integers(d_min, d_max + 1, len(edges))
    node_terms: list[list[int]] = [[] for _ in range(n_nodes)]
    for e, (a, b) in enumerate(edges):
        node_terms[a].append(e)
        node_terms[b].append(e)
    terms = ["".join(sym(e) for e in t) for t in node_terms]
    tensors = [rng.standard_normal(tuple(int(dims[e]) for e in t)) for t in node_terms]
    return Instance(f"dense_regular_n{n_nodes}_s{seed}", "dense", ",".join(terms) + "->", tensors, None)


def matrix_chain(n: int, dim: int, seed: int) -> Instance:
    rng = np.random.default_rng(seed)
    terms = [sym(i) + sym(i + 1) for i in range(n)]
    return Instance(f"dense_matrix_chain_{n}x{dim}", "dense", ",".join(terms) + "->" + sym(0) + sym(n),
                    [rng.standard_normal((dim, dim)) for _ in range(n)], None)


def lattice(L: int, bond: int, seed: int) -> Instance:
    """L x L lattice of Gaussian tensors, one bond per grid edge (closed network, scalar output)."""
    rng = np.random.default_rng(seed)
    edges = {}
    for r in range(L):
        for c in range(L):
            if c + 1 < L:
                edges[((r, c), (r, c + 1))] = len(edges)
            if r + 1 < L:
                edges[((r, c), (r + 1, c))] = len(edges)
    terms, tensors = [], []
    for r in range(L):
        for c in range(L):
            t = [e for (a, b), e in edges.items() if (r, c) in (a, b)]
            terms.append("".join(sym(e) for e in t))
            tensors.append(rng.standard_normal((bond,) * len(t)))
    return Instance(f"dense_lattice_{L}x{L}_b{bond}", "dense", ",".join(terms) + "->", tensors, None)


# ------------------------------------------------------------------------------------------ suites
def suite(scale: str = "full", seed: int = 0) -> list[Instance]:
    """The generated benchmark suite (``full`` ~40 instances, ``debug`` a handful of tiny ones).

    ``heldout`` / ``heldout_debug``: the same families at sizes, clause ratios, zero fractions and
    generator seeds (seed + 100) that the full suite does not use; the hybrids are never tuned on them."""
    if scale == "heldout_debug":
        return [chain_eq(10), random_3cnf(15, 3.9, seed + 100), random_factor_graph(12, 14, 0.7, seed + 100),
                matrix_chain(5, 12, seed + 100)]
    if scale == "heldout":
        hs = seed + 100
        out = [grid_eq(14), grid_eq(18), chain_eq(18), chain_eq(22)]
        for n, r in ((22, 3.0), (22, 4.0), (26, 2.8), (26, 3.9), (30, 3.0), (30, 4.2)):
            out.append(random_3cnf(n, r, hs))
        out += [parity_ring(30), hardcore_grid(10)]
        for n, m, p0 in ((40, 50, 0.3), (40, 50, 0.7), (45, 55, 0.95), (70, 90, 0.9)):
            out.append(random_factor_graph(n, m, p0, hs))
        out += [random_regular(26, 3, 2, 4, hs), random_regular(36, 3, 2, 4, hs + 1), matrix_chain(20, 96, hs),
                matrix_chain(6, 200, hs), lattice(5, 3, hs), lattice(4, 4, hs)]
        return out
    if scale == "debug":
        return [grid_eq(5), chain_eq(8), random_3cnf(14, 4.3, seed), pigeonhole(3), hardcore_grid(4),
                random_factor_graph(10, 12, 0.5, seed), matrix_chain(4, 8, seed), lattice(3, 2, seed)]
    out = [grid_eq(n) for n in (12, 16, 20, 22)] + [chain_eq(n) for n in (16, 20, 24)]
    for n, ratios in ((18, (4.3,)), (20, (2.5, 4.3)), (24, (2.5, 3.5, 4.3)), (28, (2.5, 3.5, 4.3)), (32, (2.5,))):
        for r in ratios:
            out.append(random_3cnf(n, r, seed))
    out += [pigeonhole(4), pigeonhole(5), pigeonhole(6), parity_ring(20), parity_ring(40)]
    out += [hardcore_grid(L) for L in (8, 12, 14)]
    for p0 in (0.0, 0.5, 0.9):
        out += [random_factor_graph(30, 40, p0, seed), random_factor_graph(50, 60, p0, seed + 1)]
    out.append(random_factor_graph(60, 80, 0.9, seed))
    out += [random_regular(n, 3, 2, 4, seed + i) for i, n in enumerate((20, 30, 40))]
    out += [matrix_chain(10, 128, seed), matrix_chain(30, 64, seed), lattice(4, 3, seed), lattice(5, 2, seed),
            lattice(6, 2, seed)]
    return out
