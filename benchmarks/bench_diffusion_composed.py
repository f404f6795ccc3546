"""Foresight + CompactFusion composed benchmark (run by `make bench`): the full `diffusion_composed`
experiment through the DAG (cold cache, fresh store: the DiT, classifier, references and link
calibration are built in its prepare stage), every system's quality, bytes and simulated latency as
ratios to synchronous fp16 exchange from the same run, the per-seed PSNR, wall time and peak memory.

Run: .venv/bin/python benchmarks/bench_diffusion_composed.py [overrides ...]   (debug=true: tiny)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import claims_table, headline, per_seed_table, ratio_to, run_isolated, variant_metrics  # noqa: E402

NAN = float("nan")
LINKS = ("nvlink", "pcie", "ethernet")


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("diffusion_composed", *overrides)
    headline("diffusion_composed", out, peak, wall)
    m = variant_metrics(out)
    sync = m.get("sync", {})
    ratio = ratio_to(sync)

    print("| variant | role | status | PSNR dB (+-se) | SSIM | class acc | skip fraction | bytes/step / sync | "
          "steady bytes / sync | " + " | ".join(f"lat {k} / sync" for k in LINKS) + " | K/V err mean | wall_s |")
    print("|" + "---|" * (10 + len(LINKS)))
    for name, o in out.variants.items():
        r = m[name]
        lat = " | ".join(f"{ratio(r, f'sim_latency_s_{k}'):.3f}" for k in LINKS)
        steady = ratio(r, "bytes_per_step_steady", "bytes_per_step")
        print(f"| {name} | {o.role} | {o.status} | {r.get('psnr_db', NAN):.2f} +- {r.get('psnr_db_se', NAN):.2f} "
              f"| {r.get('ssim', NAN):.4f} | {r.get('class_acc', NAN):.3f} | {r.get('skip_fraction', NAN):.3f} "
              f"| {ratio(r, 'bytes_per_step'):.4f} | {steady:.4f} | {lat} | {r.get('recon_rel_err_mean', NAN):.4f} "
              f"| {o.wall_s:.0f} |")
    per_seed_table(out, "psnr_db")
    claims_table(out)


if __name__ == "__main__":
    main(sys.argv[1:])
