"""The pure-torch paths keep their input's device, checked here without a GPU (issue "Run where researchers
run: GPUs"): each runs on torch's ``meta`` device, whose ops check operands' devices as cuda's do (a cpu
scalar tensor allowed, any other cpu tensor an error) while computing no values. A tensor made without
``device=`` (a shift table, a position table, a constant, a generator's draw) fails here exactly where it
would fail on a GPU. benchmarks/gpu_check.py compares the values on a real device; this catches the
crashes before anyone has one. Paths that branch on values (``.item()``: Foresight's decisions, the error
feedback's norms) cannot run on meta and are left to gpu_check."""
from __future__ import annotations

import pytest
import torch

META = torch.device("meta")


def on_meta(*ts: torch.Tensor) -> bool:
    return all(t.device == META for t in ts)


@pytest.mark.parametrize("bits", [32, 8, 4, 2, 1, 0])
def test_packed_ddp_codecs(bits):
    from components.compression.torch_codecs import make_torch_codec

    # Prepare
    codec, n = make_torch_codec(bits, 128), 1000
    # Execute
    payload = codec.encode(torch.randn(n, device=META))
    decoded = codec.decode(payload, n)
    # Assert
    assert on_meta(payload, decoded) and payload.dtype == torch.uint8 and decoded.dtype == torch.float32
    assert payload.numel() == codec.payload_bytes(n) and decoded.shape == (n,)


@pytest.mark.parametrize("width, keep, values", [(64, 8, "fp32"), (64, 8, "bf16"), (300, 16, "fp32")])
def test_row_topk(width, keep, values):
    from components.compression.torch_topk import TorchRowTopK

    # Prepare
    codec, rows = TorchRowTopK(keep, width, values), 12
    # Execute
    payload = codec.encode(torch.randn(rows, width, device=META))
    decoded = codec.decode(payload, rows)
    # Assert
    assert on_meta(payload, decoded) and payload.dtype == torch.uint8 and decoded.shape == (rows, width)


@pytest.mark.parametrize("name, kw", [("fp32", {}), ("fp16", {}), ("int8", {}), ("sign", {}),
                                      ("binary", {"scale": "rank1"}), ("binary", {"scale": "channel"}),
                                      ("int2", {"scale": "rank1"}), ("lowrank", {"rank": 4})])
def test_compactfusion_matrix_codecs(name, kw):
    from components.compression.residual import make_matrix_codec

    # Prepare
    codec, shape = make_matrix_codec(name, **kw), (2, 16, 32)
    # Execute
    payload = codec.encode(torch.randn(shape, device=META))
    decoded = codec.decode(payload, shape)
    # Assert
    assert on_meta(payload, decoded) and payload.dtype == torch.uint8 and decoded.dtype == torch.float32
    assert payload.numel() == codec.payload_bytes(shape) and tuple(decoded.shape) == shape


@pytest.mark.parametrize("block", ["pre_ln", "parallel", "fal", "fal_plus"])
def test_gpt_blocks_forward_and_backward(block):
    from components.models.gpt import GPT, GPTConfig

    # Prepare
    model = GPT(GPTConfig(vocab_size=50, n_layer=2, n_head=4, d_model=64, context=32, block=block)).to(META)
    x, y = (torch.randint(0, 50, (2, 32), device=META) for _ in range(2))
    # Execute
    logits, loss = model(x, y)
    loss.backward()
    # Assert
    assert on_meta(logits, loss, *(p.grad for p in model.parameters()))


def test_ring_attention_and_the_cp_ring_blocks():
    from components.training.context_parallel.ring import RingSpec, build_model, ring_attention

    # Prepare
    q, k, v = (torch.randn(2, 2, 64, 16, device=META, requires_grad=True) for _ in range(3))
    x, y = (torch.randint(0, 50, (2, 32), device=META) for _ in range(2))
    # Execute / Assert: the ring itself, then the cp_ring GPT in each K/V mode
    out = ring_attention(q, k, v, 4)
    out.sum().backward()
    assert on_meta(out, q.grad, k.grad, v.grad)
    for spec in (RingSpec(chunks=4), RingSpec(chunks=4, kv="randproj", r=4),
                 RingSpec(chunks=4, kv="subspace", r=4, M=1), RingSpec(chunks=4, kv="subspace", r=4, M=2)):
        model = build_model(50, 2, 2, 32, 32, spec).to(META)
        logits, loss = model(x, y)
        loss.backward()
        assert on_meta(logits, loss), spec


def test_ssn_boundary_round_trip():
    from components.training.subspace_pp.codecs import BoundaryCodec

    # Prepare: the stage boundary of subspace_model_parallel (basis and token table on the device)
    B, T, d, k, V = 2, 16, 32, 8, 50
    codec = BoundaryCodec("ssn", d, torch.randn(d, k, device=META), torch.randn(V, d, device=META), vocab=V)
    y = torch.randn(B, T, d, device=META, requires_grad=True)
    tok = torch.randint(0, V, (B, T), device=META)
    # Execute: sender, wire, receiver, and the gradient back
    t_send = codec.pre(y, tok)
    t_hat, tok_r = codec.decode(codec.encode(t_send, tok), (B, T))
    t_hat.requires_grad_()
    codec.post(t_hat, tok_r).sum().backward()
    t_send.backward(codec.decode_grad(codec.encode_grad(t_hat.grad), (B, T)))
    # Assert
    assert on_meta(t_hat, tok_r, y.grad)


def test_dit_sampling_pass():
    from components.diffusion.sampling import sample
    from components.models.dit import DiT, DiTConfig

    # Prepare: images and clips
    for cfg in (DiTConfig(img_size=8, channels=1, patch=2, d=32, heads=2, depth=2, num_classes=4),
                DiTConfig(img_size=8, channels=1, patch=2, d=32, heads=2, depth=2, num_classes=4, frames=2)):
        model = DiT(cfg).to(META)
        shape = (2, cfg.channels, 8, 8) if cfg.frames == 1 else (2, cfg.frames, cfg.channels, 8, 8)
        # Execute
        out = sample(model, torch.randn(shape, device=META), torch.zeros(2, dtype=torch.long, device=META), 3)
        # Assert
        assert on_meta(out) and tuple(out.shape) == shape


def test_dit_training_loss_and_the_seeds_noise():
    from components.diffusion.prepare import rf_loss
    from components.diffusion.sampling import draw
    from components.models.dit import DiT, DiTConfig

    # Prepare: the model on the device, the draws from a cpu generator (the same on any device)
    cfg = DiTConfig(img_size=8, channels=1, patch=2, d=32, heads=2, depth=2, num_classes=4)
    model, g = DiT(cfg).to(META), torch.Generator().manual_seed(0)
    # Execute: one rectified-flow loss and its gradient; a seed's noise and labels for sampling
    loss = rf_loss(model, torch.randn(3, 1, 8, 8, device=META), torch.zeros(3, dtype=torch.long, device=META), g)
    loss.backward()
    noise, y = draw(0, 4, model)
    # Assert
    assert on_meta(loss, noise, y, next(model.parameters()).grad)


@pytest.mark.parametrize("M", [1, 2, 4, 16])
def test_context_parallel_subspace_index_wire(M):
    from components.training.context_parallel.wire import decode_index, encode_index

    # Prepare: which of M subspaces each token chose (M = 1: nothing is sent)
    idx = torch.zeros(2, 2, 8, dtype=torch.long, device=META)
    # Execute
    payload = encode_index(idx, M)
    back = decode_index(payload, M, tuple(idx.shape))
    # Assert
    assert on_meta(payload, back) and back.dtype == torch.long and tuple(back.shape) == tuple(idx.shape)
