"""Arnold simulator benchmark (run by `make bench`): placements evaluated per second and how solve
time grows with cluster size (64 -> 2048 nodes), against the best-fit baseline in the same run.
Prints one table; peak memory (tracemalloc) beside time."""
from __future__ import annotations

import time
import tracemalloc

import numpy as np

from components.core.netsim import Link
from components.simulation import engine
from components.simulation.arnold.cluster import fragment, fragment_jobs
from components.simulation.arnold.contention import SharedNet, background_flows, link_flow_counts
from components.simulation.arnold.costmodel import StepCost, iteration_time
from components.simulation.arnold.mip import place_mip
from components.simulation.arnold.placement import Instance, place_bestfit_dp, place_tiles
from components.simulation.arnold.spread import objective
from components.simulation.topology import Level, Tree


def fat_tree(n: int) -> Tree:
    """At least 4 minipods of up to 128 nodes; 8 nodes per leaf below 64-node minipods, else 16
    (64 nodes: 4 x 2 x 8; 2048 nodes: 16 x 8 x 16, the experiment's cluster)."""
    pods = max(4, n // 128)
    per_pod = n // pods
    per_leaf = 8 if per_pod <= 64 else 16
    return Tree([Level("node", per_leaf, Link(3.2e12, 1e-6)), Level("leaf", per_pod // per_leaf, Link(51.2e12, 2e-6)),
                 Level("minipod", pods, Link(204.8e12, 4e-6), 2.735e12, 1.882e12)])


def timed(fn, *a, repeat: int = 1):
    tracemalloc.start()
    t0 = time.perf_counter()
    for _ in range(repeat):
        out = fn(*a)
    dt = (time.perf_counter() - t0) / repeat
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, dt, peak


def main() -> None:
    print("Arnold: solve time vs cluster size (busy 30%, job = 58% of nodes, P = 8; MIP limit 30 s, only <= 128 nodes)")
    print(f"{'nodes':>6} {'job DxP':>8} {'bestfit s':>10} {'tiles s':>9} {'tiles/bf':>9} {'mip s':>8} {'mip status':>11} "
          f"{'obj bf':>7} {'obj tiles':>9} {'obj mip':>8} {'peak MiB':>9}")
    for n in (64, 128, 256, 512, 1024, 2048):
        topo = fat_tree(n)
        free = fragment(topo.n, 0.3, np.random.default_rng(0), 2, max(8, n // 8))
        P = 8
        D = int(0.58 * n) // P
        inst = Instance(topo, free, D, P, 2, 0.5, 30.0)
        cap = inst.cap()
        bf, t_bf, _ = timed(place_bestfit_dp, inst, None, repeat=3)
        tl, t_tl, peak = timed(place_tiles, inst, None)
        mip_s, status, o_mip = float("nan"), "-", float("nan")
        if n <= 128:
            (mp, res), mip_s, _ = timed(lambda: place_mip(inst, None, return_result=True))
            status, o_mip = res.status, objective(mp, topo, 2, cap, 0.5)
        print(f"{n:>6} {f'{D}x{P}':>8} {t_bf:>10.4f} {t_tl:>9.3f} {t_tl / t_bf:>9.0f} {mip_s:>8.2f} {status:>11} "
              f"{objective(bf, topo, 2, cap, 0.5):>7.2f} {objective(tl, topo, 2, cap, 0.5):>9.2f} {o_mip:>8.2f} {peak:>9.1f}")

    print("\nVectorised simulator throughput on 2048 nodes (1200-node job)")
    topo = fat_tree(2048)
    free = fragment(topo.n, 0.3, np.random.default_rng(1), 8, 256)
    inst = Instance(topo, free, 150, 8)
    cap = inst.cap()
    node_of = place_tiles(inst)
    _, dt_obj, _ = timed(objective, node_of, topo, 2, cap, 0.5, repeat=200)
    cost = StepCost()
    _, dt_it, peak = timed(lambda: iteration_time(node_of, cost, lambda *a, **kw: engine.phase_time(topo, *a, **kw)), repeat=20)
    bf = place_bestfit_dp(inst)
    _, dt_bf, _ = timed(lambda: iteration_time(bf, cost, lambda *a, **kw: engine.phase_time(topo, *a, **kw)), repeat=20)
    print(f"{'what':<44} {'per s':>10} {'ratio vs best-fit':>18} {'peak MiB':>9}")
    print(f"{'placements scored (objective), tiles':<44} {1 / dt_obj:>10.0f} {'':>18} {'':>9}")
    print(f"{'iteration-time simulations (2 phases), tiles':<44} {1 / dt_it:>10.1f} {dt_bf / dt_it:>18.2f} {peak:>9.1f}")
    print(f"{'iteration-time simulations, best-fit (baseline)':<44} {1 / dt_bf:>10.1f} {1.0:>18.2f} {'':>9}")
    print(f"{'simulated messages per s (ring step + PP)':<44} {(1200 + 1050) / dt_it * 1:>10.0f} {'':>18} {'':>9}")
    print(f"nodes simulated: {topo.n}")

    print("\nShared cluster (background DP/PP traffic at duty 0.4, fair share per uplink) vs dedicated uplinks, same placement")
    owner = fragment_jobs(topo.n, 0.3, np.random.default_rng(1), 8, 256)
    (bsrc, bdst), dt_bg, _ = timed(lambda: background_flows(owner), repeat=20)
    n_bg = link_flow_counts(topo, bsrc, bdst)
    _, dt_sh, peak = timed(lambda: iteration_time(node_of, cost, SharedNet(topo, 0.4 * n_bg)), repeat=20)
    print(f"{'what':<44} {'per s':>10} {'ratio vs dedicated':>18} {'peak MiB':>9}")
    print(f"{'background flows built (per cluster)':<44} {1 / dt_bg:>10.1f} {'':>18} {'':>9}")
    print(f"{'iteration-time simulations, shared, tiles':<44} {1 / dt_sh:>10.1f} {dt_it / dt_sh:>18.2f} {peak:>9.1f}")
    print(f"background flows: {bsrc.size}")


if __name__ == "__main__":
    main()
