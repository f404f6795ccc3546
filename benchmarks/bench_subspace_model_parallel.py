"""Subspace model parallel benchmark: the full `subspace_model_parallel` experiment (9 variants, 3 seeds for
the gated comparison; a 4-stage GPipe pipeline whose first steps run on 4 Ray stage actors) with every variant's loss, bytes and simulated
time-to-loss as ratios to dense fp32 from the same run, the exactness figures, wall time and peak memory.

Time-to-loss is the experiment's ``reach:`` metric: per seed, the first point of a variant's curve at or
below that seed's dense fp32 final loss (the spec's definition; curve and final loss use the same windows).

Run: .venv/bin/python benchmarks/bench_subspace_model_parallel.py [overrides ...]   (debug=true: tiny flavour)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import (WALL, claims_table, fig, fig_ratio, fig_se, headline, per_seed_table,  # noqa: E402
                              run_isolated, variant_metrics, variant_table)


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("subspace_model_parallel", *overrides)
    dn = variant_metrics(out).get("dense_fp32", {})

    headline("subspace_model_parallel", out, peak, wall)
    variant_table(out, [
        ("final_val_loss (+-se)", fig_se("final_val_loss")), ("loss / dense", fig_ratio(dn, "final_val_loss", fmt=".4f")),
        ("bytes/step", fig("bytes_per_step", ".0f")), ("bytes / dense", fig_ratio(dn, "bytes_per_step", fmt=".4f")),
        ("B/token fwd, bwd", lambda r, o: f"{fig('bytes_per_token_fwd', '.0f')(r, o)}, {fig('bytes_per_token_bwd', '.0f')(r, o)}"),
        ("sim step 80 Mbps / dense", fig_ratio(dn, "sim_step_s_link80")),
        ("time-to-dense-loss 80 / dense", fig_ratio(dn, "sim_time_to_target_s_link80")),
        ("time-to-dense-loss 300 / dense", fig_ratio(dn, "sim_time_to_target_s_link300")),
        ("steps to dense loss", fig("steps_to_target", ".0f")),
        ("max boundary rel err", fig("max_boundary_rel_err", ".2e")), ("grad rel err", fig("grad_rel_err", ".2e")),
        WALL, ("peak RSS MB", fig("peak_rss_mb", ".0f"))])
    per_seed_table(out, "final_val_loss")
    claims_table(out)


if __name__ == "__main__":
    main(sys.argv[1:])
