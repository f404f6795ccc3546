"""Hybrid einsum benchmark: the generated suite (and, with --heldout, the held-out instances) with dense /
COO / hybrid (cost-predicted switch) / one-way hybrid (density threshold) on one opt_einsum path and
numpy.einsum (same path), torch.einsum, pydata sparse; per instance the times (thread CPU ms, median of
reps, torch and BLAS single-threaded), each hybrid's speed ratio to the better static representation
with its peak intermediate memory beside the static ones', and the ratio to the best library, all from
one run. Also the calibration (tau and cost model) and the GRID-EQ(n) gap table.

Run: .venv/bin/python benchmarks/bench_hybrid_einsum.py [--no-pydata] [--no-libs] [--heldout] [--tau 1e-3]
     [--seed 0] [--no-gap]
"""
from __future__ import annotations

import argparse
import math
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from components.algorithms.hybrid_einsum.calibrate import CalibrationParams, calibrate  # noqa: E402
from components.algorithms.hybrid_einsum.technique import (GapParams, SuiteParams, run_einsum_gap,  # noqa: E402
                                                           run_einsum_suite)
from components.core.context import RunContext  # noqa: E402


def fmt(t: float) -> str:
    return "exceeded" if math.isinf(t) else ("-" if t != t else f"{t * 1e3:.1f}")


def mib(b) -> str:
    return "-" if b is None or b != b else f"{b / 2 ** 20:.2f}"


def table(rows, methods):
    print(f"{'instance':32s} " + " ".join(f"{c[:10]:>10s}" for c in methods) +
          f" {'hyb/best':>8s} {'1way/best':>9s} {'hyb/lib':>7s} | {'peak MiB: dense':>15s} {'coo':>8s} {'hybrid':>8s}"
          f" {'1way':>8s} | {'sw':>4s} {'avg dens':>8s}   (ms)")
    for r in rows:
        print(f"{r['instance'][:32]:32s} " + " ".join(f"{fmt(r[c + '_s']):>10s}" for c in methods) +
              f" {r['hybrid_over_best_static']:8.2f} {r.get('oneway_over_best_static', math.nan):9.2f}"
              f" {r['hybrid_over_best_library']:7.2f} | {mib(r.get('dense_peak_bytes')):>15s}"
              f" {mib(r.get('coo_peak_bytes')):>8s} {mib(r.get('hybrid_peak_bytes')):>8s}"
              f" {mib(r.get('hybrid_oneway_peak_bytes')):>8s} | {r['hybrid_switched_at']:4d}"
              f" {r.get('avg_density', math.nan):8.2g}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-pydata", action="store_true")
    ap.add_argument("--no-libs", action="store_true", help="only dense, COO and the two hybrids")
    ap.add_argument("--heldout", action="store_true", help="also the held-out instances")
    ap.add_argument("--no-gap", action="store_true")
    ap.add_argument("--tau", type=float, default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    cal = calibrate(CalibrationParams())
    print(f"calibrated tau = {cal['tau']} (raw {cal['tau_raw']:.2g}, crossovers {cal['crossovers']}); "
          f"cost model fit, median relative error per part: "
          + ", ".join(f"{k} {v:.0%}" for k, v in cal["cost_fit"].items()))
    if a.tau is not None:
        cal = dict(cal, tau=a.tau)
    methods = ["dense", "coo", "hybrid", "hybrid_oneway"]
    if not a.no_libs:
        methods += ["numpy_oe", "torch_einsum"] + ([] if a.no_pydata else ["pydata_sparse"])
    res = run_einsum_suite(SuiteParams(methods=methods, heldout=a.heldout),
                           RunContext(seed=a.seed, inputs={"calibration": cal}))
    print("\nsuite")
    table(res.tables["suite"], methods)
    if "heldout" in res.tables:
        print("\nheld-out")
        table(res.tables["heldout"], methods)
    for k, v in res.metrics.items():
        print(f"  {k:40s} {v:.4g}")
    if not a.no_gap:
        gap = run_einsum_gap(GapParams(tau=cal["tau"]), RunContext(inputs={"calibration": cal}))
        print(f"\n{'n':>3s} {'dense ms':>10s} {'coo ms':>10s} {'hybrid ms':>10s} {'dense/coo':>9s} {'dense peak MiB':>14s}"
              f" {'coo peak MiB':>12s} {'hybrid peak MiB':>15s}")
        for r in gap.tables["gap"]:
            ratio = r["dense_s"] / r["coo_s"] if r["coo_s"] > 0 else math.nan
            print(f"{r['n']:3d} {fmt(r['dense_s']):>10s} {fmt(r['coo_s']):>10s} {fmt(r['hybrid_s']):>10s} {ratio:9.2f} "
                  f"{r['dense_peak_bytes_path'] / 2**20:14.1f} {mib(r.get('coo_peak_bytes')):>12s}"
                  f" {mib(r.get('hybrid_peak_bytes')):>15s}")
        for k, v in gap.metrics.items():
            print(f"  {k:34s} {v:.4g}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
