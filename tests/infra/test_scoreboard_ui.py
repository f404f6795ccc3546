"""The HTML scoreboard rendered by headless Chromium: the claims table and the experiments' plots show.

Parent runs are written straight into a temporary SQLite store (no Ray); the page is opened from
disk. The page itself reports what the browser drew ("plots rendered: N/M"): an image that failed to
decode would count as not rendered.
"""
from __future__ import annotations

import importlib.util

import pytest


from components.core.tracker import tracking_client
from pipelines import scoreboard as sb
from tests.infra.svc import INFRA, need_binary
from tests.pipelines.test_scoreboard import fake_parent, outcome


def _shooter():
    spec = importlib.util.spec_from_file_location("screenshot_mlflow", INFRA / "screenshot_mlflow.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow   # headless Chromium renders the page, ~60 s: runs in `make bench` (keeps `make test` in its 15 minutes)
def test_scoreboard_page_renders_table_and_plots(tmp_path):
    need_binary(["chromium", "chromium-browser"], "chromium")
    from PIL import Image

    # Prepare: two code versions of one experiment (the newer one with a plot), one premise not met
    client = tracking_client(f"sqlite:///{tmp_path}/mlflow.db")
    fake_parent(client, "ui_exp", "a" * 40, [outcome("gain_claim", False, "0.01")], minute=1)
    fake_parent(client, "ui_exp", "b" * 40, [outcome("gain_claim", True, "0.07", measured_pm="0.07 ± 0.01"),
                                             outcome("setting_claim", False, "1", premise_holds=False)],
                minute=2, png=b"plot")
    out = sb.scoreboard(client.tracking_uri, tmp_path / "reports", experiments=["ui_exp"], mlflow_run=False)
    shot = tmp_path / "scoreboard.png"
    # Execute
    text = _shooter().shoot(f"file://{out['html']}", shot, 1400, 900,
                            ["gain_claim", "setting_claim", "premise not met", "plots rendered:"], timeout=120,
                            settle_s=1.0)
    # Assert: the browser drew the table rows, the one plot and one sparkline per claim
    assert "plots rendered: 1/1 · sparklines: 2" in text, text[-500:]
    assert "0.07 ± 0.01" in text and "bbbbbbbbbb" in text
    img = Image.open(shot).convert("RGB")
    assert img.size == (1400, 900)
    pixels = list(img.getdata())
    green = sum(1 for p in pixels if abs(p[0] - 0x1a) < 30 and abs(p[1] - 0x7f) < 30 and abs(p[2] - 0x37) < 30)
    assert green > 30, "the 'holds' status (green) is not on the page"
    colours = len(set(pixels))
    assert colours > 2000, f"{colours} colours: the plot (random RGB noise) did not draw"
