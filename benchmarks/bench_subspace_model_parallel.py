"""Subspace model parallel benchmark: the full `subspace_model_parallel` experiment (9 variants, 3 seeds for
the gated comparison; a 4-stage GPipe pipeline whose first steps run on 4 Ray stage actors) with every variant's loss, bytes and simulated
time-to-loss as ratios to dense fp32 from the same run, the exactness figures, wall time and peak memory.

Time-to-loss is the experiment's ``reach:`` metric: per seed, the first point of a variant's curve at or
below that seed's dense fp32 final loss (the spec's definition; curve and final loss use the same windows).

Run: .venv/bin/python benchmarks/bench_subspace_model_parallel.py [overrides ...]   (debug=true: tiny flavour)
"""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import claims_table, headline, per_seed_table, run_isolated  # noqa: E402

NAN = float("nan")


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("subspace_model_parallel", *overrides)
    m = {n: (o.result.metrics if o.result else {}) for n, o in out.variants.items()}
    dn = m.get("dense_fp32", {})

    def ratio(a: float, b: float) -> float:
        return a / b if b and math.isfinite(b) and not math.isnan(b) else NAN

    headline("subspace_model_parallel", out, peak, wall)
    print("| variant | final_val_loss (+-se) | loss / dense | bytes/step | bytes / dense | B/token fwd, bwd "
          "| sim step 80 Mbps / dense | time-to-dense-loss 80 / dense | time-to-dense-loss 300 / dense "
          "| steps to dense loss | max boundary rel err | grad rel err | wall_s | peak RSS MB |")
    print("|" + "---|" * 14)
    for name, o in out.variants.items():
        r = m[name]
        print(f"| {name} | {r.get('final_val_loss', NAN):.4f} +- {r.get('final_val_loss_se', NAN):.4f} "
              f"| {ratio(r.get('final_val_loss', NAN), dn.get('final_val_loss')):.4f} "
              f"| {r.get('bytes_per_step', NAN):.0f} | {ratio(r.get('bytes_per_step', NAN), dn.get('bytes_per_step')):.4f} "
              f"| {r.get('bytes_per_token_fwd', NAN):.0f}, {r.get('bytes_per_token_bwd', NAN):.0f} "
              f"| {ratio(r.get('sim_step_s_link80', NAN), dn.get('sim_step_s_link80')):.3f} "
              f"| {ratio(r.get('sim_time_to_target_s_link80', NAN), dn.get('sim_time_to_target_s_link80')):.3f} "
              f"| {ratio(r.get('sim_time_to_target_s_link300', NAN), dn.get('sim_time_to_target_s_link300')):.3f} "
              f"| {r.get('steps_to_target', NAN):.0f} "
              f"| {r.get('max_boundary_rel_err', NAN):.2e} | {r.get('grad_rel_err', NAN):.2e} "
              f"| {o.wall_s:.0f} | {r.get('peak_rss_mb', NAN):.0f} |")
    per_seed_table(out, "final_val_loss")
    claims_table(out)


if __name__ == "__main__":
    main(sys.argv[1:])
