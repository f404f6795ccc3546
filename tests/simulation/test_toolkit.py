"""The shared simulation toolkit: topologies, link loads, phase times, actor mode = vectorised mode."""
import numpy as np
import pytest

from components.core.errors import ConfigError
from components.core.netsim import Link
from components.simulation import engine
from components.simulation.actors import ActorCluster
from components.simulation.topology import Level, Mesh2D, Tree, tree_from_config

L1 = Link(8e9, 1e-6)      # 1 GB/s
L2 = Link(16e9, 2e-6)     # 2 GB/s


def small_tree():
    # 2 nodes per leaf, 2 leafs per pod, 2 pods: 8 nodes
    return Tree([Level("node", 2, L1), Level("leaf", 2, L2), Level("pod", 2, L2)])


def test_tree_routes_and_loads_by_hand():
    t = small_tree()
    assert t.n == 8 and t.units == [8, 4, 2]
    assert list(t.lca_level([0, 0, 0, 0], [0, 1, 2, 4])) == [0, 1, 2, 3]
    # 0 -> 4 climbs node 0's NIC, leaf 0's uplink, pod 0's uplink, and comes down pod 1, leaf 2, node 4
    assert sorted(t.route(0, 4)) == sorted([t.up_off[0] + 0, t.down_off[0] + 4, t.up_off[1] + 0, t.down_off[1] + 2,
                                            t.up_off[2] + 0, t.down_off[2] + 1])
    loads = engine.link_loads(t, [0, 1], [4, 5], [1e9, 1e9])
    assert loads[t.up_off[2] + 0] == 2e9          # both messages share pod 0's uplink
    assert loads[t.up_off[0] + 0] == 1e9
    # busiest link: node NICs 1 GB/s carry 1 GB -> 1 s; pod uplink 2 GB/s carries 2 GB -> 1 s; + path latency
    lat = 2 * (1e-6 + 2e-6 + 2e-6)
    assert engine.phase_time(t, [0, 1], [4, 5], 1e9) == pytest.approx(1.0 + lat)
    # three flows through one pod uplink make it the bottleneck: 3 GB over 2 GB/s
    t3 = engine.phase_time(t, [0, 1, 2], [4, 5, 6], 1e9)
    assert t3 == pytest.approx(1.5 + lat)


def test_mesh_xy_routing_by_hand():
    m = Mesh2D(2, 3, L1)
    assert m.hops(0, 5) == 3
    r = m.route(0, 5)                              # inject, eject, E, E, S
    assert len(r) == 5
    loads = engine.link_loads(m, [0, 3], [2, 5], 1e9)  # two row-wise messages, disjoint links
    assert loads.max() == 1e9 and (loads > 0).sum() == 2 * (2 + 2)
    s, l = m.route_pairs(np.array([0]), np.array([5]))
    assert sorted(l.tolist()) == sorted(r)


def test_flow_cap_applies_by_highest_tier():
    t = tree_from_config({"levels": [{"name": "node", "fanout": 2, "bandwidth": "8Gbps"},
                                     {"name": "leaf", "fanout": 2, "bandwidth": "80Gbps", "flow_bandwidth": "4Gbps",
                                      "p2p_flow_bandwidth": "2Gbps"}]})
    assert engine.phase_time(t, [0], [1], 1e9) == pytest.approx(1.0)          # same leaf: NIC rate
    assert engine.phase_time(t, [0], [2], 1e9) == pytest.approx(2.0)          # crosses: capped at 4 Gbps
    assert engine.phase_time(t, [0], [2], 1e9, flow="p2p") == pytest.approx(4.0)


@pytest.mark.parametrize("bad", ["0Gbps", 0, "-1Gbps"])
def test_zero_bandwidth_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="bandwidth"):
        tree_from_config({"levels": [{"name": "node", "fanout": 4, "bandwidth": bad}]})


def test_bad_fanout_is_a_config_error():
    with pytest.raises(ConfigError, match="fanout"):
        tree_from_config({"levels": [{"name": "node", "fanout": 0, "bandwidth": "1Gbps"}]})


@pytest.mark.parametrize("topo", [small_tree(), Mesh2D(2, 4, L1, L2)])
def test_local_actor_mode_equals_vectorised(topo):
    rng = np.random.default_rng(0)
    cluster = ActorCluster("t", topo, None)
    for _ in range(5):
        n = 20
        src, dst = rng.integers(topo.n, size=n), rng.integers(topo.n, size=n)
        nb = rng.uniform(1e6, 1e9, size=n)
        t_act, recv = cluster.phase(src, dst, nb)
        assert t_act == pytest.approx(engine.phase_time(topo, src, dst, nb), rel=1e-12)
        assert recv.sum() == pytest.approx(nb.sum())
        assert recv == pytest.approx(np.bincount(dst, nb, minlength=topo.n))


def test_ray_actor_mode_equals_vectorised(ray_session):
    from components.core.raytools import start_nodes

    topo = small_tree()
    pool = start_nodes(2, 0.0, "simtest")
    try:
        cluster = ActorCluster("ray-test", topo, pool)
        rng = np.random.default_rng(1)
        src, dst = rng.integers(topo.n, size=30), rng.integers(topo.n, size=30)
        nb = rng.uniform(1e6, 1e9, size=30)
        t_act, recv = cluster.phase(src, dst, nb, flow="p2p")
        assert t_act == pytest.approx(engine.phase_time(topo, src, dst, nb, flow="p2p"), rel=1e-12)
        assert recv == pytest.approx(np.bincount(dst, nb, minlength=topo.n))
        cluster.close()
    finally:
        for a in pool:
            ray_session.kill(a)
