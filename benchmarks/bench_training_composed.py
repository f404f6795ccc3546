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

from benchmarks._util import claims_table, headline, per_seed_table, ratio_to, run_isolated, variant_metrics  # noqa: E402

NAN = float("nan")


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("training_composed", *overrides)
    m = variant_metrics(out)
    base = m.get("fp32", {})
    ratio = ratio_to(base)

    headline("training_composed", out, peak, wall)
    print("| variant | status | final_val_loss (+-se) | / fp32 | fast bytes / fp32 | all bytes / fp32 | sim step / fp32 "
          "| sim step fault-free / fp32 | throughput loss | overloaded step | down frac | taken micro-batches | wall_s |")
    print("|" + "---|" * 13)
    for name, o in out.variants.items():
        r = m[name]
        print(f"| {name} | {o.status} | {r.get('final_val_loss', NAN):.4f} +- {r.get('final_val_loss_se', NAN):.4f} "
              f"| {ratio(r, 'final_val_loss'):.4f} | {ratio(r, 'bytes_fast_per_step'):.4f} | {ratio(r, 'bytes_per_step'):.4f} "
              f"| {ratio(r, 'sim_step_s'):.3f} | {ratio(r, 'sim_step_s_fault_free', 'sim_step_s'):.3f} "
              f"| {r.get('throughput_loss', NAN):.3f} | {r.get('overloaded_step_ratio', NAN):.2f} "
              f"| {r.get('down_frac', NAN):.3f} | {r.get('takeover_microbatches', NAN):.0f} | {o.wall_s:.0f} |")
    per_seed_table(out, "final_val_loss")
    claims_table(out)


if __name__ == "__main__":
    main(sys.argv[1:])
