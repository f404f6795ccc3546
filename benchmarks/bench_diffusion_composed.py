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

from benchmarks._util import (ROLE, STATUS, WALL, claims_table, fig, fig_ratio, fig_se, headline,  # noqa: E402
                              per_seed_table, run_isolated, variant_metrics, variant_table)

LINKS = ("nvlink", "pcie", "ethernet")


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("diffusion_composed", *overrides)
    headline("diffusion_composed", out, peak, wall)
    sync = variant_metrics(out).get("sync", {})

    variant_table(out, [
        ROLE, STATUS, ("PSNR dB (+-se)", fig_se("psnr_db", ".2f")), ("SSIM", fig("ssim")), ("class acc", fig("class_acc", ".3f")),
        ("skip fraction", fig("skip_fraction", ".3f")), ("bytes/step / sync", fig_ratio(sync, "bytes_per_step", fmt=".4f")),
        ("steady bytes / sync", fig_ratio(sync, "bytes_per_step_steady", "bytes_per_step", fmt=".4f")),
        *[(f"lat {k} / sync", fig_ratio(sync, f"sim_latency_s_{k}")) for k in LINKS],
        ("K/V err mean", fig("recon_rel_err_mean")), WALL])
    per_seed_table(out, "psnr_db")
    claims_table(out)


if __name__ == "__main__":
    main(sys.argv[1:])
