"""evaluate: the ``reach:`` metrics (time to another variant's figure, per seed), the claims over the variants' aggregates (paired per seed where a claim asks), each with
its premise where it names one, and the comparison table with standard errors and ratios to the
named baseline (per sub-study when ``report.baseline`` maps baselines to their variants). A claim is
judged when every variant its ``holds`` reads ran; its ``measured`` terms on variants not run show n/a."""
from __future__ import annotations

import math
from typing import Any

from components.core.claims import ClaimOutcome, check, referenced_variants
from components.core.seeds import aggregate_metrics
from pipelines.experiment import ExperimentSpec, baseline_of
from pipelines.outcome import VariantOutcome

TABLE_DEFAULT = 8


def first_reach(xs: list[float], ys: list[float], target: float, below: bool = True) -> float:
    """The first logged x whose y reaches ``target`` (y <= target when ``below``), inf if none does.
    Logged points only, no interpolation: time-to-target is read where it was measured."""
    for x, y in zip(xs, ys):
        if (y <= target) if below else (y >= target):
            return float(x)
    return math.inf


def reach(spec: ExperimentSpec, outcomes: dict[str, VariantOutcome], tracker=None) -> None:
    """Add every ``reach:`` metric to the seeds and aggregates of each variant that logged its
    curve: seed s is measured against seed s of the target variant (the target's mean where that
    seed is missing), so claims can pair it. Logged to the seed and variant runs too."""
    for r in spec.reach:
        tv = outcomes.get(r.target_variant)
        if tv is None or tv.result is None:   # target not run (only=..., debug) or failed: no metric
            continue
        target_mean = tv.result.clean_metrics().get(r.target_metric)
        for o in outcomes.values():
            if o.result is None or r.series not in o.result.series:
                continue
            per_seed: dict[int, float] = {}
            for s, so in sorted(o.seeds.items()):
                if so.result is None or r.series not in so.result.series:
                    continue
                t_seed = tv.seeds.get(s)
                target = (t_seed.result.clean_metrics().get(r.target_metric) if t_seed and t_seed.result else None)
                target = target_mean if target is None else target
                if target is None or math.isnan(target):
                    continue
                per_seed[s] = first_reach(*so.result.series_xy(r.series), target, r.below)
                so.result.metrics[r.name] = per_seed[s]
                if tracker is not None and so.run_id and so.run_id != o.run_id:
                    tracker.log_metrics(so.run_id, {r.name: per_seed[s]})
            if per_seed:
                agg = aggregate_metrics({s: {r.name: v} for s, v in per_seed.items()})
                o.result.metrics.update(agg)
                if tracker is not None and o.run_id:
                    tracker.log_metrics(o.run_id, agg)


def judge(spec: ExperimentSpec, outcomes: dict[str, VariantOutcome]) -> list[ClaimOutcome]:
    metrics = {n: o.result.clean_metrics() for n, o in outcomes.items() if o.result is not None}
    seed_metrics = {n: o.seed_metrics() for n, o in outcomes.items() if o.result is not None}
    claims = []
    for c in spec.claims:
        named: set[str] = set()
        for _, holds, _ in c.expressions():   # only ``holds`` decides: absent measured terms show n/a
            named |= referenced_variants(holds)
        absent = sorted(named - set(outcomes))
        if absent:  # excluded by only=... or dropped by debug: not judged
            claims.append(ClaimOutcome(c.name, c.paper, "n/a", False, c.gate, f"not run: {', '.join(absent)}", skipped=True,
                                       premise=c.premise))
        else:
            out = check(c, metrics, seed_metrics)
            premise = c.premise_claim()
            p_absent = sorted(set().union(*(referenced_variants(h) for _, h, _ in premise.expressions()))
                              - set(outcomes)) if premise else []
            if p_absent:  # its premise's variants were not run: the premise is unknown, never "not met"
                out.premise_holds, out.premise_error = None, f"not run: {', '.join(p_absent)}"
            claims.append(out)
    return claims


def comparison(spec: ExperimentSpec, outcomes: dict[str, VariantOutcome]) -> list[dict[str, Any]]:
    """One row per variant: the report's table metrics (mean, ± SE with several seeds) and ratios."""
    metrics = {n: o.result.clean_metrics() for n, o in outcomes.items() if o.result is not None}
    table_metrics = list(spec.report.get("table") or [])
    if not table_metrics:
        seen: list[str] = []
        for m in metrics.values():
            seen += [k for k in m if k not in seen and not k.endswith(("_se", "_n"))]
        table_metrics = seen[:TABLE_DEFAULT]
    rows = []
    for n, o in outcomes.items():
        base = baseline_of(spec.report, n)
        row: dict[str, Any] = {"variant": n, "technique": o.technique, "role": o.role, "status": o.status,
                               "seeds": len(o.seeds), "wall_s": round(o.wall_s, 3)}
        mine = metrics.get(n, {})
        for m in table_metrics:
            val = mine.get(m)
            row[m] = val
            se = mine.get(f"{m}_se")
            if se is not None and math.isfinite(se):
                row[f"{m}_se"] = se
            b = metrics.get(base, {}).get(m) if base else None
            if base and val is not None and b not in (None, 0) and not (isinstance(b, float) and math.isnan(b)):
                row[f"{m}/{base}"] = val / b
        rows.append(row)
    return rows
