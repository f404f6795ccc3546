"""Foresight benchmark (run by `make bench`): the full `foresight` experiment through the DAG
(cold cache, fresh store: wall time, peak memory), every policy's figures as ratios to full
compute from the same run (skip fraction, PSNR/SSIM against full from the same noise, class
accuracy, wall speedup timed in-task against full, sample time), the lambda sweep, the claims;
then the sampler's cost per denoising step at batch 1 and 16 (one thread, CFG batched).

Run: .venv/bin/python benchmarks/bench_foresight.py [--skip-full]
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import claims_table, headline, run_isolated, skip_full_main  # noqa: E402

COLS = ("skip_fraction", "psnr_db", "ssim", "class_acc", "speedup_wall", "sample_ms")


def _fmt(m: dict, k: str) -> str:
    v = m.get(k)
    if v is None:
        return "-"
    se = m.get(f"{k}_se")
    return f"{v:.3f}" + (f" ± {se:.3f}" if se is not None and se == se else "")


def full_experiment() -> None:
    out, peak, wall = run_isolated("foresight")
    headline("foresight", out, peak, wall)
    full = out.variants["full"].result.metrics
    print("| variant | role | " + " | ".join(COLS) + " | sample time / full | wall_s |")
    print("|" + "---|" * (len(COLS) + 4))
    for name, o in out.variants.items():
        m = o.result.metrics if o.result else {}
        if "psnr_db" not in m or "sample_ms" not in m:
            continue
        ratio = m["sample_ms"] / full["sample_ms"] if m.get("size") == full["size"] and m.get("steps") == full["steps"] else float("nan")
        print(f"| {name} | {o.role} | " + " | ".join(_fmt(m, c) for c in COLS) + f" | {ratio:.3f} | {o.wall_s:.1f} |")
    sweep = out.variants.get("lambda_sweep")
    if sweep and sweep.result:
        print("\nlambda sweep (per seed)\n\n| seed | lambda | skip_fraction | psnr_db | class_acc |\n|---|---|---|---|---|")
        for r in sweep.result.tables.get("lambda_sweep", []):
            print(f"| {r.get('seed', '')} | {r['lam']:g} | {r['skip_fraction']:.3f} | {r['psnr_db']:.2f} | {r['class_acc']:.3f} |")
    claims_table(out)


def sampler_speed() -> None:
    """ms per denoising step of the experiment's DiT size (untrained weights: cost only)."""
    import torch

    from components.diffusion.sampling import sample
    from components.models.dit import DiT, DiTConfig

    torch.set_num_threads(1)
    model = DiT(DiTConfig(img_size=16, patch=2, d=64, heads=4, depth=6)).eval()
    print("\n## sampler cost (d64, 6 blocks, 64 tokens, CFG batched, 1 thread)\n\n| batch | ms / step |\n|---|---|")
    for b in (1, 16):
        noise, y = torch.randn(b, 1, 16, 16), torch.arange(b) % 10
        sample(model, noise, y, 2)
        t0 = time.perf_counter()
        sample(model, noise, y, 20)
        print(f"| {b} | {1000 * (time.perf_counter() - t0) / 20:.1f} |")


def main() -> None:
    skip_full_main(full_experiment, sampler_speed)


if __name__ == "__main__":
    main()
