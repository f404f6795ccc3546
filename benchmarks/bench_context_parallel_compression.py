"""Context-parallel compression benchmark: the full `context_parallel_compression` experiment (8 ring
variants x 3 seeds on the char GPT, 4 rank actors) with every variant's loss, K/V bytes per hop and
simulated time to the uncompressed loss as ratios to the uncompressed ring of the same run
(at 300 Mbps / 5 ms and at 100 Gbps), plus the exactness figures, wall time and peak memory.

Run: .venv/bin/python benchmarks/bench_context_parallel_compression.py [overrides ...]  (debug=true: tiny)
     .venv/bin/python benchmarks/bench_context_parallel_compression.py --calibrate
     (this CPU's GFLOP/s on the uncompressed ring's training step at the experiment's shapes, 1 thread:
     where the technique's default `gflops` comes from)
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import (NAN, STATUS, WALL, claims_table, fig, fig_ratio, fig_se, headline,  # noqa: E402
                              per_seed_table, run_isolated, variant_metrics, variant_table)


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("context_parallel_compression", *overrides)
    fp = variant_metrics(out).get("ring_fp32", {})

    headline("context_parallel_compression", out, peak, wall)
    variant_table(out, [
        STATUS, ("final_val_loss (+-se)", fig_se("final_val_loss")), ("loss / fp32", fig_ratio(fp, "final_val_loss", fmt=".4f")),
        ("K/V bytes per hop", fig("kv_bytes_per_hop", ".0f")), ("bytes / fp32", fig_ratio(fp, "kv_bytes_per_hop", fmt=".4f")),
        ("cut", fig("kv_bytes_cut")), ("sim_step 300M", fig("sim_step_s", ".1f", 1e3, " ms")),
        ("sim_step 100G", fig("sim_step_s_dc", ".1f", 1e3, " ms")), ("t->target 300M", fig("sim_time_to_target_s", ".2f", unit=" s")),
        ("/ fp32@100G", fig_ratio(fp, "sim_time_to_target_s", "sim_time_to_target_s_dc", fmt=".2f")),
        ("/ fp32@300M", fig_ratio(fp, "sim_time_to_target_s", fmt=".2f")), ("usage H", fig("router_usage_entropy", ".2f")),
        ("actor vs ring", fig("actor_vs_vec_err", ".1e")), ("peak RSS MB", fig("peak_rss_mb", ".0f")), WALL])
    print(f"\nexactness (uncompressed ring vs full attention, vectorised and on actors): forward "
          f"{fp.get('max_ring_abs_err', NAN):.2e}, gradients {fp.get('max_ring_grad_abs_err', NAN):.2e}; "
          f"block compute {fp.get('block_compute_s', NAN) * 1e3:.2f} ms, uncompressed hop at 300 Mbps "
          f"{fp.get('hop_s', NAN) * 1e3:.2f} ms; weight all-reduce (not in sim_step) "
          f"{fp.get('allreduce_s_per_step', NAN) * 1e3:.1f} ms at 300 Mbps")
    per_seed_table(out, "final_val_loss")
    claims_table(out)


def calibrate(steps: int = 10) -> None:
    import numpy as np
    import torch

    from components.data.char_corpus import build_corpus, sample_batch
    from components.training.context_parallel import simtime
    from components.training.context_parallel.ring import RingSpec, build_model

    torch.set_num_threads(1)
    c = build_corpus()
    P, L, H, d, T, B = 4, 3, 4, 64, 256, 8
    model = build_model(c.vocab_size, L, H, d, T, RingSpec(chunks=P))
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    rng = np.random.default_rng(0)
    fl = simtime.flops(B, T // P, d, H, L, c.vocab_size)
    per_step = 3 * P * (L * (fl["tokenwise"] + fl["block"] * (P + 1) / 2) + fl["head"])   # causal: (P+1)/2 blocks
    times = []
    for i in range(steps + 2):
        x, y = sample_batch(c.train, B, T, rng)
        t0 = time.perf_counter()
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    best = min(times[2:])
    print(f"uncompressed ring step: {best * 1e3:.1f} ms (best of {steps}), {per_step / 1e9:.2f} GFLOP -> "
          f"{per_step / best / 1e9:.1f} GFLOP/s on one thread")


if __name__ == "__main__":
    if "--calibrate" in sys.argv[1:]:
        calibrate()
    else:
        main(sys.argv[1:])
