"""Small matplotlib helpers shared by the simulation techniques (figures -> PNG bytes)."""
from __future__ import annotations

import io


def figure(w: float = 6.0, h: float = 4.0, ncols: int = 1, nrows: int = 1):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(w, h), squeeze=False)


def png(fig) -> bytes:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
