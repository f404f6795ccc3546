"""MeCeFO benchmark: the full `mecefo` experiment (fault-free, exact neighbour-do-both, checkpoint-restart,
MeCeFO and two ablations on 4 replicas through the sheet's failure schedule; MeCeFO's first steps also on
4 Ray actors killed and restarted by Ray) with every variant's loss, virtual throughput and throughput loss
as ratios to fault-free of the same run, the overloaded-step and saved-activation ratios, the
microbenchmarked cost of every combination of the three approximations, wall time and peak memory.

Run: .venv/bin/python benchmarks/bench_mecefo.py [overrides ...]   (debug=true: the tiny flavour)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import claims_table, headline, ratio_to, run_isolated, variant_metrics  # noqa: E402

NAN = float("nan")


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("mecefo", *overrides)
    m = variant_metrics(out)
    ff = m.get("fault_free", {})
    ratio = ratio_to(ff)

    headline("mecefo", out, peak, wall)
    print("| variant | status | final_val_loss (+-se) | loss / fault-free | tokens/s (virtual) | / fault-free | "
          "throughput loss | overloaded step | saved act. (d64 / d128) | grad cos (mb / step) | down frac | "
          "actor restarts / kills | actor vs vec | wall_s |")
    print("|" + "---|" * 14)
    for name, o in out.variants.items():
        r = m[name]
        print(f"| {name} | {o.status} | {r.get('final_val_loss', NAN):.4f} +- {r.get('final_val_loss_se', NAN):.4f} "
              f"| {ratio(r, 'final_val_loss'):.4f} | {r.get('tokens_per_s', NAN):.0f} | {ratio(r, 'tokens_per_s'):.3f} "
              f"| {r.get('throughput_loss', NAN):.3f} | {r.get('overloaded_step_ratio', NAN):.2f} "
              f"| {r.get('saved_activation_ratio', NAN):.2f} / {r.get('saved_activation_ratio_timing', NAN):.2f} "
              f"| {r.get('grad_cosine', NAN):.3f} / {r.get('grad_cosine_step', NAN):.3f} | {r.get('down_frac', NAN):.2f} "
              f"| {r.get('actor_restarts', NAN):.0f} / {r.get('actor_kills', NAN):.0f} "
              f"| {r.get('actor_vs_vectorised_err', NAN):.1e} | {o.wall_s:.0f} |")
    me = m.get("mecefo", {})
    modes = sorted(k[len("time_ratio_"):] for k in me
                   if k.startswith("time_ratio_") and not k.endswith(("_se", "_n")))   # not the seed aggregates
    print("\nmicrobenchmark (timing model, median fwd+bwd of one micro-batch, ratio to exact; saved bytes ratio):")
    print("| mode | time / exact | saved bytes / exact |\n|---|---|---|")
    for k in modes:
        print(f"| {k} | {me[f'time_ratio_{k}']:.3f} | {me.get(f'saved_ratio_{k}', NAN):.3f} |")
    print(f"\nexact micro-batch {me.get('t_exact_s', NAN) * 1e3:.1f} ms, MeCeFO micro-batch "
          f"{me.get('t_take_s', NAN) * 1e3:.1f} ms, all-reduce {me.get('allreduce_s', NAN) * 1e3:.2f} ms; real actor "
          f"steps: normal {me.get('real_step_s_normal', NAN) * 1e3:.1f} ms, overloaded "
          f"{me.get('real_step_s_overloaded', NAN) * 1e3:.1f} ms")
    claims_table(out)


if __name__ == "__main__":
    main(sys.argv[1:])
