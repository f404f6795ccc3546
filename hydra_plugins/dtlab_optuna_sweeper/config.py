"""Structured config of the dtlab Optuna sweeper (registered as hydra/sweeper=dtlab_optuna)."""
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class DtlabOptunaSweeperConf:
    _target_: str = "hydra_plugins.dtlab_optuna_sweeper.sweeper.DtlabOptunaSweeper"
    _recursive_: bool = False            # the sweeper builds the sampler itself (seeded per session, no warnings)
    sampler: Any = field(default_factory=lambda: {"_target_": "optuna.samplers.TPESampler", "seed": 0})
    direction: Any = "minimize"          # or maximize, or a list for multi-objective
    study_name: Optional[str] = None     # default: the experiment name
    storage: Optional[str] = None        # default: sqlite:///<runs_dir>/optuna.db (persistent: resumes)
    n_trials: int = 20                   # total trials in the study, finished ones included
    n_jobs: int = 1                      # trials launched per batch (the launcher runs them)
    max_failure_rate: float = 0.5        # stop the sweep when this share of trials has failed
    params: Optional[dict] = None        # key: interval(a,b) | choice(...) | range(a,b,step=s) | tag(log, interval(a,b))


ConfigStore.instance().store(group="hydra/sweeper", name="dtlab_optuna", node=DtlabOptunaSweeperConf,
                             provider="dtlab")

DIRECTIONS = ("minimize", "maximize")


def check_conf(conf: dict) -> None:
    """The sweeper's options as preflight and the sweeper itself check them (ConfigError, one line)."""
    from components.core.errors import ConfigError, require

    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    d = conf.get("direction")
    dirs = d if isinstance(d, (list, tuple)) else [d]
    require(bool(dirs) and all(x in DIRECTIONS for x in dirs), "hydra.sweeper.direction", d,
            "minimize or maximize (or a list of them)")
    require(is_int(conf.get("n_trials")) and conf["n_trials"] >= 1, "hydra.sweeper.n_trials", conf.get("n_trials"),
            "an integer >= 1 (the study's total trials)")
    require(is_int(conf.get("n_jobs")) and conf["n_jobs"] >= 1, "hydra.sweeper.n_jobs", conf.get("n_jobs"),
            "an integer >= 1 (trials launched per batch)")
    r = conf.get("max_failure_rate")
    require(isinstance(r, (int, float)) and not isinstance(r, bool) and 0.0 <= r <= 1.0,
            "hydra.sweeper.max_failure_rate", r, "a number in [0, 1]")
    objective = conf.get("objective")
    if objective is not None and isinstance(objective, str):
        import ast

        try:
            node = ast.parse(objective, mode="eval").body
        except SyntaxError:
            node = None      # preflight names the syntax error
        n = len(node.elts) if isinstance(node, (ast.List, ast.Tuple)) else 1
        require(n == len(dirs), "objective", objective,
                f"an expression giving {len(dirs)} value(s), one per hydra.sweeper.direction {d}; it gives {n} "
                "(a list expression \"[a.x, b.y]\" gives several)")
    for k in ("study_name", "storage"):
        require(conf.get(k) is None or (isinstance(conf[k], str) and conf[k].strip() != ""), f"hydra.sweeper.{k}",
                conf.get(k), "null or a non-empty string")
    sampler = conf.get("sampler")
    if sampler is None:
        return
    target = sampler.get("_target_") if isinstance(sampler, dict) else None
    require(isinstance(target, str), "hydra.sweeper.sampler", sampler, "a mapping with _target_: an Optuna sampler class")
    try:
        import optuna

        from hydra_plugins.dtlab_optuna_sweeper.sampler import make_sampler

        obj = make_sampler(sampler, 0)
    except Exception as e:  # noqa: BLE001 - import error, bad keyword: say which
        cause = e.__cause__ or e
        raise ConfigError("hydra.sweeper.sampler._target_", target,
                          f"an Optuna sampler class with valid arguments ({type(cause).__name__}: "
                          f"{' '.join(str(cause).split())[:200]})") from None
    require(isinstance(obj, optuna.samplers.BaseSampler), "hydra.sweeper.sampler._target_", target,
            "a subclass of optuna.samplers.BaseSampler")
