"""Generated bad inputs for `dtlab run`, and the check that each is rejected cleanly.

For every experiment in conf/experiment: mutations of every declared param of one variant per
technique (wrong type, NaN, +-inf, negative, zero, huge, empty, unknown key), bad multirun and
sweep syntax, bad sweeper/launcher/cluster/paths/objective options, and broken YAML (in a copy of
conf/). Whether a mutation must be rejected is decided from the param's declared type alone
(``must_reject``); a value the type allows but a range may not (negative, zero, huge, empty) is an
*edge* input: either outcome is fine, as long as a rejection is one clean line.
"""
from __future__ import annotations

import dataclasses
import math
import shutil
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from components.core.errors import ConfigError


@dataclass
class Case:
    label: str
    overrides: list[str]
    multirun: bool = False
    must_reject: bool = True
    names: str = ""                 # a rejection's message must contain this (the key at fault)
    yaml: str | None = None         # an experiment file written into a copy of conf/ (broken YAML)


@dataclass
class Outcome:
    case: Case
    rejected: bool
    clean: bool
    message: str = ""
    problems: list[str] = field(default_factory=list)


def _strip_optional(tp):
    args = get_args(tp)
    if get_origin(tp) in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else tp), True
    return tp, False


def _mutations(tp, default) -> list[tuple[str, str, bool]]:
    """(label, override value, must_reject) for one declared param type."""
    tp, optional = _strip_optional(tp)
    inf_ok = isinstance(default, float) and math.isinf(default)
    common = [("unknown_type_map", "{zz_bad: 1}", tp not in (Any, dict) and get_origin(tp) is not dict)]
    if tp is float:
        return common + [("wrong_type", "abc", True), ("bool", "true", True), ("nan", "nan", True),
                         ("inf", "inf", not inf_ok), ("-inf", "-inf", True), ("negative", "-1.0", False),
                         ("zero", "0.0", False), ("huge", "1e300", False), ("empty", "''", True)]
    if tp is int:
        return common + [("wrong_type", "abc", True), ("fraction", "1.5", True), ("nan", "nan", True),
                         ("inf", "inf", True), ("-inf", "-inf", True), ("negative", "-1", False),
                         ("zero", "0", False), ("huge", "1000000000000000000", False), ("empty", "''", True)]
    if tp is bool:
        return common + [("wrong_type", "maybe", True), ("int", "2", True), ("nan", "nan", True),
                         ("zero", "0", True), ("empty", "''", True)]
    if tp is str:
        return common + [("number", "123", True), ("nan", "nan", True), ("inf", "inf", True),
                         ("empty", "''", False), ("huge", "x" * 5000, False)]
    if get_origin(tp) is Literal:
        return common + [("not_a_choice", "zz_not_a_choice", True), ("nan", "nan", True), ("empty", "''", True),
                         ("negative", "-1", not any(a == -1 for a in get_args(tp)))]
    if get_origin(tp) in (list, tuple):
        return common + [("scalar", "zz_scalar", True), ("empty", "[]", False), ("nan_item", "[nan]", _strict_items(tp))]
    if dataclasses.is_dataclass(tp):
        return [("wrong_type", "zz_scalar", True), ("unknown_key", "{zz_no_such_key: 1}", True)]
    return []


def _strict_items(tp) -> bool:
    args = get_args(tp)
    return bool(args) and args[0] in (int, float, bool)


def param_cases() -> list[Case]:
    from components.core.registry import get_technique
    from pipelines import config, dag

    out = []
    for exp in config.experiment_names():
        cfg = config.compose([f"experiment={exp}", "debug=true"])
        dag.validate(cfg)  # imports the experiment's techniques
        seen = set()
        for vname, v in cfg["experiment"]["variants"].items():
            tech = v.get("technique")
            if tech in seen:
                continue
            seen.add(tech)
            cls = get_technique(tech).params
            if cls is None:
                continue
            hints = typing.get_type_hints(cls)
            base = [f"experiment={exp}", "debug=true"]
            key = f"experiment.variants.{vname}.params"
            out.append(Case(f"{exp}.{vname}.unknown_key", base + [f"++{key}.zz_no_such_param=1"], names="zz_no_such_param"))
            for f in dataclasses.fields(cls):
                default = f.default if f.default is not dataclasses.MISSING else None
                for label, value, must in _mutations(hints[f.name], default):
                    out.append(Case(f"{exp}.{vname}.{f.name}.{label}", base + [f"++{key}.{f.name}={value}"],
                                    must_reject=must, names=f.name))
    return out


def option_cases() -> list[Case]:
    """Run-level options, multirun and sweep syntax, sweeper/launcher settings, objectives, paths."""
    p = ["experiment=platform_probe", "debug=true"]
    sw = p + ["hparams_search=platform_probe_optuna"]
    rows = [
        ("only_empty", p + ["only=[]"], False, "only"), ("only_unknown", p + ["only=[nope]"], False, "only"),
        ("only_number", p + ["only=3"], False, "only"), ("debug_maybe", p + ["debug=maybe"], False, "debug"),
        ("runs_dir_proc", p + ["runs_dir=/proc/nope"], False, "runs_dir"),
        ("runs_dir_file", p + ["runs_dir=/etc/hostname/x"], False, "runs_dir"),
        ("num_cpus_neg", p + ["cluster.num_cpus=-2"], False, "cluster.num_cpus"),
        ("num_cpus_zero", p + ["cluster.num_cpus=0"], False, "cluster.num_cpus"),
        ("num_cpus_inf", p + ["cluster.num_cpus=inf"], False, "cluster.num_cpus"),
        ("num_cpus_str", p + ["cluster.num_cpus=abc"], False, "cluster.num_cpus"),
        ("attach_str", p + ["cluster.attach=maybe"], False, "cluster.attach"),
        ("auth_mode", p + ["cluster.auth_mode=nope"], False, "cluster.auth_mode"),
        ("unknown_experiment", ["experiment=nope"], False, "experiment"),
        ("unknown_cluster", p + ["cluster=nope"], False, "cluster"),
        ("unknown_tracking", p + ["tracking=nope"], False, "tracking"),
        ("unknown_search", p + ["hparams_search=nope"], False, "hparams_search"),
        ("unknown_root_key", p + ["zz_nokey=1"], False, "zz_nokey"),
        ("seeds_str", p + ["experiment.seeds=abc"], False, "seeds"),
        ("seeds_nan", p + ["experiment.seeds=[nan]"], False, "seeds"),
        ("probe_seconds_inf", p + ["experiment.common.probe.seconds=inf"], False, "seconds"),
        ("probe_steps_neg", p + ["experiment.common.probe.steps=-1"], False, "steps"),
        ("comma_no_multirun", p + ["only=a,b"], False, "only"),
        ("mr_double_comma", p + ["experiment.seeds=[0],,[1]"], True, "experiment.seeds"),
        ("mr_open_range", p + ["experiment.seeds=range(0"], True, "experiment.seeds"),
        ("mr_empty_choice", p + ["experiment.seeds=choice()"], True, "experiment.seeds"),
        ("mr_range_list", p + ["experiment.common.probe.steps=range(1,9),-1"], True, "steps"),
        ("mr_interval_grid", p + ["experiment.common.probe.steps=interval(1,9)"], True, "steps"),
        ("mr_bad_late_job", p + ["experiment.common.probe.steps=range(300,-300,-1)"], True, "steps"),
        ("mr_launcher_nope", p + ["experiment.seeds=[0],[1]", "hydra/launcher=nope"], True, "hydra/launcher"),
        ("mr_launcher_parallel0", p + ["experiment.seeds=[0],[1]", "hydra.launcher.max_parallel=0"], True, "max_parallel"),
        ("mr_launcher_cpus_neg", p + ["experiment.seeds=[0],[1]", "hydra.launcher.job_cpus=-1"], True, "job_cpus"),
        ("mr_sweeper_nope", p + ["experiment.seeds=[0],[1]", "hydra/sweeper=nope"], True, "hydra/sweeper"),
        ("mr_num_cpus_neg", p + ["experiment.seeds=[0],[1]", "cluster.num_cpus=-2"], True, "cluster.num_cpus"),
        ("sw_direction", sw + ["hydra.sweeper.direction=sideways"], True, "direction"),
        ("sw_n_jobs0", sw + ["hydra.sweeper.n_jobs=0"], True, "n_jobs"),
        ("sw_n_jobs_neg", sw + ["hydra.sweeper.n_jobs=-3"], True, "n_jobs"),
        ("sw_n_trials_neg", sw + ["hydra.sweeper.n_trials=-1"], True, "n_trials"),
        ("sw_n_trials0", sw + ["hydra.sweeper.n_trials=0"], True, "n_trials"),
        ("sw_n_trials_str", sw + ["hydra.sweeper.n_trials=many"], True, "n_trials"),
        ("sw_failure_rate", sw + ["hydra.sweeper.max_failure_rate=2"], True, "max_failure_rate"),
        ("sw_sampler_nope", sw + ["hydra.sweeper.sampler._target_=optuna.samplers.Nope"], True, "sampler"),
        ("sw_sampler_not_sampler", sw + ["hydra.sweeper.sampler._target_=collections.OrderedDict"], True, "sampler"),
        ("sw_sampler_kwarg", sw + ["++hydra.sweeper.sampler.zz_bad=1"], True, "sampler"),
        ("sw_reversed", sw + ["hydra.sweeper.params.experiment.variants.a.params.value=interval(2.0,0.02)"], True, "value"),
        ("sw_reversed_cli", sw + ["experiment.variants.a.params.value=interval(2.0,0.02)"], True, "value"),
        ("sw_unknown_key", sw + ["experiment.variants.a.params.zz_nokey=interval(0,1)"], True, "zz_nokey"),
        ("sw_bad_bound", sw + ["experiment.variants.a.params.steps=interval(-5,2)"], True, "steps"),
        ("sw_empty_space", sw + ["hydra.sweeper.params=null"], True, "params"),
        ("sw_objective_syntax", sw + ["objective='a.value +'"], True, "objective"),
        ("sw_objective_variant", sw + ["objective=zz.value"], True, "objective"),
        ("sw_objective_call", sw + ["objective='__import__(1)'"], True, "objective"),
        ("sw_objective_const", sw + ["objective=3"], True, "objective"),
        ("sw_only_empty", sw + ["only=[]"], True, "only"),
        ("sw_runs_dir", sw + ["runs_dir=/proc/nope"], True, "runs_dir"),
    ]
    return [Case(f"option.{label}", ov, multirun=mr, names=names) for label, ov, mr, names in rows]


BROKEN_YAML = {
    "tab_indent": "name: zz_broken\nvariants:\n\ta: {technique: probe}\n",
    "unclosed_list": "name: zz_broken\nseeds: [0, 1\nvariants: {}\n",
    "unclosed_map": "name: zz_broken\nvariants: {a: {technique: probe}\n",
    "bad_mapping": "name: zz_broken\n  seeds: [0]\n variants: x\n",
    "duplicate_colon": "name: zz_broken: x\nvariants: {}\n",
    "bad_quote": "name: 'zz_broken\nvariants: {}\n",
}


def yaml_cases() -> list[Case]:
    return [Case(f"yaml.{k}", ["experiment=zz_broken", "debug=true"], yaml=text, names="zz_broken.yaml")
            for k, text in BROKEN_YAML.items()]


def all_cases() -> list[Case]:
    return param_cases() + option_cases() + yaml_cases()


def conf_copy(dest: Path) -> Path:
    """A copy of conf/ to break files in (DTLAB_CONF_DIR)."""
    from pipelines.config import CONF_DIR

    target = dest / "conf"
    if not target.exists():
        shutil.copytree(CONF_DIR, target)
    return target


def check_in_process(case: Case, runs_dir: Path, conf_dir: Path | None = None) -> Outcome:
    """Run the preflight's validation pass on ``case`` in this process (no Ray, no tracking)."""
    from pipelines import config, preflight

    overrides = [*case.overrides, f"runs_dir={runs_dir}"] if not any(o.startswith("runs_dir=") for o in case.overrides) \
        else list(case.overrides)
    old = config.CONF_DIR
    if case.yaml is not None:
        assert conf_dir is not None
        (conf_dir / "experiment" / "zz_broken.yaml").write_text(case.yaml)
        config.CONF_DIR = conf_dir
    try:
        preflight.check(overrides, case.multirun)
        return Outcome(case, rejected=False, clean=not case.must_reject,
                       problems=["accepted, but its declared type forbids it"] if case.must_reject else [])
    except ConfigError as e:
        msg = f"dtlab: error: {e}"
        problems = []
        if "\n" in msg:
            problems.append("more than one line")
        if case.names and case.names not in msg:
            problems.append(f"message does not name {case.names!r}")
        return Outcome(case, rejected=True, clean=not problems, message=msg, problems=problems)
    except BaseException as e:  # noqa: BLE001 - anything else is a traceback for the user
        return Outcome(case, rejected=True, clean=False, message=f"{type(e).__name__}: {e}",
                       problems=[f"uncaught {type(e).__name__}"])
    finally:
        config.CONF_DIR = old


def summary(outcomes: list[Outcome]) -> dict[str, int]:
    bad = [o for o in outcomes if o.case.must_reject]
    edge = [o for o in outcomes if not o.case.must_reject]
    return {"bad_inputs": len(bad), "rejected_cleanly": sum(o.rejected and o.clean for o in bad),
            "edge_inputs": len(edge), "edge_rejected": sum(o.rejected for o in edge),
            "edge_unclean": sum(not o.clean for o in edge)}
