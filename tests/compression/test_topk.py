"""The one top-k codec (components.compression.sparsifiers.RowTopK) and its two faces: the registered
numpy ``top_k`` and the torch boundary payload (TorchRowTopK). The pinned outputs were computed with
the two separate codecs that existed before they were merged (2026-12-02), on the same seeded
inputs: the merge must reproduce them bit for bit."""
import math

import numpy as np
import pytest
import torch

from components.compression import make_compressor
from components.compression.sparsifiers import RowTopK, sparse_wire_bits
from components.compression.torch_topk import TorchRowTopK
from components.core.errors import ConfigError


def _numpy_cases():
    rng = np.random.default_rng(31)
    return [
        ("normal200_k20", 200, {"kind": "top_k", "k": 20}, rng.standard_normal(200)),
        ("ties20_k7", 20, {"kind": "top_k", "k": 7}, rng.integers(-3, 4, 20).astype(np.float64)),
        ("f32_37_ratio", 37, {"kind": "top_k", "ratio": 0.2}, rng.standard_normal(37).astype(np.float32)),
        ("short_v", 50, {"kind": "top_k", "k": 10}, rng.standard_normal(30)),
        ("k_ge_size", 50, {"kind": "top_k", "k": 10}, rng.standard_normal(6)),
        ("bits16", 64, {"kind": "top_k", "k": 3, "value_bits": 16}, rng.standard_normal(64)),
    ]


def _torch_cases():
    g = torch.Generator().manual_seed(31)
    return [
        ("fp32_10", (3, 10, "fp32"), 3, torch.randn(3, 10, generator=g)),
        ("bf16_10", (3, 10, "bf16"), 3, torch.randn(3, 10, generator=g)),
        ("ties_12", (2, 12, "fp32"), 2, torch.randint(-2, 3, (2, 12), generator=g).float()),
        ("int16_300", (2, 300, "fp32"), 2, torch.randn(2, 300, generator=g)),
        ("bf16_3d", (4, 8, "bf16"), 6, torch.randn(2, 3, 8, generator=g)),
    ]


# name -> (kept coordinates, bits, dtype), from the numpy TopK before the merge
NUMPY_BEFORE = {
    "normal200_k20": ([10, 15, 39, 40, 69, 70, 75, 89, 116, 117, 126, 127, 136, 145, 147, 154, 172, 186, 195, 199],
                      800, "float64"),
    "ties20_k7": ([0, 1, 5, 6, 9, 16, 17], 259, "float64"),
    "f32_37_ratio": ([0, 1, 2, 13, 15, 20, 24], 266, "float32"),
    "short_v": ([3, 5, 7, 9, 13, 16, 17, 21, 26, 29], 370, "float64"),
    "k_ge_size": ([0, 1, 2, 3, 4, 5], 350, "float64"),
    "bits16": ([33, 35, 45], 66, "float64"),
}

# name -> (payload hex, payload_bytes), from TorchRowTopK before the merge
TORCH_BEFORE = {
    "fp32_10": ("0d8ca4bfaf9c9a3fa3d27e3f1faf0140049fbdbffe00413f2cc004c0e8b10bc0e7ac0340060509050401050103", 45),
    "bf16_10": ("0a403940a8bfba3fb93fa6bf8dbfd33f843f090407090007070106", 27),
    "ties_12": ("000000c0000000c0000000c0000000c00005010b", 20),
    "int16_300": ("ccbc3340146532c0807036c0fe9b2ac024011d012a01d100", 24),
    "bf16_3d": ("11401cc0ebbfd1bf033f87bf993fcc3ea2bfc03fad3f97bffcbf0940083fa9be55bfa1bfdf3fbe3e76bf8b3f093f043f"
                "040700060107050206040500050206000704030102070605", 72),
}


@pytest.mark.parametrize("name, dim, cfg, v", _numpy_cases(), ids=[c[0] for c in _numpy_cases()])
def test_numpy_top_k_gives_the_outputs_of_before_the_merge(name, dim, cfg, v):
    # Prepare: today's reference
    kept, bits, dtype = NUMPY_BEFORE[name]
    # Execute
    out, got_bits = make_compressor(cfg, dim)(v)
    # Assert: the same coordinates kept (ties broken the same way), copied exactly, the same bits
    assert np.flatnonzero(out).tolist() == kept and str(out.dtype) == dtype and got_bits == bits
    assert np.array_equal(out[kept], v[kept])


@pytest.mark.parametrize("name, spec, rows, x", _torch_cases(), ids=[c[0] for c in _torch_cases()])
def test_torch_row_top_k_gives_the_payload_of_before_the_merge(name, spec, rows, x):
    # Prepare
    payload_hex, nbytes = TORCH_BEFORE[name]
    c = TorchRowTopK(*spec)
    # Execute
    p = c.encode(x)
    dense = c.decode(p, rows)
    # Assert: byte-identical payload, its size, and a decode that puts the kept values back
    assert bytes(p.tolist()).hex() == payload_hex and p.numel() == c.payload_bytes(rows) == nbytes
    flat = x.reshape(rows, -1).to(getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[spec[2]])).float()
    kept = dense != 0
    assert int(kept.sum()) == rows * spec[0] and torch.equal(dense[kept], flat[kept])


@pytest.mark.parametrize("shape, k", [((50,), 7), ((4, 33), 5), ((2, 3, 16), 16)])
def test_both_backends_keep_the_same_coordinates(shape, k):
    # Prepare: tie-free values (the k-th largest magnitude is unique)
    x = np.random.default_rng(7).standard_normal(shape)
    # Execute: the one codec on a numpy array and on the same values as a torch tensor
    a = RowTopK(k, "numpy")(x)
    t = RowTopK(k, "torch")(torch.from_numpy(x))
    # Assert: identical dense outputs, k per row
    assert np.array_equal(a, t.numpy()) and ((a != 0).sum(-1) == k).all()


def test_encode_decode_round_trip_per_backend():
    # Prepare
    x = np.random.default_rng(3).standard_normal((3, 10)).astype(np.float32)
    for backend, arr in (("numpy", x), ("torch", torch.from_numpy(x))):
        codec = RowTopK(4, backend)
        # Execute
        vals, idx = codec.encode(arr)
        dense = codec.decode(vals, idx, 10)
        # Assert: k values and indices per row, dense in the values' dtype, the values at their columns
        assert tuple(vals.shape) == tuple(idx.shape) == (3, 4)
        assert np.array_equal(np.asarray(dense), np.where(np.asarray(dense) != 0, x, 0)) and dense.dtype == arr.dtype


def test_wire_size_is_counted_by_one_function():
    # Prepare
    v = np.random.default_rng(0).standard_normal(200)
    c = TorchRowTopK(3, 300, "bf16")
    # Execute / Assert: numpy top-k and rand-k (indices at ceil(log2 d) bits), torch payload (int16 indices)
    idx_bits = math.ceil(math.log2(200))
    rng = np.random.default_rng(1)
    assert make_compressor({"kind": "top_k", "k": 9}, 200)(v)[1] == sparse_wire_bits(9, 32, idx_bits) == 9 * (32 + 8)
    assert make_compressor({"kind": "rand_k", "k": 9}, 200)(v, rng)[1] == sparse_wire_bits(9, 32, idx_bits)
    assert make_compressor({"kind": "rand_k", "k": 9, "shared_seed": True}, 200)(v, rng)[1] == 9 * 32 + 32
    assert c.payload_bytes(5) * 8 == sparse_wire_bits(5 * 3, 16, 16) == 8 * c.encode(torch.randn(5, 300)).numel()


@pytest.mark.parametrize("kw, key", [({"k": 2, "backend": "jax"}, "backend"), ({"k": 0}, "k")])
def test_bad_codec_options_name_the_key(kw, key):
    with pytest.raises(ConfigError) as e:
        RowTopK(**kw)
    assert e.value.key == key
