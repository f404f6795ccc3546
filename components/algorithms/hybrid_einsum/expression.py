"""Einsum expressions: parsing, validation against the operands, and the shared contraction path.

Labels are any characters except ``,`` ``-`` ``>`` ``.`` and whitespace (so expressions with more
than 52 indices, as opt_einsum's ``get_symbol`` writes them, work). Internally every label is an
int; each pairwise step is relabelled locally, so no step hits numpy/torch's 52-letter limit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.core.errors import ConfigError, require

_BAD = set(",->. \t\n")


@dataclass
class Expression:
    terms: list[tuple[int, ...]]      # input terms as label ids
    output: tuple[int, ...]
    sizes: dict[int, int]             # label id -> dimension
    labels: list[str]                 # label id -> character

    def canonical(self) -> str:
        """The expression with opt_einsum symbols (label id i -> oe.get_symbol(i))."""
        import opt_einsum as oe

        s = lambda t: "".join(oe.get_symbol(i) for i in t)  # noqa: E731
        return ",".join(s(t) for t in self.terms) + "->" + s(self.output)


def parse(expr: str, shapes: list[tuple[int, ...]]) -> Expression:
    """Parse ``expr`` and check it against the operand shapes; ConfigError naming the problem otherwise."""
    require(isinstance(expr, str) and len(expr.strip()) > 0, "expr", expr, "a non-empty einsum string like 'ab,bc->ac'")
    e = expr.replace(" ", "")
    require("..." not in e, "expr", expr, "explicit indices (ellipsis '...' is not supported)")
    require(e.count("->") <= 1 and ("-" not in e.replace("->", "")) and (">" not in e.replace("->", "")),
            "expr", expr, "at most one '->' separating inputs from the output")
    lhs, arrow, rhs = e.partition("->")
    terms_s = lhs.split(",")
    require(len(terms_s) == len(shapes), "expr", expr,
            f"{len(terms_s)} input terms for {len(shapes)} operands (they must match)")
    ids: dict[str, int] = {}
    labels: list[str] = []
    terms: list[tuple[int, ...]] = []
    sizes: dict[int, int] = {}
    for pos, (t, shp) in enumerate(zip(terms_s, shapes)):
        for ch in t:
            if ch in _BAD:
                raise ConfigError("expr", expr, f"valid index labels (found {ch!r} in term {pos})")
        require(len(t) == len(shp), "expr", expr,
                f"term {pos} '{t}' to have one label per dimension of operand {pos} (shape {tuple(shp)})")
        term = []
        for ch, dim in zip(t, shp):
            if ch not in ids:
                ids[ch] = len(labels)
                labels.append(ch)
            i = ids[ch]
            if i in sizes and sizes[i] != dim:
                raise ConfigError("shapes", tuple(shp), f"index '{ch}' has size {sizes[i]} elsewhere but {dim} in operand {pos}")
            sizes[i] = int(dim)
            term.append(i)
        terms.append(tuple(term))
    if arrow:
        for ch in rhs:
            if ch in _BAD:
                raise ConfigError("expr", expr, f"valid output labels (found {ch!r})")
            require(ch in ids, "expr", expr, f"output index '{ch}' to appear in an input term")
        require(len(set(rhs)) == len(rhs), "expr", expr, "each output index at most once")
        out = tuple(ids[ch] for ch in rhs)
    else:  # implicit output: indices seen exactly once, in alphabetical order (numpy's rule)
        counts: dict[int, int] = {}
        for t in terms:
            for i in t:
                counts[i] = counts.get(i, 0) + 1
        out = tuple(sorted((i for i, c in counts.items() if c == 1), key=lambda i: labels[i]))
    for i, d in sizes.items():
        require(d >= 1, "shapes", d, f"positive dimensions (index '{labels[i]}' has size {d})")
    return Expression(terms, out, sizes, labels)


@dataclass
class Plan:
    expr: Expression
    path: list[tuple[int, ...]]       # opt_einsum convention: positions in the shrinking operand list
    largest_intermediate: float       # entries of the largest dense intermediate on this path
    flops: float


def plan(expr: str, shapes: list[tuple[int, ...]], optimize: str = "greedy") -> Plan:
    """Parse and compute ONE contraction path with opt_einsum; every representation uses it."""
    import opt_einsum as oe

    ex = parse(expr, shapes)
    require(optimize in ("greedy", "optimal", "dp", "auto", "auto-hq", "branch-2", "random-greedy"), "optimize",
            optimize, "an opt_einsum path strategy: greedy, optimal, dp, auto, auto-hq, branch-2, random-greedy")
    if len(ex.terms) == 1:
        return Plan(ex, [(0,)], float(np.prod([ex.sizes[i] for i in ex.output]) if ex.output else 1), 0.0)
    path, info = oe.contract_path(ex.canonical(), *[tuple(s) for s in shapes], shapes=True, optimize=optimize)
    return Plan(ex, [tuple(p) for p in path], float(info.largest_intermediate), float(info.opt_cost))


def step_keep(terms: list[tuple[int, ...]], picked: tuple[int, ...], output: tuple[int, ...]) -> tuple[int, ...]:
    """Labels of the contracted operands still needed later (output or another remaining operand),
    in order of first appearance."""
    later = set(output)
    for pos, t in enumerate(terms):
        if pos not in picked:
            later.update(t)
    seen, keep = set(), []
    for pos in picked:
        for i in terms[pos]:
            if i in later and i not in seen:
                seen.add(i)
                keep.append(i)
    return tuple(keep)


def check_operands(tensors) -> list[np.ndarray]:
    """Operands as float64/complex128 numpy arrays (exact zeros matter: no noisy float32)."""
    out = []
    for pos, t in enumerate(tensors):
        a = t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
        require(a.dtype.kind in "biufc", f"tensors[{pos}]", a.dtype, "a numeric array")
        out.append(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64, copy=False))
    return out
