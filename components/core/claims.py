"""Claims: a paper's statement as a check over variants' final metrics.

A claim is written in the experiment config as an expression over ``variant.metric`` names::

    holds: "ef21.final_grad_norm_sq <= 1e-16 and cgd.final_grad_norm_sq >= 1e-2"
    measured: "ef21.final_grad_norm_sq"

Expressions are parsed with :mod:`ast` and only arithmetic, comparisons, boolean logic, constants,
``variant.metric`` look-ups and a few functions are allowed: no names from Python, no calls to
anything else. A variant without results (a crashed run) makes the claim fail, never pass. A metric
that a variant which ran did not report (a grid value not run, ``rates`` without 20) leaves the claim
"not run": it never fails on it, and a NaN (a real value: a target never reached) still fails it.
Terms of ``measured`` that cannot be computed show as n/a; only ``holds`` decides whether a claim is
judged.

Over seeds: ``variant.m`` is the mean over the variant's seeds, ``variant.m_se`` its standard
error and ``variant.m_n`` the count (components.core.seeds). ``paired(expr)`` evaluates ``expr``
on every seed that all the variants it names ran, and gives the mean of those per-seed values;
``paired_se(expr)`` their standard error (NaN below two seeds, so the claim fails). "gain >= 0.05
and > 2 SE" is ``paired(a.m - b.m) >= 0.05 and paired(a.m - b.m) > 2 * paired_se(a.m - b.m)``.
``seed_max(expr)`` and ``seed_min(expr)`` give the worst and best of those per-seed values: "every
seed left the plateau" is ``seed_max(a.final_loss) < a.plateau_loss``, where a mean would let one
good seed carry a stuck one.

Over a grid axis: a claim with ``over: axis`` (or a list of axes) is checked once per value,
with ``{axis}`` in ``holds``/``measured`` replaced by it; it holds when at least ``at_least``
of the cells hold (default: every cell).

Premises: ``premise`` is the measured precondition under which the paper states the claim (the
small model is over-confident, communication is comparable to compute), an expression in the same
language, checked on the same cells. A claim whose premise is measured false is "premise not met"
whichever way its own check came out: a failure there is the setting's, not the technique's, and a
pass there is vacuous (homogeneous agents cannot show a stall). ``holds`` keeps the raw check; a
premise that cannot be computed (a missing metric, a NaN) is unknown and never excuses a failure.

Timed claims: ``noise: variant.figure_noise`` (or a list of them) names the noise floor of each timed
figure the claim gates, in the figure's own units (components.core.timing: the same work timed
against itself in the same interleaving). The claim is evaluated again with each named figure moved
by minus and plus its floor (every combination, seed values alike); when a verdict there differs
from the measured one, the effect lies inside the noise floor and the claim reads "inconclusive":
neither holds nor fails (``holds`` is then False). A floor that cannot be read leaves the measured
verdict standing, with a note.
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
SEED_FUNCS = ("paired", "paired_se", "seed_max", "seed_min")   # evaluate their argument once per shared seed
_ALLOWED_CALLS = set(_FUNCS) | set(SEED_FUNCS)
_AXIS = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MissingMetric(KeyError):
    """A claim referred to a variant or metric that the run did not produce."""


class MissingVariant(MissingMetric):
    """A claim referred to a variant with no results at all (it failed, or was not run)."""


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
    noise: tuple[str, ...] = ()              # ``variant.figure_noise`` floors of the timed figures it gates

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
        if isinstance(node, ast.Call) and node.func.id in SEED_FUNCS and len(node.args) != 1:
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
            raise MissingVariant(f"variant {v!r} has no results")
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
                raise MissingVariant(f"variant {variant!r} has no results")
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
        if isinstance(node, ast.Call) and node.func.id in SEED_FUNCS:
            vals = _per_seed(node.args[0], self.seed_metrics, self.run)
            if node.func.id in ("seed_max", "seed_min"):
                out = float(max(vals) if node.func.id == "seed_max" else min(vals))
            else:
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
    skipped: bool = False   # not judged (only=..., a metric not reported): neither holds nor fails
    cells: list = field(default_factory=list)   # per axis cell: {cell, holds, measured, error, status}
    premise: str = ""                    # the premise expression ("" when the claim names none)
    premise_holds: bool | None = None    # None: no premise, or its variants were not run
    premise_measured: str = ""
    premise_error: str = ""
    measured_pm: str = ""                # the measured figure with "± SE" where it is a mean over seeds
    inconclusive: bool = False           # a timed effect inside its noise floor: neither holds nor fails
    noise_measured: str = ""             # each timed figure with its noise floor ("a.x 1.5 ± 0.04")

    @property
    def status(self) -> str:
        """One of STATUSES: a claim whose premise fails is "premise not met", not the technique's."""
        return outcome_status(self)


STATUSES = ("holds", "fails", "inconclusive", "premise not met", "not run")


def outcome_status(c: Any) -> str:
    """The scoreboard status of a ClaimOutcome (or its stored dict)."""
    get = c.get if isinstance(c, Mapping) else lambda k, d=None: getattr(c, k, d)
    if get("skipped", False):
        return "not run"
    if get("premise_holds", None) is False:
        return "premise not met"
    if get("inconclusive", False):
        return "inconclusive"
    return "holds" if get("holds", False) else "fails"


def noise_figure(ref: str, key: str = "noise") -> tuple[str, str, str]:
    """(variant, figure, noise metric) of a ``noise:`` entry ``variant.figure_noise``."""
    try:
        body = ast.parse(ref, mode="eval").body
    except SyntaxError:
        body = None
    ok = (isinstance(body, ast.Attribute) and isinstance(body.value, ast.Name) and body.attr.endswith("_noise")
          and len(body.attr) > len("_noise"))
    if not ok:
        raise ConfigError(key, ref, "a metric name variant.FIGURE_noise (the noise floor of the timed figure "
                                    "variant.FIGURE, components.core.timing)")
    return body.value.id, body.attr[:-len("_noise")], body.attr


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


def _measured_text(expr: str, metrics, key: str, seed_metrics) -> str:
    """The measured figure; each term of a list that cannot be computed (its variant not run, a
    metric not reported) shows as n/a, so one absent term never hides the others."""
    body = parse_expr(expr, key).body
    terms = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    vals = []
    for t in terms:
        try:
            vals.append(_Evaluator(expr, key, seed_metrics or {}).run(t, metrics))
        except (MissingMetric, ValueError, ZeroDivisionError, TypeError):
            vals.append(None)
    return fmt(vals if isinstance(body, (ast.List, ast.Tuple)) else vals[0], none="n/a")


def _perturbed(metrics, seed_metrics, moves: list[tuple[str, str, float, dict]]):
    """Copies of ``metrics`` and ``seed_metrics`` with each (variant, figure) moved by its amount
    (``per_seed``: the seed's own amount where it reported one)."""
    m = {v: dict(d) for v, d in metrics.items()}
    sm = {v: {s: dict(d) for s, d in per.items()} for v, per in (seed_metrics or {}).items()}
    for variant, figure, amount, per_seed in moves:
        if figure in m.get(variant, {}):
            m[variant][figure] += amount
        for s, d in sm.get(variant, {}).items():
            if figure in d:
                d[figure] += per_seed.get(s, amount)
    return m, sm


def _noise_verdict(claim: Claim, cell: Mapping[str, Any], holds_expr: str, ok: bool, metrics,
                   seed_metrics) -> tuple[bool, str, str]:
    """(inconclusive, figure ± floor text, note): ``holds`` re-evaluated with every timed figure at
    minus and plus its noise floor (each combination); inconclusive when any verdict differs."""
    floors, shown = [], []
    for ref in claim.noise:
        variant, figure, nm = noise_figure(substitute(ref, cell), f"claims.{claim.name}.noise")
        n = metrics.get(variant, {}).get(nm)
        if n is None or not isinstance(n, (int, float)) or math.isnan(n):
            return False, "", f"noise floor unknown ({variant}.{nm} not reported)"
        n = abs(float(n))
        per_seed = {s: abs(d[nm]) for s, d in (seed_metrics or {}).get(variant, {}).items()
                    if isinstance(d.get(nm), (int, float)) and not math.isnan(d[nm])}
        floors.append((variant, figure, n, per_seed))
        shown.append(f"{variant}.{figure} {fmt(metrics.get(variant, {}).get(figure))} ± {fmt(n)}")
    for signs in itertools.product((-1.0, 1.0), repeat=len(floors)):
        moves = [(v, f, sg * n, {s: sg * x for s, x in ps.items()}) for sg, (v, f, n, ps) in zip(signs, floors)]
        m, sm = _perturbed(metrics, seed_metrics, moves)
        try:
            value = _value(holds_expr, m, f"claims.{claim.name}.holds", sm)[0]
        except (MissingMetric, ValueError, ZeroDivisionError, TypeError):
            continue
        if bool(value) != ok:
            return True, "; ".join(shown), ""
    return False, "; ".join(shown), ""


def _reason(e: BaseException) -> str:
    """The message of ``e`` (a KeyError's str() would quote it)."""
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)


def _judge_cell(claim: Claim, cell, holds_expr: str, measured_expr: str, metrics, seed_metrics) -> dict:
    """One cell: {cell, holds, measured, error, status, pm, noise}; status is one of STATUSES but
    "premise not met" (the premise is checked apart)."""
    measured, ok, error, pm, status, noise = "", False, "", "", "fails", ""
    if measured_expr:
        measured = _measured_text(measured_expr, metrics, f"claims.{claim.name}.measured", seed_metrics)
        with contextlib.suppress(MissingMetric, ValueError, ZeroDivisionError, TypeError):
            pm = _measured_pm(measured_expr, metrics, seed_metrics)  # display only: never decides
    try:
        value, nan_seen = _value(holds_expr, metrics, f"claims.{claim.name}.holds", seed_metrics)
        if isinstance(value, float) and math.isnan(value):
            raise ValueError("NaN")
        ok = bool(value)
        status = "holds" if ok else "fails"
        if not ok and nan_seen:
            error = "a NaN was compared (a NaN metric, e.g. a target never reached, or a standard error of one seed)"
        elif claim.noise:
            inside, noise, note = _noise_verdict(claim, cell, holds_expr, ok, metrics, seed_metrics)
            if inside:
                status, ok = "inconclusive", False
                error = f"inconclusive: inside the noise floor ({noise}); measured verdict: {'holds' if value else 'fails'}"
            error = error or note
    except MissingVariant as e:          # a variant with no results (it failed): the claim fails
        measured, error = measured or "n/a", _reason(e)
    except MissingMetric as e:           # a metric not reported: not judged, never failed
        measured, error, status = measured or "n/a", f"not run: {_reason(e)}", "not run"
    except (ValueError, ZeroDivisionError, TypeError) as e:
        measured, error = measured or "n/a", str(e)
    return {"cell": dict(cell), "holds": ok, "measured": measured, "error": error, "status": status, "pm": pm,
            "noise": noise}


def check(claim: Claim, metrics: Mapping[str, Mapping[str, float]],
          seed_metrics: Mapping[str, Mapping[int, Mapping[str, float]]] | None = None) -> ClaimOutcome:
    """Evaluate one claim (every cell of its axes). A variant without results or a NaN makes a
    cell fail, a metric not reported leaves it "not run", a timed effect inside its noise floor
    "inconclusive"; the reason is attached. With ``over``, the claim holds when ``at_least`` cells
    hold, fails when even every undecided cell holding would not reach that, and is otherwise not
    run (some cell not run) or inconclusive."""
    cells = [_judge_cell(claim, cell, h, m, metrics, seed_metrics) for cell, h, m in claim.expressions()]
    measured_parts, pm_parts, errors = [], [], []
    for c in cells:
        label = ",".join(str(v) for v in c["cell"].values())
        measured_parts.append(f"{label}: {c['measured']}" if label else c["measured"])
        pm_parts.append((f"{label}: " if label else "") + (c["pm"] or c["measured"]))
        if c["error"]:
            errors.append(f"{label}: {c['error']}" if label else c["error"])
    count = {s: sum(c["status"] == s for c in cells) for s in ("holds", "inconclusive", "not run")}
    need = len(cells) if claim.at_least is None else claim.at_least
    if count["holds"] >= need:
        status = "holds"
    elif count["holds"] + count["inconclusive"] + count["not run"] < need:
        status = "fails"
    else:
        status = "not run" if count["not run"] else "inconclusive"
    measured = "; ".join(measured_parts)
    if claim.over:
        measured = f"{count['holds']}/{len(cells)} cells hold (need {need}) · " + measured
    has_pm = any(c["pm"] for c in cells)
    out = ClaimOutcome(claim.name, claim.paper, measured, status == "holds", claim.gate, error="; ".join(errors),
                       skipped=status == "not run", inconclusive=status == "inconclusive",
                       cells=[{k: c[k] for k in ("cell", "holds", "measured", "error", "status")} for c in cells]
                       if claim.over else [],
                       measured_pm=(measured.split(" · ")[0] + " · " if claim.over else "") + "; ".join(pm_parts)
                       if has_pm else "",
                       noise_measured="; ".join(c["noise"] for c in cells if c["noise"]))
    premise = claim.premise_claim()
    if premise is not None:
        p = check(premise, metrics, seed_metrics)
        # only a premise measured false excuses a failure: a missing metric or a NaN leaves it unknown
        pcells = p.cells or [{"holds": p.holds, "error": p.error}]
        met = True if p.holds else (False if any(not c["holds"] and not c["error"] for c in pcells) else None)
        out.premise, out.premise_holds, out.premise_measured, out.premise_error = claim.premise, met, p.measured, p.error
    return out
