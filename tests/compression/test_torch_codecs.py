"""The torch bucketed codecs: round trip within their error bounds, packed payload = counted bytes,
same decoded values and bit counts as the numpy codecs, bad settings rejected."""
import numpy as np
import pytest
import torch

from components.compression.quantizers import AbsmaxQuantizer, ScaledSign
from components.compression.torch_codecs import (TorchAbsmax, TorchScaledSign, make_torch_codec, pack_bits,
                                                 unpack_bits)
from components.core.errors import ConfigError


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_pack_roundtrip(bits):
    u = torch.randint(0, 2 ** bits, (1001,))
    assert torch.equal(unpack_bits(pack_bits(u, bits), bits, 1001), u.to(torch.int32))
    assert pack_bits(u, bits).numel() == -(-1001 * bits // 8)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("n", [1000, 128, 5])
def test_absmax_error_bound_and_bytes(bits, n):
    g = torch.randn(n) * torch.logspace(-3, 1, n)
    codec = make_torch_codec(bits, 128)
    out, nbytes = codec.roundtrip(g)
    levels = 2 ** (bits - 1) - 1
    nb = -(-n // 128)
    scales = torch.nn.functional.pad(g, (0, nb * 128 - n)).view(nb, 128).abs().amax(1).repeat_interleave(128)[:n]
    assert torch.all((out - g).abs() <= scales / (2 * levels) + 1e-6)   # half a level per bucket
    assert nbytes == codec.payload_bytes(n) == -(-nb * 128 * bits // 8) + 4 * nb
    ref, ref_bits = AbsmaxQuantizer(bits, 128)(g.double().numpy())
    assert np.allclose(out.numpy(), ref, atol=1e-6)
    assert codec.wire_bits(n) == ref_bits


def test_sign_times_mean_matches_numpy_and_keeps_l1():
    g = torch.randn(1000)
    codec = TorchScaledSign(128)
    out, nbytes = codec.roundtrip(g)
    ref, ref_bits = ScaledSign(128)(g.double().numpy())
    assert np.allclose(out.numpy(), ref, atol=1e-6)
    assert codec.wire_bits(1000) == ref_bits and nbytes == 128 + 4 * 8
    for b in range(8):  # each bucket keeps its L1 mass and the signs
        s = slice(b * 128, min(1000, (b + 1) * 128))
        assert torch.isclose(out[s].abs().sum(), g[s].abs().sum(), rtol=1e-5)
        assert torch.equal(torch.sign(out[s]), torch.sign(g[s]))


def test_zero_and_fp32():
    g = torch.randn(77)
    out, nbytes = make_torch_codec(0).roundtrip(g)
    assert nbytes == 0 and torch.count_nonzero(out) == 0
    out, nbytes = make_torch_codec(32).roundtrip(g)
    assert nbytes == 4 * 77 and torch.equal(out, g)


def test_all_zero_bucket_decodes_to_zero():
    out, _ = TorchAbsmax(4, 16).roundtrip(torch.zeros(40))
    assert torch.count_nonzero(out) == 0


@pytest.mark.parametrize("bits,bucket", [(3, 64), (16, 64), (4, 0), (1, -5)])
def test_bad_settings(bits, bucket):
    with pytest.raises(ConfigError):
        make_torch_codec(bits, bucket)
