"""SpaceServe (NeurIPS 2025, OpenReview w4qJ056WhI): space-multiplexing an MLLM's encoder and decoder
on one GPU, in a calibrated discrete-event simulator (SimPy). Spec: ../shared/techniques/spaceserve.md.

- :mod:`.calibration` A100 figures (cited), fitted throughput-vs-SM-share curves, the kernel cost model
- :mod:`.workload`    multimodal Poisson request streams, the same for every system per (seed, rate)
- :mod:`.scheduling`  SIS (cost-model SM partitioning) and encoder batch order (FCFS, SRPT, TWSRFT)
- :mod:`.sim`         the simulator: time multiplexing (vLLM-like) and space multiplexing (SIS / static split / the released code's mask)
- :mod:`.technique`   technique ``spaceserve`` (one system, a load curve over arrival rates, one seed)

Experiment: ``conf/experiment/spaceserve.yaml``; benchmark: ``benchmarks/bench_spaceserve.py``.
"""
from components.serving.spaceserve import technique  # noqa: F401  (registers the technique)
