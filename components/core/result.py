"""What a technique returns: final metrics, per-step series, tables and files for the report."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Result:
    """One variant's outcome.

    metrics: final figures under plain names (``final_grad_norm_sq``, ``bytes_per_step``...).
    series:  per-step figures, ``name -> list of values`` (step = index) or ``name -> (steps, values)``.
    tables:  ``name -> list of row dicts``; saved as JSON artifacts and shown in the report.
    info:    anything JSON-able worth keeping in summary.json (derived constants, events).
    files:   ``name -> bytes or str`` artifacts the technique made itself (a PNG, a CSV).
    """

    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, list[dict]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    files: dict[str, bytes | str] = field(default_factory=dict)

    def series_xy(self, name: str) -> tuple[list[float], list[float]]:
        s = self.series[name]
        if isinstance(s, tuple) and len(s) == 2:
            return list(map(float, s[0])), list(map(float, s[1]))
        return list(range(len(s))), [float(v) for v in s]

    def clean_metrics(self) -> dict[str, float]:
        """Metrics as floats; non-finite values kept (MLflow stores NaN/inf) but never None."""
        out = {}
        for k, v in self.metrics.items():
            if v is None:
                continue
            if isinstance(v, bool):
                v = float(v)
            out[k] = float(v) if isinstance(v, (int, float)) else math.nan
        return out
