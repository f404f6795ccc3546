"""DUO benchmark: the full `duo` experiment (8 variants on Ray Train, 4 gloo workers each) with every
variant's final validation loss, fast/slow bytes and simulated step time as ratios to fp32 DDP and to
plain 4-bit, PowerSGD side by side, plus measured gloo seconds, wall time and peak memory.

Run: .venv/bin/python benchmarks/bench_duo.py [overrides ...]   (e.g. debug=true for the tiny flavour)
     .venv/bin/python benchmarks/bench_duo.py --lr-scan [1e-3,2e-3,...] [--steps 1000]
     (how the experiment's one learning rate was chosen: fp32 DDP's math in one process - the mean of
     4 workers' batch-16 gradients is the gradient of their batch of 64 - same AdamW, schedule, seeds.)
     .venv/bin/python benchmarks/bench_duo.py --phases [--steps 200] [--rounds 2]
     (DUO's extra compute, phase by phase: (1) in one process, thread CPU medians of the optimizer step
     (plain sync's one AdamW step vs DUO's commit + preview, fused kernel vs the unfused reference formula)
     and of the gradient caching (one contiguous bucket copy vs the first version's fresh zeroed vector
     filled parameter by parameter); (2) q4 and duo4 through the real worker loop on 4 gloo processes (no
     Ray), the experiment's model and knobs, phases on the loop's clock and the simulated step on the
     1 Gbps and 100 Mbps links, with each rank's peak RSS.)
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks._util import WALL, claims_table, fig, fig_ratio, fig_se, headline, run_isolated, variant_metrics, variant_table  # noqa: E402

NAN = float("nan")


def main(overrides: list[str]) -> None:
    out, peak, wall = run_isolated("duo", *overrides)
    m = variant_metrics(out)
    fp, q4 = m.get("fp32", {}), m.get("q4", {})

    headline("duo", out, peak, wall)
    variant_table(out, [
        ("final_val_loss (+-se over seeds)", fig_se("final_val_loss")),
        ("loss / fp32", fig_ratio(fp, "final_val_loss", fmt=".4f")),
        ("bytes/step fast", fig("bytes_fast_per_step", ".0f")), ("bytes/step slow", fig("bytes_slow_per_step", ".0f")),
        ("bytes / fp32", fig_ratio(fp, "bytes_per_step")), ("sim_step_s", fig("sim_step_s", ".2f", 1e3, " ms")),
        ("sim / fp32", fig_ratio(fp, "sim_step_s")), ("sim / q4", fig_ratio(q4, "sim_step_s")),
        ("slow/fwd", fig("slow_fwd_ratio", ".2f")), ("sim / q4 (100Mbps)", fig_ratio(q4, "sim_step_s_slow_link")),
        ("gloo fast s/step", fig("gloo_fast_s_per_step", ".2f", 1e3, " ms")),
        ("gloo slow s/step", fig("gloo_slow_s_per_step", ".2f", 1e3, " ms")),
        ("exposed slow s/step", fig("exposed_slow_s_per_step", ".2f", 1e3, " ms")),
        ("tokens/s", fig("tokens_per_s", ".0f")), WALL])
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


def _cpu_median(fn, reps: int = 200) -> float:
    """Median thread CPU seconds of ``fn()`` (after one warm-up call)."""
    import statistics

    fn()
    ts = []
    for _ in range(reps):
        c0 = time.thread_time()
        fn()
        ts.append(time.thread_time() - c0)
    return statistics.median(ts)


def phase_micro() -> None:
    """DUO's per-step extras against plain sync in one process (1 thread): optimizer and caching."""
    import torch

    from components.models.gpt import GPT, SIZES, GPTConfig
    from components.training.ddp.optim import AdamW
    from components.training.ddp.strategies import flatten_params

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=103, **SIZES["small"]))
    flat = flatten_params(model)
    ps = list(model.parameters())
    n = flat.numel()
    sizes = [p.numel() for p in ps]
    committed = flat.clone()
    c_views = [c.view_as(p) for c, p in zip(committed.split(sizes), ps)]
    grads = [torch.randn_like(p) * 1e-3 for p in ps]
    bucket = torch.cat([g.reshape(-1) for g in reversed(grads)])      # DDP's bucket: reversed order
    offs = [0]
    for g in reversed(grads):
        offs.append(offs[-1] + g.numel())
    gbar = [bucket[o:o + g.numel()].view_as(g) for o, g in zip(reversed(offs[:-1]), grads)]
    opt = AdamW(ps, weight_decay=0.1)
    ref = AdamW(ps, weight_decay=0.1)
    rows = [
        ("plain sync: AdamW step (fused)", lambda: opt.update(ps, grads, 1e-3, ps)),
        ("plain sync: AdamW step (unfused reference)", lambda: ref.update_reference(ps, grads, 1e-3, ps)),
        ("DUO: commit + preview (fused)", lambda: opt.commit_preview(c_views, gbar, 1e-3, grads, 1e-3, ps)),
        ("DUO: commit + preview (unfused reference)",
         lambda: (ref.update_reference(c_views, gbar, 1e-3, c_views), ref.update_reference(c_views, grads, 1e-3, ps,
                                                                                           write=False))),
    ]
    cache = torch.empty_like(bucket)
    offsets = [p.data.storage_offset() for p in ps]

    def cache_before():  # the first version: a fresh zeroed vector per step, filled parameter by parameter
        c = torch.zeros_like(flat)
        for o, g in zip(offsets, grads):
            c[o:o + g.numel()].copy_(g.reshape(-1))

    rows += [("DUO: cache the local gradient (one bucket copy)", lambda: cache.copy_(bucket)),
             ("DUO: cache the local gradient (first version: zeroed vector, per-parameter copies)", cache_before)]
    print(f"## DUO's extra compute per step, one process, 1 thread, {n} parameters (median thread CPU, 200 reps)\n")
    print("| phase | CPU us |\n|---|---|")
    for name, fn in rows:
        print(f"| {name} | {_cpu_median(fn) * 1e6:.0f} |")
    buf_mb = 4 * n / 2**20
    print(f"\nDUO's extra state: committed weights + 2 cache buffers + 2 preview moment buffers = 5 x {buf_mb:.2f} MB "
          f"= {5 * buf_mb:.2f} MB per worker (plain sync: none beyond weights + 2 moments)\n")


def _phase_rank(rank: int, world: int, port: int, method: str, steps: int, out: str) -> None:
    import json
    import resource

    import torch
    import torch.distributed as dist

    from components.data.char_corpus import build_corpus
    from components.training.ddp.loop import run_seed
    from components.training.ddp.strategies import SyncStrategy
    from components.training.duo.fast_slow import DuoStrategy

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    corpus = build_corpus()
    from components.models.gpt import SIZES

    cfg = dict(model=dict(SIZES["small"]), vocab_size=corpus.vocab_size, batch=16, steps=steps, lr=8e-3, warmup=50,
               final_lr_frac=0.1, optimizer="adamw", weight_decay=0.1, bits=4, bucket=128, eval_every=0,
               eval_batches=1, eval_batch=32, final_eval_batches=1, ddp_bucket_mb=25.0, powersgd_rank=2,
               powersgd_start=10, fail_at=None,
               method="duo" if method == "duo4" else "plain",
               strategy=DuoStrategy if method == "duo4" else SyncStrategy)
    r = run_seed(cfg, 0, corpus.train, corpus.val, rank, world)
    r["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gathered = [None] * world
    dist.all_gather_object(gathered, r)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"world": world, "ranks": gathered}, f)
    dist.destroy_process_group()


def phase_loop(steps: int, rounds: int = 2) -> None:
    """q4 vs duo4 through the real worker loop on 4 gloo processes: phases, simulated step, peak RSS.
    The two alternate ``rounds`` times (q4, duo4, q4, ...) and every figure is the median over rounds, so a
    change in the machine's load between two runs does not land on one method only."""
    import json
    import socket
    import statistics
    import tempfile

    import torch.multiprocessing as mp

    from components.training.ddp.technique import DPParams, summarize

    runs: dict = {"q4": [], "duo4": []}
    for method in ("q4", "duo4") * rounds:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "out.json")
            t0 = time.perf_counter()
            mp.spawn(_phase_rank, args=(4, port, method, steps, path), nprocs=4, join=True)
            wall = time.perf_counter() - t0
            out = json.load(open(path))
        p = DPParams(model="small", batch=16, steps=steps, bits=4, bucket=128)
        m = summarize(p, "duo" if method == "duo4" else "plain", out).metrics
        m["peak_rss_mb"] = max(r["peak_rss_mb"] for r in out["ranks"])
        m["wall_s"] = wall
        runs[method].append(m)
    q, d = ({k: statistics.median(r[k] for r in runs[meth]) for k in runs[meth][0] if isinstance(runs[meth][0][k], float)}
            for meth in ("q4", "duo4"))
    print(f"## q4 vs duo4 through the worker loop: 4 gloo processes, small GPT, batch 16, {steps} steps, "
          f"{rounds} alternating rounds (phases: median thread CPU per step, mean over ranks, median over rounds; "
          f"wall medians beside)\n")
    print("per round, sim_step_s duo4 / q4: " + ", ".join(
        f"{b['sim_step_s'] / a['sim_step_s']:.3f}" for a, b in zip(runs["q4"], runs["duo4"])) + "\n")
    print("| figure | q4 | duo4 | duo4 / q4 |\n|---|---|---|---|")
    rows = [("fwd_s", 1e3, "ms"), ("bwd_s", 1e3, "ms"), ("opt_s", 1e3, "ms"), ("fwd_wall_s", 1e3, "ms"),
            ("bwd_wall_s", 1e3, "ms"), ("opt_wall_s", 1e3, "ms"), ("sim_fast_s", 1e3, "ms"), ("sim_slow_s", 1e3, "ms"),
            ("slow_fwd_ratio", 1, ""), ("sim_step_s", 1e3, "ms"), ("sim_step_s_slow_link", 1e3, "ms"),
            ("exposed_slow_s_per_step", 1e3, "ms"), ("peak_rss_mb", 1, "MB"), ("wall_s", 1, "s")]
    for k, scale, unit in rows:
        a, b = q.get(k, NAN), d.get(k, NAN)
        print(f"| {k} | {a * scale:.3f} {unit} | {b * scale:.3f} {unit} | {b / a if a else NAN:.3f} |")
    compute_q = q["fwd_s"] + q["bwd_s"] + q["opt_s"]
    compute_d = d["fwd_s"] + d["bwd_s"] + d["opt_s"]
    print(f"\nDUO's compute over q4's: {compute_d / compute_q:.3f}x ({(compute_d - compute_q) * 1e3:+.3f} ms); "
          f"slow path {d['sim_slow_s'] * 1e3:.2f} ms vs forward {d['fwd_s'] * 1e3:.2f} ms on 1 Gbps: "
          f"{max(0.0, d['sim_slow_s'] - d['fwd_s']) * 1e3:.2f} ms of it not hidden.\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--phases" in args:
        phase_micro()
        phase_loop(int(args[args.index("--steps") + 1]) if "--steps" in args else 200,
                   int(args[args.index("--rounds") + 1]) if "--rounds" in args else 2)
    elif "--lr-scan" in args:
        i = args.index("--lr-scan")
        lrs = args[i + 1] if len(args) > i + 1 and not args[i + 1].startswith("--") else "1e-3,2e-3,3e-3,5e-3,8e-3,1.2e-2"
        steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 1000
        lr_scan([float(x) for x in lrs.split(",")], steps)
    else:
        main(args)
