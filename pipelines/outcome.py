"""What a DAG run produces: per (variant, seed) outcomes, per-variant aggregates, the run outcome."""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from components.core.claims import ClaimOutcome
from components.core.result import Result

PARENT_TAG = "dtlab.kind"


def error_text(e: BaseException) -> str:
    """First line ``Type: message``, then the (tail of the) traceback; a Ray task's own cause."""
    cause = getattr(e, "cause", None)  # RayTaskError carries the original exception
    base = cause if isinstance(cause, BaseException) else e
    tb = "".join(traceback.format_exception(type(base), base, base.__traceback__))
    head = f"{type(base).__name__}: {base}".splitlines()[0]
    return f"{head}\n{tb[-3000:]}"


@dataclass
class SeedOutcome:
    seed: int
    run_id: str = ""             # the nested seed run (== the variant's run with one seed)
    status: str = "QUEUED"
    result: Result | None = None
    error: str = ""
    started: float = 0.0
    ended: float = 0.0
    where: dict = field(default_factory=dict)


@dataclass
class VariantOutcome:
    name: str
    technique: str
    role: str
    family: str
    run_id: str = ""
    status: str = "QUEUED"
    result: Result | None = None   # aggregated over seeds (None if any seed failed)
    error: str = ""
    started: float = 0.0
    ended: float = 0.0
    seeds: dict[int, SeedOutcome] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return max(0.0, self.ended - self.started) if self.ended else 0.0

    def seed_metrics(self) -> dict[int, dict[str, float]]:
        return {s: o.result.clean_metrics() for s, o in self.seeds.items() if o.result is not None}


@dataclass
class RunOutcome:
    experiment: str
    experiment_id: str
    parent_run_id: str
    tracking_uri: str
    variants: dict[str, VariantOutcome]
    claims: list[ClaimOutcome]
    comparison: list[dict[str, Any]]
    timings: dict[str, float]
    prepare_cache: dict[str, str] = field(default_factory=dict)
    dashboard_url: str | None = None

    @property
    def failed(self) -> list[str]:
        return [n for n, v in self.variants.items() if v.status != "FINISHED"]

    @property
    def claims_held(self) -> int:
        return sum(c.holds for c in self.claims if c.gate and not c.skipped)   # an inconclusive claim never holds

    @property
    def claims_judged(self) -> int:
        """Gated claims with a verdict: not "not run", not "inconclusive" (inside the noise floor)."""
        return sum(1 for c in self.claims if c.gate and not c.skipped and not c.inconclusive)

    @property
    def claims_inconclusive(self) -> int:
        return sum(1 for c in self.claims if c.gate and not c.skipped and c.inconclusive)

    def metrics(self) -> dict[str, dict[str, float]]:
        return {n: o.result.clean_metrics() for n, o in self.variants.items() if o.result is not None}

    def seed_metrics(self) -> dict[str, dict[int, dict[str, float]]]:
        return {n: o.seed_metrics() for n, o in self.variants.items() if o.result is not None}
