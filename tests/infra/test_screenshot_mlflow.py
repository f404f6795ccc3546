"""infra/screenshot_mlflow.py: MLflow's comparison view of real runs, rendered by headless Chromium."""
from __future__ import annotations

import pytest

from tests.infra.svc import BIN, INFRA, dtlab_env, need_binary, run_logged


@pytest.mark.slow
def test_comparison_view_screenshot_shows_runs(tmp_path):
    need_binary(["chromium", "chromium-browser"], "chromium")
    from PIL import Image, ImageStat

    runs_dir = tmp_path / "runs"
    run_logged([str(BIN / "dtlab"), "run", "experiment=platform_probe", "debug=true",
                "cluster.include_dashboard=false", f"runs_dir={runs_dir}"], tmp_path / "run.log", env=dtlab_env(),
               timeout=600)
    out = tmp_path / "compare.png"
    # the script itself fails unless the page showed the compared runs' names before the shot
    run_logged([str(BIN / "python"), str(INFRA / "screenshot_mlflow.py"), "--tracking-uri",
                f"sqlite:///{runs_dir}/mlflow.db", "--experiment", "platform_probe", "--out", str(out),
                "--width", "1400", "--height", "1000"], tmp_path / "shot.log", env=dtlab_env(), timeout=600)
    img = Image.open(out).convert("RGB")
    assert img.size == (1400, 1000)
    gray = img.convert("L")
    n = gray.size[0] * gray.size[1]
    # a rendered page (a loading skeleton measured: stddev 2.8, 8 colours, no dark pixels;
    # the comparison view: stddev ~25, >2000 colours, ~1.4% dark pixels of text and plot lines)
    assert ImageStat.Stat(gray).stddev[0] > 10, "screenshot is (nearly) one colour"
    assert len(set(img.resize((350, 250)).getdata())) > 200, "too few colours: a blank or skeleton page"
    dark = gray.point(lambda p: 255 if p < 128 else 0).histogram()[255]
    assert dark > 0.004 * n, f"almost no text or lines on the page ({dark} dark pixels)"
