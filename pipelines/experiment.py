"""Experiment specs: read a composed Hydra config, check every part, before Ray starts.

An experiment config (conf/experiment/NAME.yaml) holds::

    name, family, summary
    seeds:     [0, 1, 2]              # the seed axis: one task per variant x seed
    resources: {num_cpus: 1, num_gpus: 0, nodes: 0, node_cpus: 0, max_parallel: null}
    device:    auto                   # auto | cpu | cuda: where torch work runs (components.core.devices)
    axes:      {axis: [values]}       # grid axes for variants' ``over`` and claims' ``over``
    prepare:   {entry: {step: registered_step, params: {...}, inputs: {step_input: entry}}}
    common:    {technique: {...}}     # params merged under the own params of that technique's variants
    variants:  {vname: {technique, role, params, seeds, inputs: {tech_input: entry}, over: [axis]}}
    claims:    {cname: {holds, paper, measured, gate, over: axis, at_least: N,
                        premise: expr, premise_measured: expr,    # the measured precondition, its figure
                        kind: empirical | accounting,             # accounting: holds by construction
                        noise: variant.figure_noise | [...],      # timed: inconclusive inside the floor
                        repeat: {SUFFIX: {suffix: VSUFFIX, paper: note}}}}   # the claim again on other variants
    report:    {baseline: vname | {baseline_vname: [vname, ...]},        # a mapping: one per sub-study
                table: [metric, ...], plots: [{kind: series, metric: m, ...},   # series, bar, scatter
                                              {kind: cells, claim: grid_claim, x: axis, group: axis}]}
    robustness: {perturbation: [hydra override, ...]}  # off-tuned re-checks (`dtlab robustness`)
    reach:     {metric: {series: curve, target: variant.metric, below: true}}   # time to a target
    debug:     {dotted.key: value}    # the tiny flavour (merged deeply); variants.X: null drops X
    paper:     {estimate: {flops, minutes, memory_gb, basis},   # the paper-scale flavour, for a GPU
                set: {dotted.key: value}}                           # node: applied as ``debug`` is

:func:`build_spec` turns that into an :class:`ExperimentSpec` (every params block parsed once,
defaults filled in) or raises ConfigError naming the key, the value and what is allowed.
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from components.core.claims import Claim, noise_figure, parse_expr, referenced_variants, substitute, template_axes
from components.core.devices import requested as requested_device
from components.core.errors import ConfigError, require
from components.core.params import parse_params
from components.core.registry import get_prepare_step, get_technique
from pipelines.flavours import FLAVOURS, flavour_block, paper_block

ROLES = ("technique", "baseline", "control")
_TOP_KEYS = {"name", "family", "summary", "seeds", "resources", "device", "axes", "prepare", "common", "variants", "claims",
             "report", "debug", "paper", "robustness", "reach"}
_VARIANT_KEYS = {"technique", "role", "params", "seeds", "inputs", "over"}
_CLAIM_KEYS = {"holds", "paper", "measured", "gate", "over", "at_least", "premise", "premise_measured", "kind",
               "noise", "repeat"}
_REPEAT_KEYS = {"suffix", "paper"}
_VARIANT_REF = re.compile(r"(?<![\w.])([A-Za-z_][\w{}]*)\.(?=[A-Za-z_{])")   # ``variant.`` in a claim expression
# empirical: the paper's claim on the evidence; accounting: holds by construction unless the bookkeeping is
# wrong (a bytes cut fixed by the shapes): a regression check, counted apart from the headline
CLAIM_KINDS = ("empirical", "accounting")
PLOT_KINDS = ("series", "bar", "scatter", "cells")
_AXIS_REF = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class VariantSpec:
    name: str
    technique: str
    role: str
    family: str
    params_raw: dict[str, Any]      # as written (common merged in, grid values substituted)
    params: Any                     # the parsed dataclass (validated, defaults filled in)
    seeds: list[int] = field(default_factory=lambda: [0])
    inputs: dict[str, str] = field(default_factory=dict)   # technique input -> prepare entry
    base: str = ""                  # the variant it was expanded from (grids), else its own name
    cell: dict[str, Any] = field(default_factory=dict)     # axis -> value for grid cells

    @property
    def params_resolved(self) -> dict[str, Any]:
        """The params as the technique sees them, defaults included (what MLflow logs)."""
        return resolved(self.params)


@dataclass
class PrepareSpec:
    name: str
    step: str
    params_raw: dict[str, Any]
    params: Any
    inputs: dict[str, str] = field(default_factory=dict)   # step input -> prepare entry
    seeded: bool = False


@dataclass
class Reach:
    """A derived metric: the x at which a variant's curve first reaches another variant's figure
    (simulated time to the dense run's final loss). Computed per seed after execute, the target
    read from the same seed of the target variant, so that claims can pair it; inf if never."""
    name: str          # the metric it adds to every variant whose result has the curve
    series: str        # a curve logged as (xs, ys, x name): xs = what is reached in (sim seconds, tokens)
    target: str        # variant.metric
    below: bool = True  # reached when y <= target (a loss); false: y >= target (an accuracy)

    @property
    def target_variant(self) -> str:
        return self.target.partition(".")[0]

    @property
    def target_metric(self) -> str:
        return self.target.partition(".")[2]


@dataclass
class ExperimentSpec:
    name: str
    family: str
    summary: str
    seeds: list[int]
    num_cpus: float
    nodes: int
    node_cpus: float
    max_parallel: int | None
    prepare: list[PrepareSpec]
    variants: list[VariantSpec]
    claims: list[Claim]
    report: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, list] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    reach: list[Reach] = field(default_factory=list)
    claim_kinds: dict[str, str] = field(default_factory=dict)   # claim name -> one of CLAIM_KINDS
    device: str = "auto"               # auto | cpu | cuda (components.core.devices)
    num_gpus: float = 0.0              # GPUs per Ray task and Ray Train worker (node actors hold none: README "On GPUs")
    flavour: str = "full"              # full | debug | paper: which block was applied (FLAVOURS)

    @property
    def seed(self) -> int:
        """The first seed (tools outside the DAG that need one)."""
        return self.seeds[0]

    def variant(self, name: str) -> VariantSpec:
        return next(v for v in self.variants if v.name == name)

    def entry(self, name: str) -> PrepareSpec:
        return next(p for p in self.prepare if p.name == name)

    def needed_prepare(self) -> list[tuple[PrepareSpec, list[int | None]]]:
        """The prepare entries the selected variants need, upstream first, each with the seeds it
        is built for (``[None]`` for an unseeded step)."""
        by_name = {p.name: p for p in self.prepare}
        seeds_of: dict[str, set] = {}

        def need(entry: str, seeds: set) -> None:
            p = by_name[entry]
            s = set(seeds) if p.seeded else {None}
            if s <= seeds_of.get(entry, set()):
                return
            seeds_of.setdefault(entry, set()).update(s)
            for up in p.inputs.values():
                need(up, seeds)

        for v in self.variants:
            for entry in v.inputs.values():
                need(entry, set(v.seeds))
        order = topo_order(by_name)
        return [(by_name[n], sorted(seeds_of[n], key=lambda x: -1 if x is None else x)) for n in order if n in seeds_of]


def resolved(params: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        return dataclasses.asdict(params)
    return dict(params or {})


def topo_order(entries: dict[str, PrepareSpec]) -> list[str]:
    """Entries upstream first; a cycle is a ConfigError naming it."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(n: str, path: list[str]) -> None:
        if state.get(n) == 2:
            return
        if state.get(n) == 1:
            cycle = path[path.index(n):] + [n]
            raise ConfigError(f"experiment.prepare.{n}.inputs", " -> ".join(cycle), "prepare steps without a cycle")
        state[n] = 1
        for up in entries[n].inputs.values():
            visit(up, path + [n])
        state[n] = 2
        order.append(n)

    for n in entries:
        visit(n, [])
    return order


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def debug_dropped(exp: dict, flavour: str = "debug") -> set[str]:
    """Variants the flavour's block drops with ``variants.NAME: null`` (claims on them show "not run")."""
    return {str(k).split(".", 1)[1] for k, v in flavour_block(exp, flavour).items()
            if v is None and str(k).startswith("variants.") and str(k).count(".") == 1}


def apply_debug(exp: dict, keep: set[str] = frozenset(), flavour: str = "debug") -> dict:
    """Apply the experiment's ``debug`` block (``flavour="paper"``: its ``paper`` block's ``set``;
    dotted keys) to a copy of it. A mapping value merges into the mapping it names (other keys
    kept); ``variants.X: null`` marks variant X to be skipped (see :func:`debug_dropped`), it does
    not erase its definition. Keys in ``keep`` (dotted keys the command line set) are not overwritten."""
    exp = copy.deepcopy(exp)
    block = flavour_block(exp, flavour)
    where = "debug" if flavour == "debug" else "paper.set"
    dropped = debug_dropped(exp, flavour)
    for dotted, value in block.items():
        dotted = str(dotted)
        if value is None and dotted.startswith("variants.") and dotted.split(".", 1)[-1] in dropped:
            continue
        node = exp
        parts = dotted.split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                raise ConfigError(f"experiment.{where}.{dotted}", value, f"a path into the experiment ('{p}' is not a mapping)")
            node = node[p]
        last = parts[-1]
        if isinstance(value, dict) and isinstance(node.get(last), dict):
            value = deep_merge(node[last], value)
        node[last] = _keep_overridden(node.get(last), value, dotted, keep)
    return exp


def _keep_overridden(current: Any, value: Any, dotted: str, keep: set[str]) -> Any:
    """The debug value, except where a command-line override set this key (or one below it)."""
    if dotted in keep:
        return current
    if isinstance(value, dict) and isinstance(current, dict):
        return {k: (current[k] if f"{dotted}.{k}" in keep and k in current
                    else _keep_overridden(current.get(k), v, f"{dotted}.{k}", keep)) for k, v in value.items()} | {
            k: v for k, v in current.items() if k not in value}
    return value


def _check_seeds(seeds: Any, key: str) -> list[int]:
    ok = (isinstance(seeds, list) and 1 <= len(seeds) <= 64 and len(set(map(repr, seeds))) == len(seeds)
          and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**31 for s in seeds))
    require(ok, key, seeds, "a non-empty list of distinct integer seeds in [0, 2^31), e.g. [0, 1, 2]")
    return list(seeds)


def _substitute(value: Any, cell: dict[str, Any]) -> Any:
    """Grid values into params: ``"{axis}"`` alone keeps the value's type, inside a string it is text."""
    if isinstance(value, str):
        whole = _AXIS_REF.fullmatch(value)
        if whole and whole.group(1) in cell:
            return cell[whole.group(1)]
        return _AXIS_REF.sub(lambda m: str(cell[m.group(1)]) if m.group(1) in cell else m.group(0), value)
    if isinstance(value, dict):
        return {k: _substitute(v, cell) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, cell) for v in value]
    return value


def cell_suffix(cell: dict[str, Any]) -> str:
    return "_".join(re.sub(r"\W", "_", str(v)) for v in cell.values())


def _expand_grid(variants_raw: dict, axes: dict[str, list]) -> dict[str, tuple[str, dict, dict]]:
    """variant name -> (base name, raw definition with grid values in, cell)."""
    out: dict[str, tuple[str, dict, dict]] = {}
    for vname, v in variants_raw.items():
        key = f"experiment.variants.{vname}"
        require(str(vname).isidentifier(), key, vname, "a variant name that is a Python identifier")
        require(isinstance(v, dict) and "technique" in v, key, v, "a mapping with 'technique', 'role', 'params'")
        over = v.get("over") or []
        over = [over] if isinstance(over, str) else over
        require(isinstance(over, list), f"{key}.over", over, "a list of axis names")
        for a in over:
            require(a in axes, f"{key}.over", a, "an axis of experiment.axes: " + (", ".join(axes) or "none defined"))
        if not over:
            out[vname] = (vname, v, {})
            continue
        for combo in itertools.product(*(axes[a] for a in over)):
            cell = dict(zip(over, combo))
            name = f"{vname}_{cell_suffix(cell)}"
            require(name not in variants_raw and name not in out, key, name, "grid cell names that no other variant has")
            body = {k: _substitute(val, cell) for k, val in v.items() if k != "over"}
            out[name] = (vname, body, cell)
    return out


def overridden_keys(overrides: list[str] | None, below: str = "experiment") -> set[str]:
    """Dotted keys below ``below`` (``experiment``, ``cluster``, ...) that command-line overrides set."""
    keys = set()
    for ov in overrides or []:
        key = ov.lstrip("+~").partition("=")[0]
        if key.startswith(below + "."):
            keys.add(key[len(below) + 1:])
    return keys


def parse_only(only: Any) -> list[str] | None:
    """``only``: null (every variant), ``a,b`` or ``[a, b]``; an empty selection is an error, not "all"."""
    if only is None:
        return None
    if isinstance(only, str):
        names = [s.strip() for s in only.split(",") if s.strip()]
    elif isinstance(only, (list, tuple)) and all(isinstance(s, str) for s in only):
        names = [s.strip() for s in only if s.strip()]
    else:
        raise ConfigError("only", only, "null (every variant) or variant names, e.g. only=[a,b]")
    if not names:
        raise ConfigError("only", only, "null (every variant) or at least one variant name, e.g. only=[a,b]")
    return names


def build_spec(exp: dict, debug: bool = False, only: list[str] | None = None,
               overridden: set[str] = frozenset(), flavour: str | None = None) -> ExperimentSpec:
    """Validate an experiment mapping (already resolved to plain Python) into a spec.

    ``flavour``: full, debug or paper (``debug=True`` is ``flavour="debug"``). ``overridden``: dotted
    keys below ``experiment.`` set on the command line; they win over the flavour block's values."""
    flavour = flavour or ("debug" if debug else "full")
    require(flavour in FLAVOURS, "flavour", flavour, "one of " + ", ".join(FLAVOURS))
    require(isinstance(exp, dict), "experiment", exp, "a mapping")
    if "seed" in exp:
        raise ConfigError("experiment.seed", exp["seed"], "replaced by the seed axis: experiment.seeds=[...] "
                          "(e.g. seeds: [0, 1, 2])")
    unknown = sorted(set(exp) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"experiment.{unknown[0]}", exp[unknown[0]], "unknown key; allowed: " + ", ".join(sorted(_TOP_KEYS)))
    if exp.get("paper") is not None:
        paper_block(exp["paper"])    # checked in every flavour, so a bad block never waits for a GPU node
    dropped: set[str] = set()
    if flavour != "full":
        dropped = debug_dropped(exp, flavour)
        unknown_drop = sorted(dropped - set(exp.get("variants") or {}))
        if unknown_drop:
            where = "debug" if flavour == "debug" else "paper.set"
            raise ConfigError(f"experiment.{where}.variants.{unknown_drop[0]}", None, "a variant of this experiment to drop")
        exp = apply_debug(exp, keep=set(overridden), flavour=flavour)
    name = exp.get("name")
    require(isinstance(name, str) and name, "experiment.name", name, "a non-empty string")
    seeds = _check_seeds(exp.get("seeds", [0]), "experiment.seeds")
    resources = exp.get("resources") or {}
    bad = sorted(set(resources) - {"num_cpus", "num_gpus", "nodes", "node_cpus", "max_parallel"})
    if bad:
        raise ConfigError(f"experiment.resources.{bad[0]}", resources[bad[0]],
                          "unknown key; allowed: num_cpus, num_gpus, nodes, node_cpus, max_parallel")
    device, num_gpus = requested_device(exp)
    max_parallel = resources.get("max_parallel")
    require(max_parallel is None or (isinstance(max_parallel, int) and not isinstance(max_parallel, bool) and max_parallel >= 1),
            "experiment.resources.max_parallel", max_parallel, "null (as many as the CPUs fit) or a positive integer")
    num_cpus = resources.get("num_cpus", 1)
    require(isinstance(num_cpus, (int, float)) and not isinstance(num_cpus, bool) and 0 <= num_cpus <= 64,
            "experiment.resources.num_cpus", num_cpus, "a number in [0, 64]")
    nodes = resources.get("nodes", 0)
    require(isinstance(nodes, int) and not isinstance(nodes, bool) and 0 <= nodes <= 256,
            "experiment.resources.nodes", nodes, "an integer in [0, 256]")
    node_cpus = resources.get("node_cpus", 0)
    require(isinstance(node_cpus, (int, float)) and not isinstance(node_cpus, bool) and node_cpus >= 0,
            "experiment.resources.node_cpus", node_cpus, "a non-negative number")

    axes = exp.get("axes") or {}
    require(isinstance(axes, dict), "experiment.axes", axes, "a mapping: axis name -> list of values")
    for a, vals in axes.items():
        require(str(a).isidentifier(), f"experiment.axes.{a}", a, "an axis name that is a Python identifier")
        require(isinstance(vals, list) and vals and len(set(map(repr, vals))) == len(vals),
                f"experiment.axes.{a}", vals, "a non-empty list of distinct values")

    prepares = _build_prepare(exp.get("prepare") or {})
    by_entry = {p.name: p for p in prepares}

    variants_raw = exp.get("variants") or {}
    require(isinstance(variants_raw, dict) and variants_raw, "experiment.variants", variants_raw, "at least one variant")
    expanded = _expand_grid(variants_raw, axes)
    bases = {b for b, _, _ in expanded.values()}
    if only:
        missing = [v for v in only if v not in expanded and v not in bases]
        if missing:
            raise ConfigError("only", missing[0], "a variant of this experiment: " + ", ".join(expanded))
    common = exp.get("common") or {}
    require(isinstance(common, dict), "experiment.common", common, "a mapping: technique name -> shared params")
    for tname in common:
        get_technique(tname, f"experiment.common.{tname}")
    variants = []
    for vname, (base, v, cell) in expanded.items():
        key = f"experiment.variants.{base}"
        extra = sorted(set(v) - _VARIANT_KEYS)
        if extra:
            raise ConfigError(f"{key}.{extra[0]}", v[extra[0]], "unknown key; allowed: " + ", ".join(sorted(_VARIANT_KEYS)))
        tech = get_technique(v["technique"], f"{key}.technique")
        role = v.get("role", "technique")
        require(role in ROLES, f"{key}.role", role, "one of " + ", ".join(ROLES))
        raw = deep_merge(common.get(tech.name) or {}, v.get("params") or {})
        parsed = parse_params(tech.params, raw, f"{key}.params") if tech.params is not None else raw
        inputs = _bind_inputs(v.get("inputs"), tech.inputs, by_entry, f"{key}.inputs", f"technique {tech.name}")
        if tech.validate is not None:
            try:
                _call_validate(tech.validate, parsed, exp, {name: by_entry[e] for name, e in inputs.items()})
            except ConfigError as e:
                raise ConfigError(e.key if e.key.startswith("experiment.") else f"{key}.params.{e.key}", e.value, e.allowed) from None
        vseeds = _check_seeds(v["seeds"], f"{key}.seeds") if v.get("seeds") is not None else seeds
        if (only and vname not in only and base not in only) or base in dropped or vname in dropped:
            continue
        variants.append(VariantSpec(vname, tech.name, role, tech.family, raw, parsed, vseeds, inputs, base, cell))

    perturbations(exp)  # validated here so that `dtlab run` rejects a bad block too
    names = set(expanded)
    claim_defs = claim_block(exp)
    claims = [_build_claim(cname, c, axes, names) for cname, c in claim_defs.items()]
    report = _build_report(dict(exp.get("report") or {}), names, expanded, {c.name: c for c in claims})
    reach = _build_reach(exp.get("reach") or {}, names)
    return ExperimentSpec(name, str(exp.get("family", "")), str(exp.get("summary", "")), seeds, float(num_cpus),
                          nodes, float(node_cpus), max_parallel, prepares, variants, claims, report, axes, raw=exp,
                          reach=reach, claim_kinds={n: str(c.get("kind", "empirical")) for n, c in claim_defs.items()},
                          device=device, num_gpus=num_gpus, flavour=flavour)


def _build_reach(block: Any, names: set[str]) -> list[Reach]:
    require(isinstance(block, dict), "experiment.reach", block, "a mapping: metric -> {series, target, below}")
    out = []
    for metric, r in block.items():
        key = f"experiment.reach.{metric}"
        require(str(metric).isidentifier(), key, metric, "a metric name that is a Python identifier")
        require(isinstance(r, dict), key, r, "a mapping with series, target and optionally below")
        extra = sorted(set(r) - {"series", "target", "below"})
        if extra:
            raise ConfigError(f"{key}.{extra[0]}", r[extra[0]], "unknown key; allowed: below, series, target")
        require(isinstance(r.get("series"), str) and r["series"], f"{key}.series", r.get("series"),
                "the name of a curve the variants log as (xs, ys, x name)")
        target = r.get("target")
        variant, _, m = str(target).partition(".")
        require(isinstance(target, str) and variant in names and m.isidentifier(), f"{key}.target", target,
                "variant.metric with a variant of this experiment: " + ", ".join(sorted(names)))
        below = r.get("below", True)
        require(isinstance(below, bool), f"{key}.below", below, "true (reached when the curve falls to the target) or false")
        out.append(Reach(str(metric), r["series"], target, below))
    return out


TUNED = "tuned"   # the robustness label of the tuned configuration itself


def perturbations(exp: dict) -> dict[str, dict[str, Any]]:
    """The ``robustness:`` block: ``{name: [override, ...]}`` or ``{name: {why: text, overrides: [...]}}``
    -> ``{name: {"why": text, "overrides": [...]}}``. Each override is one Hydra override of a key
    below ``experiment.`` (no sweeps: a perturbation is one job)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    block = exp.get("robustness") or {}
    key = "experiment.robustness"
    require(isinstance(block, dict), key, block, "a mapping: perturbation name -> list of Hydra overrides")
    parser = OverridesParser.create()
    out = {}
    for name, body in block.items():
        k = f"{key}.{name}"
        require(str(name).isidentifier() and name != TUNED, k, name,
                f"a perturbation name that is a Python identifier other than '{TUNED}'")
        if isinstance(body, dict):
            extra = sorted(set(body) - {"why", "overrides"})
            if extra:
                raise ConfigError(f"{k}.{extra[0]}", body[extra[0]], "unknown key; allowed: why, overrides")
            why, overrides = str(body.get("why") or ""), body.get("overrides")
        else:
            why, overrides = "", body
        require(isinstance(overrides, list) and overrides and all(isinstance(o, str) for o in overrides), k,
                overrides, "a non-empty list of Hydra overrides, e.g. ['experiment.seeds=[3,4]']")
        for ov in overrides:
            try:
                (parsed,) = parser.parse_overrides([ov])
            except Exception as e:  # noqa: BLE001 - hydra raises its own parse errors
                raise ConfigError(k, ov, f"a Hydra override ({str(e).splitlines()[0]})") from None
            require(parsed.get_key_element().lstrip("+~").startswith("experiment."), k, ov,
                    "an override of a key below experiment. (off the tuned configuration)")
            require(not parsed.is_sweep_override(), k, ov, "one value (a perturbation is one job: no sweep)")
        out[str(name)] = {"why": why, "overrides": list(overrides)}
    return out


def _call_validate(hook, params: Any, exp: dict, bound: dict[str, PrepareSpec]) -> None:
    """A technique's validate hook: ``hook(params, experiment)``, or ``hook(params, experiment, inputs)``
    when it takes a third argument: ``inputs`` maps each declared input to the PrepareSpec it is bound to
    (entry name, step, parsed params with defaults), so a check against a prepared model needs no
    duplicate param naming the entry."""
    import inspect

    try:
        inspect.signature(hook).bind(params, exp, bound)
        takes_inputs = True
    except (TypeError, ValueError):  # two parameters (or no signature to read): the original form
        takes_inputs = False
    if takes_inputs:
        hook(params, exp, bound)
    else:
        hook(params, exp)


def _bind_inputs(given: Any, declared: tuple[str, ...], entries: dict[str, PrepareSpec], key: str, who: str) -> dict[str, str]:
    """Declared input name -> prepare entry: ``given`` binds some, the rest bind by the same name."""
    given = given or {}
    require(isinstance(given, dict), key, given, "a mapping: input name -> prepare entry")
    for k, entry in given.items():
        require(k in declared, f"{key}.{k}", entry, f"an input {who} declares: " + (", ".join(declared) or "none"))
        require(entry in entries, f"{key}.{k}", entry, "a prepare entry of this experiment: " + (", ".join(entries) or "none"))
    bound = {}
    for name in declared:
        entry = given.get(name, name)
        require(entry in entries, f"{key}.{name}", entry,
                f"{who} reads input '{name}': add a prepare entry named '{name}' or bind it with inputs: "
                f"{{{name}: ENTRY}}; entries: " + (", ".join(entries) or "none"))
        bound[name] = entry
    return bound


def _build_prepare(prep: dict) -> list[PrepareSpec]:
    require(isinstance(prep, dict), "experiment.prepare", prep, "a mapping: entry name -> {step, params, inputs}")
    out = []
    for pname, p in prep.items():
        key = f"experiment.prepare.{pname}"
        require(isinstance(p, dict) and "step" in p, key, p, "a mapping with 'step' and 'params'")
        extra = sorted(set(p) - {"step", "params", "inputs"})
        if extra:
            raise ConfigError(f"{key}.{extra[0]}", p[extra[0]], "unknown key; allowed: step, params, inputs")
        step = get_prepare_step(p["step"], f"{key}.step")
        raw = p.get("params") or {}
        parsed = parse_params(step.params, raw, f"{key}.params") if step.params is not None else raw
        out.append(PrepareSpec(pname, step.name, raw, parsed, {}, step.seeded))
    entries = {p.name: p for p in out}
    for p in out:
        step = get_prepare_step(p.step)
        p.inputs = _bind_inputs(prep[p.name].get("inputs"), step.inputs, entries, f"experiment.prepare.{p.name}.inputs",
                                f"prepare step {step.name}")
    for p in out:
        for inp, up in p.inputs.items():
            require(p.seeded or not entries[up].seeded, f"experiment.prepare.{p.name}.inputs.{inp}", up,
                    "an unseeded entry (an unseeded step cannot consume a seeded one: make it seeded too)")
    topo_order(entries)
    return out


def claim_block(exp: dict) -> dict[str, dict]:
    """An experiment's claims with each ``repeat:`` expanded: what the spec, the scoreboard and
    compare read, so that a repeated claim is a named claim everywhere.

    ``repeat: {SUFFIX: {suffix: VSUFFIX, paper: NOTE}}`` on claim ``NAME`` declares the claim
    ``NAME + SUFFIX``: the same holds/measured/premise/noise with every variant ``V`` read as
    ``V + VSUFFIX`` and the paper text followed by ``; NOTE``. The same claim over another regime
    (gatekeeper's over-confident small model) is written once. The expansions of one SUFFIX
    follow the last claim that declares it, in declaration order (the board's order)."""
    claims = exp.get("claims") or {}
    require(isinstance(claims, dict), "experiment.claims", claims, "a mapping of claim name to claim")
    last: dict[str, str] = {}
    for cname, c in claims.items():
        rep = c.get("repeat") if isinstance(c, dict) else None
        if rep is None:
            continue
        require(isinstance(rep, dict) and rep, f"experiment.claims.{cname}.repeat", rep,
                "a mapping {CLAIM_SUFFIX: {suffix: VARIANT_SUFFIX, paper: NOTE}}")
        for ksuf, spec in rep.items():
            key = f"experiment.claims.{cname}.repeat.{ksuf}"
            require(isinstance(ksuf, str) and re.fullmatch(r"\w+", ksuf or "") is not None, key, ksuf,
                    "a claim-name suffix (letters, digits, _)")
            require(isinstance(spec, dict) and set(spec) <= _REPEAT_KEYS and isinstance(spec.get("suffix"), str)
                    and re.fullmatch(r"\w+", spec.get("suffix") or "") is not None, key, spec,
                    "{suffix: VARIANT_SUFFIX (letters, digits, _), paper: NOTE}")
            last[ksuf] = cname
    out: dict[str, dict] = {}
    for cname, c in claims.items():
        out[cname] = {k: v for k, v in c.items() if k != "repeat"} if isinstance(c, dict) else c
        for ksuf, at in last.items():
            if at != cname:
                continue
            for base, bc in claims.items():
                spec = (bc.get("repeat") or {}).get(ksuf) if isinstance(bc, dict) else None
                if spec is None:
                    continue
                name = base + ksuf
                require(name not in claims and name not in out, f"experiment.claims.{base}.repeat.{ksuf}", ksuf,
                        f"a suffix giving a new claim name ({name!r} exists)")
                out[name] = _repeated(bc, spec)
    return out


def _repeated(c: dict, spec: dict) -> dict:
    """Claim ``c`` with every variant reference suffixed (see :func:`claim_block`)."""
    suffix = spec["suffix"]

    def move(text):
        return _VARIANT_REF.sub(lambda m: f"{m.group(1)}{suffix}.", text) if isinstance(text, str) else text

    out = {k: v for k, v in c.items() if k != "repeat"}
    for part in ("holds", "measured", "premise", "premise_measured"):
        if part in out:
            out[part] = move(out[part])
    if "noise" in out:
        out["noise"] = [move(n) for n in out["noise"]] if isinstance(out["noise"], list) else move(out["noise"])
    if spec.get("paper"):
        out["paper"] = f"{out.get('paper', '')}; {spec['paper']}" if out.get("paper") else str(spec["paper"])
    return out


def _build_claim(cname: str, c: Any, axes: dict, names: set[str]) -> Claim:
    key = f"experiment.claims.{cname}"
    require(isinstance(c, dict) and "holds" in c, key, c, "a mapping with 'holds' (and 'paper', 'measured')")
    extra = sorted(set(c) - _CLAIM_KEYS)
    if extra:
        raise ConfigError(f"{key}.{extra[0]}", c[extra[0]], "unknown key; allowed: " + ", ".join(sorted(_CLAIM_KEYS)))
    over = c.get("over") or []
    over = [over] if isinstance(over, str) else list(over)
    for a in over:
        require(a in axes, f"{key}.over", a, "an axis of experiment.axes: " + (", ".join(axes) or "none defined"))
    at_least = c.get("at_least")
    n_cells = 1
    for a in over:
        n_cells *= len(axes[a])
    if at_least is not None:
        require(bool(over), f"{key}.at_least", at_least, "only with 'over: AXIS'")
        require(isinstance(at_least, int) and not isinstance(at_least, bool) and 1 <= at_least <= n_cells,
                f"{key}.at_least", at_least, f"an integer in [1, {n_cells}] (the cells of {', '.join(over)})")
    require(c.get("kind", "empirical") in CLAIM_KINDS, f"{key}.kind", c.get("kind"), "one of " + ", ".join(CLAIM_KINDS))
    premise, premise_measured = c.get("premise") or "", c.get("premise_measured") or ""
    for part, text in (("premise", premise), ("premise_measured", premise_measured)):
        require(isinstance(text, str), f"{key}.{part}", text, "an expression over variant.metric names")
    require(bool(premise) or not premise_measured, f"{key}.premise_measured", premise_measured,
            "only with 'premise' (the precondition whose figure it shows)")
    claim = Claim(cname, str(c["holds"]), str(c.get("paper", "")), str(c.get("measured", "") or ""),
                  bool(c.get("gate", True)), tuple(over), tuple((a, tuple(axes[a])) for a in over), at_least,
                  premise, premise_measured)
    parts = {"holds": "holds", "measured": "measured", "premise": "premise", "premise_measured": "premise_measured"}
    for part, attr in parts.items():
        text = getattr(claim, attr)
        stray = template_axes(text) - set(over)
        if stray:
            raise ConfigError(f"{key}.{part}", text, f"{{{sorted(stray)[0]}}} needs over: [{sorted(stray)[0]}]")
    checked = [("holds", h) for _, h, _ in claim.expressions()] + [("measured", m) for _, _, m in claim.expressions()]
    if claim.premise_claim() is not None:
        checked += [(part, e) for _, h, m in claim.premise_claim().expressions()
                    for part, e in (("premise", h), ("premise_measured", m))]
    for part, expr in checked:
        if not expr:
            continue
        parse_expr(expr, f"{key}.{part}")
        bad = referenced_variants(expr, f"{key}.{part}") - names
        if bad:
            raise ConfigError(f"{key}.{part}", expr, f"names unknown variant {sorted(bad)[0]!r}; variants: "
                              + ", ".join(sorted(names)))
    return _with_noise(claim, c.get("noise"), key, names)


def _with_noise(claim: Claim, noise: Any, key: str, names: set[str]) -> Claim:
    """``noise:`` (one ``variant.figure_noise`` or a list): the floors of the timed figures the claim
    gates (components.core.claims, "Timed claims")."""
    refs = [noise] if isinstance(noise, str) else list(noise or [])
    require(all(isinstance(r, str) for r in refs), f"{key}.noise", noise,
            "a metric name variant.FIGURE_noise or a list of them")
    for ref in refs:
        stray = template_axes(ref) - set(claim.over)
        if stray:
            raise ConfigError(f"{key}.noise", ref, f"{{{sorted(stray)[0]}}} needs over: [{sorted(stray)[0]}]")
        for cell in claim.cells():
            variant, _, _ = noise_figure(substitute(ref, cell), f"{key}.noise")
            require(variant in names, f"{key}.noise", ref, "a variant of this experiment: " + ", ".join(sorted(names)))
    return dataclasses.replace(claim, noise=tuple(refs)) if refs else claim


def _build_report(report: dict, names: set[str], expanded: dict, claims: dict[str, Claim]) -> dict:
    base = report.get("baseline")
    if isinstance(base, dict):
        report["baseline"] = _baseline_groups(base, names, expanded)
    elif base is not None:
        require(base in names, "experiment.report.baseline", base, "a variant name: " + ", ".join(sorted(names)))
    plots = []
    for i, plot in enumerate(report.get("plots") or []):
        require(isinstance(plot, dict) and plot.get("kind") in PLOT_KINDS, f"experiment.report.plots[{i}].kind",
                (plot or {}).get("kind") if isinstance(plot, dict) else plot, "one of " + ", ".join(PLOT_KINDS))
        if plot.get("variants"):  # a grid variant's base name stands for all of its cells
            cells = []
            for v in plot["variants"]:
                group = [n for n, (b, _, _) in expanded.items() if b == v and n != v]
                cells += group or [v]
            plot = {**plot, "variants": cells}
        if plot["kind"] == "cells":
            plot = _cells_plot(plot, claims, f"experiment.report.plots[{i}]")
        plots.append(plot)
    if plots:
        report["plots"] = plots
    return report


def _cells_plot(plot: dict, claims: dict[str, Claim], key: str) -> dict:
    """A ``kind: cells`` plot: a grid claim's measured figure (its first term) at each value of axis
    ``x``, one line per value of axis ``group``; the claim's axes go into the plot for the report."""
    allowed = ("claim", "x", "group", "x_figure", "hline", "logx", "logy", "title", "xlabel", "ylabel", "name")
    extra = sorted(set(plot) - {"kind", *allowed})
    if extra:
        raise ConfigError(f"{key}.{extra[0]}", plot[extra[0]], "unknown key; allowed: " + ", ".join(allowed))
    gridded = sorted(n for n, c in claims.items() if c.over and c.measured)
    claim = claims.get(plot.get("claim"))
    require(claim is not None and bool(claim.over) and bool(claim.measured), f"{key}.claim", plot.get("claim"),
            "a claim with over: [AXIS, ...] and measured: (" + (", ".join(gridded) or "none in this experiment") + ")")
    wanted = [plot.get("x"), *([plot["group"]] if plot.get("group") is not None else [])]
    require(sorted(map(str, wanted)) == sorted(claim.over), f"{key}.x", plot.get("x"),
            f"the axes of claim {claim.name} (over: {list(claim.over)}): x, and group when it has two")
    x_figure = plot.get("x_figure")
    if x_figure is not None:
        ok = isinstance(x_figure, str) and template_axes(x_figure) <= set(claim.over)
        require(ok, f"{key}.x_figure", x_figure, f"an expression over variant.metric names and the axes {list(claim.over)}")
        for cell in claim.cells():
            parse_expr(substitute(x_figure, cell), f"{key}.x_figure")
    hline = plot.get("hline")
    require(hline is None or (isinstance(hline, (int, float)) and not isinstance(hline, bool)), f"{key}.hline", hline,
            "a number (a reference line, e.g. the claim's gate)")
    return {**plot, "axes": {a: list(v) for a, v in claim.axes}, "figure": claim.measured}


def _baseline_groups(groups: dict, names: set[str], expanded: dict) -> dict[str, list[str]]:
    """``{baseline: [variant, ...]}``: each sub-study's variants are ratioed to its own baseline (a
    grid variant's base name stands for its cells); a variant in two groups is an error."""
    key = "experiment.report.baseline"
    require(bool(groups), key, groups, "a variant name, or a mapping {baseline variant: [variants it is the baseline for]}")
    out, owner = {}, {}
    for base, members in groups.items():
        require(base in names, f"{key}.{base}", base, "a variant name: " + ", ".join(sorted(names)))
        require(isinstance(members, list) and members, f"{key}.{base}", members, "a non-empty list of variant names")
        cells = []
        for v in members:
            group = [n for n, (b, _, _) in expanded.items() if b == v and n != v]
            require(v in names or bool(group), f"{key}.{base}", v, "a variant name: " + ", ".join(sorted(names)))
            cells += group or [v]
        cells = list(dict.fromkeys([base, *cells]))
        for v in cells:
            require(v not in owner or owner[v] == base, f"{key}.{base}", v,
                    f"a variant in one group only (it is already ratioed to {owner.get(v)})")
            owner[v] = base
        out[str(base)] = cells
    return out


def baseline_of(report: dict, variant: str) -> str | None:
    """The baseline a variant's ratios are to (a single name, or its group's in a mapping)."""
    base = report.get("baseline")
    if isinstance(base, dict):
        return next((b for b, members in base.items() if variant in members), None)
    return base
