"""Composed training benchmark: the full `training_composed` experiment (one Ray Train DDP job per variant and
seed: fp32 pre-LN, FAL, DUO-1bit, MeCeFO alone and the three composed, all through the same seeded failure
schedule) with every variant's loss, critical-path bytes, simulated step and throughput loss as ratios to
fp32 DDP of the same run, per-seed losses, wall time and peak memory.

Run: .venv/bin/python benchmarks/bench_training_composed.py [overrides ...]   (debug=true: the tiny flavour)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import (STATUS, WALL, claims_table, fig, fig_ratio, fig_se, headline, per_seed_table,  # noqa: E402
                              run_isolated, variant_metrics, variant_table)


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("training_composed", *overrides)
    base = variant_metrics(out).get("fp32", {})

    headline("training_composed", out, peak, wall)
    variant_table(out, [
        STATUS, ("final_val_loss (+-se)", fig_se("final_val_loss")), ("/ fp32", fig_ratio(base, "final_val_loss", fmt=".4f")),
        ("fast bytes / fp32", fig_ratio(base, "bytes_fast_per_step", fmt=".4f")),
        ("all bytes / fp32", fig_ratio(base, "bytes_per_step", fmt=".4f")), ("sim step / fp32", fig_ratio(base, "sim_step_s")),
        ("sim step fault-free / fp32", fig_ratio(base, "sim_step_s_fault_free", "sim_step_s")),
        ("throughput loss", fig("throughput_loss", ".3f")), ("overloaded step", fig("overloaded_step_ratio", ".2f")),
        ("down frac", fig("down_frac", ".3f")), ("taken micro-batches", fig("takeover_microbatches", ".0f")), WALL])
    per_seed_table(out, "final_val_loss")
    claims_table(out)


if __name__ == "__main__":
    main(sys.argv[1:])
