"""What a technique returns: final metrics, per-step series, tables and files for the report."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Result:
    """One variant's outcome.

    metrics: final figures under plain names (``final_grad_norm_sq``, ``bytes_per_step``...).
    series:  per-step figures, ``name -> list of values`` (step = index) or ``name -> (steps, values)``;
             a curve over something other than steps is ``name -> (xs, values, "what x is")``
             (e.g. ``(alphas, s_d, "alpha")``): logged with its x named, never as steps. x values
             that are not integers make a curve too (its x is then called "x").
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
        """(x values, values); the x values of a curve are :class:`XValues` (they carry its x name)."""
        s = self.series[name]
        if isinstance(s, tuple) and len(s) in (2, 3):
            xs = list(map(float, s[0]))
            x_name = s[2] if len(s) == 3 else getattr(s[0], "name", None)
            if x_name is None and any(not x.is_integer() for x in xs if math.isfinite(x)):
                x_name = "x"
            return (XValues(xs, str(x_name)) if x_name else xs), list(map(float, s[1]))
        return list(range(len(s))), [float(v) for v in s]

    def x_name(self, name: str) -> str | None:
        """What the x of series ``name`` is ("alpha", "deferral ratio"), or None for steps."""
        return getattr(self.series_xy(name)[0], "name", None)

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


class XValues(list):
    """The x values of a curve whose x is not a step, with its name; a list, so seed means and
    JSON treat it as one, and the name survives them (``Result.series_xy`` hands these out)."""

    def __init__(self, values=(), name: str = "x"):
        super().__init__(values)
        self.name = name
