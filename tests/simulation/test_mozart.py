"""Mozart: co-activation counts by hand, balanced clustering, dedup dispatch accounting, the
streaming model (one chunk = bulk), bad input, and package actors = single-process MoE."""
import numpy as np
import pytest

from components.core.context import RunContext
from components.core.errors import ConfigError
from components.core.params import parse_params
from components.simulation import engine
from components.simulation.mozart.actors import run_actor_check
from components.simulation.mozart.allocation import clustered, contiguous, intra_affinity
from components.simulation.mozart.dispatch import imbalance, package_load, remote_packages, traffic_matrix
from components.simulation.mozart.profiling import coactivation
from components.simulation.mozart.streaming import pipeline
from components.simulation.mozart.prepare import TinyMoEParams, build_traces
from components.simulation.mozart.technique import MozartLMParams, MozartParams, run_mozart, run_mozart_lm
from components.simulation.mozart.traces import planted, uniform
from components.simulation.mozart.wafer import Wafer


def test_coactivation_counts_on_a_hand_made_trace():
    trace = np.array([[0, 1], [1, 0], [2, 3], [0, 2], [1, 0]])
    f, C = coactivation(trace, 4)
    assert f.tolist() == [4, 3, 2, 1]
    assert C[0, 1] == C[1, 0] == 3
    assert C[2, 3] == 1 and C[0, 2] == 1 and C[1, 3] == 0
    assert np.all(np.diag(C) == 0)


def test_dispatch_dedups_per_package_and_skips_home():
    group_of = np.array([0, 0, 1, 1, 2, 2])        # 3 packages, 2 experts each
    experts = np.array([[0, 1], [0, 2], [2, 4], [3, 2]])
    home = np.array([1, 0, 2, 1])
    R = remote_packages(experts, home, group_of, 3)
    # token 0: experts on package 0 only (deduplicated), home 1 -> one copy to 0
    # token 1: packages 0, 1, home 0 -> one copy to 1; token 2: packages 1, 2, home 2 -> to 1; token 3: all home
    assert R.sum(1).tolist() == [1, 1, 1, 0]
    T = traffic_matrix(experts, home, group_of, 3, 10.0)
    assert T[1, 0] == 10 and T[0, 1] == 10 and T[2, 1] == 10 and T.sum() == 30
    assert package_load(experts, group_of, 3).tolist() == [3, 4, 1]
    assert imbalance(np.array([3.0, 4.0, 1.0])) == pytest.approx(1.5)


def test_balanced_clustering_recovers_planted_topics_and_keeps_balance():
    rng = np.random.default_rng(0)
    perm = rng.permutation(32)
    prof = planted(4096, 32, 2, 8, 0.9, rng, perm)
    f, C = coactivation(prof, 32)
    g = clustered(f, C, 8, 0.1, rng)
    assert np.bincount(g, minlength=8).tolist() == [4] * 8               # E/G experts per package
    load = np.bincount(g, f, 8)
    assert load.max() <= 1.1 * load.mean() + 1e-9                      # balance on the profile split
    g0 = contiguous(f, C, 8, 0.1, rng)
    assert intra_affinity(g, C) > 2 * intra_affinity(g0, C)
    ev = planted(8192, 32, 2, 8, 0.9, rng, perm)                        # evaluate on a fresh split
    home = rng.integers(8, size=8192)
    assert remote_packages(ev, home, g, 8).sum() < 0.75 * remote_packages(ev, home, g0, 8).sum()


def test_uniform_routing_gives_clustering_nothing():
    rng = np.random.default_rng(1)
    f, C = coactivation(uniform(4096, 64, 2, rng), 64)
    g, g0 = clustered(f, C, 8, 0.1, rng), contiguous(f, C, 8, 0.1, rng)
    ev, home = uniform(16384, 64, 2, rng), rng.integers(8, size=16384)
    a, b = remote_packages(ev, home, g, 8).sum(), remote_packages(ev, home, g0, 8).sum()
    assert abs(a / b - 1) < 0.05


@pytest.mark.parametrize("shared", [True, False])
def test_streaming_reduces_to_bulk_at_one_chunk(shared):
    a, b, c, w, o = 3e-5, 5e-5, 2e-5, 1e-5, 1e-6
    bulk, ev = pipeline(1, lambda s: a / s, b, lambda s: c / s, w, o, shared, prefetch_weights=False)
    assert bulk == pytest.approx(a + w + b + o + c)
    assert [e["op"] for e in ev] == ["dispatch", "weights", "compute", "combine"]


def test_streaming_matches_the_pipeline_formula_and_overheads_erode_it():
    a, b, c = 2.0, 4.0, 2.0                       # comm ~ compute; separate links: bottleneck max(a, b, c)
    for s in (2, 4, 8):
        t, _ = pipeline(s, lambda k: a / k, b, lambda k: c / k, 0.0, 0.0, shared_link=False)
        assert t == pytest.approx((a + b + c) / s + (s - 1) * max(a, b, c) / s)
    t8, _ = pipeline(8, lambda k: a / k, b, lambda k: c / k, 0.0, 0.0, shared_link=True)
    assert t8 == pytest.approx((a + b + c) / 8 + 7 * max(a + c, b) / 8)   # shared links: max(a + c, b)
    t_costly, _ = pipeline(8, lambda k: a / k, b, lambda k: c / k, 0.0, 0.2, shared_link=True)
    assert t8 < t_costly < a + b + c


def test_chunk_events_respect_dependencies():
    _, ev = pipeline(4, lambda k: 1.0 / k, 2.0, lambda k: 1.0 / k, 0.1, 0.0, True)
    by = {(e["op"], e["chunk"]): e for e in ev}
    for i in range(4):
        assert by[("compute", i)]["start"] >= by[("dispatch", i)]["end"] - 1e-12
        assert by[("combine", i)]["start"] >= by[("compute", i)]["end"] - 1e-12


@pytest.mark.parametrize("raw,key", [({"model": {"experts": 60, "top_k": 4}}, "model.experts"),
                                     ({"model": {"experts": 64, "top_k": 2}, "hardware": {"chiplets": 3}}, "model.experts"),
                                     ({"model": {"experts": 64, "top_k": 2}, "topics": 7}, "topics"),
                                     ({"hardware": {"inter_bandwidth": "0Gbps"}}, "hardware.inter.bandwidth"),
                                     ({"model": {"experts": 8, "top_k": 9}}, "model.top_k")])
def test_bad_input_is_a_config_error(raw, key):
    with pytest.raises(ConfigError) as e:
        parse_params(MozartParams, raw)
    assert e.value.key.endswith(key)


def test_package_actors_match_single_process_moe_locally():
    rng = np.random.default_rng(0)
    perm = rng.permutation(16)
    prof = planted(1024, 16, 2, 4, 0.9, rng, perm)
    f, C = coactivation(prof, 16)
    g = clustered(f, C, 8, 0.1, rng)
    net = Wafer.from_config({}).network("tree")
    ev, home = prof[:48], rng.integers(8, size=48)
    out = run_actor_check("t", net, None, ev, home, g, 8192.0, rng)
    assert out["actor_max_abs_err"] < 1e-9
    assert out["actor_remote_copies"] == remote_packages(ev, home, g, 8).sum()
    T = traffic_matrix(ev, home, g, 8, 8192.0)
    assert out["actor_dispatch_s"] == pytest.approx(engine.matrix_phase_time(net, T), rel=1e-12)


SMALL = {"eval_tokens": 8192, "profile_tokens": 2048, "chunk_sweep": [1, 8], "plots": False}


def test_technique_ablation_directions_on_a_small_run():
    r0 = run_mozart(parse_params(MozartParams, {**SMALL, "placement": "contiguous"}), RunContext(seed=0))
    r1 = run_mozart(parse_params(MozartParams, {**SMALL, "placement": "clustered", "schedule": "stream", "network": "tree"}), RunContext(seed=0))
    assert r1.metrics["inter_package_bytes"] < r0.metrics["inter_package_bytes"]
    assert r1.metrics["moe_layer_time_s"] < r0.metrics["moe_layer_time_s"]
    assert r1.metrics["load_imbalance"] <= 1.15


def test_one_seed_gives_every_variant_the_same_tokens():
    # Prepare: two variants that differ only in the schedule, and a random placement in between
    bulk, stream, rand = (parse_params(MozartParams, {**SMALL, **kw}) for kw in
                          ({"schedule": "bulk"}, {"schedule": "stream"}, {"placement": "random"}))
    # Execute
    a = run_mozart(bulk, RunContext(seed=3))
    run_mozart(rand, RunContext(seed=3))
    b = run_mozart(stream, RunContext(seed=3))
    c = run_mozart(bulk, RunContext(seed=4))
    # Assert: same tokens and homes on one seed (the schedule moves no byte), others on another seed
    assert b.metrics["inter_package_bytes"] == a.metrics["inter_package_bytes"]
    assert b.metrics["remote_copies_per_token"] == a.metrics["remote_copies_per_token"]
    assert b.metrics["moe_layer_time_s"] < a.metrics["moe_layer_time_s"]
    assert c.metrics["inter_package_bytes"] != a.metrics["inter_package_bytes"]


def test_lm_variant_reads_its_named_input_and_the_step_is_seeded():
    # Prepare: a tiny MoE LM's routing, built twice for one seed and once for another
    tiny = parse_params(TinyMoEParams, {"layers": 2, "d": 16, "experts": 16, "top_k": 2, "ffn": 16, "steps": 3,
                                        "batch": 2, "profile_tokens": 512, "eval_tokens": 4096})
    t0, t0b, t1 = (build_traces(tiny, RunContext(seed=s)) for s in (0, 0, 1))
    p = parse_params(MozartLMParams, {**SMALL, "eval_tokens": 4096, "model": {"experts": 64, "top_k": 2}})
    # Execute
    r = run_mozart_lm(p, RunContext(seed=0, inputs={"moe_traces": t0}))
    # Assert: one model per seed; experts and top-k come from the traces; the input is required by name
    assert all(np.array_equal(x, y) for x, y in zip(t0["eval"], t0b["eval"]))
    assert not all(np.array_equal(x, y) for x, y in zip(t0["eval"], t1["eval"]))
    assert r.metrics["experts"] == 16 and r.metrics["top_k"] == 2 and r.metrics["inter_package_bytes"] > 0
    with pytest.raises(ConfigError, match="moe_traces"):
        run_mozart_lm(p, RunContext(seed=0))


def test_experts_map_to_chiplets_by_sharding_or_sharing():
    from components.simulation.mozart.wafer import MoEShape, chiplet_of

    w = Wafer.from_config({})                          # 8 packages x 8 chiplets
    g16 = np.arange(16) // 2                           # 2 experts per package: each sharded over 4 chiplets
    first, share = chiplet_of(g16, MoEShape(experts=16), w)
    assert share == 4 and first[:4].tolist() == [0, 4, 8, 12]
    g128 = np.arange(128) // 16                        # 16 per package: 2 experts per chiplet
    first, share = chiplet_of(g128, MoEShape(experts=128), w)
    assert share == 1 and np.bincount(first, minlength=64).tolist() == [2] * 64


def test_streaming_timeline_has_a_colour_legend_and_readable_text(monkeypatch):
    # Prepare: one run of 2 chunks; capture the figure instead of its PNG bytes
    from components.simulation.mozart import plots as mplots

    figs = []
    monkeypatch.setattr(mplots, "png", lambda fig: figs.append(fig) or b"")
    ev = [{"op": op, "chunk": c, "start": 1e-5 * (c + k), "end": 1e-5 * (c + k + 1)}
          for c in range(2) for k, op in enumerate(["dispatch", "weights", "compute", "combine"])]
    # Execute
    mplots.timelines({"streaming (2 chunks)": ev})
    # Assert: every op colour named in a legend; chunk numbers and tick labels at >= 9 pt
    ax = figs[0].axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["dispatch", "weights", "compute", "combine"]
    assert sorted(t.get_text() for t in ax.texts) == ["0", "0", "0", "1", "1", "1"]
    assert min(t.get_fontsize() for t in ax.texts + ax.get_yticklabels()) >= 9
