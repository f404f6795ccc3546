"""``optuna``, imported on first use.

Hydra imports every module under hydra_plugins/ to find its plugins, in every process that composes
a config (each `dtlab run`, even one that only rejects a bad override), and importing optuna costs
about 0.3 s here (python -X importtime). The sweeper's modules read ``optuna.X`` through this
stand-in, so only a sweep pays for it."""
from __future__ import annotations


class _Optuna:
    def __getattr__(self, name: str):
        import optuna as real

        return getattr(real, name)


optuna = _Optuna()
