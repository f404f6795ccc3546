"""Dirichlet partitioning of load_digits and participation patterns (no Ray, no torch training)."""
import numpy as np
import pytest

from components.core.errors import ConfigError
from components.data.digits import dirichlet_partition, load_digits_arrays, train_test_split_per_client
from components.federated.participation import check_pattern, client_probs, pattern_levels, sample_round


@pytest.mark.parametrize("alpha,n", [(0.1, 20), (0.3, 20), (10.0, 7), (0.5, 1)])
def test_partition_keeps_every_sample_exactly_once(alpha, n):
    # Prepare
    X, y = load_digits_arrays()
    # Execute
    parts = dirichlet_partition(y, n, alpha, np.random.default_rng(3), min_size=10)
    splits = train_test_split_per_client(parts, 0.2, np.random.default_rng(4))
    # Assert
    allidx = np.concatenate(parts)
    assert len(parts) == n and min(len(p) for p in parts) >= 10
    assert len(allidx) == len(y) and np.array_equal(np.sort(allidx), np.arange(len(y)))
    both = np.concatenate([np.concatenate([tr, te]) for tr, te in splits])
    assert np.array_equal(np.sort(both), np.arange(len(y)))
    assert all(len(te) >= 1 and len(tr) >= 1 for tr, te in splits)


def test_small_alpha_skews_labels_more():
    _, y = load_digits_arrays()
    def classes_per_client(alpha):
        parts = dirichlet_partition(y, 20, alpha, np.random.default_rng(0))
        return np.mean([(np.bincount(y[p], minlength=10) >= 0.05 * len(p)).sum() for p in parts])
    assert classes_per_client(0.1) < classes_per_client(100.0) - 3


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_partition_rejects_non_positive_alpha(bad):
    _, y = load_digits_arrays()
    with pytest.raises(ConfigError, match="alpha"):
        dirichlet_partition(y, 5, bad, np.random.default_rng(0))


def test_pattern_levels_follow_their_definitions():
    assert np.allclose(pattern_levels({"pattern": "linear"}, 5), [0.1, 0.3, 0.5, 0.7, 0.9])
    bi = pattern_levels({"pattern": "bimodal"}, 20)
    assert (bi == 0.8).sum() == 10 and (bi == 0.1).sum() == 10
    lt = pattern_levels({"pattern": "long_tail"}, 20)
    i = np.arange(1, 21)
    assert np.allclose(lt, np.clip(0.9 / i ** 0.7, 0.05, 0.9)) and lt[0] == 0.9
    # assignment to clients is a seeded permutation of the levels
    p = client_probs({"pattern": "linear"}, 20, np.random.default_rng(1))
    assert np.allclose(np.sort(p), np.linspace(0.1, 0.9, 20)) and not np.allclose(p, np.linspace(0.1, 0.9, 20))


@pytest.mark.parametrize("pattern", ["linear", "bimodal", "long_tail", "uniform"])
def test_sampling_frequencies_follow_the_pattern(pattern):
    # Prepare
    probs = client_probs({"pattern": pattern}, 20, np.random.default_rng(0))
    rng = np.random.default_rng(42)
    rounds = 4000
    # Execute
    counts = np.zeros(20)
    sizes = []
    for _ in range(rounds):
        picked = sample_round(probs, rng)
        counts[picked] += 1
        sizes.append(len(picked))
    # Assert: within 4 binomial standard deviations of p_i, and never an empty round
    freq = counts / rounds
    tol = 4 * np.sqrt(probs * (1 - probs) / rounds) + 0.005
    assert np.all(np.abs(freq - probs) <= tol), (freq, probs)
    assert min(sizes) >= 1
    if pattern != "uniform":
        assert np.corrcoef(freq, probs)[0, 1] > 0.99


def test_sampling_guarantees_one_participant():
    rng = np.random.default_rng(0)
    probs = np.array([0.0, 0.001, 0.0])
    picks = [sample_round(probs, rng) for _ in range(200)]
    assert all(len(p) == 1 and p[0] == 1 for p in picks)


@pytest.mark.parametrize("cfg,key", [
    ({"pattern": "linear", "hi": 1.5}, "participation.hi"),
    ({"pattern": "uniform", "p": -0.1}, "participation.p"),
    ({"pattern": "custom", "probs": [0.5, 1.2, 0.1]}, "participation.probs[1]"),
    ({"pattern": "custom", "probs": [0.5, 0.5]}, "participation.probs"),
    ({"pattern": "zipf"}, "participation.pattern"),
    ({"pattern": "bimodal", "hgh": 0.9}, "participation.hgh"),
])
def test_bad_patterns_are_config_errors(cfg, key):
    with pytest.raises(ConfigError) as e:
        check_pattern(cfg, 3)
    assert e.value.key == key and "\n" not in str(e.value)
