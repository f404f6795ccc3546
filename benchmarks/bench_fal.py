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

from benchmarks._util import ratio_to, run_isolated, variant_metrics  # noqa: E402

NAN = float("nan")


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("fal", *overrides)
    m = variant_metrics(out)
    base = m.get("pre_ln", {})
    ratio = ratio_to(base)

    print(f"## fal full experiment: {wall:.0f} s wall, peak memory {peak:.0f} MB (driver + Ray workers), "
          f"claims held {out.claims_held}/{sum(c.gate for c in out.claims)}\n")
    print("| variant | status | final_val_loss (+-se) | loss / pre_ln | AR fwd | AR step | AR bytes/step | bytes / pre_ln "
          "| compute ms | sim_step 1G ms | / pre_ln | sim_step 100G ms | / pre_ln | comm share 1G | tokens/s 1G "
          "| max TP err | real step ms | peak RSS MB | wall_s |")
    print("|" + "---|" * 19)
    for name, o in out.variants.items():
        r = m[name]
        print(f"| {name} | {o.status} | {r.get('final_val_loss', NAN):.4f} +- {r.get('final_val_loss_se', NAN):.4f} "
              f"| {ratio(r, 'final_val_loss'):.4f} | {r.get('allreduces_per_forward', NAN):.0f} "
              f"| {r.get('allreduces_per_step', NAN):.0f} | {r.get('allreduce_bytes_per_step', NAN):.0f} "
              f"| {ratio(r, 'allreduce_bytes_per_step'):.3f} | {r.get('compute_s_per_step', NAN) * 1e3:.1f} "
              f"| {r.get('sim_step_s', NAN) * 1e3:.1f} | {ratio(r, 'sim_step_s'):.3f} "
              f"| {r.get('sim_step_s_dc', NAN) * 1e3:.1f} | {ratio(r, 'sim_step_s_dc'):.3f} "
              f"| {r.get('comm_share', NAN):.2f} | {r.get('tokens_per_s', NAN):.0f} | {r.get('max_tp_abs_err', NAN):.1e} "
              f"| {r.get('train_s_per_step', NAN) * 1e3:.1f} | {r.get('peak_rss_mb', NAN):.0f} | {o.wall_s:.0f} |")
    print("\n| claim | gate | outcome | measured | premise |\n|---|---|---|---|---|")
    for c in out.claims:
        outcome = "skipped" if c.skipped else ("premise not met" if getattr(c, "premise_holds", None) is False
                                               else c.holds)
        print(f"| {c.name} | {c.gate} | {outcome} | {c.measured} | {getattr(c, 'premise_measured', '') or ''} |")


if __name__ == "__main__":
    main(sys.argv[1:])
