"""Gatekeeper (arXiv 2502.19335): confidence tuning of the small model in a deferral cascade.

- :mod:`.loss`       the Gatekeeper loss: alpha * CE on correct + (1 - alpha) * KL(p || U) on incorrect, both / N
- :mod:`.metrics`    deferral curves (real, random, ideal), s_d, s_o, AUROC, joint accuracy at r, cost,
                     calibration (ECE, mean confidence - accuracy: the paper's over-confidence premise)
- :mod:`.digits`     corrupted load_digits, the small MLP and the large CNN, training, temperature scaling
- :mod:`.prepare`    prepare step ``gatekeeper_digits`` (seeded: split, stage-1 small model, large model)
- :mod:`.cascade`    one arm (untuned / ce_continued / temperature / gatekeeper) on one seed and its scoring
- :mod:`.technique`  techniques ``gatekeeper``, ``cascade_baseline``, ``gatekeeper_alpha_sweep`` (trade-off plot)
- :mod:`.lm`         technique ``gatekeeper_lm``: the LM cascade on the reasoning task (per-token stage 2)
- :mod:`.answers`    greedy chains of thought of a reasoning GPT on held-out problems, with their confidence
- :mod:`.large_answers` prepare step ``cascade_large_answers``: the base model's answers, once for every arm and seed
- :mod:`.serving`    Ray Serve deployments: the small deployment answers or forwards to the large one
- :mod:`.served`     technique ``gatekeeper_served``: the cascade deployed, checked against offline, load-tested
- :mod:`.sweep_plot` reads an alpha multirun from MLflow and plots the trade-off

Experiment: ``conf/experiment/gatekeeper.yaml``; benchmark: ``benchmarks/bench_gatekeeper.py``.
"""
