"""The sweep's Optuna sampler, built from its Hydra config and reseeded on a resumed study (shared by
the sweeper and its config check)."""
from __future__ import annotations

import warnings
from typing import Any

from hydra.utils import instantiate
from omegaconf import OmegaConf

from hydra_plugins.dtlab_optuna_sweeper.lazy import optuna


def resume_seed(seed: Any, n_trials_so_far: int) -> Any:
    """``seed`` for a fresh study; ``SeedSequence([seed, n_trials_so_far])`` for one with trials."""
    if not n_trials_so_far or not isinstance(seed, int) or isinstance(seed, bool):
        return seed
    import numpy as np

    return int(np.random.SeedSequence([seed, n_trials_so_far]).generate_state(1)[0])


def make_sampler(cfg: Any, n_trials_so_far: int) -> optuna.samplers.BaseSampler | None:
    """The sampler ``cfg`` (a Hydra ``_target_`` mapping) describes, for a study that already holds
    ``n_trials_so_far`` trials.

    A seeded sampler given the same seed again restarts its random stream: on resume it proposes
    trial 0's point again (TPE's first ``n_startup_trials`` are plain seeded random draws). So a
    study that has trials gets the seed ``SeedSequence([seed, n_trials_so_far])``: deterministic
    for a given store, different from every earlier session's, and a fresh study keeps the
    configured seed. (Optuna's FAQ pickles the sampler beside the study instead; that file would be
    a second store, lost with a SIGKILL between writes and absent on another host.) Optuna's
    ExperimentalWarning for experimental samplers (BruteForceSampler) is not printed."""
    if cfg is None or isinstance(cfg, optuna.samplers.BaseSampler):
        return cfg
    cfg = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    if cfg.get("seed") is not None:
        cfg["seed"] = resume_seed(cfg["seed"], n_trials_so_far)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return instantiate(cfg)
