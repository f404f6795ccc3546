"""DUO benchmark: the full `duo` experiment (8 variants on Ray Train, 4 gloo workers each) with every
variant's final validation loss, fast/slow bytes and simulated step time as ratios to fp32 DDP and to
plain 4-bit, PowerSGD side by side, plus measured gloo seconds, wall time and peak memory.

Run: .venv/bin/python benchmarks/bench_duo.py [overrides ...]   (e.g. debug=true for the tiny flavour)
     .venv/bin/python benchmarks/bench_duo.py --lr-scan [1e-3,2e-3,...] [--steps 1000]
     (how the experiment's one learning rate was chosen: fp32 DDP's math in one process - the mean of
     4 workers' batch-16 gradients is the gradient of their batch of 64 - same AdamW, schedule, seeds.)
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import claims_table, headline, run_isolated  # noqa: E402

NAN = float("nan")


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("duo", *overrides)
    m = {n: (o.result.metrics if o.result else {}) for n, o in out.variants.items()}
    fp, q4 = m.get("fp32", {}), m.get("q4", {})

    def ratio(a: dict, b: dict, key: str, key_b: str | None = None) -> float:
        den = b.get(key_b or key, NAN)
        return a.get(key, NAN) / den if den else NAN

    headline("duo", out, peak, wall)
    print("| variant | final_val_loss (+-se over seeds) | loss / fp32 | bytes/step fast | bytes/step slow | bytes / fp32 "
          "| sim_step_s | sim / fp32 | sim / q4 | slow/fwd | sim / q4 (100Mbps) | gloo fast s/step | gloo slow s/step "
          "| exposed slow s/step | tokens/s | wall_s |")
    print("|" + "---|" * 16)
    for name, o in out.variants.items():
        r = m[name]
        print(f"| {name} | {r.get('final_val_loss', NAN):.4f} +- {r.get('final_val_loss_se', NAN):.4f} "
              f"| {ratio(r, fp, 'final_val_loss'):.4f} | {r.get('bytes_fast_per_step', NAN):.0f} "
              f"| {r.get('bytes_slow_per_step', NAN):.0f} | {ratio(r, fp, 'bytes_per_step'):.3f} "
              f"| {r.get('sim_step_s', NAN) * 1e3:.2f} ms | {ratio(r, fp, 'sim_step_s'):.3f} | {ratio(r, q4, 'sim_step_s'):.3f} "
              f"| {r.get('slow_fwd_ratio', NAN):.2f} | {ratio(r, q4, 'sim_step_s_slow_link'):.3f} "
              f"| {r.get('gloo_fast_s_per_step', NAN) * 1e3:.2f} ms | {r.get('gloo_slow_s_per_step', NAN) * 1e3:.2f} ms "
              f"| {r.get('exposed_slow_s_per_step', NAN) * 1e3:.2f} ms | {r.get('tokens_per_s', NAN):.0f} | {o.wall_s:.0f} |")
    claims_table(out)


def lr_scan(lrs: list[float], steps: int, seed: int = 0) -> None:
    import numpy as np
    import torch

    from components.data.char_corpus import build_corpus, sample_batch
    from components.models.gpt import GPT, SIZES, GPTConfig, evaluate_loss
    from components.training.ddp.optim import AdamW, lr_at
    from components.training.ddp.strategies import flatten_params

    torch.set_num_threads(1)
    c = build_corpus()
    print(f"## fp32 LR scan: small GPT, 4 x 16 sequences, {steps} steps, AdamW (0.9, 0.95), wd 0.1, "
          f"warmup 50, cosine to 0.1x, seed {seed}\n\n| lr | final_val_loss | wall_s |\n|---|---|---|")
    for lr in lrs:
        torch.manual_seed(seed)
        model = GPT(GPTConfig(vocab_size=c.vocab_size, **SIZES["small"]))
        flat = flatten_params(model)
        ps = list(model.parameters())
        opt = AdamW([flat], weight_decay=[torch.cat([torch.full((p.numel(),), 0.1 if p.dim() >= 2 else 0.0)
                                                    for p in ps])])
        rngs = [np.random.default_rng(seed * 10_007 + r) for r in range(4)]  # the 4 workers' streams
        t0 = time.perf_counter()
        for step in range(steps):
            xs, ys = zip(*[sample_batch(c.train, 16, 64, g) for g in rngs])
            _, loss = model(torch.cat(xs), torch.cat(ys))
            model.zero_grad()
            loss.backward()
            opt.update([flat], [torch.cat([p.grad.reshape(-1) for p in ps])], lr_at(step, steps, lr, 50, 0.1), [flat])
        val = evaluate_loss(model, c.val, 64, 32, 40, seed=54321)
        print(f"| {lr:g} | {val:.4f} | {time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--lr-scan" in args:
        i = args.index("--lr-scan")
        lrs = args[i + 1] if len(args) > i + 1 and not args[i + 1].startswith("--") else "1e-3,2e-3,3e-3,5e-3,8e-3,1.2e-2"
        steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 1000
        lr_scan([float(x) for x in lrs.split(",")], steps)
    else:
        main(args)
