"""Reading a run's artifacts back from MLflow (comparison tables, claims, configs, plots), for the
reports that show stored runs: compare, the scoreboard and RESULTS.md."""
from __future__ import annotations

import tempfile
from pathlib import Path


def read_artifact(client, run_id: str, path: str) -> bytes | None:
    """The bytes of artifact ``path`` of run ``run_id``; None if it cannot be read."""
    try:
        with tempfile.TemporaryDirectory() as d:
            return Path(client.download_artifacts(run_id, path, d)).read_bytes()
    except Exception:  # noqa: BLE001 - a missing or unreadable artifact is shown as absent
        return None


def pngs(client, run_id: str) -> list[tuple[str, bytes]]:
    """The run's plots (``plots/*.png``) as (artifact path, bytes)."""
    try:
        items = client.list_artifacts(run_id, "plots")
    except Exception:  # noqa: BLE001 - no artifacts: no plots
        return []
    out = []
    for it in items:
        if it.path.endswith(".png"):
            data = read_artifact(client, run_id, it.path)
            if data:
                out.append((it.path, data))
    return out
