"""Worker functions for the 2-process gloo tests of the DDP hooks and DUO (spawned, no Ray)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

from components.training.ddp.strategies import SyncStrategy
from components.training.duo.fast_slow import DuoStrategy

BASE_CFG = dict(model=dict(n_layer=1, n_head=2, d_model=16, context=32), batch=8, steps=12, lr=3e-3, warmup=2,
                final_lr_frac=0.1, optimizer="adamw", weight_decay=0.1, bits=4, bucket=64, eval_every=0,
                eval_batches=1, eval_batch=8, final_eval_batches=2, ddp_bucket_mb=25.0, powersgd_rank=2,
                powersgd_start=3, fail_at=None, strategy=SyncStrategy)

METHODS = {  # name -> config overrides
    "fp32": dict(method="fp32"),
    "powersgd": dict(method="powersgd"),
    "plain4": dict(method="plain", bits=4),
    "plain1": dict(method="plain", bits=1),
    "ef1": dict(method="ef", bits=1),
    "duo4": dict(method="duo", bits=4, strategy=DuoStrategy),
    "duo1": dict(method="duo", bits=1, strategy=DuoStrategy),
    "duo0": dict(method="duo", bits=0, strategy=DuoStrategy),
}


def _exit_now(dist) -> None:
    """End a worker whose results are written: destroy the group, then leave without the interpreter's
    teardown, where gloo's leftover threads sometimes abort the process ("terminate called without an
    active exception", seen in `make test`; a crash before the results are written still fails the test)."""
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _init(rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)


def hooks_worker(rank: int, world: int, port: int, out: str) -> None:
    """Train the debug GPT for a few steps with every method; rank 0 writes what each produced."""
    _run_named(rank, world, port, out, {n: {**BASE_CFG, **over} for n, over in METHODS.items()},
               ("paths", "train_loss", "final_val_loss", "param_checksum", "n_params"))


def _run_named(rank: int, world: int, port: int, out: str, cfgs: dict, keep: tuple) -> None:
    """Train every named config on this rank; rank 0 writes every rank's ``keep`` figures to ``out``."""
    import torch.distributed as dist

    from components.data.char_corpus import build_corpus
    from components.training.ddp.loop import run_seed

    _init(rank, world, port)
    corpus = build_corpus(max_chars=60_000)
    res = {}
    for name, cfg in cfgs.items():
        r = run_seed({**cfg, "vocab_size": corpus.vocab_size}, 0, corpus.train, corpus.val, rank, world)
        res[name] = {k: r.get(k) for k in keep}
    gathered = [None] * world
    dist.all_gather_object(gathered, res)
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))
    _exit_now(dist)


def closed_form_worker(rank: int, world: int, port: int, out: str) -> None:
    """DUO with SGD and a 1-bit fast path; records w_t, the exact local gradients (computed on a
    separate plain copy of the model) and the decoded low-bit messages, for the closed-form check."""
    import copy

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from components.compression.torch_codecs import make_torch_codec
    from components.data.char_corpus import build_corpus, sample_batch
    from components.models.gpt import GPT, GPTConfig
    from components.training.ddp.strategies import flatten_params

    _init(rank, world, port)
    corpus = build_corpus(max_chars=60_000)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=corpus.vocab_size, **BASE_CFG["model"]))
    flat = flatten_params(model)
    ref = copy.deepcopy(model)
    ref_params = list(ref.parameters())
    ddp = DDP(model)
    # one scale for the whole gradient, so the 1-bit code does not depend on DDP's bucket order
    # (DDP reorders its bucket after the first step); bucket-order-aware codes are checked elsewhere
    assert flat.numel() <= 8192
    cfg = {**BASE_CFG, "bits": 1, "bucket": 8192, "optimizer": "sgd", "weight_decay": 0.0}
    strat = DuoStrategy(ddp, cfg, flat)
    strat.attach()
    codec = make_torch_codec(1, 8192)
    rng = np.random.default_rng(rank)
    lr, steps = 0.05, 6
    ws, gbars, qbars, ddp_q, committed = [], [], [], [], []
    for step in range(steps):
        x, y = sample_batch(corpus.train, 8, 32, rng)
        w = flat.detach().clone()
        ws.append(w)
        # independent exact local gradient at w_t and the low-bit messages of all workers
        with torch.no_grad():
            for p, q in zip(ref_params, model.parameters()):
                p.copy_(q)
        ref.zero_grad()
        ref(x, y)[1].backward()
        g = torch.cat([p.grad.reshape(-1) for p in ref_params])
        all_g = [torch.empty_like(g) for _ in range(world)]
        dist.all_gather(all_g, g)
        gbars.append(torch.stack(all_g).mean(0))
        qbars.append(torch.stack([codec.roundtrip(gi)[0] for gi in all_g]).mean(0))
        strat.before_forward(step)
        _, loss = ddp(x, y)
        loss.backward()
        ddp_q.append(strat.grads()[0].clone())
        strat.after_backward(step, lr)
        committed.append(strat.committed[0].clone())
        for p in model.parameters():
            p.grad = None
    ws.append(flat.detach().clone())
    strat.finish(lr)
    final = flat.detach().clone()
    if rank == 0:
        torch.save({"ws": ws, "gbars": gbars, "qbars": qbars, "final": final, "lr": lr, "ddp_q": ddp_q,
                    "committed": committed}, out)
    _exit_now(dist)


TAKEOVER = {  # name -> config overrides: replica 1 down for steps 3..7 of 12 (kills [[3, 1]], down 5; svd bases refreshed every 4 steps: the takes straddle a refresh)
    "none": dict(takeover={"recovery": "none"}),
    "ndb": dict(takeover={"recovery": "ndb", "kills": [[3, 1]], "down_steps": 5}),
    "mecefo_exact": dict(takeover={"recovery": "mecefo", "kills": [[3, 1]], "down_steps": 5, "skip_attn": False,
                                   "lowrank": False}),
    "mecefo": dict(takeover={"recovery": "mecefo", "kills": [[3, 1]], "down_steps": 5, "refresh": 4}),
    "fal_duo_mecefo": dict(block="fal", method="duo", bits=1, strategy=DuoStrategy,
                           takeover={"recovery": "mecefo", "kills": [[3, 1]], "down_steps": 5, "refresh": 4}),
}


def takeover_worker(rank: int, world: int, port: int, out: str) -> None:
    """The debug GPT (2 layers) through a fixed failure of replica 1 under each recovery; rank 0
    writes what each produced."""
    base = {**BASE_CFG, "method": "fp32", "model": dict(BASE_CFG["model"], n_layer=2)}
    _run_named(rank, world, port, out, {n: {**base, **over} for n, over in TAKEOVER.items()},
               ("param_checksum", "takes", "take_cost_ratio", "refresh_cost_ratio", "final_val_loss", "train_loss"))
