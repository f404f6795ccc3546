"""Claims: a paper's statement as a check over variants' final metrics.

A claim is written in the experiment config as an expression over ``variant.metric`` names::

    holds: "ef21.final_grad_norm_sq <= 1e-16 and cgd.final_grad_norm_sq >= 1e-2"
    measured: "ef21.final_grad_norm_sq"

Expressions are parsed with :mod:`ast` and only arithmetic, comparisons, boolean logic, constants,
``variant.metric`` look-ups and a few functions are allowed: no names from Python, no calls to
anything else. A missing variant or metric (a crashed run) makes the claim fail, never pass.
"""
from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass
from typing import Any, Mapping

from components.core.errors import ConfigError

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow, ast.Mod: operator.mod}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
_FUNCS = {"min": min, "max": max, "abs": abs, "log10": math.log10, "log": math.log, "sqrt": math.sqrt,
          "all": all, "any": any}


class MissingMetric(KeyError):
    """A claim referred to a variant or metric that the run did not produce."""


@dataclass(frozen=True)
class Claim:
    name: str
    holds: str               # boolean expression
    paper: str = ""          # the paper's figure or statement, for the scoreboard
    measured: str = ""       # expression shown as the measured figure (defaults to a summary)
    gate: bool = True        # False: reported, not counted as a check (a control)


def parse_expr(expr: str, key: str) -> ast.Expression:
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise ConfigError(key, expr, f"a valid expression ({e.msg})") from None
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
                               ast.UAdd, ast.BinOp, ast.Compare, ast.Constant, ast.Attribute, ast.Name,
                               ast.Load, ast.Call, ast.List, ast.Tuple, *_BINOPS, *_CMPOPS))
        if not ok:
            raise ConfigError(key, expr, f"only arithmetic, comparisons and variant.metric names ({type(node).__name__} found)")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS):
            raise ConfigError(key, expr, "only calls to " + ", ".join(sorted(_FUNCS)))
    return tree


def referenced_variants(expr: str, key: str = "claim") -> set[str]:
    """Variant names an expression reads (the left side of every ``variant.metric``)."""
    tree = parse_expr(expr, key)
    return {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}


def evaluate(expr: str, metrics: Mapping[str, Mapping[str, float]], key: str = "claim") -> Any:
    """Evaluate ``expr`` against ``metrics[variant][metric]``."""
    tree = parse_expr(expr, key)

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            variant, metric = node.value.id, node.attr
            if variant not in metrics:
                raise MissingMetric(f"variant {variant!r} has no results")
            if metric not in metrics[variant]:
                raise MissingMetric(f"{variant}.{metric} was not reported")
            return metrics[variant][metric]
        if isinstance(node, ast.Name):
            raise ConfigError(key, expr, f"bare name {node.id!r}; write variant.metric")
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos}[type(node.op)](v)
        if isinstance(node, ast.BinOp):
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, comp in zip(node.ops, node.comparators):
                right = ev(comp)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Call):
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise ConfigError(key, expr, f"unsupported syntax {type(node).__name__}")

    return ev(tree)


@dataclass
class ClaimOutcome:
    name: str
    paper: str
    measured: str
    holds: bool
    gate: bool
    error: str = ""
    skipped: bool = False   # its variants were not run (only=...): neither holds nor fails


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def check(claim: Claim, metrics: Mapping[str, Mapping[str, float]]) -> ClaimOutcome:
    """Evaluate one claim; a missing metric or NaN makes it fail with the reason attached."""
    measured = ""
    try:
        if claim.measured:
            measured = _fmt(evaluate(claim.measured, metrics, f"claims.{claim.name}.measured"))
        value = evaluate(claim.holds, metrics, f"claims.{claim.name}.holds")
        if isinstance(value, float) and math.isnan(value):
            raise ValueError("NaN")
        return ClaimOutcome(claim.name, claim.paper, measured, bool(value), claim.gate)
    except (MissingMetric, ValueError, ZeroDivisionError, TypeError) as e:
        return ClaimOutcome(claim.name, claim.paper, measured or "n/a", False, claim.gate, error=str(e))
