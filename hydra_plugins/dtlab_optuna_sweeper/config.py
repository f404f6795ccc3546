"""Structured config of the dtlab Optuna sweeper (registered as hydra/sweeper=dtlab_optuna)."""
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class DtlabOptunaSweeperConf:
    _target_: str = "hydra_plugins.dtlab_optuna_sweeper.sweeper.DtlabOptunaSweeper"
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
