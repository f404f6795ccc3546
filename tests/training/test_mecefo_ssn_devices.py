"""MeCeFO and subspace_pp on ``ctx.device`` (issue 33), checked without a GPU: both techniques declare
cuda, MeCeFO's timing step is keyed by its device, and the pure-torch paths keep their operands on the
device: torch's ``meta`` device stands in for cuda (its ops refuse a cpu operand as cuda's do and compute
no values, so code that reads a value, ``.item()``, is left to benchmarks/gpu_check.py). That cpu results
are unchanged is what tests/training/test_mecefo.py and test_subspace_pp.py check."""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from tests.training.test_mecefo import _one_thread  # noqa: F401  (autouse: tiny models on one thread)

META = torch.device("meta")
V = 40


def on_meta(*ts: torch.Tensor) -> bool:
    return all(t.device == META for t in ts)


@pytest.mark.parametrize("name", ["mecefo", "subspace_pp"])
def test_techniques_declare_cuda(name):
    from components.core.registry import lookup

    # Prepare / Execute
    spec = lookup("technique", name)
    # Assert
    assert {"cpu", "cuda"} <= set(spec.devices)


def test_mecefo_timing_is_a_measured_time_keyed_by_its_device():
    from components.core.registry import lookup

    # Prepare / Execute
    step = lookup("prepare_step", "mecefo_timing")
    # Assert
    assert {"cpu", "cuda"} <= set(step.devices) and step.per_device


def test_subspace_pp_on_cuda_trains_in_process():
    from components.core.errors import ConfigError
    from components.training.subspace_pp.technique import SubspacePPParams, _validate

    # Prepare
    actors, local = SubspacePPParams(execution="actors"), SubspacePPParams(execution="in_process")
    # Execute / Assert: cuda on the stage actors (no GPU there) is one line; in process, or auto, runs
    with pytest.raises(ConfigError) as e:
        _validate(actors, {"device": "cuda"})
    assert e.value.key == "execution" and "\n" not in str(e.value)
    _validate(local, {"device": "cuda"}), _validate(actors, {"device": "auto"}), _validate(actors, {})


def test_mecefo_refuses_a_timing_measured_on_another_device():
    from components.core.context import RunContext
    from components.core.errors import ConfigError
    from components.training.mecefo.technique import MeCeFOParams, run_mecefo

    # Prepare: a timing recorded on cuda, a run on cpu
    ctx = RunContext(seed=0, inputs={"corpus": None, "timing": {"device": "cuda"}}, device="cpu")
    # Execute / Assert: one line naming the input, before any training
    with pytest.raises(ConfigError) as e:
        run_mecefo(MeCeFOParams(), ctx)
    assert e.value.key == "timing.device" and "\n" not in str(e.value)


@pytest.mark.parametrize("block", ["pre_ln", "parallel", "fal", "fal_plus"])
def test_mecefo_approximations_of_a_block_backward(block):
    from components.models.gpt import GPT, GPTConfig
    from components.training.mecefo.approx import Approx, Bases, flat_grad, microbatch_loss, skipped_mask

    # Prepare: the model on the device, a micro-batch drawn on cpu, svd bases held from the device's weights
    model = GPT(GPTConfig(vocab_size=V, n_layer=2, n_head=2, d_model=16, context=8, block=block)).to(META)
    x, y = torch.randint(0, V, (2, 8)), torch.randint(0, V, (2, 8))
    bases = Bases(Approx(rank=4)).at(model, 0)
    modes = [Approx(rank=4), Approx(rank=4, basis="gaussian"),                 # svd held; cpu draw moved
             Approx(skip_attn=False, rank=64)]                                # full rank: P = I
    for a in modes:
        # Execute: attention skipped, FFN recomputed, low-rank FFN weight gradients
        model.zero_grad(set_to_none=True)
        microbatch_loss(model, x, y, a, torch.Generator().manual_seed(0), bases).backward()
        # Assert
        assert on_meta(flat_grad(model), skipped_mask(model), *bases.Ps), a
    assert bases.refreshes == 1


@pytest.mark.parametrize("recovery", ["fault_free", "ndb", "mecefo", "drop"])
def test_mecefo_training_steps(recovery):
    from components.data.char_corpus import build_corpus
    from components.training.mecefo.approx import Approx
    from components.training.mecefo.schedule import fixed_schedule
    from components.training.mecefo.train import TrainSetup, train

    # Prepare: replica 2 down at steps 1-2 (a takeover), bases refreshed at step 2; cpu-drawn micro-batches
    corpus = build_corpus(max_chars=20_000)
    setup = TrainSetup(n_layer=1, n_head=2, d_model=16, context=8, batch=2, steps=3, warmup=1)
    sets, _ = fixed_schedule(4, 3, [(1, 2)], 2)
    for grouped in (True, False):
        # Execute: the training path (exact micro-batches batched) and the actors' per-replica arithmetic,
        # with the skipped attention's gradient averaged over its computers and the AdamW step
        out = train(setup, corpus, 0, sets, recovery, Approx(rank=4, refresh=2), steps=3, evaluate=False,
                    grouped=grouped, device="meta")
        # Assert: the weights and the optimizer's moments (its step count is a cpu scalar, as torch keeps it)
        moments = [st[k] for st in out["opt"].state.values() for k in ("exp_avg", "exp_avg_sq")]
        assert moments and on_meta(*out["model"].parameters(), *moments)


def test_mecefo_timing_measures_on_its_device():
    from components.training.mecefo.timing import TimingParams, measure

    # Prepare
    p = TimingParams(n_layer=1, n_head=2, d_model=16, context=8, batch=2, reps=1, warmup=0)
    # Execute: every mode's forward and backward and one refresh of the svd bases
    out = measure(p, V, device="meta")
    # Assert: every mode timed, the device recorded
    assert out["device"] == "meta" and len(out["modes"]) == 9 and all("s" in m for m in out["modes"].values())


def test_ssn_stage_step():
    from components.models.gpt import GPTConfig
    from components.training.subspace_pp.codecs import BoundaryCodec
    from components.training.subspace_pp.model import build_stages, reference_loss
    from components.training.subspace_pp.stage import StageWorker

    # Prepare: the SSN pipeline of 2 stages built on cpu (seeded), its workers on the device; cpu token ids
    cfg = GPTConfig(vocab_size=V, n_layer=2, n_head=2, d_model=16, context=8, tie_embeddings=False)
    stages, const = build_stages(cfg, 2, 0, 4, ssn=True)
    codec = BoundaryCodec("ssn", 16, const["basis"], const["table"], vocab=V)
    w0 = StageWorker(0, 2, stages[0], None, codec, 1e-3, 0.0, 1, device="meta")
    w1 = StageWorker(1, 2, stages[1], codec, None, 1e-3, 0.0, 1, device="meta")
    x, y = torch.randint(0, V, (2, 8)), torch.randint(0, V, (2, 8))
    # Execute: an evaluation forward through stage 0's worker; a training step across the boundary with the
    # workers' modules, codec and input handling (their own forward reads the loss, .item()); the optimizer
    payload, shape, _ = w0.forward(-1, 0, x, None, train=False)
    inp, _, tok = w0._input(x)
    t = codec.pre(w0.module(inp), tok)
    h, leaf, _ = w1._input((codec.encode(t, tok), shape, None))
    F.cross_entropy(w1.module(h).reshape(-1, V), y.to(META).reshape(-1)).backward()
    t.backward(codec.decode_grad(codec.encode_grad(leaf.grad), shape))
    grads = [q.grad for st in stages for q in st.parameters()]
    w0.step(1e-3), w1.step(1e-3)
    ref = reference_loss(stages, x, y)
    # Assert: every trainable parameter got its gradient there; the optimizer's moments sit beside them
    assert all(g is not None for g in grads) and on_meta(payload, h, ref, *grads)
    assert on_meta(*(s for w in (w0, w1) for st in w.opt.state.values() for s in (st["exp_avg"], st["exp_avg_sq"])))
