"""tensor_parallel and context_parallel on ``ctx.device`` (issue 33), checked without a GPU: both declare
cuda; the TP rank model and its all-reduces, the rank timer, and the context-parallel exactness paths
keep their input's device on torch's ``meta`` device (tests/core/test_device_propagation.py says why).
The techniques themselves call ``.item()`` and cannot run on meta: their cpu results are the existing
tests', a GPU's are benchmarks/gpu_check.py's."""
from __future__ import annotations

import threading

import pytest
import torch

from components.core.registry import lookup
from components.models.gpt import GPT, GPTConfig

META = torch.device("meta")


def on_meta(*ts: torch.Tensor) -> bool:
    return all(t.device == META for t in ts)


@pytest.mark.parametrize("name", ["tensor_parallel", "context_parallel"])
def test_the_technique_declares_cuda(name):
    # Prepare / Execute: the registry entry
    tech = lookup("technique", name)
    # Assert: cpu stays, cuda is declared (device=cuda is then accepted before Ray starts)
    assert tech.devices == ("cpu", "cuda")


@pytest.mark.parametrize("block, per_forward", [("pre_ln", 4), ("parallel", 2), ("fal", 3), ("fal_plus", 4)])
def test_tp2_ranks_as_threads_on_meta_forward_backward_and_partial_grads(block, per_forward):
    from components.training.tensor_parallel.comm import ThreadComm
    from components.training.tensor_parallel.model import TPRankGPT

    # Prepare: two ranks of a 2-layer model on meta over the threads' all-reduce, one batch there
    cfg = GPTConfig(vocab_size=50, n_layer=2, n_head=4, d_model=32, context=16, block=block)
    tc = ThreadComm(2)
    ranks = [TPRankGPT(cfg, r, 2, tc.handle(r)).to(META) for r in range(2)]
    x, y = (torch.randint(0, 50, (2, 16), device=META) for _ in range(2))
    out: list = [None, None]
    errs: list = []

    def step(r):
        try:
            logits, loss = ranks[r](x, y)
            loss.backward()
            ranks[r].sync_partial_grads()
            out[r] = logits
        except BaseException as e:  # noqa: BLE001 - asserted below; the peer must not wait for it
            errs.append(e)
            tc._barrier.abort()

    # Execute: each rank in its own thread, as run_threads runs them
    threads = [threading.Thread(target=step, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Assert: outputs and every gradient on meta; the same all-reduces as on cpu, each one timed
    assert not errs, errs
    for rank in ranks:
        assert on_meta(*(p.grad for p in rank.parameters()))
        assert rank.comm.counts()["fwd_allreduces"] == per_forward and rank.comm.comm_s >= 0
    assert on_meta(*out)


def test_a_rank_timer_and_its_rank_run_where_the_model_is():
    from components.training.tensor_parallel.comm import CountingComm
    from components.training.tensor_parallel.ranks import RankTimer, TPRank

    # Prepare: a model on meta
    model = GPT(GPTConfig(vocab_size=50, n_layer=2, n_head=4, d_model=32, context=16, block="fal")).to(META)
    # Execute
    timer = RankTimer(model, 2)
    rank = TPRank(model.cfg.to_dict(), 1, 2, comm=CountingComm(1, 2), device="meta")
    # Assert: both shards on the model's device (the timed step's clock is then the wall clock)
    assert timer.device == "meta" and on_meta(*timer.rank.model.parameters(), *rank.model.parameters())


@pytest.mark.parametrize("kv, codec, r, M", [("dense", "fp32", 0, 1), ("dense", "int8", 0, 1),
                                             ("randproj", "bf16", 4, 1), ("subspace", "bf16", 4, 4)])
def test_context_parallel_exactness_paths_on_meta(kv, codec, r, M):
    from components.training.context_parallel.check import full_attention, layer0_inputs, vectorised
    from components.training.context_parallel.ring import RingSpec, build_model

    # Prepare: a 1-layer cp_ring model and tokens on meta
    model = build_model(50, 1, 2, 32, 32, RingSpec(chunks=4, kv=kv, codec=codec, r=r, M=M)).to(META)
    x = torch.randint(0, 50, (2, 32), device=META)
    # Execute: layer 0's inputs, the training path's ring and full attention, forward and backward
    t = layer0_inputs(model, x)
    dout = torch.zeros(t["q"].shape, device=META)
    vec, full = vectorised(t, dout), full_attention(t, dout)
    # Assert: every output and gradient stays on meta; the bytes are counted as on cpu
    grads = [vec[n] for n in ("out", "dq", "dk", "dv", "dwk", "dwv") if n in vec]
    assert on_meta(*grads, *(full[n] for n in ("out", "dq", "dk", "dv")))
    assert sum(n * h for kind, n, h in vec["sink"] if kind == "fwd") > 0
