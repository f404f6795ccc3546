"""CompactFusion benchmark: the full `compactfusion` experiment (9 patch-parallel systems x 3 seeds on
the shared tiny DiT, 64 samples x 30 steps per seed, 4 shard actors for the per-seed bit-for-bit
check) with every system's quality, bytes per step and simulated latency (NVLink/PCIe/Ethernet-like
presets) as ratios to synchronous fp16 exchange of the same run, the K/V error figures, wall time
and peak memory (cold cache: the DiT and classifier are trained in the run's prepare stage).

Run: .venv/bin/python benchmarks/bench_compactfusion.py [overrides ...]   (debug=true: tiny)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import (NAN, STATUS, WALL, claims_table, fig, fig_ratio, fig_se, headline,  # noqa: E402
                              run_isolated, variant_metrics, variant_table)


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("compactfusion", *overrides)
    sync = variant_metrics(out).get("sync", {})

    headline("compactfusion", out, peak, wall)
    variant_table(out, [
        STATUS, ("PSNR dB (+-se)", fig_se("psnr_db", ".2f")), ("SSIM", fig("ssim")), ("class acc", fig("class_acc", ".3f")),
        ("bytes/step", fig("bytes_per_step", ".0f")), ("/ sync", fig_ratio(sync, "bytes_per_step", fmt=".4f")),
        ("steady / sync", fig_ratio(sync, "bytes_per_step_steady", "bytes_per_step", fmt=".4f")),
        ("lat NVLink / sync", fig_ratio(sync, "sim_latency_s_nvlink")),
        ("lat PCIe / sync", fig_ratio(sync, "sim_latency_s_pcie")),
        ("lat Eth / sync", fig_ratio(sync, "sim_latency_s_ethernet")),
        ("K/V err last", fig("recon_rel_err_last")), ("err growth", fig("recon_err_growth", ".2f")),
        ("base mismatch", fig("base_mismatch", ".2e")), ("actor bits equal", fig("actor_bits_equal", ".0f")),
        ("codec s/step", fig("codec_s_per_step", ".3f")), WALL])
    print(f"\ncalibration: one block on one shard {sync.get('block_compute_s', NAN) * 1e3:.2f} ms, on all tokens "
          f"{sync.get('block_compute_s_full', NAN) * 1e3:.2f} ms; links (Gbit/s) NVLink-like "
          f"{sync.get('link_gbps_nvlink', NAN):.2f}, PCIe-like {sync.get('link_gbps_pcie', NAN):.3f}, Ethernet-like "
          f"{sync.get('link_gbps_ethernet', NAN):.4f}; exact K/V change between steps {sync.get('kv_step_change_mean', NAN):.4f} "
          f"(mean), {sync.get('kv_step_change_last', NAN):.4f} (last step)")
    claims_table(out)

if __name__ == "__main__":
    main(sys.argv[1:])
