import math

import numpy as np
import pytest

from components.compression import make_compressor
from components.core.errors import ConfigError

D = 200
RNG = np.random.default_rng(0)
VECTORS = [RNG.standard_normal(D), RNG.standard_t(2, D), np.r_[np.ones(5) * 100, RNG.standard_normal(D - 5) * 0.01]]


@pytest.mark.parametrize("cfg", [
    {"kind": "top_k", "ratio": 0.1}, {"kind": "top_k", "k": 1}, {"kind": "sign"}, {"kind": "sign", "bucket": 16},
    {"kind": "absmax", "bits": 4, "bucket": 32}, {"kind": "absmax", "bits": 8, "bucket": 128}, {"kind": "identity"},
])
def test_deterministic_compressors_are_contractive(cfg):
    c = make_compressor(cfg, D)
    eps = c.contraction_eps(D)
    assert eps is not None and 0 <= eps < 1
    for v in VECTORS:
        out, _ = c(v)
        assert np.sum((out - v) ** 2) <= eps * np.sum(v**2) + 1e-12


def test_rand_k_unbiased_and_unscaled_contractive_in_expectation():
    v = VECTORS[0]
    scaled = make_compressor({"kind": "rand_k", "k": 20}, D)
    rng = np.random.default_rng(1)
    mean = np.mean([scaled(v, rng)[0] for _ in range(4000)], axis=0)
    assert np.linalg.norm(mean - v) / np.linalg.norm(v) < 0.1
    plain = make_compressor({"kind": "rand_k", "k": 20, "scaled": False}, D)
    err = np.mean([np.sum((plain(v, rng)[0] - v) ** 2) for _ in range(2000)])
    assert err == pytest.approx((1 - 20 / D) * np.sum(v**2), rel=0.05)


def test_bits_counted():
    v = VECTORS[0]
    idx_bits = math.ceil(math.log2(D))
    assert make_compressor({"kind": "top_k", "k": 10}, D)(v)[1] == 10 * (32 + idx_bits)
    assert make_compressor({"kind": "rand_k", "k": 10}, D)(v)[1] == 10 * (32 + idx_bits)
    assert make_compressor({"kind": "rand_k", "k": 10, "shared_seed": True}, D)(v)[1] == 10 * 32 + 32
    assert make_compressor({"kind": "identity"}, D)(v)[1] == 32 * D
    assert make_compressor({"kind": "absmax", "bits": 4, "bucket": 64}, D)(v)[1] == 4 * D + 4 * 32  # 4 buckets
    assert make_compressor({"kind": "sign", "bucket": 50}, D)(v)[1] == D + 4 * 32
    assert make_compressor({"kind": "zero"}, D)(v)[1] == 0


def test_top_k_keeps_largest():
    v = np.array([0.1, -5.0, 2.0, 0.0, 3.0])
    out, _ = make_compressor({"kind": "top_k", "k": 2}, 5)(v)
    assert out.tolist() == [0, -5.0, 0, 0, 3.0]


def test_absmax_exact_on_grid_values():
    v = np.array([-7.0, -1.0, 0.0, 3.0, 7.0])
    out, _ = make_compressor({"kind": "absmax", "bits": 4, "bucket": 5}, 5)(v)
    np.testing.assert_allclose(out, v)


@pytest.mark.parametrize("cfg, key", [
    ({"kind": "top_k", "k": D + 1}, "compressor.k"),
    ({"kind": "top_k", "ratio": 1.5}, "compressor.ratio"),
    ({"kind": "top_k"}, "compressor.k"),
    ({"kind": "nope"}, "compressor.kind"),
    ({"kind": "absmax", "bits": 1}, "compressor.bits"),
])
def test_bad_config(cfg, key):
    with pytest.raises(ConfigError) as e:
        make_compressor(cfg, D)
    assert e.value.key == key
