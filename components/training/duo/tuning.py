"""Grid search for the per-variant LR studies (conf/hparams_search/duo_lr_per_variant.yaml).

Optuna's GridSampler and BruteForceSampler call ``study.stop()`` once the grid is exhausted, which raises
outside ``study.optimize`` (dtlab's sweeper drives ask/tell itself). This sampler is BruteForceSampler
(every point of a categorical space once, in a seeded order) without that call: the sweeper's
``n_trials`` = grid size ends the study.
"""
from __future__ import annotations

from optuna.samplers import BruteForceSampler


class GridOnceSampler(BruteForceSampler):
    """BruteForceSampler whose end of grid is left to ``n_trials`` (no ``study.stop()``)."""

    def after_trial(self, study, trial, state, values) -> None:  # noqa: D401 - nothing to decide
        return None
