"""FAL benchmark: the full `fal` experiment (pre-LN, GPT-J parallel, FAL, FAL+ x 3 seeds on the char
GPT, 6 layers d 64, each checked on 2 gloo rank actors) with every variant's loss, all-reduces, bytes
and simulated TP-2 step as ratios to pre_ln from the same run, the exactness figures, wall time and
peak memory.

Run: .venv/bin/python benchmarks/bench_fal.py [overrides ...]  (debug=true: tiny)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import (STATUS, WALL, claims_table, fig, fig_ratio, fig_se, headline, run_isolated,  # noqa: E402
                              variant_metrics, variant_table)


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("fal", *overrides)
    base = variant_metrics(out).get("pre_ln", {})

    headline("fal", out, peak, wall)
    variant_table(out, [
        STATUS, ("final_val_loss (+-se)", fig_se("final_val_loss")),
        ("loss / pre_ln", fig_ratio(base, "final_val_loss", fmt=".4f")),
        ("AR fwd", fig("allreduces_per_forward", ".0f")), ("AR step", fig("allreduces_per_step", ".0f")),
        ("AR bytes/step", fig("allreduce_bytes_per_step", ".0f")),
        ("bytes / pre_ln", fig_ratio(base, "allreduce_bytes_per_step")),
        ("compute ms", fig("compute_s_per_step", ".1f", 1e3)), ("sim_step 1G ms", fig("sim_step_s", ".1f", 1e3)),
        ("/ pre_ln", fig_ratio(base, "sim_step_s")), ("sim_step 100G ms", fig("sim_step_s_dc", ".1f", 1e3)),
        ("/ pre_ln", fig_ratio(base, "sim_step_s_dc")), ("comm share 1G", fig("comm_share", ".2f")),
        ("tokens/s 1G", fig("tokens_per_s", ".0f")), ("max TP err", fig("max_tp_abs_err", ".1e")),
        ("real step ms", fig("train_s_per_step", ".1f", 1e3)), ("peak RSS MB", fig("peak_rss_mb", ".0f")), WALL])
    claims_table(out)

if __name__ == "__main__":
    main(sys.argv[1:])
