"""Foresight (arXiv 2506.00329): adaptive layer reuse across denoising steps, on the shared DiT.

- :mod:`.policies`   block runners: Foresight (prefix / per-layer), Static-N, TeaCache-like, PAB-like
- :mod:`.reference`  prepare step ``diffusion_reference`` (seeded: noise, labels, full-compute samples)
- :mod:`.technique`  techniques ``foresight``, ``reuse_baseline``, ``foresight_lambda_sweep``
- :mod:`.budgets`    technique ``reuse_budget_curve``: every policy at several skip budgets; the blocks' change rates

Experiment: ``conf/experiment/foresight.yaml``; benchmark: ``benchmarks/bench_foresight.py``.
"""
