"""ANN data sets: deterministic pydoc chunking, exact ground truth, the offline MiniLM model."""
from __future__ import annotations

import numpy as np
import pytest

from components.core.errors import ConfigError
from components.data.embeddings import VectorSetParams, embed_texts, exact_knn, make_vector_set, pydoc_chunks


def test_pydoc_chunks_are_deterministic_windows():
    a = pydoc_chunks(40, 10, max_chunks=300)
    assert a == pydoc_chunks(40, 10, max_chunks=300)
    assert len(a) == 300 and len(set(a)) == 300
    assert all(len(t.split()) == 40 for t in a)
    # consecutive windows of one topic overlap by 30 words
    assert a[0].split()[10:] == a[1].split()[:30]


def test_exact_knn_matches_naive():
    rng = np.random.default_rng(0)
    x, q = rng.standard_normal((300, 7)).astype(np.float32), rng.standard_normal((20, 7)).astype(np.float32)
    ids, dist = exact_knn(x, q, 5)
    d = np.linalg.norm(q[:, None, :].astype(np.float64) - x[None].astype(np.float64), axis=2)
    assert np.array_equal(ids, np.argsort(d, axis=1)[:, :5])
    assert np.allclose(dist, np.sort(d, axis=1)[:, :5], atol=1e-5)
    with pytest.raises(ConfigError):
        exact_knn(x, q, 301)


def test_synthetic_sets_and_params():
    s = make_vector_set(VectorSetParams(kind="clustered", n=500, d=8, n_clusters=5, n_queries=10, k_gt=10))
    assert s["base"].shape == (500, 8) and s["queries"].shape == (10, 8) and s["gt_ids"].shape == (10, 10)
    with pytest.raises(ConfigError):
        VectorSetParams(n=100, k_gt=200).check()


@pytest.mark.slow
def test_minilm_offline_embeddings():
    e = embed_texts(["sort a list in place", "list.sort() sorts the list in place", "the GIL and threads"])
    assert e.shape == (3, 384) and np.allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)
    assert e[0] @ e[1] > e[0] @ e[2]
