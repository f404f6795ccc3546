"""Registered technique `error_feedback` (GD, CGD, EF, EF21; one agent or n Ray actors) and the
theory check `ef_theory_grid`; the problem set is the prepare step `ef_problems` (prepare.py)."""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from components.compression import make_compressor
from components.core.errors import ConfigError, require
from components.core.netsim import Link
from components.core.plotting import fig_png, figure
from components.core.raytools import RemoteObjects, start_nodes
from components.core.registry import technique
from components.core.timing import timed
from components.core.result import Result
from components.training.error_feedback import theory
from components.training.error_feedback.agents import Agent, Server
from components.training.error_feedback.prepare import problem_dim

SINGLE = ("quadratic", "logreg", "nonconvex")
DISTRIBUTED = ("dist_quadratic", "dist_logreg", "dist_nonconvex")


@dataclass
class EFParams:
    method: Literal["gd", "cgd", "ef", "ef21"] = "ef21"
    problem: Literal["quadratic", "logreg", "nonconvex", "dist_quadratic", "dist_logreg", "dist_nonconvex"] = "quadratic"
    compressor: dict = field(default_factory=lambda: {"kind": "top_k", "ratio": 0.1})
    step: float | None = None         # null: the paper's optimal step for the method (needs mu > 0)
    iters: int = 1000
    stop_grad_norm_sq: float = 1e-26  # stop once ||grad f||^2 falls below (floating-point floor)
    tail: int = 500                   # iterations averaged for tail_grad_norm (EF's iterates swing)
    tol_grad_norm: float = 1e-8       # report iters_to_tol: first iteration with ||grad f|| below this
    link: dict = field(default_factory=lambda: {"bandwidth": "100Mbps", "latency": "1ms"})
    actor_cpus: float = 0.0           # CPUs per agent actor when the experiment gives no node pool

    def check(self):
        require(self.iters >= 1, "iters", self.iters, "a positive number of iterations")
        require(self.step is None or self.step > 0, "step", self.step, "a positive step size (or null for the optimal one)")
        require(1 <= self.tail <= self.iters, "tail", self.tail, f"an integer in [1, iters={self.iters}]")
        require(self.tol_grad_norm > 0, "tol_grad_norm", self.tol_grad_norm, "a positive tolerance")
        require(self.actor_cpus >= 0, "actor_cpus", self.actor_cpus, "a non-negative number")
        Link.from_config(self.link)


def _validate(p: EFParams, exp: dict) -> None:
    entry = (exp.get("prepare") or {}).get("problems") or {}
    make_compressor(p.compressor, problem_dim(p.problem, entry.get("params") or {}), key="compressor")
    if p.step is None and p.problem in ("nonconvex", "dist_nonconvex"):
        raise ConfigError("step", None, "an explicit step for a nonconvex problem (no mu, so no optimal step)")
    if p.step is None and p.problem in DISTRIBUTED:
        raise ConfigError("step", None, "an explicit step in the distributed setting (the tight step is single-agent)")


@contextlib.contextmanager
def _agent_nodes(ctx, n: int, cpus: float):
    """The experiment's node pool when it has ``n`` nodes; else ``n`` agent actors started here and
    killed on the way out, whether the run finished or raised."""
    if ctx.nodes and len(ctx.nodes) >= n:
        yield ctx.nodes
        return
    nodes = start_nodes(n, cpus, "ef-agent")
    try:
        yield nodes
    finally:
        import ray

        for node in nodes:
            ray.kill(node)


@technique("error_feedback", family="training", params=EFParams, validate=_validate, inputs=("problems",),
           summary="GD / compressed GD / EF / EF21 with contractive compressors; one agent or n Ray actors; "
                   "tight rates and Lyapunov ratios checked per step (arXiv 2506.05271).")
def run_error_feedback(p: EFParams, ctx) -> Result:
    prob = ctx.input("problems")[p.problem]
    distributed = p.problem in DISTRIBUTED
    parts = prob.parts if distributed else [prob]
    d = prob.dim
    eps = make_compressor(p.compressor, d).contraction_eps(d) if p.method != "gd" else 0.0
    L, mu = prob.L, prob.mu
    strongly_convex = mu > 0 and not distributed
    if p.step is not None:
        step = p.step
    elif p.method in ("ef", "ef21"):
        step = theory.eta_star(L, mu, eps)
    elif p.method == "cgd":
        step = theory.eta_cgd(L, mu, eps)
    else:
        step = 2.0 / (L + mu)
    link = Link.from_config(p.link)

    factories = [(Agent, f, p.method, p.compressor, step, ctx.seed * 1000 + i) for i, f in enumerate(parts)]
    # agent actors started here end with the run, a failed one too
    with (_agent_nodes(ctx, len(parts), p.actor_cpus) if distributed else contextlib.nullcontext()) as nodes:
        agents = RemoteObjects(ctx.host_key(), factories, nodes)
        call = agents.call

        x0 = np.zeros(d)
        server = Server(p.method, step, x0)
        bits_up = bits_down = 0
        sim_s = 0.0
        dense_bytes = d * 4
        starts = call("start", x0)
        if p.method == "ef21":
            server.start([m for m, _ in starts])
            bits_up += sum(b for _, b in starts)
            sim_s += link.star_gather_s([b / 8 for _, b in starts]) + link.broadcast_s(dense_bytes, len(parts))

        grad_sq, bits_cum, lyap, gaps = [], [], [], []
        x = server.x.copy() if p.method == "ef21" else x0.copy()
        iters_to_tol = math.nan
        k = 0
        with timed("wall") as wall:   # rounds_per_s: the agents' rounds span processes
            for k in range(p.iters):
                if strongly_convex and p.method == "ef":  # EF's state (x_k, e_k) is read before the round
                    lyap.append(theory.lyapunov_ef(x, agents.local[0].e, prob.x_star, eps))
                out = call("round", x)
                msgs = [m for m, _, _ in out]
                g_full = np.mean([g for _, _, g in out], axis=0)
                gn = float(g_full @ g_full)
                grad_sq.append(gn)
                if math.isnan(iters_to_tol) and math.sqrt(gn) <= p.tol_grad_norm:
                    iters_to_tol = k
                if strongly_convex and p.method == "ef21":  # EF21's state (x_k, d_k) after d is updated at x_k
                    lyap.append(theory.lyapunov_ef21(g_full, agents.local[0].g, eps))
                elif strongly_convex and p.method in ("gd", "cgd"):
                    gaps.append(prob.gap(x))
                round_bits = sum(b for _, b, _ in out)
                bits_up += round_bits
                bits_down += len(parts) * d * 32
                sim_s += link.star_gather_s([b / 8 for _, b, _ in out]) + link.broadcast_s(dense_bytes, len(parts))
                bits_cum.append(bits_up)
                x = server.apply(msgs)
                if not np.all(np.isfinite(x)) or gn > 1e300:
                    break
                if gn < p.stop_grad_norm_sq:
                    break
                ctx.progress(k + 1, p.iters, grad_norm_sq=gn)
        agents.close()

    n_done = len(grad_sq)
    tail = grad_sq[-min(p.tail, n_done):]
    metrics = {
        "final_grad_norm_sq": grad_sq[-1], "tail_grad_norm": float(np.mean(np.sqrt(tail))),
        "iters": n_done, "iters_to_tol": iters_to_tol, "bits_sent": bits_up, "bits_down": bits_down,
        "bits_per_round": bits_up / max(n_done, 1), "sim_comm_s": sim_s, "step": step, "eps": eps,
        "L": L, "mu": mu, "rounds_per_s": n_done / max(wall.s, 1e-9), "diverged": float(not np.isfinite(grad_sq[-1]) or grad_sq[-1] > 1e300),
    }
    if distributed:
        metrics["heterogeneity"] = prob.heterogeneity()
        metrics["n_agents"] = len(parts)
    series = {"grad_norm_sq": grad_sq, "bits_cum": bits_cum}
    if strongly_convex:
        metrics.update(rho_star=theory.rho_star(L, mu, eps), rho_cgd=theory.rho_cgd(L, mu, eps),
                       rho_gd=theory.rho_gd(L, mu))
        tracked = lyap if p.method in ("ef", "ef21") else gaps
        ratios = _ratios(tracked)
        if ratios:
            key = "max_lyapunov_ratio" if p.method in ("ef", "ef21") else "max_rate_ratio"
            metrics[key] = max(ratios)
            metrics["observed_rate"] = float(np.exp(np.mean(np.log(np.maximum(ratios, 1e-300)))))
            series["lyapunov" if p.method in ("ef", "ef21") else "gap"] = tracked
    return Result(metrics=metrics, series=series,
                  info={"problem": p.problem, "method": p.method, "compressor": repr(make_compressor(p.compressor, d)),
                        "step": step, "distributed": distributed})


def _ratios(values: list[float], floor: float = 1e-12) -> list[float]:
    """Per-step ratios V_{k+1}/V_k, counted only while V_k > floor * V_0 (floating-point floor)."""
    if len(values) < 2 or not values[0] > 0:
        return []
    v0 = values[0]
    out = []
    for a, b in zip(values[:-1], values[1:]):
        if a <= floor * v0 or not math.isfinite(b):
            break
        out.append(b / a)
    return out


@dataclass
class GridParams:
    kappa_min: float = 1.5
    kappa_max: float = 100.0
    n_kappa: int = 200
    eps_min: float = 0.01
    eps_max: float = 0.99
    n_eps: int = 199

    def check(self):
        require(1 < self.kappa_min < self.kappa_max, "kappa_min", self.kappa_min, "1 < kappa_min < kappa_max")
        require(0 < self.eps_min < self.eps_max < 1, "eps_min", self.eps_min, "0 < eps_min < eps_max < 1")
        require(self.n_kappa >= 2, "n_kappa", self.n_kappa, "a grid size >= 2")
        require(self.n_eps >= 2, "n_eps", self.n_eps, "a grid size >= 2")


@technique("ef_theory_grid", family="training", params=GridParams,
           summary="Checks the paper's theorem numerically: rho_CGD < rho* (EF/EF21) on a (kappa, eps) grid, "
                   "and rho* -> the GD rate as eps -> 0.")
def run_theory_grid(p: GridParams, ctx) -> Result:
    kappas = np.geomspace(p.kappa_min, p.kappa_max, p.n_kappa)
    epss = np.linspace(p.eps_min, p.eps_max, p.n_eps)
    gap = theory.grid_gap(kappas, epss)
    gd_limit = max(abs(theory.rho_star(k, 1.0, 1e-14) - theory.rho_gd(k, 1.0)) for k in kappas)
    fig, axes = figure(6, 4)
    ax = axes[0, 0]
    im = ax.pcolormesh(epss, kappas, np.log10(np.maximum(gap, 1e-16)), shading="auto")
    ax.set_yscale("log")
    ax.set_xlabel("eps (compressor contraction)")
    ax.set_ylabel("kappa = L / mu")
    ax.set_title("log10(rho* - rho_CGD): EF/EF21 tight rate minus CGD's")
    fig.colorbar(im)
    png = fig_png(fig, dpi=110)
    i, j = np.unravel_index(np.argmin(gap), gap.shape)
    return Result(metrics={"min_gap": float(gap.min()), "share_positive": float((gap > 0).mean()),
                           "gd_limit_err": float(gd_limit), "grid_points": float(gap.size)},
                  info={"argmin": {"kappa": float(kappas[i]), "eps": float(epss[j])}},
                  files={"plots/rate_gap.png": png})
