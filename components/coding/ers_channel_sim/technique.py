"""Registered techniques of the ``ers_channel_sim`` experiment (one seed per call).

- ``channel_sim`` (Part A): one channel-simulation scheme on the Gaussian channels d x s2 with a
  truncated source; bits from real prefix codes, exactness by KS tests of the residual (Y - x)/s per
  coordinate (the accepted sample is independent of the round, so trials truncated at the round cap
  are excluded without bias and reported). ``scheme``: ``ers`` (N; gamma(T) + delta(rank of J by the
  race variable)), ``rs_naive`` (gamma(K)), ``rs_sorting`` (gamma(m - m0 + 1) + gamma(L) + delta(rank
  in group L): the group size 2^m, m = floor(log2 wbar(x)) capped at floor(log2 max_rounds), must reach
  the decoder; m0 = floor((d/2) log2(1 + 1/s2)), or the cap's exponent when that is lower), ``pfr``
  (delta(K), truncated at max_points), ``bound`` (the I + log2(I+1) + 5 line itself, a control: I by
  quadrature).
- ``wyner_ziv`` (Part B): ERS(N) vs RS (N = 1), PML (truncated PFR) and IML(N) on the SAME source draws
  and shared randomness: they are one measurement of four selection rules (compared at equal rate
  by interpolation, which a claim over separate variants cannot do), not baselines re-run to pair.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.stats import kstest

from components.coding.ers_channel_sim import wyner_ziv as wz
from components.coding.ers_channel_sim.codes import delta_len, gamma_len
from components.coding.ers_channel_sim.gaussian import GaussChannel, mutual_info_bits, truncated_source
from components.coding.ers_channel_sim.samplers import ers, pfr, rs_grouped
from components.core.errors import require
from components.core.plotting import fig_png, figure
from components.core.registry import technique
from components.core.result import Result


def tag(v: float) -> str:
    """Metric-name form of a number: 0.05 -> 0p05, 1.0 -> 1."""
    return f"{v:g}".replace(".", "p").replace("-", "m")


def _positive_list(key, vals, what="positive numbers"):
    require(isinstance(vals, list) and len(vals) > 0 and all(isinstance(v, (int, float)) and v > 0 for v in vals),
            key, vals, f"a non-empty list of {what}")


@dataclass
class ChannelSimParams:
    scheme: Literal["ers", "rs_naive", "rs_sorting", "pfr", "bound"] = "ers"
    N: int = 64
    ds: list = field(default_factory=lambda: [1, 2, 4])
    s2s: list = field(default_factory=lambda: [0.05, 0.2, 1.0])
    n_trials: int = 10000
    xmax: float = 3.0
    max_rounds: int = 100_000
    max_points: int = 1 << 20
    slack_bits: float = 5.0            # the bound is I + log2(I + 1) + slack_bits

    def check(self):
        require(self.N >= 1, "N", self.N, "an integer >= 1 (proposals per ERS round)")
        require(isinstance(self.ds, list) and len(self.ds) > 0 and all(isinstance(d, int) and d >= 1 for d in self.ds),
                "ds", self.ds, "a non-empty list of dimensions >= 1")
        _positive_list("s2s", self.s2s, "noise variances > 0")
        require(self.n_trials >= 10, "n_trials", self.n_trials, "an integer >= 10")
        require(self.xmax > 0, "xmax", self.xmax, "a positive truncation of the source")
        require(self.max_rounds >= 1, "max_rounds", self.max_rounds, "a round cap >= 1")
        require(self.max_points >= 1, "max_points", self.max_points, "a PFR point cap >= 1")


def least_group_exp(model, d: int, max_rounds: int) -> int:
    """The least RS-sorting group exponent any source point can get, known to the decoder without x:
    m0 = floor(log2 wbar(0)) = floor((d/2) log2(1 + 1/s2)) (wbar is least at x = 0), or the round cap's
    floor(log2 max_rounds) when that is lower, since :func:`rs_grouped` caps every group there. The
    group exponent is sent as gamma(m - least + 1); offset by m0 alone, a cap below 2^m0 would make
    that index < 1. Computed with the sampler's own arithmetic, so m >= least holds bit for bit."""
    m0 = int(np.floor(model.logwbar(np.zeros((1, d)))[0] / np.log(2.0)))
    return min(m0, math.floor(math.log2(max_rounds)))


def _bits(p: ChannelSimParams, model, x, rng, d: int, s2: float):
    """(bits per completed trial, outputs y, completed mask) of scheme ``p.scheme``."""
    if p.scheme == "ers":
        r = ers(model, x, p.N, rng, p.max_rounds)
        ok = r["T"] > 0
        return gamma_len(r["T"][ok]) + delta_len(r["rank"][ok]), r["y"], ok
    if p.scheme in ("rs_naive", "rs_sorting"):
        r = rs_grouped(model, x, rng, p.max_rounds)
        ok = r["K"] > 0
        if p.scheme == "rs_naive":
            return gamma_len(r["K"][ok]), r["y"], ok
        least = least_group_exp(model, d, p.max_rounds)
        return gamma_len(r["mexp"][ok] - least + 1) + gamma_len(r["L"][ok]) + delta_len(r["rank"][ok]), r["y"], ok
    r = pfr(model, x, rng, p.max_points)
    ok = r["K"] > 0
    return delta_len(r["K"][ok]), r["y"], ok


@technique("channel_sim", family="coding", params=ChannelSimParams,
           summary="One-shot channel simulation on Gaussian channels: ERS(N) with gamma(T)+delta(rank) vs "
                   "RS (naive index, sorting), PFR; bits vs I + log2(I+1) + 5, exactness by KS.")
def run_channel_sim(p: ChannelSimParams, ctx) -> Result:
    rng = np.random.default_rng(ctx.seed)
    metrics: dict[str, float] = {}
    rows, series = [], {}
    ks_ps = []
    total = len(p.ds) * len(p.s2s)
    for s2 in p.s2s:
        xs, ys = [], []
        for d in p.ds:
            info = mutual_info_bits(s2, d, p.xmax)
            bound = info + math.log2(info + 1.0) + p.slack_bits
            key = f"d{d}_s{tag(s2)}"
            metrics[f"bound_{key}"], metrics[f"info_{key}"] = bound, info
            if p.scheme == "bound":
                bits = bound
            else:
                x = truncated_source(rng, p.n_trials, d, p.xmax)
                b, y, ok = _bits(p, GaussChannel(s2), x, rng, d, s2)
                bits = float(np.mean(b))
                resid = (y[ok] - x[ok]) / math.sqrt(s2)
                ps = [float(kstest(resid[:, j], "norm").pvalue) for j in range(d)]
                ks_ps += ps
                metrics[f"ks_p_{key}"] = min(ps)
                metrics[f"truncated_{key}"] = float(np.mean(~ok))
                metrics[f"excess_{key}"] = bits - bound
            metrics[f"bits_{key}"] = bits
            rows.append({"d": d, "s2": s2, "I_bits": info, "bound": bound, "bits": bits,
                         "ks_p": metrics.get(f"ks_p_{key}", math.nan), "truncated": metrics.get(f"truncated_{key}", 0.0)})
            xs.append(d)
            ys.append(bits)
            ctx.progress(len(rows), total, bits=bits)
        series[f"bits_s{tag(s2)}"] = (xs, ys)
    if p.scheme != "bound":
        metrics["ks_min_p"] = min(ks_ps)
        metrics["ks_tests"] = len(ks_ps)
        metrics["truncated_max"] = max(r["truncated"] for r in rows)
        low = [r["bits"] - r["bound"] for r in rows if r["d"] <= 2]
        high = [r["bits"] - r["bound"] for r in rows if r["d"] > 2]
        metrics["max_excess_over_bound_d_le2"] = max(low) if low else math.nan
        metrics["max_excess_over_bound_d_gt2"] = max(high) if high else math.nan
    return Result(metrics=metrics, series=series, tables={"settings": rows},
                  info={"code": p.scheme, "N": p.N, "bound": f"I + log2(I+1) + {p.slack_bits:g}"})


@dataclass
class WynerZivParams:
    N: int = 64
    sz2s: list = field(default_factory=lambda: [0.1, 0.5])
    sw2s: list = field(default_factory=lambda: [0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2])
    Ls: list = field(default_factory=lambda: list(range(11)))
    n_trials: int = 50000
    n_points: int = 4096               # PFR truncation (points per trial)
    xmax: float = 4.0
    min_pml_mismatch: float = 0.01     # compare mismatch only where PML's is measurable

    def check(self):
        require(self.N >= 1, "N", self.N, "an integer >= 1 (proposals per ERS round)")
        _positive_list("sz2s", self.sz2s, "side-information noise variances > 0")
        _positive_list("sw2s", self.sw2s, "test-channel noise variances > 0")
        require(isinstance(self.Ls, list) and len(self.Ls) > 0
                and all(isinstance(L, int) and 0 <= L <= wz.HASH_BITS for L in self.Ls), "Ls", self.Ls,
                f"a non-empty list of bin bits in 0..{wz.HASH_BITS}")
        require(self.n_trials >= 100, "n_trials", self.n_trials, "an integer >= 100")
        require(self.n_points >= 16, "n_points", self.n_points, "an integer >= 16")
        require(self.xmax > 0, "xmax", self.xmax, "a positive truncation of the source")


def _wz_plot(rows, sz2) -> bytes:
    fig, ax = figure(6.0, 4.2)
    ax = ax[0, 0]
    style = {"ers": "o", "rs": "s", "pml": "^", "iml": "x"}
    for sch, mk in style.items():
        pts = sorted((r["rate"], r["mse"]) for r in rows if r["scheme"] == sch)
        if pts:
            front, best = [], math.inf
            for rt, ms in pts:
                if ms < best:
                    best = ms
                    front.append((rt, ms))
            ax.plot([f[0] for f in front], [f[1] for f in front], mk + "-", label=sch.upper() + " (front)")
    D = np.logspace(-3, math.log10(sz2 / (1 + sz2)), 100)
    ax.plot(wz.r_wz(D, sz2), D, "k--", label="R_WZ(D)")
    ax.set(yscale="log", xlabel="rate (bits)", ylabel="MSE", title=f"Wyner-Ziv, sz2 = {sz2:g}")
    ax.legend(fontsize=8)
    return fig_png(fig)


@technique("wyner_ziv", family="coding", params=WynerZivParams,
           summary="Gaussian Wyner-Ziv by distributed matching: ERS(N) (T + L-bit bin) vs RS (N=1), "
                   "PML (truncated PFR) and IML(N, biased) on the same shared randomness; MSE vs rate with R_WZ.")
def run_wyner_ziv(p: WynerZivParams, ctx) -> Result:
    rng = np.random.default_rng(ctx.seed)
    rows: list[dict] = []
    metrics: dict[str, float] = {}
    files, series = {}, {}
    ratios_all, below_all, gains_all, iml_ratios, same_l = [], [], [], [], []
    total = len(p.sz2s) * len(p.sw2s)
    for sz2 in p.sz2s:
        zrows = []
        for sw2 in p.sw2s:
            pts = wz.run_point(rng, sz2, sw2, p.n_trials, p.N, p.Ls, p.n_points, p.xmax)
            for r in pts:
                r["sz2"] = sz2
            zrows += pts
            ctx.progress(len(rows) // max(1, len(pts)) + len(zrows) // max(1, len(pts)), total)
        rows += zrows
        t = tag(sz2)
        ratios, iml_r = [], []
        for sw2 in p.sw2s:
            at = [r for r in zrows if r["sw2"] == sw2]
            ers_pts = [r for r in at if r["scheme"] == "ers"]
            iml_pts = [r for r in at if r["scheme"] == "iml"]
            for q in (r for r in at if r["scheme"] == "pml" and r["mismatch"] >= p.min_pml_mismatch):
                e = wz.interp_mismatch(ers_pts, q["rate"])
                if not math.isnan(e):
                    ratios.append(e / q["mismatch"])
                same_l += [r["mismatch"] / q["mismatch"] for r in ers_pts if r["L"] == q["L"]]   # T's bits not counted
                i = wz.interp_mismatch(iml_pts, q["rate"])
                if not math.isnan(i):
                    iml_r.append(i / q["mismatch"])
        ers_all = [r for r in zrows if r["scheme"] == "ers"]
        below, gains = [], []
        for q in (r for r in zrows if r["scheme"] == "rs"):
            e = wz.pareto_mse(ers_all, q["rate"])
            below.append(bool(e < q["mse"]))
            gains.append((q["mse"] - e) / q["mse"] if not math.isnan(e) else -math.inf)
        metrics[f"mismatch_ratio_max_z{t}"] = max(ratios) if ratios else math.nan
        metrics[f"mismatch_ratio_median_z{t}"] = float(np.median(ratios)) if ratios else math.nan
        metrics[f"mse_below_rs_share_z{t}"] = float(np.mean(below))
        metrics[f"mse_gain_min_z{t}"] = min(gains)
        ratios_all += ratios
        below_all += below
        gains_all += gains
        iml_ratios += iml_r
        for sch in ("ers", "rs", "pml", "iml"):
            pts = sorted((r["rate"], r["mse"], r["mismatch"]) for r in zrows if r["scheme"] == sch)
            series[f"mse_vs_rate_{sch}_z{t}"] = ([q[0] for q in pts], [q[1] for q in pts])
            series[f"mismatch_vs_rate_{sch}_z{t}"] = ([q[0] for q in pts], [q[2] for q in pts])
        files[f"plots/mse_vs_rate_z{t}.png"] = _wz_plot(zrows, sz2)
    metrics.update({
        "mismatch_ratio_max": max(ratios_all) if ratios_all else math.nan,
        "mismatch_ratio_median": float(np.median(ratios_all)) if ratios_all else math.nan,
        "mismatch_points": len(ratios_all),
        "mismatch_ratio_same_L_max": max(same_l) if same_l else math.nan,
        "mismatch_ratio_same_L_median": float(np.median(same_l)) if same_l else math.nan,
        "mse_below_rs_share": float(np.mean(below_all)), "mse_gain_min": min(gains_all), "rs_points": len(below_all),
        "iml_mismatch_ratio_max": max(iml_ratios) if iml_ratios else math.nan,
        "ers_ks_min_p": min(r["ks_p"] for r in rows if r["scheme"] == "ers"),
        "rs_ks_min_p": min(r["ks_p"] for r in rows if r["scheme"] == "rs"),
        "pml_ks_min_p": min(r["ks_p"] for r in rows if r["scheme"] == "pml"),
        "iml_ks_max_p": max(r["ks_p"] for r in rows if r["scheme"] == "iml"),
        "ks_tests": len({(r["scheme"], r["sz2"], r["sw2"]) for r in rows if r["scheme"] != "iml"}),
        "pml_truncated_max": max(r["truncated"] for r in rows if r["scheme"] == "pml"),
        "pml_decoder_truncated_max": max(r.get("decoder_truncated", 0.0) for r in rows),
        "ers_truncated_max": max(r["truncated"] for r in rows if r["scheme"] == "ers"),
        "mismatch_prob_ers_L4": float(np.mean([r["mismatch"] for r in rows if r["scheme"] == "ers" and r["L"] == 4] or [math.nan])),
    })
    return Result(metrics=metrics, series=series, tables={"points": rows}, files=files)
