"""Arnold's shared-cluster model (contention.py): background flows by hand, per-flow fair shares and the
iteration time on a hand-computed 3-job cluster, the per-flow cap, and duty 0 = today's engine."""
import numpy as np
import pytest

from components.core.context import RunContext
from components.core.errors import ConfigError
from components.core.netsim import Link
from components.core.params import parse_params
from components.core.registry import lookup
from components.simulation import engine
from components.simulation.arnold.cluster import fragment, fragment_jobs
from components.simulation.arnold.contention import SharedNet, background_flows, link_flow_counts
from components.simulation.arnold.costmodel import StepCost, iteration_time
from components.simulation.arnold.placement import Instance
from components.simulation.arnold.technique import ArnoldParams, run_arnold
from components.simulation.topology import Level, Tree


def tiny(pod_flow_bps=float("inf")):
    """8 nodes: leaf0 {0,1}, leaf1 {2,3} (pod0); leaf2 {4,5}, leaf3 {6,7} (pod1). Node and leaf uplinks
    10 Gbps (a leaf's 2 nodes share its uplink: 2:1), pod uplinks 100 Gbps, no latency."""
    return Tree([Level("node", 2, Link(10e9, 0.0)), Level("leaf", 2, Link(10e9, 0.0)),
                 Level("pod", 2, Link(100e9, 0.0), pod_flow_bps, pod_flow_bps)])


# our job (DP 2 x PP 1) on nodes 0 and 4; background job A on {1, 5} (a 2-node job: pure DP ring),
# background job B on {2, 3} (ring inside leaf1); nodes 6, 7 free
OWNER = np.array([-1, 0, 1, 1, -1, 0, -1, -1])
NODE_OF = np.array([[0], [4]])
COST = StepCost(grad_bytes=2.5e9, act_bytes=0.0, n_micro=1, pp_exposed=0.0, compute_s=1.0)


def test_background_flows_by_hand():
    s, d = background_flows(OWNER, bg_pp=2)
    assert sorted(zip(s.tolist(), d.tolist())) == [(1, 5), (2, 3), (3, 2), (5, 1)]
    # a 4-node job with 2 stages: Megatron order over nodes 4..7 -> stage 0 = {4, 5}, stage 1 = {6, 7}
    s, d = background_flows(np.array([-1, -1, -1, -1, 0, 0, 0, 0]), bg_pp=2)
    assert sorted(zip(s.tolist(), d.tolist())) == [(4, 5), (4, 6), (5, 4), (5, 7), (6, 7), (7, 6)]


def test_fair_share_and_iteration_time_by_hand():
    t = tiny()
    n_bg = link_flow_counts(t, *background_flows(OWNER, bg_pp=2))
    # job A's flows cross leaf0 and leaf2 and both pods' uplinks (both directions); job B none of them
    leaf_up = lambda leaf: t.up_off[1] + leaf  # noqa: E731
    assert [n_bg[leaf_up(k)] for k in range(4)] == [1, 0, 1, 0]
    assert n_bg[t.up_off[2]] == 1 and n_bg[t.down_off[2] + 1] == 1
    for duty, want_step in ((0.0, 1.0), (0.5, 1.5), (1.0, 2.0)):
        # ring step: each of our 2 flows carries G/D = 1.25e9 B = 1e10 bit; on leaf0's uplink it shares
        # 10 Gbps with duty x job A's flow -> 10 / (1 + duty) Gbps -> (1 + duty) s. DP = 2(D-1) steps.
        net = SharedNet(t, duty * n_bg)
        it = iteration_time(NODE_OF, COST, net)
        assert it["dp_ring_step_s"] == pytest.approx(want_step)
        assert it["iter_time_s"] == pytest.approx(1.0 + 2 * want_step)       # 3 + 2 duty
        rate, *_ = net.rates(np.array([0, 4]), np.array([4, 0]))
        assert rate == pytest.approx([10e9 / (1 + duty)] * 2)
        st = net.stats["collective"]
        assert st["pairs"] == 8                                              # 2 flows x (2 leaf + 2 pod links)
        assert st["factor"] == pytest.approx(1 + duty)
        assert st["bg_share"] == pytest.approx(duty / (1 + duty))
        assert st["slowdown"] == pytest.approx(1 + duty)
        assert st["slowed"] == (1.0 if duty > 0 else 0.0)
    # duty 0 is today's engine
    assert iteration_time(NODE_OF, COST, SharedNet(t, 0 * n_bg))["iter_time_s"] == pytest.approx(
        iteration_time(NODE_OF, COST, lambda *a, **kw: engine.phase_time(t, *a, **kw))["iter_time_s"])


def test_contention_binds_only_below_the_per_flow_cap():
    t = tiny(pod_flow_bps=5e9)                       # crossing a pod caps a flow at 5 Gbps
    n_bg = link_flow_counts(t, *background_flows(OWNER, bg_pp=2))
    # share 10 / (1 + duty) stays >= 5 up to duty 1: the cap sets the rate, background traffic costs nothing
    for duty in (0.0, 0.5, 1.0):
        net = SharedNet(t, duty * n_bg)
        assert iteration_time(NODE_OF, COST, net)["dp_ring_step_s"] == pytest.approx(2.0)
        assert net.stats["collective"]["slowed"] == 0.0 and net.stats["collective"]["slowdown"] == pytest.approx(1.0)
    # three flows of job A on the same uplinks (a heavier job) at duty 1: share 10 / 4 = 2.5 Gbps < 5
    heavy = n_bg * 3
    assert iteration_time(NODE_OF, COST, SharedNet(t, heavy))["dp_ring_step_s"] == pytest.approx(4.0)


def test_fragment_jobs_draws_the_same_clusters():
    for seed in range(5):
        owner = fragment_jobs(512, 0.3, np.random.default_rng(seed), 8, 64)
        assert np.array_equal(owner < 0, fragment(512, 0.3, np.random.default_rng(seed), 8, 64))
        assert (owner >= 0).sum() == round(0.3 * 512)


def test_zero_duty_equals_engine_on_real_placements():
    t = Tree([Level("node", 8, Link(3.2e12, 1e-6)), Level("leaf", 4, Link(25.6e12, 2e-6)),
              Level("pod", 8, Link(51.2e12, 4e-6), 2.735e12, 1.882e12)])
    owner = fragment_jobs(t.n, 0.3, np.random.default_rng(4), 4, 32)
    inst = Instance(t, owner < 0, 18, 8)
    n_bg = link_flow_counts(t, *background_flows(owner))
    assert n_bg.sum() > 0
    for pol in ("tiles", "bestfit_dp", "bestfit_pp", "random"):
        node_of = lookup("placement_policy", pol)(inst, np.random.default_rng(0))
        want = iteration_time(node_of, StepCost(), lambda *a, **kw: engine.phase_time(t, *a, **kw))
        got = iteration_time(node_of, StepCost(), SharedNet(t, 0 * n_bg))
        assert got["iter_time_s"] == pytest.approx(want["iter_time_s"], rel=1e-12)
        heavy = iteration_time(node_of, StepCost(), SharedNet(t, 1.0 * n_bg))
        assert heavy["iter_time_s"] >= want["iter_time_s"] * (1 - 1e-12)      # contention never speeds a job up


SMALL = {"dp": 12, "pp": 4, "busy": [0.3], "n_clusters": 2, "plots": False,
         "topology": {"levels": [{"name": "node", "fanout": 8, "bandwidth": "3.2Tbps"},
                                 {"name": "leaf", "fanout": 4, "bandwidth": "25.6Tbps"},
                                 {"name": "minipod", "fanout": 4, "bandwidth": "51.2Tbps"}]}}


def test_technique_shared_reports_contention_and_the_duty_sweep():
    today = run_arnold(parse_params(ArnoldParams, SMALL), RunContext(seed=0)).metrics
    p = parse_params(ArnoldParams, {**SMALL, "bg_duty_cycle": 0.4, "duty_sweep": [0.0, 0.4, 1.0], "bg_load_sweep": [0.0, 1.0, 3.0]})
    r = run_arnold(p, RunContext(seed=0))
    m = r.metrics
    assert m["objective"] == pytest.approx(today["objective"])                    # same placements
    assert m["iter_time_duty000"] == pytest.approx(today["iter_time_s"], rel=1e-12)
    assert m["iter_time_duty040"] == pytest.approx(m["iter_time_s"])
    assert m["iter_time_duty000"] <= m["iter_time_duty040"] <= m["iter_time_duty100"]
    assert m["contention_slowdown"] == pytest.approx(m["iter_time_s"] / today["iter_time_s"])
    for k in ("contention_factor", "contention_factor_dp", "contention_factor_pp", "bg_flow_share", "slowed_frac_dp"):
        assert k in m
    assert m["contention_factor"] >= 1.0
    xs, ys, xname = r.series["iter_time_vs_duty"]
    assert xs == [0.0, 0.4, 1.0] and ys[1] == pytest.approx(m["iter_time_s"]) and xname == "background duty cycle"
    # a duty cycle d is a load of d active flows per background message
    assert m["iter_time_load000"] == pytest.approx(m["iter_time_duty000"]) and m["iter_time_load100"] == pytest.approx(m["iter_time_duty100"])
    assert m["iter_time_load300"] >= m["iter_time_load100"]
    assert r.series["iter_time_vs_bg_load"][0] == [0.0, 1.0, 3.0]


def test_shared_params_are_checked():
    with pytest.raises(ConfigError, match="bg_duty_cycle"):
        parse_params(ArnoldParams, {**SMALL, "bg_duty_cycle": 1.5})
    with pytest.raises(ConfigError, match="duty_sweep"):
        parse_params(ArnoldParams, {**SMALL, "duty_sweep": [0.2, -0.1]})
    with pytest.raises(ConfigError, match="bg_load_sweep"):
        parse_params(ArnoldParams, {**SMALL, "bg_load_sweep": [1.0, -2.0]})
    with pytest.raises(ConfigError, match="bg_duty_cycle"):
        parse_params(ArnoldParams, {**SMALL, "mode": "actors", "dp": 2, "pp": 2, "bg_duty_cycle": 0.4,
                                    "topology": {"levels": [{"name": "node", "fanout": 4, "bandwidth": "3.2Tbps"},
                                                            {"name": "leaf", "fanout": 2, "bandwidth": "12.8Tbps"},
                                                            {"name": "minipod", "fanout": 2, "bandwidth": "12.8Tbps"}]}})
