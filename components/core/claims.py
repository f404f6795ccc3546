"""Claims: a paper's statement as a check over variants' final metrics.

A claim is written in the experiment config as an expression over ``variant.metric`` names::

    holds: "ef21.final_grad_norm_sq <= 1e-16 and cgd.final_grad_norm_sq >= 1e-2"
    measured: "ef21.final_grad_norm_sq"

Expressions are parsed with :mod:`ast` and only arithmetic, comparisons, boolean logic, constants,
``variant.metric`` look-ups and a few functions are allowed: no names from Python, no calls to
anything else. A missing variant or metric (a crashed run) makes the claim fail, never pass.

Over seeds: ``variant.m`` is the mean over the variant's seeds, ``variant.m_se`` its standard
error and ``variant.m_n`` the count (components.core.seeds). ``paired(expr)`` evaluates ``expr``
on every seed that all the variants it names ran, and gives the mean of those per-seed values;
``paired_se(expr)`` their standard error (NaN below two seeds, so the claim fails). "gain >= 0.05
and > 2 SE" is ``paired(a.m - b.m) >= 0.05 and paired(a.m - b.m) > 2 * paired_se(a.m - b.m)``.

Over a grid axis: a claim with ``over: axis`` (or a list of axes) is checked once per value,
with ``{axis}`` in ``holds``/``measured`` replaced by it; it holds when at least ``at_least``
of the cells hold (default: every cell).

Premises: ``premise`` is the measured precondition under which the paper states the claim (the
small model is over-confident, communication is comparable to compute), an expression in the same
language, checked on the same cells. A claim whose premise is measured false is "premise not met"
whichever way its own check came out: a failure there is the setting's, not the technique's, and a
pass there is vacuous (homogeneous agents cannot show a stall). ``holds`` keeps the raw check; a
premise that cannot be computed (a missing metric, a NaN) is unknown and never excuses a failure.
"""
from __future__ import annotations

import ast
import contextlib
import itertools
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from components.core.errors import ConfigError
from components.core.formatting import fmt
from components.core.seeds import mean_se

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow, ast.Mod: operator.mod}
_CMPOPS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
_FUNCS = {"min": min, "max": max, "abs": abs, "log10": math.log10, "log": math.log, "sqrt": math.sqrt,
          "all": all, "any": any}
_SEED_FUNCS = ("paired", "paired_se")   # evaluate their argument once per shared seed
_ALLOWED_CALLS = set(_FUNCS) | set(_SEED_FUNCS)
_AXIS = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MissingMetric(KeyError):
    """A claim referred to a variant or metric that the run did not produce."""


@dataclass(frozen=True)
class Claim:
    name: str
    holds: str               # boolean expression (a template with {axis} when ``over`` is set)
    paper: str = ""          # the paper's figure or statement, for the scoreboard
    measured: str = ""       # expression shown as the measured figure (defaults to a summary)
    gate: bool = True        # False: reported, not counted as a check (a control)
    over: tuple[str, ...] = ()               # grid axes the claim quantifies over
    axes: tuple[tuple[str, tuple], ...] = ()  # (axis, values) for each axis in ``over``
    at_least: int | None = None              # cells that must hold (None: every cell)
    premise: str = ""                        # the measured precondition (same language, same cells)
    premise_measured: str = ""               # its figure to show (defaults to none)

    def cells(self) -> list[dict[str, Any]]:
        """One {axis: value} per cell; a single empty cell without ``over``."""
        if not self.over:
            return [{}]
        values = dict(self.axes)
        return [dict(zip(self.over, combo)) for combo in itertools.product(*(values[a] for a in self.over))]

    def expressions(self) -> list[tuple[dict, str, str]]:
        """(cell, holds, measured) with the axis values substituted."""
        return [(c, substitute(self.holds, c), substitute(self.measured, c) if self.measured else "")
                for c in self.cells()]

    def premise_claim(self) -> "Claim | None":
        """The premise as a claim of its own over the same cells (every cell must meet it)."""
        if not self.premise:
            return None
        return Claim(f"{self.name}.premise", self.premise, measured=self.premise_measured, over=self.over,
                     axes=self.axes)


def substitute(template: str, cell: Mapping[str, Any]) -> str:
    """Replace ``{axis}`` by the cell's value: inside a name (``php_{pattern}``) as the grid
    spells it in variant names, elsewhere as the value itself (unknown names are left for the
    parser to reject)."""
    def repl(m: re.Match) -> str:
        if m.group(1) not in cell:
            return m.group(0)
        value = cell[m.group(1)]
        in_name = m.start() > 0 and (template[m.start() - 1].isalnum() or template[m.start() - 1] == "_")
        return re.sub(r"\W", "_", str(value)) if in_name else repr(value) if isinstance(value, str) else str(value)

    return _AXIS.sub(repl, template)


def template_axes(template: str) -> set[str]:
    return set(_AXIS.findall(template or ""))


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
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _ALLOWED_CALLS):
            raise ConfigError(key, expr, "only calls to " + ", ".join(sorted(_ALLOWED_CALLS)))
        if isinstance(node, ast.Call) and node.func.id in _SEED_FUNCS and len(node.args) != 1:
            raise ConfigError(key, expr, f"{node.func.id}(expr) takes one expression")
    return tree


def referenced_variants(expr: str, key: str = "claim") -> set[str]:
    """Variant names an expression reads (the left side of every ``variant.metric``)."""
    return _node_variants(parse_expr(expr, key))


def _node_variants(node: ast.AST) -> set[str]:
    return {n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}


def evaluate(expr: str, metrics: Mapping[str, Mapping[str, float]], key: str = "claim",
             seed_metrics: Mapping[str, Mapping[int, Mapping[str, float]]] | None = None) -> Any:
    """Evaluate ``expr`` against ``metrics[variant][metric]`` (aggregates over seeds);
    ``paired(...)`` and ``paired_se(...)`` read ``seed_metrics[variant][seed][metric]``."""
    return _value(expr, metrics, key, seed_metrics)[0]


def _per_seed(node: ast.AST, seed_metrics, run) -> list[float]:
    """``node`` evaluated on every seed all of its variants ran."""
    variants = _node_variants(node)
    for v in variants:
        if v not in seed_metrics:
            raise MissingMetric(f"variant {v!r} has no results")
    common = set.intersection(*(set(seed_metrics[v]) for v in variants)) if variants else set()
    if not common:
        raise MissingMetric("no seed shared by " + ", ".join(sorted(variants)))
    return [float(run(node, {v: seed_metrics[v][s] for v in variants})) for s in sorted(common)]


class _Evaluator:
    def __init__(self, expr: str, key: str, seed_metrics):
        self.expr, self.key, self.seed_metrics = expr, key, seed_metrics
        self.nan_seen = False

    def run(self, node: ast.AST, metrics) -> Any:
        expr, key = self.expr, self.key

        def ev(child: ast.AST) -> Any:
            return self.run(child, metrics)

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
            val = metrics[variant][metric]
            if isinstance(val, float) and math.isnan(val):
                self.nan_seen = True
            return val
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
        if isinstance(node, ast.Call) and node.func.id in _SEED_FUNCS:
            vals = _per_seed(node.args[0], self.seed_metrics, self.run)
            mean, se = mean_se(vals)
            out = mean if node.func.id == "paired" else se
            self.nan_seen = self.nan_seen or math.isnan(out)
            return out
        if isinstance(node, ast.Call):
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise ConfigError(key, expr, f"unsupported syntax {type(node).__name__}")


@dataclass
class ClaimOutcome:
    name: str
    paper: str
    measured: str
    holds: bool
    gate: bool
    error: str = ""
    skipped: bool = False   # its variants were not run (only=...): neither holds nor fails
    cells: list = field(default_factory=list)   # per axis cell: {cell, holds, measured, error}
    premise: str = ""                    # the premise expression ("" when the claim names none)
    premise_holds: bool | None = None    # None: no premise, or its variants were not run
    premise_measured: str = ""
    premise_error: str = ""
    measured_pm: str = ""                # the measured figure with "± SE" where it is a mean over seeds

    @property
    def status(self) -> str:
        """One of STATUSES: a claim whose premise fails is "premise not met", not the technique's."""
        return outcome_status(self)


STATUSES = ("holds", "fails", "premise not met", "not run")


def outcome_status(c: Any) -> str:
    """The scoreboard status of a ClaimOutcome (or its stored dict)."""
    get = c.get if isinstance(c, Mapping) else lambda k, d=None: getattr(c, k, d)
    if get("skipped", False):
        return "not run"
    if get("premise_holds", None) is False:
        return "premise not met"
    return "holds" if get("holds", False) else "fails"


def _value(expr: str, metrics, key: str, seed_metrics) -> tuple[Any, bool]:
    """The expression's value, and whether a NaN was read on the way (a NaN compares False)."""
    ev = _Evaluator(expr, key, seed_metrics or {})
    return ev.run(parse_expr(expr, key), metrics), ev.nan_seen


def _measured_pm(expr: str, metrics, seed_metrics) -> str:
    """``expr``'s figure with "± SE" on each term that is a mean over seeds: ``paired(X)`` (its
    ``paired_se``) or a bare ``variant.metric`` with a finite ``metric_se``; "" when no term has one."""
    body = parse_expr(expr, "measured").body
    terms = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    parts, any_se = [], False
    for t in terms:
        ev = _Evaluator(expr, "measured", seed_metrics or {})
        val, se = ev.run(t, metrics), None
        if isinstance(t, ast.Call) and isinstance(t.func, ast.Name) and t.func.id == "paired":
            se = mean_se(_per_seed(t.args[0], seed_metrics or {}, ev.run))[1]
        elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
            se = metrics.get(t.value.id, {}).get(f"{t.attr}_se")
        if isinstance(se, (int, float)) and math.isfinite(se):
            any_se = True
            parts.append(f"{fmt(val)} ± {fmt(float(se))}")
        else:
            parts.append(fmt(val))
    if not any_se:
        return ""  # (a term that cannot be computed raised: the caller shows the plain figure)
    return "[" + ", ".join(parts) + "]" if isinstance(body, (ast.List, ast.Tuple)) else parts[0]


def check(claim: Claim, metrics: Mapping[str, Mapping[str, float]],
          seed_metrics: Mapping[str, Mapping[int, Mapping[str, float]]] | None = None) -> ClaimOutcome:
    """Evaluate one claim (every cell of its axes); a missing metric or a NaN makes a cell fail,
    with the reason attached."""
    cells, measured_parts, pm_parts, errors, has_pm = [], [], [], [], False
    for cell, holds_expr, measured_expr in claim.expressions():
        label = ",".join(str(v) for v in cell.values())
        measured, ok, error, pm = "", False, "", ""
        try:
            if measured_expr:
                measured = fmt(_value(measured_expr, metrics, f"claims.{claim.name}.measured", seed_metrics)[0])
                with contextlib.suppress(MissingMetric, ValueError, ZeroDivisionError, TypeError):
                    pm = _measured_pm(measured_expr, metrics, seed_metrics)  # display only: never decides
            value, nan_seen = _value(holds_expr, metrics, f"claims.{claim.name}.holds", seed_metrics)
            if isinstance(value, float) and math.isnan(value):
                raise ValueError("NaN")
            ok = bool(value)
            if not ok and nan_seen:
                error = "a NaN was compared (a NaN metric, e.g. a target never reached, or a standard error of one seed)"
        except (MissingMetric, ValueError, ZeroDivisionError, TypeError) as e:
            measured, error = measured or "n/a", str(e)
        cells.append({"cell": cell, "holds": ok, "measured": measured, "error": error})
        measured_parts.append(f"{label}: {measured}" if label else measured)
        pm_parts.append((f"{label}: " if label else "") + (pm or measured))
        has_pm = has_pm or bool(pm)
        if error:
            errors.append(f"{label}: {error}" if label else error)
    held = sum(c["holds"] for c in cells)
    need = len(cells) if claim.at_least is None else claim.at_least
    measured = "; ".join(measured_parts)
    if claim.over:
        measured = f"{held}/{len(cells)} cells hold (need {need}) · " + measured
    out = ClaimOutcome(claim.name, claim.paper, measured, held >= need, claim.gate, error="; ".join(errors),
                       cells=cells if claim.over else [],
                       measured_pm=(measured.split(" · ")[0] + " · " if claim.over else "") + "; ".join(pm_parts)
                       if has_pm else "")
    premise = claim.premise_claim()
    if premise is not None:
        p = check(premise, metrics, seed_metrics)
        # only a premise measured false excuses a failure: a missing metric or a NaN leaves it unknown
        cells = p.cells or [{"holds": p.holds, "error": p.error}]
        met = True if p.holds else (False if any(not c["holds"] and not c["error"] for c in cells) else None)
        out.premise, out.premise_holds, out.premise_measured, out.premise_error = claim.premise, met, p.measured, p.error
    return out
