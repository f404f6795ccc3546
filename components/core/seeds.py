"""The seed axis: one variant's per-seed results turned into the figures claims and reports read.

Every final metric ``m`` of a variant becomes ``m`` (mean over seeds), ``m_se`` (standard error
of the mean; NaN for one seed, so a claim about noise cannot pass on one draw) and ``m_n`` (the
number of seeds that reported it). The per-seed values are kept, so technique and baseline can
be paired seed by seed (:func:`components.core.claims.evaluate`'s ``paired``).
"""
from __future__ import annotations

import math
from typing import Any

from components.core.result import Result

SUFFIXES = ("_se", "_n")


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (sample std / sqrt(n)); NaN SE below two finite values."""
    vals = [float(v) for v in values]
    if not vals:
        return math.nan, math.nan
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    return mean, math.sqrt(var / len(vals))


def aggregate_metrics(per_seed: dict[int, dict[str, float]]) -> dict[str, float]:
    """``m``, ``m_se``, ``m_n`` for every metric any seed reported."""
    names: list[str] = []
    for m in per_seed.values():
        names += [k for k in m if k not in names]
    out: dict[str, float] = {}
    means: dict[str, float] = {}
    for name in names:
        vals = [m[name] for m in per_seed.values() if name in m]
        means[name], out[f"{name}_se"] = mean_se(vals)
        out[f"{name}_n"] = float(len(vals))
    out.update(means)  # a metric the technique itself named ``x_n`` wins over a derived count
    return out


def _mean_series(results: list[Result], name: str) -> Any:
    """The mean curve where every seed has the same x values; else the first seed's curve."""
    curves = [r.series_xy(name) for r in results if name in r.series]
    xs0 = curves[0][0]
    if len(curves) > 1 and all(c[0] == xs0 for c in curves):
        ys = [sum(c[1][i] for c in curves) / len(curves) for i in range(len(xs0))]
        return (xs0, ys)
    return (xs0, curves[0][1])


def aggregate_results(per_seed: dict[int, Result]) -> Result:
    """One Result for a variant: aggregated metrics, mean series, tables with a ``seed`` column,
    info per seed, files of each seed (under ``seed<S>/`` when there are several)."""
    seeds = sorted(per_seed)
    results = [per_seed[s] for s in seeds]
    if len(results) == 1:
        r = results[0]
        return Result(metrics={**aggregate_metrics({seeds[0]: r.clean_metrics()})}, series=dict(r.series),
                      tables=dict(r.tables), info=dict(r.info), files=dict(r.files))
    metrics = aggregate_metrics({s: per_seed[s].clean_metrics() for s in seeds})
    series_names: list[str] = []
    for r in results:
        series_names += [k for k in r.series if k not in series_names]
    series = {n: _mean_series(results, n) for n in series_names}
    tables: dict[str, list[dict]] = {}
    for s, r in zip(seeds, results):
        for name, rows in r.tables.items():
            tables.setdefault(name, []).extend({"seed": s, **row} for row in rows)
    tables["per_seed"] = [{"seed": s, **r.clean_metrics()} for s, r in zip(seeds, results)]
    files = {f"seed{s}/{name}": data for s, r in zip(seeds, results) for name, data in r.files.items()}
    info = {"seeds": seeds, "per_seed": {str(s): r.info for s, r in zip(seeds, results)}}
    return Result(metrics=metrics, series=series, tables=tables, info=info, files=files)
