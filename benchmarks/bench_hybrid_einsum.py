"""Hybrid einsum benchmark: the generated suite with dense / COO / hybrid on one opt_einsum path and
numpy.einsum (same path), torch.einsum, pydata sparse; per instance the times, the hybrid's ratio to
the better static representation and to the best library, all from one run (torch single-threaded).
Also the calibrated tau and the GRID-EQ(n) gap table.

Run: .venv/bin/python benchmarks/bench_hybrid_einsum.py [--no-pydata] [--tau 1e-3]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-pydata", action="store_true")
    ap.add_argument("--tau", type=float, default=None)
    a = ap.parse_args()
    tau = a.tau
    if tau is None:
        cal = calibrate(CalibrationParams())
        tau = cal["tau"]
        print(f"calibrated tau = {tau} (raw {cal['tau_raw']:.2g}, crossovers {cal['crossovers']})")
    methods = ["dense", "coo", "hybrid", "numpy_oe", "torch_einsum"] + ([] if a.no_pydata else ["pydata_sparse"])
    res = run_einsum_suite(SuiteParams(methods=methods, tau=tau), RunContext())
    cols = methods
    print(f"{'instance':34s} " + " ".join(f"{c[:10]:>10s}" for c in cols) +
          f" {'hyb/best':>8s} {'hyb/lib':>8s} {'avg dens':>8s}   (ms)")
    for r in res.tables["suite"]:
        print(f"{r['instance'][:34]:34s} " + " ".join(f"{fmt(r[c + '_s']):>10s}" for c in cols) +
              f" {r['hybrid_over_best_static']:8.2f} {r['hybrid_over_best_library']:8.2f} {r.get('avg_density', math.nan):8.2g}")
    for k, v in res.metrics.items():
        print(f"  {k:34s} {v:.4g}")
    gap = run_einsum_gap(GapParams(tau=tau), RunContext())
    print(f"\n{'n':>3s} {'dense ms':>10s} {'coo ms':>10s} {'hybrid ms':>10s} {'dense/coo':>9s} {'dense peak MiB':>14s}")
    for r in gap.tables["gap"]:
        ratio = r["dense_s"] / r["coo_s"] if r["coo_s"] > 0 else math.nan
        print(f"{r['n']:3d} {fmt(r['dense_s']):>10s} {fmt(r['coo_s']):>10s} {fmt(r['hybrid_s']):>10s} {ratio:9.2f} "
              f"{r['dense_peak_bytes_path'] / 2**20:14.1f}")
    for k, v in gap.metrics.items():
        print(f"  {k:34s} {v:.4g}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
