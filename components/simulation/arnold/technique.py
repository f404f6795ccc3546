"""Registered technique `arnold_placement`: place a DP x PP job on fragmented fat trees with one
placement policy (Arnold's tiles, the MIP, or a baseline) and score spreads, the weighted
max-spread objective and the modelled iteration time.

One call evaluates one seed: ``n_clusters`` fragmented clusters per occupancy level, drawn from
``ctx.seed``, a Monte-Carlo sample whose mean is the paper's figure (not a seed loop). Cluster
``(level, i)`` depends only on the seed, never on the policy, so every variant run on seed s
places its job on the very same clusters and the DAG pairs policies seed by seed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from components.core.errors import require
from components.core.registry import lookup, technique
from components.core.result import Result
from components.simulation import engine
from components.simulation.arnold import mip as _mip  # noqa: F401  (registers the "mip" policy)
from components.simulation.arnold import placement as _placement  # noqa: F401  (registers the baselines, tiles)
from components.simulation.arnold.cluster import fragment, free_per_unit
from components.simulation.arnold.costmodel import StepCost, iteration_time
from components.simulation.arnold.placement import Instance
from components.simulation.arnold.plots import placement_map, spread_per_group
from components.simulation.arnold.spread import check_placement, group_spreads, lower_bounds
from components.simulation.topology import tree_from_config


def default_fat_tree() -> dict:
    """16 minipods x 8 leafs x 16 nodes (2048 nodes, 16,384 GPUs); 2:1 oversubscribed core.

    Crossing a minipod caps one flow at 3.2/1.17 Tbps for collectives and 3.2/1.7 Tbps for P2P:
    the ~17% / ~70% degradations the paper's characterisation reports for crossing spine domains.
    """
    return {"levels": [
        {"name": "node", "fanout": 16, "bandwidth": "3.2Tbps", "latency": "1us"},
        {"name": "leaf", "fanout": 8, "bandwidth": "51.2Tbps", "latency": "2us"},
        {"name": "minipod", "fanout": 16, "bandwidth": "204.8Tbps", "latency": "4us",
         "flow_bandwidth": "2.735Tbps", "p2p_flow_bandwidth": "1.882Tbps"}]}


@dataclass
class ArnoldParams:
    policy: str = "tiles"                 # a placement_policy: tiles, mip, random, bestfit_dp, bestfit_pp, lowest_switch
    topology: dict = field(default_factory=default_fat_tree)
    spread_level: str = "minipod"         # tier whose distinct units count as a group's spread
    dp: int = 150                         # D: data-parallel replicas
    pp: int = 8                           # P: pipeline stages (one node per cell; TP=8 inside the node)
    alpha: float = 0.5                    # weight of the DP term in the objective
    busy: list[float] = field(default_factory=lambda: [0.2, 0.3, 0.4])   # background occupancy levels
    n_clusters: int = 20                  # fragmented clusters drawn per occupancy level (within-run sample)
    bg_job_min: int = 8
    bg_job_max: int = 256
    cost: dict = field(default_factory=dict)      # StepCost overrides
    time_limit_s: float = 60.0            # MIP solver limit per instance (honoured, status reported)
    mode: Literal["vectorised", "actors"] = "vectorised"
    actor_endpoints_max: int = 64         # actor mode only for small clusters
    plots: bool = True

    def check(self):
        topo = tree_from_config(self.topology, "topology")
        lv_names = [lv.name for lv in topo.levels]
        require(self.spread_level in lv_names[1:], "spread_level", self.spread_level, "a tier above the node: " + ", ".join(lv_names[1:]))
        require(self.dp >= 1, "dp", self.dp, "a positive number of replicas")
        require(self.pp >= 1, "pp", self.pp, "a positive number of stages")
        require(0 <= self.alpha <= 1, "alpha", self.alpha, "a weight in [0, 1]")
        require(len(self.busy) >= 1 and all(0 <= b < 1 for b in self.busy), "busy", self.busy, "occupancy fractions in [0, 1)")
        require(self.n_clusters >= 1, "n_clusters", self.n_clusters, "a positive number of clusters per occupancy level")
        require(1 <= self.bg_job_min <= self.bg_job_max, "bg_job_min", self.bg_job_min, "1 <= bg_job_min <= bg_job_max")
        require(self.time_limit_s > 0, "time_limit_s", self.time_limit_s, "a positive number of seconds")
        free = topo.n - int(round(max(self.busy) * topo.n))
        require(self.dp * self.pp <= free, "dp x pp", f"{self.dp}x{self.pp}={self.dp * self.pp} nodes",
                f"a job that fits the free capacity: {free} of {topo.n} nodes free at busy={max(self.busy)}")
        lookup("placement_policy", self.policy, "policy")
        if self.mode == "actors":
            require(topo.n <= self.actor_endpoints_max, "mode", self.mode,
                    f"vectorised for clusters over actor_endpoints_max={self.actor_endpoints_max} nodes (this one has {topo.n})")
        StepCost.from_config(self.cost, "cost")


def _place(pol: str, inst: Instance, rng) -> tuple[np.ndarray, float, str]:
    t0 = time.perf_counter()
    if pol == "mip":
        node_of, res = _mip.place_mip(inst, rng, return_result=True)
        return node_of, res.solver_s, res.status
    node_of = lookup("placement_policy", pol)(inst, rng)
    return node_of, time.perf_counter() - t0, "heuristic"


@technique("arnold_placement", family="simulation", params=ArnoldParams,
           summary="Arnold (arXiv 2509.15940): topology-aligned DP x PP placement (tile heuristic / MIP) vs random, "
                   "best-fit with Megatron or PP-inner rank order, and Slurm's lowest-common-switch, on a fragmented fat tree.")
def run_arnold(p: ArnoldParams, ctx) -> Result:
    topo = tree_from_config(p.topology, "topology")
    level = [lv.name for lv in topo.levels].index(p.spread_level)
    cost = StepCost.from_config(p.cost, "cost")
    rows, first = [], None
    cluster = pool = None
    own_pool = False
    if p.mode == "actors":
        from components.simulation.actors import ActorCluster, pool_for

        pool, own_pool = pool_for(ctx, 4, "arnold-node")
        cluster = ActorCluster(f"{ctx.experiment}/{ctx.variant}/s{ctx.seed}", topo, pool)
    total = len(p.busy) * p.n_clusters
    try:
        for bi, busy in enumerate(p.busy):
            for i in range(p.n_clusters):
                free = fragment(topo.n, busy, np.random.default_rng([ctx.seed, bi, i]), p.bg_job_min, p.bg_job_max)
                inst = Instance(topo, free, p.dp, p.pp, level, p.alpha, p.time_limit_s)
                lb = lower_bounds(p.dp, p.pp, inst.cap())
                lb_leaf = lower_bounds(p.dp, p.pp, free_per_unit(topo, free, 1))
                node_of, solve_s, status = _place(p.policy, inst, np.random.default_rng([ctx.seed, bi, i, 7]))
                check_placement(node_of, free)
                dp, pp = group_spreads(node_of, topo, level)
                dpl, ppl = group_spreads(node_of, topo, 1)
                it = iteration_time(node_of, cost, lambda *a, **kw: engine.phase_time(topo, *a, **kw))
                r = {"busy": busy, "cluster": i,
                     "objective": p.alpha * dp.max() / lb[0] + (1 - p.alpha) * pp.max() / lb[1],
                     "objective_leaf": p.alpha * dpl.max() / lb_leaf[0] + (1 - p.alpha) * ppl.max() / lb_leaf[1],
                     "max_spread_dp": dp.max(), "max_spread_pp": pp.max(), "mean_spread_dp": dp.mean(),
                     "mean_spread_pp": pp.mean(), "max_spread_dp_leaf": dpl.max(), "max_spread_pp_leaf": ppl.max(),
                     "solver_s": solve_s, "status": status, **it}
                if cluster is not None:
                    ita = iteration_time(node_of, cost, lambda *a, **kw: cluster.phase(*a, **kw)[0])
                    r["iter_time_actors_s"] = ita["iter_time_s"]
                rows.append(r)
                if first is None:
                    first = (free, node_of, (dp, pp))
                ctx.progress(len(rows), total, objective=r["objective"])
    finally:
        if cluster is not None:
            cluster.close()
        if own_pool:
            import ray

            for a in pool:
                ray.kill(a)

    mean = lambda key: float(np.mean([r[key] for r in rows]))  # noqa: E731
    metrics = {key: mean(key) for key in ("objective", "objective_leaf", "max_spread_dp", "max_spread_pp", "mean_spread_dp",
                                          "mean_spread_pp", "max_spread_dp_leaf", "max_spread_pp_leaf", "iter_time_s",
                                          "dp_allreduce_s", "pp_exposed_s", "solver_s")}
    metrics.update(objective_worst=float(max(r["objective"] for r in rows)), solver_s_max=float(max(r["solver_s"] for r in rows)),
                   n_clusters=len(rows), comm_fraction=1 - cost.compute_s / metrics["iter_time_s"] if metrics["iter_time_s"] else 0.0,
                   n_optimal=sum(r["status"] == "optimal" for r in rows), n_time_limit=sum(r["status"] == "time_limit" for r in rows),
                   nodes_simulated=float(topo.n))
    if cluster is not None:
        metrics["iter_time_actors_s"] = mean("iter_time_actors_s")
        metrics["actor_vs_vectorised_max_abs_diff"] = float(max(abs(r["iter_time_actors_s"] - r["iter_time_s"]) for r in rows))
    files = {}
    if p.plots and first is not None:
        free, node_of, spreads = first
        files["plots/spread_per_group.png"] = spread_per_group({p.policy: spreads}, p.spread_level)
        files["plots/placement_map.png"] = placement_map(topo, free, {p.policy: node_of}, level)
    table = [{k: r[k] for k in ("busy", "cluster", "objective", "max_spread_dp", "max_spread_pp", "iter_time_s", "solver_s",
                                "status")} for r in rows]
    return Result(metrics=metrics,
                  series={"objective_per_cluster": [r["objective"] for r in rows],
                          "iter_time_per_cluster": [r["iter_time_s"] for r in rows]},
                  tables={"clusters": table},
                  info={"topology": topo.describe(), "policy": p.policy, "job": [p.dp, p.pp], "cost": cost.__dict__},
                  files=files)
