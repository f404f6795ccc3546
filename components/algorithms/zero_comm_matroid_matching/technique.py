"""Registered technique ``zero_comm`` (one seed per call): a suite of generated instances, each split
over m servers that send one message; the centre solves exactly on the union; every answer is
checked against the exact optimum on the whole instance (greedy for matroids, HiGHS MILP for
matching), which is also the send-all baseline's computation (its time is ``send_all_s``).

``protocol``: ``kernel`` (the technique), ``naive_topk`` (matching baseline: k heaviest edges per
server), ``send_all`` (baseline: the shard itself; its reference is its own answer).
``mode``: ``vectorised`` (every server in this process) or ``actors`` (one Ray actor per group of
servers, checked equal to vectorised on every instance). ``tree``: also reduce the messages in a
4-ary tree and compare the answer with the one-level answer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from components.algorithms.zero_comm_matroid_matching import instances as gen
from components.algorithms.zero_comm_matroid_matching import servers as sv
from components.algorithms.zero_comm_matroid_matching.matching import kernel_bound, networkx_kcapped
from components.algorithms.zero_comm_matroid_matching.matroids import MATROIDS
from components.core.errors import require
from components.core.plotting import fig_png, figure
from components.core.registry import technique
from components.core.result import Result


@dataclass
class ZeroCommParams:
    problem: Literal["mwis", "mwm"] = "mwis"
    protocol: Literal["kernel", "naive_topk", "send_all"] = "kernel"
    mode: Literal["vectorised", "actors"] = "vectorised"
    tree: bool = True
    ks: list = field(default_factory=lambda: [1, 2, 5, 10, 20])
    ms: list = field(default_factory=lambda: [2, 8, 32, 128])
    matroids: list = field(default_factory=lambda: list(MATROIDS))
    splits: list = field(default_factory=lambda: list(gen.SPLITS))
    n_instances: int = 240            # mwis: matroid instances; mwm: random general graphs
    n_min: int = 50                   # mwis: elements per instance, log-uniform in [n_min, n_max]
    n_max: int = 20000
    tied_share: float = 0.3           # share of instances with integer (tied) weights
    nv_max: int = 120                 # mwm random graphs: 20..nv_max vertices
    ne_max: int = 2500                # ... and at most ne_max edges
    n_stars: int = 200                # mwm heavy-star instances
    star_factors: list = field(default_factory=lambda: [0.5, 1.0, 2.0])   # hub degree / (k*m)
    max_hub_degree: int = 3000
    nx_checks: int = 40               # mwm: random graphs (<= nx_max_nv vertices) cross-checked with networkx
    nx_max_nv: int = 40
    n_nodes: int = 4                  # actors started here when the experiment has no node pool
    fail_server: int = -1             # fault injection (tests): that server's actor exits on its first call

    def check(self):
        require(self.problem in ("mwis", "mwm"), "problem", self.problem, "mwis or mwm")
        require(self.protocol in sv.PROTOCOLS, "protocol", self.protocol, " or ".join(sv.PROTOCOLS))
        require(not (self.problem == "mwis" and self.protocol == "naive_topk"), "protocol", self.protocol,
                "kernel or send_all for mwis (the greedy top-k IS the matroid kernel)")
        require(len(self.ks) > 0 and all(isinstance(k, int) and k >= 1 for k in self.ks), "ks", self.ks,
                "a non-empty list of integers k >= 1")
        require(len(self.ms) > 0 and all(isinstance(m, int) and m >= 1 for m in self.ms), "ms", self.ms,
                "a non-empty list of integers m >= 1")
        for mt in self.matroids:
            require(mt in MATROIDS, "matroids", mt, "each one of " + ", ".join(MATROIDS))
        require(len(self.matroids) > 0, "matroids", self.matroids, "a non-empty list")
        for s in self.splits:
            require(s in gen.SPLITS, "splits", s, "each one of " + ", ".join(gen.SPLITS))
        require(self.n_instances >= 0, "n_instances", self.n_instances, "an integer >= 0")
        require(1 <= self.n_min <= self.n_max, "n_min", (self.n_min, self.n_max), "1 <= n_min <= n_max")
        require(0.0 <= self.tied_share <= 1.0, "tied_share", self.tied_share, "a share in [0, 1]")
        require(self.nv_max >= 20 and self.ne_max >= 20, "nv_max", (self.nv_max, self.ne_max), "nv_max, ne_max >= 20")
        require(self.n_stars >= 0, "n_stars", self.n_stars, "an integer >= 0")
        require(len(self.star_factors) > 0 and all(f > 0 for f in self.star_factors), "star_factors",
                self.star_factors, "positive multiples of k*m")
        require(self.n_nodes >= 1, "n_nodes", self.n_nodes, "an integer >= 1")


def _suite(p: ZeroCommParams, rng):
    """The instances of this seed: (instance, needs split of the optimum) pairs, in order."""
    out = []
    if p.problem == "mwis":
        for i in range(p.n_instances):
            kind = p.matroids[i % len(p.matroids)]
            k, m = int(rng.choice(p.ks)), int(rng.choice(p.ms))
            lo = max(p.n_min, 2 * k)
            n = int(round(math.exp(rng.uniform(math.log(lo), math.log(max(lo, p.n_max))))))
            inst = gen.matroid_instance(rng, kind, n, k, m, bool(rng.random() < p.tied_share))
            inst.split = p.splits[(i // len(p.matroids)) % len(p.splits)]
            out.append(inst)
        return out
    for i in range(p.n_instances):
        k, m = int(rng.choice(p.ks)), int(rng.choice(p.ms))
        nv = int(rng.integers(20, p.nv_max + 1))
        ne = int(rng.integers(nv, min(p.ne_max, nv * (nv - 1) // 2) + 1))
        inst = gen.random_graph(rng, nv, ne, k, m, bool(rng.random() < p.tied_share))
        inst.split = p.splits[i % len(p.splits)]
        out.append(inst)
    for i in range(p.n_stars):
        k, m = p.ks[i % len(p.ks)], p.ms[(i // len(p.ks)) % len(p.ms)]
        f = p.star_factors[(i // (len(p.ks) * len(p.ms))) % len(p.star_factors)]
        out.append(gen.heavy_star(rng, int(k), int(m), float(f), p.max_hub_degree))
    return out


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def _one(p: ZeroCommParams, inst, rng, nodes, key: str) -> dict:
    prob = p.problem
    kind = getattr(inst, "kind", "matching")
    meta = getattr(inst, "meta", {})
    whole = {"ids": np.arange(inst.n), "w": inst.w, "data": inst.edges if prob == "mwm" else inst.data}
    (ref_w, ref_ids), ref_s = sv.timed(sv.solve, prob, kind, meta, whole, inst.k)
    inst.owner = gen.split(rng, inst.n, inst.m, inst.split, inst.w, ref_ids)
    shard_list = sv.shards(inst, prob)
    if p.mode == "actors":
        msgs, servers_s = sv.timed(sv.messages_actors, prob, kind, meta, shard_list, inst.k, p.protocol, nodes,
                                   key, p.fail_server)
        local = sv.messages_vectorised(prob, kind, meta, shard_list, inst.k, p.protocol)
        actors_equal = all(np.array_equal(a["ids"], b["ids"]) for a, b in zip(msgs, local))
    else:
        msgs, servers_s = sv.timed(sv.messages_vectorised, prob, kind, meta, shard_list, inst.k, p.protocol)
        actors_equal = math.nan
    (ans_w, ans_ids), centre_s = sv.timed(sv.solve, prob, kind, meta, sv.union(msgs), inst.k)
    biggest, total, biggest_bytes = sv.message_stats(msgs)
    bound = {"kernel": inst.k if prob == "mwis" else kernel_bound(inst.k), "naive_topk": inst.k}.get(p.protocol, math.inf)
    row = {"kind": kind, "family": getattr(inst, "family", kind), "split": inst.split, "n": inst.n, "k": inst.k,
           "m": inst.m, "hub_degree": getattr(inst, "hub_degree", 0), "opt": ref_w, "answer": ans_w,
           "optimal": _same(ans_w, ref_w), "identical_set": bool(np.array_equal(ans_ids, ref_ids)),
           "max_message": biggest, "total_message": total, "max_message_bytes": biggest_bytes,
           "bound": bound, "centre_s": centre_s, "send_all_s": ref_s, "servers_s": servers_s,
           "actors_equal": actors_equal}
    if p.tree and p.protocol == "kernel":
        final, depth = sv.tree_reduce(prob, kind, meta, msgs, inst.k)
        tree_w, tree_ids = sv.solve(prob, kind, meta, final, inst.k)
        row.update(tree_depth=depth, tree_equals_flat=_same(tree_w, ans_w) and
                   (prob == "mwm" or bool(np.array_equal(tree_ids, ans_ids))))
    return row


def _share(rows, pred=lambda r: True, what="optimal") -> float:
    sel = [r for r in rows if pred(r)]
    return float(np.mean([bool(r[what]) for r in sel])) if sel else math.nan


def _plots(p, rows) -> dict[str, bytes]:
    files = {}
    ks = sorted({r["k"] for r in rows})
    fig, ax = figure(5.5, 3.8)
    ax = ax[0, 0]
    ax.plot(ks, [max(r["max_message"] for r in rows if r["k"] == k) for k in ks], "o-", label=f"largest message ({p.protocol})")
    if p.protocol != "send_all":
        ax.plot(ks, [rows[[r["k"] for r in rows].index(k)]["bound"] for k in ks], "k--", label="bound")
    ax.set(xscale="log", yscale="log", xlabel="k", ylabel="elements", title=f"{p.problem}: message size vs k")
    ax.legend()
    files["plots/message_vs_k.png"] = fig_png(fig)
    stars = [r for r in rows if r["family"] == "heavy_star"]
    if stars:
        ms = sorted({r["m"] for r in stars})
        grid = np.array([[_share(stars, lambda r, k=k, m=m: r["k"] == k and r["m"] == m) for m in ms] for k in ks])
        fig, ax = figure(5.5, 3.8)
        ax = ax[0, 0]
        im = ax.imshow(1.0 - grid, vmin=0, vmax=1, cmap="viridis", origin="lower")
        ax.set(xticks=range(len(ms)), xticklabels=ms, yticks=range(len(ks)), yticklabels=ks, xlabel="m servers",
               ylabel="k", title=f"{p.protocol}: suboptimal share on heavy stars")
        for i in range(len(ks)):
            for j in range(len(ms)):
                if not math.isnan(grid[i, j]):
                    ax.text(j, i, f"{1 - grid[i, j]:.2f}", ha="center", va="center", color="w")
        fig.colorbar(im)
        files["plots/heavy_star_failure_rate.png"] = fig_png(fig)
    return files


@technique("zero_comm", family="algorithms", params=ZeroCommParams,
           summary="Zero-communication max-weight matroid independent set / k-capped matching: one message "
                   "per server (greedy top-k; degree-capped kernel), exact centre, vs send-all and naive top-k.")
def run_zero_comm(p: ZeroCommParams, ctx) -> Result:
    rng = np.random.default_rng(ctx.seed)
    suite = _suite(p, rng)
    nodes, own = None, False
    if p.mode == "actors":
        nodes = list(ctx.nodes or [])
        if not nodes:
            from components.core.raytools import start_nodes

            nodes, own = start_nodes(p.n_nodes, 0.0, "zc-server"), True
    rows = []
    try:
        for i, inst in enumerate(suite):
            rows.append(_one(p, inst, rng, nodes, ctx.host_key(i)))
            ctx.progress(i + 1, len(suite), optimal=_share(rows))
    finally:
        if own:
            import ray

            for n in nodes:
                ray.kill(n)
    metrics = {"instances": len(rows), "optimal_share": _share(rows),
               "suboptimal_share": 1.0 - _share(rows),
               "max_message": max(r["max_message"] for r in rows),
               "max_message_over_bound": max(r["max_message"] / r["bound"] for r in rows),
               "max_message_bytes": max(r["max_message_bytes"] for r in rows),
               "mean_total_message": float(np.mean([r["total_message"] for r in rows])),
               "centre_s": float(sum(r["centre_s"] for r in rows)),
               "send_all_s": float(sum(r["send_all_s"] for r in rows)),
               "servers_s": float(sum(r["servers_s"] for r in rows))}
    for k in sorted({r["k"] for r in rows}):
        sel = [r for r in rows if r["k"] == k]
        metrics[f"max_message_k{k}"] = max(r["max_message"] for r in sel)
        metrics[f"message_bound_k{k}"] = sel[0]["bound"]
    if p.problem == "mwis":
        metrics["identical_set_share"] = _share(rows, what="identical_set")
        for kind in sorted({r["kind"] for r in rows}):
            metrics[f"optimal_share_{kind}"] = _share(rows, lambda r, kind=kind: r["kind"] == kind)
    else:
        metrics["optimal_share_random"] = _share(rows, lambda r: r["family"] == "random")
        metrics["optimal_share_heavy_star"] = _share(rows, lambda r: r["family"] == "heavy_star")
        metrics["heavy_stars"] = sum(r["family"] == "heavy_star" for r in rows)
        gated = lambda r: r["family"] == "heavy_star" and r["k"] >= 2 and r["hub_degree"] >= r["k"] * r["m"]  # noqa: E731
        metrics["suboptimal_heavy_share"] = 1.0 - _share(rows, gated)
        metrics["heavy_gated"] = sum(map(gated, rows))
        metrics["suboptimal_heavy_all_share"] = 1.0 - _share(rows, lambda r: r["family"] == "heavy_star")
        metrics["suboptimal_random_share"] = 1.0 - _share(rows, lambda r: r["family"] == "random")
        for k in sorted({r["k"] for r in rows}):
            for m in sorted({r["m"] for r in rows}):
                s = _share(rows, lambda r, k=k, m=m: r["family"] == "heavy_star" and r["k"] == k and r["m"] == m)
                if not math.isnan(s):
                    metrics[f"suboptimal_k{k}_m{m}"] = 1.0 - s
        if p.nx_checks > 0:
            small = [inst for inst in suite if getattr(inst, "family", "") == "random"
                     and int(inst.edges.max()) + 1 <= p.nx_max_nv][: p.nx_checks]
            agree = [_same(networkx_kcapped(s.edges, s.w, s.k), r["opt"])
                     for s, r in zip(suite, rows) if any(s is t for t in small)]
            metrics["networkx_checked"] = len(agree)
            metrics["networkx_agrees"] = float(np.mean(agree)) if agree else math.nan
    if any("tree_equals_flat" in r for r in rows):
        metrics["tree_equals_flat"] = _share(rows, lambda r: "tree_equals_flat" in r, "tree_equals_flat")
        metrics["tree_depth_max"] = max(r.get("tree_depth", 0) for r in rows)
    if p.mode == "actors":
        metrics["actors_equal_vectorised"] = _share(rows, what="actors_equal")
    return Result(metrics=metrics, tables={"instances": rows}, files=_plots(p, rows),
                  info={"kernel_bound": "(2k-1)(2k-2)+1 (our derivation, not the paper's constant)"})
