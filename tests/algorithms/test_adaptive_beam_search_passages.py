"""The paper's regime for Adaptive Beam Search: non-overlapping passages, held-out and out-of-distribution
queries, the greedy-recall premise measured by the sweep, and the query-set switch."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from components.algorithms.adaptive_beam_search.passages import (PassageParams, in_distribution_passages,
                                                                 make_passage_set, ood_passages, shingles, windows)
from components.core.errors import ConfigError
from components.core.params import parse_params


def test_windows_do_not_overlap():
    # Prepare: 95 numbered words
    text = " ".join(f"w{i}" for i in range(95))
    # Execute
    w = windows(text, 40)
    # Assert: two full passages of consecutive words, the partial tail dropped, no word in two passages
    assert [p.split()[0] for p in w] == ["w0", "w40"] and all(len(p.split()) == 40 for p in w)
    assert len(set(" ".join(w).split())) == 80


def test_passage_set_is_disjoint_and_has_no_near_copies():
    from components.data.embeddings import pydoc_chunks

    # Prepare: the debug-sized passage set (hashed bag of words: no model load) and today's overlapping windows
    p = parse_params(PassageParams, {"n": 400, "n_queries": 20, "n_ood": 20, "k_gt": 20, "model": "bow",
                                     "stdlib": False})
    # Execute
    d = make_passage_set(p)
    pool = in_distribution_passages(40, stdlib=False)
    ood = ood_passages(40)
    # Assert: shapes, exact ground truth for both query sets, OOD queries from the other source
    assert d["base"].shape == (400, 256) and d["queries"].shape == (20, 256) and d["ood_queries"].shape == (20, 256)
    for q, gi in ((d["queries"], d["gt_ids"]), (d["ood_queries"], d["ood_gt_ids"])):
        dist = np.linalg.norm(d["base"][None, :, :] - q[:, None, :], axis=2)
        assert np.array_equal(np.argsort(dist, axis=1, kind="stable")[:, 0], gi[:, 0]) or np.allclose(
            np.take_along_axis(dist, gi[:, :1], 1)[:, 0], dist.min(1), atol=1e-5)
    assert d["info"]["overlap"] == 0 and d["info"]["n_ood"] == 20 and len(pool) > 1000
    # the premise's cause: a held-out overlapping window (today's set) has a near-copy in its base set, a
    # 12-word run in common; no held-out passage or OOD query here shares one with any base passage
    chunks = pydoc_chunks(40, 10, max_chunks=600)
    held, rest = chunks[1::25], [c for i, c in enumerate(chunks) if i % 25 != 1]
    rest_sh = set().union(*map(shingles, rest))
    assert np.mean([bool(shingles(h) & rest_sh) for h in held]) >= 0.9
    base_sh = set().union(*map(shingles, pool))
    counts = Counter(sh for t in pool for sh in shingles(t))
    assert max(counts.values()) == 1
    assert not any(shingles(o) & base_sh for o in ood)


def test_sweep_reads_the_ood_queries_and_measures_greedy_recall():
    from components.algorithms.adaptive_beam_search.technique import SweepParams, run_abs_sweep
    from components.core.context import RunContext
    from components.data.embeddings import VectorSetParams, make_vector_set

    # Prepare: a small passage set, the same sweep on its held-out and its OOD queries
    d = make_passage_set(parse_params(PassageParams, {"n": 400, "n_queries": 20, "n_ood": 20, "k_gt": 20,
                                                      "model": "bow", "stdlib": False}))
    base = {"M": 8, "ef_construction": 40, "widths": [10, 32], "gammas": [0.0, 0.3]}
    runs = {}
    # Execute
    for which in ("in", "ood"):
        sp = parse_params(SweepParams, {**base, "queries": which})
        runs[which] = run_abs_sweep(sp, RunContext(seed=0, inputs={"data": d}))
    # Assert: greedy recall is the gamma = 0 row's recall, each set scored against its own ground truth
    for which, res in runs.items():
        g0 = [r for r in res.tables["sweep"] if r["rule"] == "adaptive" and r["param"] == 0.0][0]
        assert res.metrics["greedy_recall"] == pytest.approx(g0["recall"])
        assert res.metrics["greedy_dc"] == pytest.approx(g0["dist_comps"])
        assert 0 < res.metrics["greedy_recall"] <= 1
    assert runs["in"].tables["sweep"] != runs["ood"].tables["sweep"]
    # a data set without OOD queries is one ConfigError naming the key
    synth = make_vector_set(VectorSetParams(kind="clustered", n=200, d=8, n_clusters=4, n_queries=10, k_gt=10))
    with pytest.raises(ConfigError) as e:
        run_abs_sweep(parse_params(SweepParams, {**base, "queries": "ood"}), RunContext(seed=0, inputs={"data": synth}))
    assert e.value.key == "queries"


def test_bad_passage_params_and_k_against_the_passage_entry():
    from components.algorithms.adaptive_beam_search.technique import SweepParams, _validate_data

    with pytest.raises(ConfigError) as e:
        parse_params(PassageParams, {"words": 4})
    assert e.value.key.endswith("words")
    exp = {"prepare": {"passages": {"step": "abs_passages", "params": {"n": 400, "k_gt": 5}}}}
    with pytest.raises(ConfigError) as e:
        _validate_data(parse_params(SweepParams, {"k": 10}), exp)
    assert e.value.key == "k" and "passages" in str(e.value)
