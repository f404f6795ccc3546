"""Registered technique `arnold_placement`: place a DP x PP job on fragmented fat trees with one
placement policy (Arnold's tiles, the MIP, or a baseline) and score spreads, the weighted
max-spread objective and the modelled iteration time.

One call evaluates one seed: ``n_clusters`` fragmented clusters per occupancy level, drawn from
``ctx.seed``, a Monte-Carlo sample whose mean is the paper's figure (not a seed loop). Cluster
``(level, i)`` depends only on the seed, never on the policy, so every variant run on seed s
places its job on the very same clusters and the DAG pairs policies seed by seed.

``bg_duty_cycle > 0`` models a shared cluster (``contention.py``): the background jobs' own DP/PP
traffic shares the uplinks with ours, and the iteration time uses the contended per-flow bandwidths;
``duty_sweep`` / ``bg_load_sweep`` re-evaluate the same placements at other background loads.
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
from components.simulation.arnold.cluster import fragment_jobs, free_per_unit
from components.simulation.arnold.contention import SharedNet, background_flows, link_flow_counts
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
    # Shared cluster (contention.py): the background jobs' own DP/PP traffic is active a fraction
    # bg_duty_cycle of the time and shares the uplinks with ours (fair share per link). 0 = today's
    # model: background jobs occupy nodes only, the uplinks are the job's alone.
    bg_duty_cycle: float = 0.0
    bg_pp: int = 8                        # pipeline stages of a background job (jobs < 2 * bg_pp nodes: pure DP)
    duty_sweep: list[float] = field(default_factory=list)   # also report iteration time at these duty cycles (same placements)
    # what-if beyond the DP/PP background jobs: background load = active flows per background message
    # (duty x concurrent flows, e.g. a job with heavier cross-uplink traffic); iteration time at each value
    bg_load_sweep: list[float] = field(default_factory=list)

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
        require(0 <= self.bg_duty_cycle <= 1, "bg_duty_cycle", self.bg_duty_cycle, "a fraction of time in [0, 1]")
        require(all(0 <= d <= 1 for d in self.duty_sweep), "duty_sweep", self.duty_sweep, "fractions of time in [0, 1]")
        require(len({_duty_key(d) for d in self.duty_sweep}) == len(self.duty_sweep), "duty_sweep", self.duty_sweep,
                "distinct duty cycles (to 2 decimals)")
        require(all(w >= 0 for w in self.bg_load_sweep), "bg_load_sweep", self.bg_load_sweep, "non-negative flows per background message")
        require(len({_load_key(w) for w in self.bg_load_sweep}) == len(self.bg_load_sweep), "bg_load_sweep", self.bg_load_sweep,
                "distinct loads (to 2 decimals)")
        require(self.bg_pp >= 1, "bg_pp", self.bg_pp, "a positive number of stages")
        if self.mode == "actors":
            require(self.bg_duty_cycle == 0 and not self.duty_sweep and not self.bg_load_sweep, "bg_duty_cycle", self.bg_duty_cycle,
                    "0 in actor mode (the shared-cluster model is vectorised only)")


def _duty_key(d: float) -> str:
    return f"duty{int(round(100 * d)):03d}"


def _load_key(w: float) -> str:
    return f"load{int(round(100 * w)):03d}"


def _contention_figures(stats: dict) -> dict:
    """Per-phase contention figures of one placement (see contention.SharedNet) and their pooled means."""
    out = {}
    for flow, tag in (("collective", "dp"), ("p2p", "pp")):
        s = stats.get(flow, {"factor": 1.0, "bg_share": 0.0, "slowed": 0.0, "slowdown": 1.0, "pairs": 0})
        out.update({f"contention_factor_{tag}": s["factor"], f"bg_flow_share_{tag}": s["bg_share"],
                    f"slowed_frac_{tag}": s["slowed"], f"contention_slowdown_{tag}": s["slowdown"]})
    pairs = [stats[f]["pairs"] for f in stats]
    if sum(pairs):
        out["contention_factor"] = sum(stats[f]["factor"] * stats[f]["pairs"] for f in stats) / sum(pairs)
        out["bg_flow_share"] = sum(stats[f]["bg_share"] * stats[f]["pairs"] for f in stats) / sum(pairs)
    else:
        out["contention_factor"], out["bg_flow_share"] = 1.0, 0.0
    return out


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
        cluster = ActorCluster(ctx.host_key(), topo, pool)
    total = len(p.busy) * p.n_clusters
    try:
        for bi, busy in enumerate(p.busy):
            for i in range(p.n_clusters):
                owner = fragment_jobs(topo.n, busy, np.random.default_rng([ctx.seed, bi, i]), p.bg_job_min, p.bg_job_max)
                free = owner < 0
                inst = Instance(topo, free, p.dp, p.pp, level, p.alpha, p.time_limit_s)
                lb = lower_bounds(p.dp, p.pp, inst.cap())
                lb_leaf = lower_bounds(p.dp, p.pp, free_per_unit(topo, free, 1))
                node_of, solve_s, status = _place(p.policy, inst, np.random.default_rng([ctx.seed, bi, i, 7]))
                check_placement(node_of, free)
                dp, pp = group_spreads(node_of, topo, level)
                dpl, ppl = group_spreads(node_of, topo, 1)
                shared, by_weight = {}, {}
                if p.bg_duty_cycle > 0 or p.duty_sweep or p.bg_load_sweep:
                    n_bg = link_flow_counts(topo, *background_flows(owner, p.bg_pp))
                    for key, w in [(_duty_key(d), d) for d in dict.fromkeys([*p.duty_sweep, p.bg_duty_cycle])] + \
                                  [(_load_key(w), w) for w in p.bg_load_sweep]:
                        if w not in by_weight:                   # a duty cycle d is a load of d flows per message
                            net = SharedNet(topo, w * n_bg)
                            by_weight[w] = (iteration_time(node_of, cost, net), net.stats)
                        shared[key] = by_weight[w]
                if p.bg_duty_cycle > 0:
                    it, st = shared[_duty_key(p.bg_duty_cycle)]
                    it = {**it, **_contention_figures(st)}
                    it["contention_slowdown"] = it["iter_time_s"] / iteration_time(
                        node_of, cost, lambda *a, **kw: engine.phase_time(topo, *a, **kw))["iter_time_s"]
                else:
                    it = iteration_time(node_of, cost, lambda *a, **kw: engine.phase_time(topo, *a, **kw))
                keep = {*map(_duty_key, p.duty_sweep), *map(_load_key, p.bg_load_sweep)}
                it.update({f"iter_time_{k}": v[0]["iter_time_s"] for k, v in shared.items() if k in keep})
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
    extra = [k for k in rows[0] if k.startswith(("iter_time_duty", "iter_time_load", "contention_", "bg_flow_share", "slowed_frac_"))]
    metrics.update({k: mean(k) for k in extra})
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
    series = {"objective_per_cluster": [r["objective"] for r in rows],
              "iter_time_per_cluster": [r["iter_time_s"] for r in rows]}
    if p.duty_sweep:
        xs = sorted(p.duty_sweep)
        series["iter_time_vs_duty"] = (xs, [metrics[f"iter_time_{_duty_key(d)}"] for d in xs], "background duty cycle")
    if p.bg_load_sweep:
        xs = sorted(p.bg_load_sweep)
        series["iter_time_vs_bg_load"] = (xs, [metrics[f"iter_time_{_load_key(w)}"] for w in xs],
                                          "background load (active flows per background message)")
    return Result(metrics=metrics,
                  series=series,
                  tables={"clusters": table},
                  info={"topology": topo.describe(), "policy": p.policy, "job": [p.dp, p.pp], "cost": cost.__dict__},
                  files=files)
