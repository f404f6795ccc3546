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

from benchmarks._util import ratio_to, run_isolated, variant_metrics  # noqa: E402

NAN = float("nan")


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("compactfusion", *overrides)
    m = variant_metrics(out)
    sync = m.get("sync", {})
    ratio = ratio_to(sync)

    print(f"## compactfusion full experiment: {wall:.0f} s wall, peak memory {peak:.0f} MB (driver + Ray workers), "
          f"claims held {out.claims_held}/{sum(c.gate for c in out.claims)}\n")
    print("| variant | status | PSNR dB (+-se) | SSIM | class acc | bytes/step | / sync | steady / sync | "
          "lat NVLink / sync | lat PCIe / sync | lat Eth / sync | K/V err last | err growth | base mismatch | "
          "actor bits equal | codec s/step | wall_s |")
    print("|" + "---|" * 17)
    for name, o in out.variants.items():
        r = m[name]
        print(f"| {name} | {o.status} | {r.get('psnr_db', NAN):.2f} +- {r.get('psnr_db_se', NAN):.2f} "
              f"| {r.get('ssim', NAN):.4f} | {r.get('class_acc', NAN):.3f} | {r.get('bytes_per_step', NAN):.0f} "
              f"| {ratio(r, 'bytes_per_step'):.4f} | {ratio(r, 'bytes_per_step_steady', 'bytes_per_step'):.4f} "
              f"| {ratio(r, 'sim_latency_s_nvlink'):.3f} | {ratio(r, 'sim_latency_s_pcie'):.3f} "
              f"| {ratio(r, 'sim_latency_s_ethernet'):.3f} | {r.get('recon_rel_err_last', NAN):.4f} "
              f"| {r.get('recon_err_growth', NAN):.2f} | {r.get('base_mismatch', NAN):.2e} "
              f"| {r.get('actor_bits_equal', NAN):.0f} | {r.get('codec_s_per_step', NAN):.3f} | {o.wall_s:.0f} |")
    print(f"\ncalibration: one block on one shard {sync.get('block_compute_s', NAN) * 1e3:.2f} ms, on all tokens "
          f"{sync.get('block_compute_s_full', NAN) * 1e3:.2f} ms; links (Gbit/s) NVLink-like "
          f"{sync.get('link_gbps_nvlink', NAN):.2f}, PCIe-like {sync.get('link_gbps_pcie', NAN):.3f}, Ethernet-like "
          f"{sync.get('link_gbps_ethernet', NAN):.4f}; exact K/V change between steps {sync.get('kv_step_change_mean', NAN):.4f} "
          f"(mean), {sync.get('kv_step_change_last', NAN):.4f} (last step)")
    print("\n| claim | gate | outcome | measured | premise |\n|---|---|---|---|---|")
    for c in out.claims:
        outcome = "skipped" if c.skipped else ("premise not met" if getattr(c, "premise_holds", None) is False
                                               else c.holds)
        print(f"| {c.name} | {c.gate} | {outcome} | {c.measured_pm or c.measured} | {getattr(c, 'premise_measured', '') or ''} |")


if __name__ == "__main__":
    main(sys.argv[1:])
