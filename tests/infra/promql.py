"""Read our Grafana dashboards: every panel's PromQL, with Grafana's variables filled in."""
from __future__ import annotations

import json
import re
from pathlib import Path

from tests.infra.svc import ROOT

DASHBOARDS = sorted((ROOT / "dashboards" / "json").glob("*.json"))


def panels(path: Path) -> list[dict]:
    """Panels of a dashboard, including those nested in rows."""
    out = []
    for p in json.loads(path.read_text())["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def targets(path: Path) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query target of every panel."""
    return [(p["title"], t["expr"]) for p in panels(path) for t in p.get("targets", []) if t.get("expr")]


def fill(expr: str, values: dict[str, str]) -> str:
    """Substitute $var / ${var} as Grafana would; unknown template variables match anything."""
    def sub(m):
        name = m.group(1) or m.group(2)
        return values.get(name, ".*")
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, expr)


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACES = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_RANGES = re.compile(r"\[[^\]]*\]")
_WORD = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "group", "rate", "irate", "increase", "delta", "idelta", "deriv", "predict_linear", "histogram_quantile",
    "label_replace", "label_join", "abs", "ceil", "floor", "round", "clamp", "clamp_min", "clamp_max", "exp",
    "ln", "log2", "log10", "sqrt", "time", "timestamp", "vector", "scalar", "sort", "sort_desc", "absent",
    "changes", "resets", "last_over_time", "max_over_time", "min_over_time", "avg_over_time", "sum_over_time",
    "count_over_time", "quantile_over_time", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "offset", "bool", "inf", "nan",
}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (strings, matchers, groupings, ranges removed)."""
    e = _STRINGS.sub('""', expr)
    e = _BRACES.sub(" ", e)
    e = _GROUPING.sub(" ", e)
    e = _RANGES.sub(" ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)
    e = re.sub(r"\b\d+(\.\d+)?([eE][+-]?\d+)?\b", " ", e)
    return {w for w in _WORD.findall(e) if w.lower() not in _PROMQL_WORDS}


def labels_used(expr: str) -> dict[str, set[str]]:
    """{metric: labels it is matched on} plus {'*': labels used in by()/without() groupings}."""
    out: dict[str, set[str]] = {}
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}", expr):
        out.setdefault(m.group(1), set()).update(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(2)))
    for m in _GROUPING.finditer(expr):
        out.setdefault("*", set()).update(x.strip() for x in m.group(1).split(",") if x.strip())
    return out
