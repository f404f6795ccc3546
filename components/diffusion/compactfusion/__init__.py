"""CompactFusion (NeurIPS 2025): compressed residuals with error feedback for patch-parallel DiT
inference, against synchronous exchange, DistriFusion-like stale K/V and naive compression.

- ``exchange``: the shard worker (K/V streams per block, CFG branch and source rank), run
  in-process or on Ray actors with the same code; codecs and error-feedback bases come from
  :mod:`components.compression.residual`;
- ``simtime``: link presets calibrated from measured block compute, the simulated step latency;
- ``prepare``: the seed's single-device reference samples, the block-compute calibration;
- ``technique``: technique ``compactfusion`` (experiment ``compactfusion``).
"""
