"""evaluate: the claims over the variants' aggregates (paired per seed where a claim asks), each with
its premise where it names one, and the comparison table with standard errors and ratios to the
named baseline (per sub-study when ``report.baseline`` maps baselines to their variants)."""
from __future__ import annotations

import math
from typing import Any

from components.core.claims import ClaimOutcome, check, referenced_variants
from pipelines.experiment import ExperimentSpec, baseline_of
from pipelines.outcome import VariantOutcome

TABLE_DEFAULT = 8


def judge(spec: ExperimentSpec, outcomes: dict[str, VariantOutcome]) -> list[ClaimOutcome]:
    metrics = {n: o.result.clean_metrics() for n, o in outcomes.items() if o.result is not None}
    seed_metrics = {n: o.seed_metrics() for n, o in outcomes.items() if o.result is not None}
    claims = []
    for c in spec.claims:
        named: set[str] = set()
        for _, holds, measured in c.expressions():
            named |= referenced_variants(holds) | (referenced_variants(measured) if measured else set())
        absent = sorted(named - set(outcomes))
        if absent:  # excluded by only=... or dropped by debug: not judged
            claims.append(ClaimOutcome(c.name, c.paper, "n/a", False, c.gate, f"not run: {', '.join(absent)}", skipped=True,
                                       premise=c.premise))
        else:
            out = check(c, metrics, seed_metrics)
            premise = c.premise_claim()
            p_absent = sorted(set().union(*(referenced_variants(e) for _, h, m in premise.expressions()
                                            for e in (h, m) if e)) - set(outcomes)) if premise else []
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
