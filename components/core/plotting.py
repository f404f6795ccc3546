"""Figures for techniques' own artifacts: a headless figure, and figure -> PNG bytes.

Techniques return PNG bytes in ``Result.files`` (they run in Ray workers; figures themselves do
not travel well), so every family turns figures into bytes the same way, here.
"""
from __future__ import annotations

import io


def figure(w: float = 6.0, h: float = 4.0, ncols: int = 1, nrows: int = 1):
    """``plt.subplots`` on the Agg backend, axes always a 2-D array."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(w, h), squeeze=False)


def fig_png(fig, dpi: int = 100) -> bytes:
    """Lay out, render to PNG bytes, and close the figure (frees its memory)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()
