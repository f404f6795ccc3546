"""Registered techniques for the ``hybrid_einsum`` experiment. Both read the hybrid's cost model and the
one-way rule's threshold tau from the prepared input ``calibration`` (prepare step
``einsum_calibration``) unless ``tau`` is set.

- ``einsum_suite``: every generated instance (random families drawn from ``ctx.seed``) with dense,
  COO, the hybrid (cost-predicted switch) and the one-way hybrid (density threshold tau) on ONE
  opt_einsum path, plus numpy.einsum (opt_einsum path), torch.einsum and pydata sparse; methods timed
  by the one timing mechanism (components.core.timing): interleaved rounds in one thread, thread CPU
  time (torch and BLAS single-threaded), a fresh seeded order per round, repeating until the ratios
  are settled to ``rel_precision``; the faster static method runs a second arm per round, whose
  spread against itself is the instance's noise floor. The suite's timed figures carry ``*_noise``
  (their floor, in their units) for the claims' ``noise:``. With ``heldout`` the same is done on
  held-out instances (other sizes and generator seeds), reported as ``heldout_*``.
- ``einsum_gap``: the exponential-gap family GRID-EQ(n) (and equality chains) over n: dense peak
  intermediate vs COO time; dense runs stop at the memory cap and are reported as exceeded.
  Its instances are fixed: no seed enters it, only timing noise.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from components.algorithms.hybrid_einsum.baselines import LIBRARIES, Unsupported, run_library
from components.algorithms.hybrid_einsum.coo import COO, MemoryCapExceeded
from components.algorithms.hybrid_einsum.engine import contract
from components.algorithms.hybrid_einsum.expression import plan
from components.core.errors import require
from components.core.plotting import fig_png
from components.core.registry import technique
from components.core.result import Result
from components.core.timing import Timing, interleave, noise_abs
from components.data import einsum_instances as gen

OURS = ("dense", "coo", "hybrid", "hybrid_oneway")
HYBRIDS = {"hybrid": "hybrid", "hybrid_oneway": "oneway"}    # method -> metric prefix


def _tau(ctx, tau: float | None) -> tuple[float, str]:
    """``tau`` when set, else the calibrated value of the ``calibration`` input."""
    if tau is not None:
        return float(tau), "param"
    return float(ctx.input("calibration")["tau"]), "calibrated"


def _cost_model(ctx) -> dict | None:
    """The calibrated cost model of the ``calibration`` input (None: the hybrid's default constants)."""
    return ctx.input("calibration").get("cost_model")


def _single_thread():
    """torch and numpy's BLAS on one thread, so per-thread CPU time captures all of a method's work."""
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits

        return threadpool_limits(1)
    except ImportError:                      # pragma: no cover (installed with scikit-learn)
        import contextlib

        return contextlib.nullcontext()


def _as_dense(res) -> np.ndarray:
    return res.todense() if isinstance(res, COO) else np.asarray(res)


def _matches(res, inst: gen.Instance, ref) -> bool:
    if isinstance(inst.expected, dict):              # sparse known output: coordinate -> value
        if isinstance(res, COO):                     # compare coordinates, never densify 2^n outputs
            got = {tuple(int(x) for x in c): float(v) for c, v in zip(res.coords, res.values)}
            return set(got) == set(inst.expected) and all(math.isclose(got[c], v, rel_tol=1e-9)
                                                          for c, v in inst.expected.items())
        d = np.asarray(res)
        nz = np.argwhere(d != 0)
        return (len(nz) == len(inst.expected)
                and all(math.isclose(float(d[c]), v, rel_tol=1e-9) for c, v in inst.expected.items()))
    want = inst.expected if inst.expected is not None else ref
    if want is None:
        return True
    # rtol 1e-9 per entry, plus round-off relative to the largest entry (1e-12 of it): a library with
    # its own path sums in another order, which a near-cancelling entry of a Gaussian chain can show
    scale = float(np.max(np.abs(want))) if np.size(want) else 0.0
    return bool(np.allclose(_as_dense(res), want, rtol=1e-9, atol=max(1e-300, 1e-12 * scale)))


def method_call(method: str, p, arrays, tau: float, cap: float, cost_model: dict | None, runs: dict):
    """A callable for the timing mechanism: one evaluation of ``method``, returning its native
    representation (dense: array; COO: COO; a hybrid: what its last step ran in); our methods' first
    run (switch point, peak bytes, densities) lands in ``runs``.

    Timed on the calling thread's CPU clock, not wall time: this machine is shared (load averages of
    13-30 on 2 cores were seen during runs), and with torch and BLAS on one thread (``_single_thread``)
    every method computes in this thread, so the Ray worker's own background threads are not charged
    to whichever method happens to be running."""
    def call():
        if method in OURS:
            run = contract(p, arrays, method, tau=tau, memory_cap_bytes=cap, output="native",
                           measure_density=False, cost_model=cost_model)
            runs.setdefault(method, run)
            return run.result
        return run_library(method, p, arrays, cap)
    return call


def status_of(t: Timing, method: str) -> str:
    """ok, exceeded (memory cap), skipped (unsupported), or failed (a library's own failure is a
    result to report, not a crash of the run)."""
    e = t.errors.get(method)
    if e is None:
        return "ok"
    if isinstance(e, MemoryCapExceeded):
        return "exceeded"
    if isinstance(e, Unsupported):
        return "skipped"
    return f"failed ({type(e).__name__})"


def seconds_of(t: Timing, method: str) -> float:
    """Median CPU seconds; inf past the memory cap or out of memory, NaN when skipped or failed."""
    st = status_of(t, method)
    if st == "ok":
        return t.median(method)
    return math.inf if st in ("exceeded", "failed (MemoryError)") else math.nan


# ------------------------------------------------------------------------------------------ suite
@dataclass
class SuiteParams:
    scale: Literal["full", "debug"] = "full"
    methods: list[str] = field(default_factory=lambda: list(OURS) + list(LIBRARIES))
    tau: float | None = None                  # one-way rule's threshold; None: the calibrated value
    memory_cap_mib: float = 1024.0            # cap on any single intermediate
    max_reps: int = 5                          # median of up to this many interleaved rounds
    min_reps: int = 3                          # at least this many (up to max_reps), then stop once settled
    rel_precision: float = 0.05                # settled: every ratio's 95% interval within +-5%
    budget_s: float = 2.0                      # per (instance, method): the rounds stop past this on average
    warmup: bool = True                        # one untimed call per method first (a call > budget_s is its one run)
    optimize: str = "greedy"
    heldout: bool = False                      # also the held-out instances (scale heldout / heldout_debug)

    def check(self):
        bad = [m for m in self.methods if m not in OURS + LIBRARIES]
        require(not bad, "methods", self.methods, "a list of: " + ", ".join(OURS + LIBRARIES))
        require(all(m in self.methods for m in ("dense", "coo", "hybrid")), "methods", self.methods,
                "must include dense, coo and hybrid")
        require(self.tau is None or 0 <= self.tau <= 1, "tau", self.tau, "null or a density in [0, 1]")
        require(self.memory_cap_mib > 0, "memory_cap_mib", self.memory_cap_mib, "a positive number of MiB")
        require(self.max_reps >= 1, "max_reps", self.max_reps, "a positive integer")
        require(self.min_reps >= 1, "min_reps", self.min_reps, "a positive integer")
        require(self.rel_precision > 0, "rel_precision", self.rel_precision, "a positive relative precision")


def _ratio(a: float, b: float) -> float:
    if math.isinf(a) and math.isinf(b):
        return 1.0
    return a / b if b > 0 else math.inf


def _geomean(x) -> float:
    x = np.asarray(x, float)
    x = x[np.isfinite(x) & (x > 0)]
    return float(np.exp(np.log(x).mean())) if len(x) else math.nan


def _geomean_noise(ratios, floors) -> float:
    """The floor of a geomean of per-instance ratios, in its units: ``G (e^mean(h) - 1)`` over the
    instances the geomean counts (each ratio's floor ``h`` is its instance's, log scale)."""
    r, h = np.asarray(ratios, float), np.asarray(floors, float)
    keep = np.isfinite(r) & (r > 0)
    return noise_abs(_geomean(r), float(h[keep].mean())) if keep.any() else math.nan


def _moved(ratios, floors, hit) -> int:
    """How many instances change side of ``hit`` (a test on a ratio) when every ratio moves by its
    instance's floor, down or up: the larger of the two (a NaN floor counts as none)."""
    r, h = np.asarray(ratios, float), np.nan_to_num(np.asarray(floors, float), nan=0.0)
    n = int(hit(r).sum())
    return max(abs(int(hit(r * np.exp(sign * h)).sum()) - n) for sign in (-1, 1))


def _within_noise(ratios, floors, bound: float) -> float:
    """The floor of "share of ratios <= bound", in shares (an infinite ratio stays out)."""
    return _moved(ratios, floors, lambda r: r <= bound) / max(len(ratios), 1)


def _run_instance(inst, p: SuiteParams, tau: float, cap: float, cm, seed: int = 0) -> dict:
    """Every method on one instance, timed by interleaved rounds in a fresh seeded order per round
    (``seed`` and the instance's name; components.core.timing): one row of the suite table. A rotation
    made each method always follow the same neighbour, whose cache and allocator state shifted
    sub-millisecond timings by 6-25%. The faster of dense and COO is the baseline whose second arm
    gives the instance's noise floor (the denominator of every "over best static" ratio)."""
    pl = plan(inst.expr, [a.shape for a in inst.tensors], p.optimize)
    runs: dict = {}
    t = interleave({m: method_call(m, pl, inst.tensors, tau, cap, cm, runs) for m in p.methods}, ("dense", "coo"),
                   clock="thread", seed=[seed, zlib.crc32(inst.name.encode())], warmup=int(p.warmup), pick="fastest",
                   min_rounds=min(p.min_reps, p.max_reps), max_rounds=p.max_reps, rel_precision=p.rel_precision,
                   budget_s=p.budget_s * len(p.methods), once_over_s=p.budget_s)
    status = {m: status_of(t, m) for m in p.methods}
    results = {m: t.results[m] for m in p.methods if status[m] == "ok" and m in t.results}
    times = {m: t.samples(m) if status[m] == "ok" else [] for m in p.methods}
    ref = None
    for m in ("dense", "numpy_oe", "coo"):
        if m in results:
            ref = _as_dense(results[m])
            break
    row = {"instance": inst.name, "family": inst.family, "n_tensors": len(inst.tensors),
           "largest_dense_intermediate": pl.largest_intermediate, "steps": len(pl.path),
           "rounds": t.n_rounds, "stopped": t.stopped, "timing_baseline": t.baseline, "noise_log": t.noise}
    correct = True
    for m in p.methods:
        sec = seconds_of(t, m)
        row[f"{m}_s"] = sec
        row[f"{m}_min_s"] = float(np.min(times[m])) if times[m] else sec     # best of the reps (diagnostic)
        row[f"{m}_reps"] = len(times[m])
        row[f"{m}_status"] = status.get(m, "not run")
        if m in runs:
            row[f"{m}_peak_bytes"] = runs[m].peak_bytes
        if m in results:
            ok = _matches(results[m], inst, ref)
            row[f"{m}_correct"] = ok
            correct &= ok
    c = runs.get("coo") or runs.get("hybrid_oneway")       # exact counts: COO holds every non-zero
    if c is not None:
        mn, avg = c.densities()
        row.update(min_density=mn, avg_density=avg)
    best_static = min(row["dense_s"], row["coo_s"])
    for m, pre in HYBRIDS.items():
        if m not in p.methods:
            continue
        hy = runs.get(m)
        row[f"{pre}_switched_at"] = -1 if hy is None or hy.switched_at is None else hy.switched_at
        row[f"{pre}_switch_reason"] = None if hy is None else hy.switch_reason
        row[f"{pre}_counts"] = -1 if hy is None else hy.counts
        row[f"{pre}_over_best_static"] = _ratio(row[f"{m}_s"], best_static)
        row[f"{pre}_over_best_static_min"] = _ratio(row[f"{m}_min_s"], min(row["dense_min_s"], row["coo_min_s"]))
        row[f"{pre}_over_dense"] = _ratio(row[f"{m}_s"], row["dense_s"])
        if hy is not None and m == "hybrid":
            row["hybrid_decision"] = hy.decision
            row["hybrid_forecasts"] = hy.forecasts
    row["hybrid_switched_at"] = row.get("hybrid_switched_at", -1)
    row["dense_over_coo"] = _ratio(row["dense_s"], row["coo_s"])
    libs = [row[f"{m}_s"] for m in p.methods if m in LIBRARIES and row[f"{m}_s"] == row[f"{m}_s"]]
    row["hybrid_over_best_library"] = _ratio(row["hybrid_s"], min(libs)) if libs else math.nan
    row["correct"] = correct
    return row


def _summary(rows: list[dict], methods: list[str], prefix: str = "") -> dict:
    """Suite metrics; ``hybrid_*`` for the cost-predicted hybrid, ``oneway_*`` for the one-way rule."""
    d_over_c = np.array([r["dense_over_coo"] for r in rows], float)
    m = {"instances": float(len(rows)),
         "dense_loses_3x": float((d_over_c >= 3).sum()),
         "coo_loses_3x": float((d_over_c <= 1 / 3).sum()),
         "dense_loses_3x_noise": float(_moved(d_over_c, [r["noise_log"] for r in rows], lambda r: r >= 3)),
         "coo_loses_3x_noise": float(_moved(d_over_c, [r["noise_log"] for r in rows], lambda r: r <= 1 / 3)),
         "all_correct": float(all(r["correct"] for r in rows)),
         "dense_exceeded": float(sum(r["dense_status"] == "exceeded" for r in rows))}
    tiny_dense = [r for r in rows if r["family"] == "dense"]
    floors = [r["noise_log"] for r in rows]
    for meth, pre in HYBRIDS.items():
        if meth not in methods:
            continue
        hr = np.array([r[f"{pre}_over_best_static"] for r in rows], float)
        m[f"{pre}_within_1_25"] = float((hr <= 1.25).mean())
        m[f"{pre}_within_1_25_noise"] = _within_noise(hr, floors, 1.25)
        m[f"{pre}_geomean_over_best_noise"] = _geomean_noise(hr, floors)
        m[f"{pre}_overhead_tiny_dense_noise"] = _geomean_noise([r[f"{pre}_over_dense"] for r in tiny_dense],
                                                               [r["noise_log"] for r in tiny_dense])
        # the same on each method's fastest rep (reported only: how much of a miss is timing noise)
        m[f"{pre}_within_1_25_min"] = float((np.array([r[f"{pre}_over_best_static_min"] for r in rows]) <= 1.25).mean())
        m[f"{pre}_geomean_over_best"] = _geomean(hr)
        m[f"{pre}_worst_over_best"] = float(hr.max())
        m[f"{pre}_switched"] = float(sum(r[f"{pre}_switched_at"] >= 0 for r in rows))
        # density-tracking overhead where nothing is sparse: hybrid / dense on the dense controls
        m[f"{pre}_overhead_tiny_dense"] = _geomean([r[f"{pre}_over_dense"] for r in tiny_dense]) - 1.0
    for lib in LIBRARIES:                    # instances each library finished (0 when not requested)
        m[f"{lib}_ran"] = float(sum(r.get(f"{lib}_status") == "ok" for r in rows))
    lib_ratios = [r["hybrid_over_best_library"] for r in rows]
    if np.isfinite(_geomean(lib_ratios)):
        m["hybrid_geomean_over_best_library"] = _geomean(lib_ratios)
        m["hybrid_geomean_over_best_library_noise"] = _geomean_noise(lib_ratios, floors)
    m["rounds_mean"] = float(np.mean([r["rounds"] for r in rows]))    # how soon the ratios settled
    m["noise_rel_median"] = float(np.expm1(np.median(floors)))
    return {prefix + k: v for k, v in m.items()}


@technique("einsum_suite", family="algorithms", params=SuiteParams, inputs=("calibration",),
           summary="Dense vs COO vs hybrid (cost-predicted switch) vs one-way hybrid (density threshold) einsum on "
                   "one opt_einsum path over a generated suite (model counting, graphical models, gap family, dense "
                   "controls) and held-out instances, beside numpy/torch einsum and pydata sparse.")
def run_einsum_suite(p: SuiteParams, ctx) -> Result:
    tau, tau_src = _tau(ctx, p.tau)
    cm = _cost_model(ctx)
    cap = p.memory_cap_mib * 2 ** 20
    sets = [("", gen.suite(p.scale, ctx.seed))]
    if p.heldout:
        sets.append(("heldout_", gen.suite("heldout_debug" if p.scale == "debug" else "heldout", ctx.seed)))
    total = sum(len(insts) for _, insts in sets)
    metrics, tables, k = {"tau": tau}, {}, 0
    with _single_thread():
        for prefix, insts in sets:
            rows = []
            for inst in insts:
                rows.append(_run_instance(inst, p, tau, cap, cm, seed=ctx.seed))
                k += 1
                ctx.progress(k, total, ratio=rows[-1]["hybrid_over_best_static"])
            metrics.update(_summary(rows, p.methods, prefix))
            tables["heldout" if prefix else "suite"] = rows
    rows = tables["suite"]
    return Result(metrics=metrics, tables=tables,
                  info={"tau": tau, "tau_source": tau_src, "cap_bytes": cap, "cost_model": cm},
                  files={"plots/suite_ratios.png": _suite_png(rows)}
                  | ({"plots/heldout_ratios.png": _suite_png(tables["heldout"])} if "heldout" in tables else {}))


def _suite_png(rows) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = [r["instance"] for r in rows]
    x = np.arange(len(rows))
    for key, mk in (("dense_s", "s"), ("coo_s", "^"), ("hybrid_s", "o"), ("hybrid_oneway_s", "x")):
        if key not in rows[0]:
            continue
        best = np.array([min(r["dense_s"], r["coo_s"]) for r in rows])
        y = np.array([r[key] for r in rows]) / best
        y = np.where(np.isfinite(y), y, 1e3)
        ax.scatter(x, y, marker=mk, s=18, label=key[:-2] + " / best static (1e3 = exceeded)")
    ax.axhline(1.25, color="grey", ls=":", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=90, fontsize=6)
    ax.set_ylabel("time / min(dense, COO)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig_png(fig, dpi=110)


# ------------------------------------------------------------------------------------------ gap
@dataclass
class GapParams:
    family: Literal["grid_eq", "chain_eq"] = "grid_eq"
    n_values: list[int] = field(default_factory=lambda: [8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 29, 30, 32, 36,
                                                         40])
    memory_cap_mib: float = 256.0             # dense runs past this are reported as exceeded
    report_cap_bytes: float = 4e9             # "dense exceeds 4 GB before n = 30": judged from the path
    reps: int = 3
    tau: float | None = None

    def check(self):
        require(len(self.n_values) >= 3 and all(3 <= n <= 60 for n in self.n_values), "n_values", self.n_values,
                "at least 3 sizes in [3, 60]")
        require(self.memory_cap_mib > 0, "memory_cap_mib", self.memory_cap_mib, "a positive number of MiB")
        require(self.reps >= 1, "reps", self.reps, "a positive integer")


def _slope(x, y) -> float:
    return float(np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)[0]) if len(x) >= 2 else math.nan


@technique("einsum_gap", family="algorithms", params=GapParams, inputs=("calibration",),
           summary="Exponential gap: GRID-EQ(n) / equality chains, dense intermediates ~2^n vs COO polynomial.")
def run_einsum_gap(p: GapParams, ctx) -> Result:
    torch.set_num_threads(1)
    tau, _ = _tau(ctx, p.tau)
    cm = _cost_model(ctx)
    cap = p.memory_cap_mib * 2 ** 20
    make = gen.grid_eq if p.family == "grid_eq" else gen.chain_eq
    rows = []
    for i, n in enumerate(p.n_values):
        inst = make(n)
        pl = plan(inst.expr, [a.shape for a in inst.tensors])
        row = {"n": n, "largest_dense_intermediate": pl.largest_intermediate,
               "dense_peak_bytes_path": pl.largest_intermediate * 8}
        runs: dict = {}
        t = interleave({m: method_call(m, pl, inst.tensors, tau, cap, cm, runs) for m in OURS}, "coo",
                       clock="thread", seed=[0, n], warmup=0, min_rounds=p.reps, max_rounds=p.reps,
                       once_over_s=5.0)        # a call over 5 s is its one run
        row.update(rounds=t.n_rounds, noise_log=t.noise)
        for m in OURS:
            st = status_of(t, m)
            row[f"{m}_s"] = seconds_of(t, m) if st in ("ok", "exceeded") else math.inf
            row[f"{m}_status"] = st
            if m in runs:
                row[f"{m}_peak_bytes"] = runs[m].peak_bytes
            if st == "ok" and m in t.results:
                row[f"{m}_correct"] = _matches(t.results[m], inst, None)
        rows.append(row)
        ctx.progress(i + 1, len(p.n_values), n=n)
    ok_d = [r for r in rows if r["dense_status"] == "ok"]
    ok_c = [r for r in rows if r["coo_status"] == "ok"]
    at = {r["n"]: r for r in rows}
    m = {"dense_log2_growth_per_n": _slope([r["n"] for r in ok_d], [math.log2(r["dense_peak_bytes"]) for r in ok_d]),
         "coo_poly_exponent": _slope([math.log(r["n"]) for r in ok_c], [math.log(r["coo_s"]) for r in ok_c]),
         "coo_max_peak_nnz_bytes": max((r.get("coo_peak_bytes", 0) for r in ok_c), default=math.nan),
         "dense_first_exceeded_n": float(min((r["n"] for r in rows if r["dense_status"] == "exceeded"), default=math.inf)),
         "dense_4gb_first_n": float(min((r["n"] for r in rows if r["dense_peak_bytes_path"] > p.report_cap_bytes),
                                        default=math.inf)),
         "coo_largest_n_done": float(max((r["n"] for r in ok_c), default=math.nan)),
         "all_correct": float(all(r.get(f"{mm}_correct", True) for r in rows for mm in OURS))}
    for n in (20, 24, 26):                   # dense past the memory cap counts as infinitely slower
        if n in at and at[n]["coo_status"] == "ok" and at[n]["dense_status"] in ("ok", "exceeded"):
            m[f"coo_speedup_n{n}"] = at[n]["dense_s"] / at[n]["coo_s"]
            m[f"coo_speedup_n{n}_noise"] = noise_abs(m[f"coo_speedup_n{n}"], at[n]["noise_log"])
            m[f"hybrid_speedup_n{n}"] = at[n]["dense_s"] / at[n]["hybrid_s"]
    last = max(ok_c, key=lambda r: r["n"]) if ok_c else None
    if last is not None:
        m["coo_s_at_largest_n"] = last["coo_s"]
        m["coo_s_at_largest_n_noise"] = noise_abs(last["coo_s"], last["noise_log"])
    series = {"dense_s": ([r["n"] for r in ok_d], [r["dense_s"] for r in ok_d], "n"),
              "coo_s": ([r["n"] for r in ok_c], [r["coo_s"] for r in ok_c], "n"),
              "hybrid_s": ([r["n"] for r in rows if r["hybrid_status"] == "ok"],
                           [r["hybrid_s"] for r in rows if r["hybrid_status"] == "ok"], "n")}
    return Result(metrics=m, series=series, tables={"gap": rows}, files={f"plots/gap_{p.family}.png": _gap_png(rows, p.family)})


def _gap_png(rows, family) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for m, mk in (("dense", "s-"), ("coo", "^-"), ("hybrid", "o--")):
        pts = [(r["n"], r[f"{m}_s"]) for r in rows if r[f"{m}_status"] == "ok"]
        if pts:
            ax.plot(*zip(*pts), mk, ms=4, label=f"{m} time (s)")
    ex = [r["n"] for r in rows if r["dense_status"] == "exceeded"]
    if ex:
        ax.axvline(min(ex) - 0.5, color="red", ls=":", lw=1, label="dense: memory cap exceeded")
    ax.set_yscale("log")
    ax.set_xlabel("n")
    ax.set_ylabel("seconds")
    ax.set_title(f"{family}(n): dense vs COO vs hybrid")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig_png(fig, dpi=110)
