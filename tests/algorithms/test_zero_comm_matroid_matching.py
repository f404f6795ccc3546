"""Zero-communication MW-IS / k-capped MWM: greedy vs brute force, the kernel's size bound and
optimality, the exact solvers agreeing, naive top-k failing on heavy stars, the tree reduction,
bad input, Ray actors equal to the vectorised run, a dying server actor, the debug flavour."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from components.algorithms.zero_comm_matroid_matching import instances as gen
from components.algorithms.zero_comm_matroid_matching import servers as sv
from components.algorithms.zero_comm_matroid_matching.matching import (is_matching, kcapped_mwm, kernel_bound,
                                                                       matching_kernel, naive_topk, networkx_kcapped)
from components.algorithms.zero_comm_matroid_matching.matroids import MATROIDS, brute_force, greedy
from components.algorithms.zero_comm_matroid_matching.technique import ZeroCommParams, run_zero_comm
from components.core.context import RunContext
from components.core.errors import ConfigError
from tests.pipelines.test_config_validation import run_cli  # the one CLI runner for bad-input checks


@pytest.mark.parametrize("kind", MATROIDS)
def test_greedy_equals_brute_force_on_tiny_matroids(kind):
    # Prepare: 30 tiny instances of each matroid, half with tied integer weights
    rng = np.random.default_rng(1)
    for t in range(30):
        k = int(rng.integers(1, 4))
        inst = gen.matroid_instance(rng, kind, int(rng.integers(3, 8)), k, 1, tied=bool(t % 2))
        # Execute
        kept = greedy(kind, inst.meta, np.arange(inst.n), inst.w, inst.data, k)
        # Assert: the greedy weight is the enumerated optimum, within k elements
        assert len(kept) <= k
        assert np.isclose(inst.w[kept].sum(), brute_force(kind, inst.meta, inst.w, inst.data, k))


def brute_matching(edges, w, k):
    best = 0.0
    for size in range(1, k + 1):
        for s in itertools.combinations(range(len(w)), size):
            if is_matching(edges[list(s)], k):
                best = max(best, float(w[list(s)].sum()))
    return best


def test_milp_networkx_and_brute_force_agree_on_small_graphs():
    rng = np.random.default_rng(2)
    for t in range(25):
        inst = gen.random_graph(rng, int(rng.integers(4, 9)), int(rng.integers(4, 11)), int(rng.integers(1, 4)), 1,
                                tied=bool(t % 3 == 0))
        w_milp, pos = kcapped_mwm(inst.edges, inst.w, inst.k)
        assert is_matching(inst.edges[pos], inst.k)
        assert np.isclose(w_milp, brute_matching(inst.edges, inst.w, inst.k))
        assert np.isclose(w_milp, networkx_kcapped(inst.edges, inst.w, inst.k))


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_kernel_respects_size_bound_and_degree_cap_and_reaches_the_bound(k):
    # Prepare: a dense random multigraph (many more edges than the bound)
    rng = np.random.default_rng(k)
    nv = 6 * k + 4
    inst = gen.random_graph(rng, nv, 40 * kernel_bound(k), k, 1, tied=False)
    # Execute
    kept = matching_kernel(np.arange(inst.n), inst.edges, inst.w, k)
    # Assert: size <= (2k-1)(2k-2)+1, reached on a dense graph; every kept degree <= 2k-1
    assert len(kept) == kernel_bound(k)
    deg = np.bincount(inst.edges[kept].ravel(), minlength=nv)
    assert deg.max() <= 2 * k - 1


def test_kernel_union_is_optimal_where_naive_topk_is_not():
    # Prepare: heavy stars, k = 2 (one hub), hub degree 2*k*m over m = 4 servers
    rng = np.random.default_rng(3)
    naive_fail = 0
    for t in range(10):
        inst = gen.heavy_star(rng, 2, 4, 2.0)
        inst.owner = gen.split(rng, inst.n, inst.m, "random", inst.w)
        opt, _ = kcapped_mwm(inst.edges, inst.w, inst.k)
        shard_list = sv.shards(inst, "mwm")
        # Execute
        kern = sv.solve("mwm", "", {}, sv.union(sv.messages_vectorised("mwm", "", {}, shard_list, 2, "kernel")), 2)[0]
        naive = sv.solve("mwm", "", {}, sv.union(sv.messages_vectorised("mwm", "", {}, shard_list, 2, "naive_topk")), 2)[0]
        # Assert
        assert np.isclose(kern, opt)
        naive_fail += naive < opt - 1e-9
    assert naive_fail >= 8


def _kernel_then_centre(edges, w, k: int, owner=None, m: int = 1) -> float:
    """The protocol on one instance: every server's kernel, the centre's exact optimum on the union."""
    owner = np.zeros(len(w), dtype=np.int64) if owner is None else owner
    inst = gen.MatchingInstance(np.asarray(edges, dtype=np.int64), np.asarray(w, dtype=np.float64), k, m, owner=owner)
    msgs = sv.messages_vectorised("mwm", "", {}, sv.shards(inst, "mwm"), k, "kernel")
    return sv.solve("mwm", "", {}, sv.union(msgs), k)[0]


def test_kernel_is_optimal_on_the_issue_multigraph_and_ignores_self_loops():
    # Prepare: a parallel copy of (0,1) spends vertex 0's degree cap (2k-1 = 3) before (0,3) is scanned
    edges = [(0, 1), (0, 1), (0, 2), (0, 3), (1, 2)]
    w = [10.0, 9.9, 9.8, 9.0, 8.5]
    # Execute
    got = _kernel_then_centre(edges, w, 2)
    looped = _kernel_then_centre(edges + [(0, 0), (3, 3), (1, 1)], w + [20.0, 19.0, 18.0], 2)
    # Assert: the optimum (0,3) + (1,2) = 17.5, as both exact solvers give; self-loops change nothing
    assert got == pytest.approx(17.5) and looped == pytest.approx(17.5)
    assert kcapped_mwm(np.array(edges), np.array(w), 2)[0] == pytest.approx(17.5)
    assert networkx_kcapped(np.array(edges), np.array(w), 2) == pytest.approx(17.5)
    # the kernel keeps the heaviest copy of each pair only (ids 0 and 2-4; not 1, the lighter (0,1))
    assert matching_kernel(np.arange(5), np.array(edges), np.array(w), 2).tolist() == [0, 2, 3, 4]


@pytest.mark.parametrize("tied", [False, True])
def test_kernel_is_optimal_on_random_multigraphs(tied):
    # Prepare: the project's random_graph on barely 2k vertices (every vertex counts) with 6k-12k edges
    # (many parallel ones), split over 1-2 servers
    rng = np.random.default_rng(11 + tied)
    parallel = 0
    for _ in range(40):
        k, m = int(rng.integers(2, 5)), int(rng.integers(1, 3))
        inst = gen.random_graph(rng, int(rng.integers(2 * k, 2 * k + 3)), int(rng.integers(6 * k, 12 * k)), k, m,
                                tied=tied)
        inst.owner = gen.split(rng, inst.n, m, "random", inst.w)
        pairs = np.sort(inst.edges, axis=1)
        parallel += len(np.unique(pairs, axis=0)) < len(pairs)
        # Execute
        got = _kernel_then_centre(inst.edges, inst.w, k, inst.owner, m)
        # Assert: equal to the exact optimum of the whole multigraph (MILP and networkx agree)
        opt = kcapped_mwm(inst.edges, inst.w, k)[0]
        assert got == pytest.approx(opt) and networkx_kcapped(inst.edges, inst.w, k) == pytest.approx(opt)
    assert parallel >= 30          # the instances are multigraphs


def test_naive_topk_is_the_k_heaviest():
    ids, w = np.arange(5), np.array([1.0, 5.0, 5.0, 0.0, 3.0])
    assert naive_topk(ids, np.zeros((5, 2), int), w, 3).tolist() == [1, 2, 4]   # ties: lower id first


def test_suite_optimal_with_tree_equal_to_flat_and_one_server_holding_the_optimum():
    p = ZeroCommParams(problem="mwis", n_instances=24, n_max=3000, ks=[1, 3, 7], ms=[2, 16, 64])
    r = run_zero_comm(p, RunContext(seed=5))
    assert r.metrics["optimal_share"] == 1 and r.metrics["identical_set_share"] == 1
    assert r.metrics["tree_equals_flat"] == 1 and r.metrics["max_message_over_bound"] <= 1
    assert {row["split"] for row in r.tables["instances"]} == set(gen.SPLITS)
    # the send-all baseline sends whole shards: far larger messages, same answers
    s = run_zero_comm(ZeroCommParams(problem="mwis", protocol="send_all", n_instances=24, n_max=3000,
                                     ks=[1, 3, 7], ms=[2, 16, 64]), RunContext(seed=5))
    assert s.metrics["mean_total_message"] > 3 * r.metrics["mean_total_message"]
    assert [row["opt"] for row in s.tables["instances"]] == [row["opt"] for row in r.tables["instances"]]


@pytest.mark.parametrize("change, key", [
    ({"ks": [0, 2]}, "ks"), ({"ms": [0]}, "ms"), ({"matroids": ["graphic", "vector"]}, "matroids"),
    ({"problem": "mwis", "protocol": "naive_topk"}, "protocol"), ({"star_factors": [0]}, "star_factors"),
])
def test_bad_params_name_the_key(change, key):
    with pytest.raises(ConfigError) as e:
        ZeroCommParams(**change).check()
    assert e.value.key == key


def test_bad_input_on_the_cli_is_one_line_exit_2_before_ray():
    r = run_cli("experiment=zero_comm_matroid_matching", "experiment.common.zero_comm.ks=[0,2]")
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "ks" in lines[0], r.stderr
    assert "ray" not in r.stdout.lower()


def test_actors_equal_vectorised_and_a_dead_server_actor_fails_with_the_reason(ray_session):
    # Execute: actor mode on own actors (no node pool): messages equal to the in-process ones
    p = ZeroCommParams(problem="mwm", mode="actors", n_instances=3, n_stars=3, nv_max=30, ne_max=120, ks=[1, 2, 3],
                       ms=[2, 5], nx_checks=0, n_nodes=2)
    r = run_zero_comm(p, RunContext(seed=0, variant="t_actors"))
    assert r.metrics["actors_equal_vectorised"] == 1 and r.metrics["optimal_share"] == 1
    # Execute: server 1's actor dies on its first call
    p.fail_server = 1
    with pytest.raises(sv.ServerDied, match=r"server actor 1 .*died"):
        run_zero_comm(p, RunContext(seed=0, variant="t_dies"))


def test_debug_flavour_end_to_end(run_experiment):
    out = run_experiment("zero_comm_matroid_matching")
    assert not out.failed and len(out.variants) == 7
    names = {c.name: c for c in out.claims}
    for n in ("mwm_always_optimal", "tree_reduction_equals_flat", "actors_equal_vectorised"):
        assert names[n].error == "", names[n].error
    assert out.variants["mwm"].result.metrics["optimal_share"] == 1


def test_a_dead_server_actor_ends_the_variant_failed_with_the_reason(run_experiment, mlflow_client):
    out = run_experiment("zero_comm_matroid_matching", "only=[mwis_actors]",
                         "++experiment.variants.mwis_actors.params.fail_server=1")
    v = out.variants["mwis_actors"]
    assert v.status == "FAILED" and "server actor" in v.error and "died" in v.error, (v.status, v.error)
    run = mlflow_client.get_run(v.run_id)
    assert run.info.status == "FAILED" and "server actor" in run.data.tags.get("error", "")
