"""Experiment specs: read a composed Hydra config, check every part, before Ray starts.

An experiment config (conf/experiment/NAME.yaml) holds::

    name, family, summary, seed
    resources: {num_cpus: 1, nodes: 0, max_parallel: null}  # CPUs per variant task; NodeActor pool size;
                                      # variants in flight (null: as many as the CPUs fit)
    prepare:   {out_name: {step: registered_prepare_step, params: {...}}}
    common:    {technique: {...}}     # params merged under the own params of that technique's variants
    variants:  {vname: {technique: registered_name, role: technique|baseline, params: {...}}}
    claims:    {cname: {holds: "expr", paper: "...", measured: "expr", gate: true}}
    report:    {baseline: vname, table: [metric, ...], plots: [{kind: series, metric: m, ...}]}
    debug:     {dotted.key: value}    # the tiny flavour, applied when debug=true; variants.X: null drops X

:func:`build_spec` turns that into an :class:`ExperimentSpec` or raises ConfigError.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from components.core.claims import Claim, parse_expr, referenced_variants
from components.core.errors import ConfigError, require
from components.core.params import parse_params
from components.core.registry import get_prepare_step, get_technique

ROLES = ("technique", "baseline", "control")
_TOP_KEYS = {"name", "family", "summary", "seed", "resources", "prepare", "common", "variants", "claims",
             "report", "debug"}
PLOT_KINDS = ("series", "bar", "scatter")


@dataclass
class VariantSpec:
    name: str
    technique: str
    role: str
    family: str
    params_raw: dict[str, Any]
    params: Any  # the parsed dataclass (validated)


@dataclass
class PrepareSpec:
    name: str
    step: str
    params_raw: dict[str, Any]


@dataclass
class ExperimentSpec:
    name: str
    family: str
    summary: str
    seed: int
    num_cpus: float
    nodes: int
    node_cpus: float
    max_parallel: int | None
    prepare: list[PrepareSpec]
    variants: list[VariantSpec]
    claims: list[Claim]
    report: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def variant(self, name: str) -> VariantSpec:
        return next(v for v in self.variants if v.name == name)


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def debug_dropped(exp: dict) -> set[str]:
    """Variants the ``debug`` block drops with ``variants.NAME: null`` (claims on them show "not run")."""
    return {str(k).split(".", 1)[1] for k, v in (exp.get("debug") or {}).items()
            if v is None and str(k).startswith("variants.") and str(k).count(".") == 1}


def apply_debug(exp: dict) -> dict:
    """Apply the experiment's ``debug`` block (dotted keys) to a copy of it; ``variants.X: null``
    marks variant X to be skipped (see :func:`debug_dropped`), it does not erase its definition."""
    exp = copy.deepcopy(exp)
    dropped = debug_dropped(exp)
    for dotted, value in (exp.get("debug") or {}).items():
        if value is None and str(dotted).split(".", 1)[-1] in dropped and str(dotted).startswith("variants."):
            continue
        node = exp
        parts = str(dotted).split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                raise ConfigError(f"experiment.debug.{dotted}", value, f"a path into the experiment ('{p}' is not a mapping)")
            node = node[p]
        node[parts[-1]] = value
    return exp


def build_spec(exp: dict, debug: bool = False, only: list[str] | None = None) -> ExperimentSpec:
    """Validate an experiment mapping (already resolved to plain Python) into a spec."""
    require(isinstance(exp, dict), "experiment", exp, "a mapping")
    unknown = sorted(set(exp) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"experiment.{unknown[0]}", exp[unknown[0]], "unknown key; allowed: " + ", ".join(sorted(_TOP_KEYS)))
    dropped: set[str] = set()
    if debug:
        dropped = debug_dropped(exp)
        unknown_drop = sorted(dropped - set(exp.get("variants") or {}))
        if unknown_drop:
            raise ConfigError(f"experiment.debug.variants.{unknown_drop[0]}", None, "a variant of this experiment to drop")
        exp = apply_debug(exp)
    name = exp.get("name")
    require(isinstance(name, str) and name, "experiment.name", name, "a non-empty string")
    seed = exp.get("seed", 0)
    require(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0, "experiment.seed", seed, "a non-negative integer")
    resources = exp.get("resources") or {}
    bad = sorted(set(resources) - {"num_cpus", "nodes", "node_cpus", "max_parallel"})
    if bad:
        raise ConfigError(f"experiment.resources.{bad[0]}", resources[bad[0]],
                          "unknown key; allowed: num_cpus, nodes, node_cpus, max_parallel")
    max_parallel = resources.get("max_parallel")
    require(max_parallel is None or (isinstance(max_parallel, int) and max_parallel >= 1),
            "experiment.resources.max_parallel", max_parallel, "null (as many as the CPUs fit) or a positive integer")
    num_cpus = resources.get("num_cpus", 1)
    require(isinstance(num_cpus, (int, float)) and 0 <= num_cpus <= 64, "experiment.resources.num_cpus", num_cpus, "a number in [0, 64]")
    nodes = resources.get("nodes", 0)
    require(isinstance(nodes, int) and 0 <= nodes <= 256, "experiment.resources.nodes", nodes, "an integer in [0, 256]")
    node_cpus = resources.get("node_cpus", 0)
    require(isinstance(node_cpus, (int, float)) and node_cpus >= 0, "experiment.resources.node_cpus", node_cpus, "a non-negative number")

    prepares = []
    for pname, p in (exp.get("prepare") or {}).items():
        key = f"experiment.prepare.{pname}"
        require(isinstance(p, dict) and "step" in p, key, p, "a mapping with 'step' and 'params'")
        step = get_prepare_step(p["step"], f"{key}.step")
        raw = p.get("params") or {}
        if step.params is not None:
            parse_params(step.params, raw, f"{key}.params")
        prepares.append(PrepareSpec(pname, p["step"], raw))

    variants_raw = exp.get("variants") or {}
    require(isinstance(variants_raw, dict) and variants_raw, "experiment.variants", variants_raw, "at least one variant")
    if only:
        missing = [v for v in only if v not in variants_raw]
        if missing:
            raise ConfigError("only", missing[0], "a variant of this experiment: " + ", ".join(variants_raw))
    common = exp.get("common") or {}
    require(isinstance(common, dict), "experiment.common", common, "a mapping: technique name -> shared params")
    for tname in common:
        get_technique(tname, f"experiment.common.{tname}")
    variants = []
    for vname, v in variants_raw.items():
        key = f"experiment.variants.{vname}"
        require(str(vname).isidentifier(), key, vname, "a variant name that is a Python identifier")
        require(isinstance(v, dict) and "technique" in v, key, v, "a mapping with 'technique', 'role', 'params'")
        extra = sorted(set(v) - {"technique", "role", "params"})
        if extra:
            raise ConfigError(f"{key}.{extra[0]}", v[extra[0]], "unknown key; allowed: technique, role, params")
        tech = get_technique(v["technique"], f"{key}.technique")
        role = v.get("role", "technique")
        require(role in ROLES, f"{key}.role", role, "one of " + ", ".join(ROLES))
        raw = deep_merge(common.get(tech.name) or {}, v.get("params") or {})
        parsed = parse_params(tech.params, raw, f"{key}.params") if tech.params is not None else raw
        if tech.validate is not None:
            try:
                tech.validate(parsed, exp)
            except ConfigError as e:
                raise ConfigError(e.key if e.key.startswith("experiment.") else f"{key}.params.{e.key}", e.value, e.allowed) from None
        if (only and vname not in only) or vname in dropped:
            continue
        variants.append(VariantSpec(vname, tech.name, role, tech.family, raw, parsed))

    names = {v for v in variants_raw}
    claims = []
    for cname, c in (exp.get("claims") or {}).items():
        key = f"experiment.claims.{cname}"
        require(isinstance(c, dict) and "holds" in c, key, c, "a mapping with 'holds' (and 'paper', 'measured')")
        extra = sorted(set(c) - {"holds", "paper", "measured", "gate"})
        if extra:
            raise ConfigError(f"{key}.{extra[0]}", c[extra[0]], "unknown key; allowed: holds, paper, measured, gate")
        for part in ("holds", "measured"):
            if c.get(part):
                parse_expr(str(c[part]), f"{key}.{part}")
                bad = referenced_variants(str(c[part]), f"{key}.{part}") - names
                if bad:
                    raise ConfigError(f"{key}.{part}", c[part], f"names unknown variant {sorted(bad)[0]!r}; variants: " + ", ".join(names))
        claims.append(Claim(cname, str(c["holds"]), str(c.get("paper", "")), str(c.get("measured", "") or ""),
                            bool(c.get("gate", True))))

    report = dict(exp.get("report") or {})
    base = report.get("baseline")
    if base is not None:
        require(base in names, "experiment.report.baseline", base, "a variant name: " + ", ".join(names))
    for i, plot in enumerate(report.get("plots") or []):
        require(isinstance(plot, dict) and plot.get("kind") in PLOT_KINDS, f"experiment.report.plots[{i}].kind",
                (plot or {}).get("kind") if isinstance(plot, dict) else plot, "one of " + ", ".join(PLOT_KINDS))
    return ExperimentSpec(name, str(exp.get("family", "")), str(exp.get("summary", "")), seed, float(num_cpus),
                          nodes, float(node_cpus), max_parallel, prepares, variants, claims, report, raw=exp)
