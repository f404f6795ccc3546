"""Registered technique `duo`: DUO's low-bit fast sync + tentative update, with the cached
full-precision gradient all-reduced behind the next forward and committed one step late."""
from __future__ import annotations

from dataclasses import dataclass

from components.core.registry import technique
from components.core.result import Result
from components.training.ddp.technique import DPParams, _validate, run_data_parallel
from components.training.duo import fast_slow  # noqa: F401  (registers ddp_strategy "duo")


@dataclass
class DuoParams(DPParams):
    """Same knobs as ddp_train; ``bits`` is the fast path's codec (0 = no fast sync)."""


@technique("duo", family="training", params=DuoParams, validate=_validate, inputs=("corpus",),
           devices=("cpu", "cuda"),
           summary="DUO (Double Update Overlap, NeurIPS 2025): 4/1/0-bit fast gradient sync with a tentative "
                   "update; the exact gradient is all-reduced behind the next forward and committed one step late.")
def run_duo(p: DuoParams, ctx) -> Result:
    res = run_data_parallel(p, ctx, "duo", strategy="duo")
    res.info["fast_slow"] = "commit(c, S, gbar_{t-1}); w = preview(c, S, qbar_t)"
    return res
