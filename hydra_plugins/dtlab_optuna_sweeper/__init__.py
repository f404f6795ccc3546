"""Hydra sweeper on current Optuna (5.x), config-compatible with hydra-optuna-sweeper.

Why ours: the released hydra-optuna-sweeper pins optuna 2.10, whose RDB storage breaks under
SQLAlchemy 2 (which MLflow needs). This keeps that plugin's config shape (params with
interval/choice/range/tag(log,...), direction, n_trials, n_jobs, sampler, storage, study_name) so
users' configs stay portable: select it with `hydra/sweeper: dtlab_optuna`.
"""
