"""One way to print a metric value (tables, logs, claim reports): floats to ``digits``
significant digits, lists element-wise, ``None`` as ``none``. Callers differ only in precision
and in how a missing value reads, so those are the arguments."""
from __future__ import annotations

from typing import Any


def fmt(v: Any, digits: int = 4, none: str = "") -> str:
    """``v`` as short text: ``fmt(0.123456) == "0.1235"``, ``fmt([1.0, None]) == "[1, ]"``."""
    if v is None:
        return none
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt(x, digits, none) for x in v) + "]"
    return str(v)
