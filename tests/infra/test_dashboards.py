"""Static checks of dashboards/: every metric (and label) a panel queries is one the code exports.

Exported metrics are read from the code itself, not from a list kept by hand:
- dtlab's: the Gauge/Counter/Histogram calls in pipelines/stages/execute.py's ``Board`` (Ray adds ``ray_``),
  with their tag keys;
- Ray's system metrics: the gauges of Ray's reporter agent (METRICS_GAUGES in the installed
  ray/dashboard/modules/reporter/reporter_agent.py, tag keys from ray.dashboard.consts), plus the
  core metrics Ray's own Grafana dashboards query (ray/dashboard/modules/metrics/dashboards).
"""
from __future__ import annotations

import ast
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from tests.infra.promql import DASHBOARDS, labels_used, metric_names, panels, targets
from tests.infra.svc import ROOT

# labels Prometheus or Ray's exporter add to every series
ADDED_LABELS = {"instance", "job", "SessionName", "Version", "Component", "NodeAddress", "WorkerId", "__name__"}


def _eval_tags(node: ast.AST, names: dict) -> tuple:
    return tuple(eval(compile(ast.Expression(node), "<tags>", "eval"), {"__builtins__": {}}, dict(names)))


@lru_cache
def dtlab_metrics() -> dict[str, set[str]]:
    """{prometheus name: tag keys} of the metrics Board in pipelines/stages/execute.py creates."""
    tree = ast.parse((ROOT / "pipelines" / "stages" / "execute.py").read_text())
    board = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Board")
    out, names = {}, {}
    for node in ast.walk(board):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                names[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("Gauge", "Counter", "Histogram") and node.args \
                and isinstance(node.args[0], ast.Constant):
            tags = _eval_tags(node.args[2], names) if len(node.args) > 2 else ()
            out["ray_" + node.args[0].value] = set(tags)
    assert out, "found no metrics in Board"
    return out


@lru_cache
def ray_metrics() -> dict[str, set[str] | None]:
    """{prometheus name: tag keys or None (unknown)} of Ray's own metrics."""
    import ray
    import ray.dashboard.consts as consts

    base = Path(ray.__file__).parent / "dashboard" / "modules"
    consts_ns = {k: v for k, v in vars(consts).items() if k.endswith("_TAG_KEYS")}
    tree = ast.parse((base / "reporter" / "reporter_agent.py").read_text())
    out: dict[str, set[str] | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "METRICS_GAUGES" for t in node.targets):
            for call in node.value.values:
                name = call.args[0].value
                try:
                    out["ray_" + name] = set(_eval_tags(call.args[3], consts_ns))
                except Exception:  # noqa: BLE001 - a tag expression we cannot evaluate: names only
                    out["ray_" + name] = None
    assert "ray_node_cpu_utilization" in out, "Ray's reporter agent no longer defines node_cpu_utilization"
    for f in (base / "metrics" / "dashboards").glob("*_panels.py"):
        for name in re.findall(r"\b(ray_[a-z0-9_]+)\b", f.read_text()):
            out.setdefault(name, None)
    return out


def unknown_metrics(expr: str) -> set[str]:
    return metric_names(expr) - set(dtlab_metrics()) - set(ray_metrics())


def unknown_labels(expr: str) -> set[str]:
    known = {**ray_metrics(), **dtlab_metrics()}
    used = labels_used(expr)
    bad = set()
    all_labels = set(ADDED_LABELS)
    for metric in metric_names(expr):
        tags = known.get(metric)
        if tags is None:
            return set()  # a Ray core metric whose labels we do not know: names only
        all_labels |= tags
        bad |= used.get(metric, set()) - tags - ADDED_LABELS
    bad |= used.get("*", set()) - all_labels
    return bad


def _variable_queries(path: Path) -> list[str]:
    out = []
    for v in json.loads(path.read_text())["templating"]["list"]:
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip())
            assert m, f"{path.name}: variable {v['name']}: unsupported query {q}"
            out.append(m.group(1))
    return out


def test_dashboards_exist():
    assert {p.stem for p in DASHBOARDS} >= {"platform", "training"}


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda p: p.stem)
def test_every_panel_metric_is_exported(dashboard):
    exprs = targets(dashboard)
    assert exprs, f"{dashboard.name} has no queries"
    problems = []
    for title, expr in exprs + [("variable", q) for q in _variable_queries(dashboard)]:
        if not metric_names(expr):
            problems.append(f"{title}: no metric in {expr}")
        if unknown_metrics(expr):
            problems.append(f"{title}: unknown metrics {sorted(unknown_metrics(expr))}")
        if unknown_labels(expr):
            problems.append(f"{title}: labels not exported {sorted(unknown_labels(expr))} in {expr}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_is_valid_grafana_json(dashboard):
    d = json.loads(dashboard.read_text())
    for key in ("uid", "title", "panels", "templating", "schemaVersion"):
        assert key in d, f"{dashboard.name}: missing {key}"
    variables = {v["name"] for v in d["templating"]["list"]}
    ps = panels(dashboard)
    ids = [p["id"] for p in ps]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for p in ps:
        assert {"type", "title", "gridPos", "targets"} <= set(p), p.get("title")
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and g["w"] > 0 and g["h"] > 0, f"{p['title']}: gridPos {g}"
        assert p["datasource"]["uid"] in {"${datasource}", "dtlab-prometheus"}
        for t in p["targets"]:
            for var in re.findall(r"\$\{?(\w+)\}?", t["expr"]):
                assert var in variables or var.startswith("__"), f"{p['title']}: undefined variable ${var}"
    assert len({json.loads(p.read_text())["uid"] for p in DASHBOARDS}) == len(DASHBOARDS), "dashboard uids collide"


def test_training_dashboard_plots_error_feedback_grad_norm():
    exprs = [e for _, e in targets(next(p for p in DASHBOARDS if p.stem == "training"))]
    assert any('metric="grad_norm_sq"' in e and "ray_dtlab_live_metric" in e for e in exprs)
    src = (ROOT / "components" / "training" / "error_feedback" / "technique.py").read_text()
    assert "grad_norm_sq=" in src, "error_feedback no longer pushes grad_norm_sq via ctx.progress"


def test_provisioning_points_at_prometheus_and_these_dashboards():
    ds = yaml.safe_load((ROOT / "dashboards/provisioning/datasources/dtlab-prometheus.yaml").read_text())
    (src,) = ds["datasources"]
    assert src["type"] == "prometheus" and src["uid"] == "dtlab-prometheus" and src["url"]
    prov = yaml.safe_load((ROOT / "dashboards/provisioning/dashboards/dtlab.yaml").read_text())
    (p,) = prov["providers"]
    assert p["type"] == "file" and p["options"]["path"]


@pytest.mark.parametrize("expr, bad", [
    ("max by (variant) (ray_dtlab_no_such_metric)", "metric"),
    ('max by (variant) (ray_dtlab_variant_step{experimnt="x"})', "label"),
    ("sum by (hostname) (ray_node_cpu_utilization)", "label"),
])
def test_checker_catches_mistakes(expr, bad):
    assert (unknown_metrics(expr) if bad == "metric" else unknown_labels(expr))
