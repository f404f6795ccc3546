"""Arnold: spreads by hand, MIP = brute force, heuristics never double-book or overbook, time limits,
bad input, and the iteration-time model in actor mode = vectorised mode."""
import itertools
import math

import numpy as np
import pytest

from components.core.context import RunContext
from components.core.errors import ConfigError
from components.core.registry import lookup
from components.core.netsim import Link
from components.core.params import parse_params
from components.simulation import engine
from components.simulation.actors import ActorCluster
from components.simulation.arnold.cluster import fragment
from components.simulation.arnold.costmodel import StepCost, iteration_time
from components.simulation.arnold.mip import place_mip, solve_counts
from components.simulation.arnold.placement import Instance, rank_order
from components.simulation.arnold.spread import check_placement, group_spreads, lower_bounds, objective
from components.simulation.arnold.technique import ArnoldParams, run_arnold
from components.simulation.topology import Level, Tree, tree_from_config

L = Link(8e9, 1e-6)
PLACEMENT_POLICIES = ("random", "bestfit_dp", "bestfit_pp", "lowest_switch", "tiles", "mip")


def policy(name):
    return lookup("placement_policy", name)


def tree(nodes_per_leaf=2, leafs=2, pods=3):
    return Tree([Level("node", nodes_per_leaf, L), Level("leaf", leafs, L), Level("pod", pods, L)])


def test_spreads_by_hand():
    t = tree()                                     # pods hold nodes 0-3, 4-7, 8-11; leafs hold pairs
    node_of = np.array([[0, 4, 8],                 # replica 0: stages on pods 0, 1, 2
                        [1, 5, 2]])                # replica 1: pods 0, 1, 0
    dp, pp = group_spreads(node_of, t, 2)
    assert dp.tolist() == [1, 1, 2]                # stage 2: nodes 8 (pod 2) and 2 (pod 0)
    assert pp.tolist() == [3, 2]
    dpl, ppl = group_spreads(node_of, t, 1)        # leafs: 0,0 | 2,2 | 4,1
    assert dpl.tolist() == [1, 1, 2] and ppl.tolist() == [3, 3]
    cap = np.array([4, 4, 4])
    assert lower_bounds(2, 3, cap) == (1, 1)
    assert objective(node_of, t, 2, cap, 0.5) == pytest.approx(0.5 * 2 + 0.5 * 3)


def test_rank_orders():
    nodes = np.arange(6)
    assert rank_order(nodes, 3, 2, "dp_inner").tolist() == [[0, 3], [1, 4], [2, 5]]
    assert rank_order(nodes, 3, 2, "pp_inner").tolist() == [[0, 1], [2, 3], [4, 5]]


def brute_force(D, P, cap, alpha):
    lb_dp, lb_pp = lower_bounds(D, P, np.asarray(cap))
    best = math.inf
    for assign in itertools.product(range(len(cap)), repeat=D * P):
        a = np.array(assign).reshape(D, P)
        if any((a == m).sum() > c for m, c in enumerate(cap)):
            continue
        sdp = max(len(set(a[:, p])) for p in range(P))
        spp = max(len(set(a[d, :])) for d in range(D))
        best = min(best, alpha * sdp / lb_dp + (1 - alpha) * spp / lb_pp)
    return best


@pytest.mark.parametrize("D,P,cap,alpha", [(3, 2, [3, 2, 4], 0.5), (2, 3, [2, 2, 3], 0.5), (3, 2, [2, 2, 2], 0.3),
                                           (2, 4, [3, 3, 3], 0.7)])
def test_mip_optimum_equals_brute_force(D, P, cap, alpha):
    unit_of, res = solve_counts(D, P, np.array(cap), alpha, 30)
    assert res.status == "optimal"
    assert res.objective == pytest.approx(brute_force(D, P, cap, alpha))
    for m, c in enumerate(cap):                    # the returned assignment is feasible and scores the optimum
        assert (unit_of == m).sum() <= c
    sdp = max(len(set(unit_of[:, p])) for p in range(P))
    spp = max(len(set(unit_of[d, :])) for d in range(D))
    lb = lower_bounds(D, P, np.array(cap))
    assert alpha * sdp / lb[0] + (1 - alpha) * spp / lb[1] == pytest.approx(res.objective)


@pytest.mark.parametrize("seed", range(3))
def test_every_policy_places_each_cell_on_its_own_free_node(seed):
    t = Tree([Level("node", 4, L), Level("leaf", 4, L), Level("pod", 4, L)])   # 64 nodes
    rng = np.random.default_rng(seed)
    free = fragment(t.n, [0.2, 0.3, 0.45][seed % 3], rng, 2, 12)
    shapes = [(6, 2), (5, 6), (12, 2), (1, 7), (34, 1)]
    for D, P in shapes:
        inst = Instance(t, free, D, P, time_limit_s=5)
        cap = inst.cap()
        for name in PLACEMENT_POLICIES:
            if name == "mip" and D * P > 12:
                continue
            node_of = policy(name)(inst, np.random.default_rng(seed))
            assert node_of.shape == (D, P)
            check_placement(node_of, free)                             # distinct nodes, all free
            used = np.bincount(t.unit(node_of.ravel(), 2), minlength=4)
            assert (used <= cap).all()


def test_tiles_never_worse_than_single_alignment_on_random_clusters():
    t = Tree([Level("node", 8, L), Level("leaf", 4, L), Level("pod", 8, L)])   # 256 nodes
    for seed in range(8):
        free = fragment(t.n, 0.3, np.random.default_rng(seed), 4, 32)
        inst = Instance(t, free, 20, 8)
        cap = inst.cap()
        o = {k: objective(policy(k)(inst, None), t, 2, cap, 0.5) for k in ("tiles", "bestfit_dp", "bestfit_pp")}
        assert o["tiles"] <= min(o["bestfit_dp"], o["bestfit_pp"]) + 1e-9


def test_mip_time_limit_is_honoured_and_reported():
    t = Tree([Level("node", 4, L), Level("leaf", 4, L), Level("pod", 6, L)])
    free = fragment(t.n, 0.3, np.random.default_rng(1), 2, 12)
    inst = Instance(t, free, 8, 8, time_limit_s=1.0)
    node_of, res = place_mip(inst, return_result=True)
    assert res.solver_s < 5.0
    assert res.status in ("optimal", "time_limit")
    check_placement(node_of, free)


def test_job_larger_than_free_capacity_is_a_config_error():
    with pytest.raises(ConfigError, match="free capacity"):
        parse_params(ArnoldParams, {"dp": 200, "pp": 8, "busy": [0.4]})       # 1600 > 1229 free nodes
    with pytest.raises(ConfigError, match="bandwidth"):
        parse_params(ArnoldParams, {"topology": {"levels": [{"name": "node", "fanout": 4, "bandwidth": 0},
                                                            {"name": "minipod", "fanout": 2, "bandwidth": "1Gbps"}]}, "dp": 2, "pp": 2})
    with pytest.raises(ConfigError, match="policy"):
        parse_params(ArnoldParams, {"policy": "nope"})


def test_iteration_time_actor_mode_equals_vectorised():
    t = Tree([Level("node", 4, Link(3.2e12, 1e-6)), Level("leaf", 2, Link(12.8e12, 2e-6)),
              Level("pod", 2, Link(12.8e12, 4e-6), flow_bps=2.7e12, p2p_flow_bps=1.9e12)])
    free = fragment(t.n, 0.25, np.random.default_rng(3), 1, 3)
    inst = Instance(t, free, 4, 3)
    cost = StepCost()
    cluster = ActorCluster("arnold-test", t, None)
    for name in ("tiles", "bestfit_dp", "random"):
        node_of = policy(name)(inst, np.random.default_rng(0))
        vec = iteration_time(node_of, cost, lambda *a, **kw: engine.phase_time(t, *a, **kw))
        act = iteration_time(node_of, cost, lambda *a, **kw: cluster.phase(*a, **kw)[0])
        assert act["iter_time_s"] == pytest.approx(vec["iter_time_s"], rel=1e-12)
        assert vec["iter_time_s"] > cost.compute_s


SMALL = {"dp": 12, "pp": 4, "busy": [0.3], "n_clusters": 2,
         "topology": {"levels": [{"name": "node", "fanout": 8, "bandwidth": "3.2Tbps"},
                                 {"name": "leaf", "fanout": 4, "bandwidth": "25.6Tbps"},
                                 {"name": "minipod", "fanout": 4, "bandwidth": "51.2Tbps"}]}}


def test_technique_small_run_reports_metrics_and_plots():
    p = parse_params(ArnoldParams, SMALL)
    r = run_arnold(p, RunContext(seed=0))
    for k in ("max_spread_dp", "max_spread_pp", "objective", "iter_time_s", "solver_s", "objective_worst"):
        assert k in r.metrics
    assert r.metrics["n_clusters"] == 2 and len(r.tables["clusters"]) == 2
    assert r.files["plots/placement_map.png"][:4] == b"\x89PNG"
    assert r.files["plots/spread_per_group.png"][:4] == b"\x89PNG"


def test_one_seed_gives_every_policy_the_same_clusters():
    # Prepare: two policies, two seeds
    tiles, bestfit = (parse_params(ArnoldParams, {**SMALL, "policy": pol, "plots": False}) for pol in ("tiles", "bestfit_dp"))
    t = tree_from_config(SMALL["topology"])
    # Execute
    runs = {(pol, seed): run_arnold(p, RunContext(seed=seed)) for pol, p in (("tiles", tiles), ("bestfit_dp", bestfit))
            for seed in (0, 1)}
    # Assert: cluster i of seed s is the one drawn from (s, level, i), whatever the policy, so the
    # DAG can pair policies seed by seed; another seed draws other clusters
    for (pol, seed), r in runs.items():
        for i in range(2):
            free = fragment(t.n, 0.3, np.random.default_rng([seed, 0, i]), tiles.bg_job_min, tiles.bg_job_max)
            inst = Instance(t, free, 12, 4)
            want = objective(policy(pol)(inst, None), t, 2, inst.cap(), 0.5)
            assert r.tables["clusters"][i]["objective"] == pytest.approx(want)
    free0, free1 = (fragment(t.n, 0.3, np.random.default_rng([s, 0, 0]), 8, 256) for s in (0, 1))
    assert not np.array_equal(free0, free1)
