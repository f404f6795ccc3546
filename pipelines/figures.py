"""Labelled figures: every measured value beside the term it is the value of.

A claim with ``measured:`` shows its terms (pipelines.live.labelled). A claim without one shows
the operands of its ``holds`` expression, each by name (``ef21.final_grad_norm_sq = 3.1e-17``):
every ``variant.metric`` and every per-seed call (``paired(...)``, ``seed_max(...)``, ...) it reads, computed when
the run is judged and stored on the parent run as ``claim_operands.json``.
"""
from __future__ import annotations

import ast
import math
from typing import Any, Mapping

from components.core.claims import SEED_FUNCS

ARTIFACT = "claim_operands.json"


def operands(expr: str) -> list[str]:
    """The terms an expression reads, in order, once each: ``variant.metric`` names and whole
    per-seed calls (``paired(...)``, ``seed_max(...)``: their inside is one per-seed figure)."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return []
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SEED_FUNCS:
            out.append(ast.unparse(node))
            return
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            out.append(ast.unparse(node))
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree.body)
    return list(dict.fromkeys(out))


def claim_operands(claims, metrics: Mapping[str, Mapping[str, float]],
                   seed_metrics: Mapping[str, Mapping[int, Mapping[str, float]]] | None = None) -> dict[str, list[list[str]]]:
    """For each claim without ``measured:``: ``[[term, value], ...]`` over its ``holds`` (every cell
    of a grid claim, the cell's values in front); a term that cannot be computed reads "n/a"."""
    from components.core.claims import evaluate
    from components.core.formatting import fmt

    out: dict[str, list[list[str]]] = {}
    for claim in claims:
        if claim.measured:
            continue
        pairs: list[list[str]] = []
        for cell, holds, _ in claim.expressions():
            prefix = ",".join(str(v) for v in cell.values())
            for term in operands(holds):
                try:
                    value: Any = evaluate(term, metrics, f"claims.{claim.name}.holds", seed_metrics)
                    text = fmt(value) if not (isinstance(value, float) and math.isnan(value)) else "nan"
                except Exception:  # noqa: BLE001 - a missing metric or variant: shown, never raised
                    text = "n/a"
                pairs.append([f"{prefix}: {term}" if prefix else term, text])
        if pairs:
            out[claim.name] = pairs
    return out


def operands_text(pairs: list[list[str]] | None, sep: str = "\n") -> str:
    """``a.m = 1.2`` lines (or one line with ``sep="; "``)."""
    return sep.join(f"{t} = {v}" for t, v in pairs or [])
