"""Screenshot MLflow's run-comparison view with headless Chromium (Debian's `chromium`).

    .venv/bin/python infra/screenshot_mlflow.py [--tracking-uri URI] [--experiment NAME] [--out PNG]

Takes the latest dtlab parent run of EXPERIMENT from the store (default: the configured one,
runs/mlflow.db, or MLFLOW_TRACKING_URI), starts `mlflow ui` on a free 127.0.0.1 port against a
SQLite store (or uses an http:// tracking server as is), opens the comparison page of that run's
variants (#/compare-runs) in headless Chromium, saves the PNG and stops the UI.
Exit 0 with the PNG path on stdout; one clear line and exit 1 on any failure.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1"]


class ScreenshotError(RuntimeError):
    pass


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise ScreenshotError("chromium not found; run infra/install_services.sh (Debian package 'chromium')")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_health(url: str, proc: subprocess.Popen, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise ScreenshotError(f"mlflow ui exited with {proc.returncode} during start-up")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=3) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise ScreenshotError(f"mlflow ui not healthy at {url} after {timeout:.0f}s")


def latest_runs(uri: str, experiment: str) -> tuple[str, str, dict[str, str]]:
    """(experiment id, parent run id, {child run id: run name}) of the experiment's latest dtlab parent run."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri)
    exp = c.get_experiment_by_name(experiment)
    if exp is None:
        raise ScreenshotError(f"no experiment {experiment!r} in {uri}; run `dtlab run experiment={experiment}` first")
    parents = c.search_runs([exp.experiment_id], "tags.`dtlab.kind` = 'parent'", order_by=["attributes.start_time DESC"],
                            max_results=1)
    if not parents:
        raise ScreenshotError(f"experiment {experiment!r} has no dtlab parent run in {uri}")
    pid = parents[0].info.run_id
    kids = c.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{pid}'", max_results=50)
    if not kids:
        raise ScreenshotError(f"parent run {pid} has no variant runs to compare")
    return exp.experiment_id, pid, {r.info.run_id: r.info.run_name for r in kids}


def compare_url(base: str, exp_id: str, run_ids: list[str]) -> str:
    q = urllib.parse.urlencode({"runs": json.dumps(run_ids), "experiments": json.dumps([exp_id])})
    return f"{base}/#/compare-runs?{q}"


def _cdp_page(port: int, timeout: float) -> str:
    """WebSocket URL of the page Chromium opened (DevTools HTTP endpoint on loopback)."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=3) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        time.sleep(0.3)
    raise ScreenshotError(f"chromium's DevTools endpoint on 127.0.0.1:{port} did not come up in {timeout:.0f}s")


async def _capture(ws_url: str, out: Path, wait_texts: list[str], timeout: float, settle_s: float,
                   width: int, height: int) -> str:
    """Wait until the page's text shows every string in ``wait_texts``, let it settle, save a PNG."""
    import asyncio
    import base64

    import websockets

    async with websockets.connect(ws_url, max_size=256 * 2**20, open_timeout=30) as ws:
        ids = iter(range(1, 10**9))

        async def call(method: str, **params):
            i = next(ids)
            await ws.send(json.dumps({"id": i, "method": method, "params": params}))
            while True:
                msg = json.loads(await ws.recv())
                if msg.get("id") == i:
                    if "error" in msg:
                        raise ScreenshotError(f"DevTools {method}: {msg['error']}")
                    return msg["result"]

        await call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        end, text = time.time() + timeout, ""
        while True:
            r = await call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                           returnByValue=True)
            text = r.get("result", {}).get("value") or ""
            missing = [t for t in wait_texts if t not in text]
            if not missing:
                break
            if time.time() > end:
                raise ScreenshotError(f"page never showed {missing} within {timeout:.0f}s; it shows: {text[:300]!r}")
            await asyncio.sleep(1.0)
        # the comparison plot is drawn by plotly once the metrics arrive; wait for it (bounded)
        plot_end = time.time() + min(60.0, timeout)
        while time.time() < plot_end:
            r = await call("Runtime.evaluate", expression="!!document.querySelector('.js-plotly-plot .main-svg')",
                           returnByValue=True)
            if r.get("result", {}).get("value"):
                break
            await asyncio.sleep(1.0)
        # fold away MLflow's assistant side panel if it opened (it hides half the table)
        await call("Runtime.evaluate", returnByValue=True, expression=(
            "(() => { const nc = document.querySelector('button[aria-label=\"New Chat\"]');"
            " const c = nc && nc.parentElement.querySelector('button[aria-label=\"Close\"]');"
            " if (c) { c.click(); return true; } return false; })()"))
        await asyncio.sleep(settle_s)  # charts and tables finish drawing
        shot = await call("Page.captureScreenshot", format="png")
        out.write_bytes(base64.b64decode(shot["data"]))
        return text


def shoot(url: str, out: Path, width: int, height: int, wait_texts: list[str], timeout: float = 180,
          settle_s: float = 3.0) -> str:
    """Open ``url`` in headless Chromium, wait for ``wait_texts`` to render, save ``out``; returns the page text."""
    import asyncio

    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    profile = tempfile.mkdtemp(prefix="dtlab-chromium-")
    port = _free_port()
    cmd = [chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
           f"--remote-debugging-address=127.0.0.1", f"--remote-debugging-port={port}", url]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        ws_url = _cdp_page(port, 60)
        text = asyncio.run(_capture(ws_url, out, wait_texts, timeout, settle_s, width, height))
    finally:
        _stop(proc)
        shutil.rmtree(profile, ignore_errors=True)
    if not out.exists() or out.stat().st_size == 0:
        raise ScreenshotError("chromium produced no screenshot")
    return text


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, SIGKILL if it lingers."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def screenshot(uri: str, experiment: str, out: Path, width: int = 1600, height: int = 1300,
               start_timeout: float = 180, render_timeout: float = 180) -> tuple[Path, str]:
    """Save the comparison view of the latest run's variants to ``out``; returns (path, page text).

    The page counts as rendered once the names of (up to) three of the compared runs show in it.
    """
    exp_id, _, runs = latest_runs(uri, experiment)
    wait_texts = sorted(runs.values())[:3]
    if uri.startswith(("http://", "https://")):
        text = shoot(compare_url(uri.rstrip("/"), exp_id, list(runs)), out, width, height, wait_texts, render_timeout)
        return out, text
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    mlflow = Path(sys.executable).parent / "mlflow"
    cmd = [str(mlflow) if mlflow.exists() else "mlflow", "ui", "--backend-store-uri", uri,
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    log = tempfile.NamedTemporaryFile(prefix="dtlab-mlflow-ui-", suffix=".log", delete=False)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        try:
            _wait_health(base, proc, start_timeout)
        except ScreenshotError as e:
            raise ScreenshotError(f"{e}; log: {log.name}") from None
        text = shoot(compare_url(base, exp_id, list(runs)), out, width, height, wait_texts, render_timeout)
    finally:
        _stop(proc)
        log.close()
    os.unlink(log.name)  # kept only when something failed (its path is in the error)
    return out, text


def _configured_uri() -> str:
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    sys.path.insert(0, str(ROOT))
    from pipelines import config

    return config.compose([])["tracking"]["uri"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tracking-uri", help="sqlite:///... or http://... (default: the configured store)")
    ap.add_argument("--experiment", default="error_feedback")
    ap.add_argument("--out", type=Path, default=None, help="PNG path (default <runs>/screenshots/mlflow_compare.png)")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1300)
    a = ap.parse_args(argv)
    try:
        uri = a.tracking_uri or _configured_uri()
        out = a.out or (Path(uri[len("sqlite:///"):]).parent if uri.startswith("sqlite:///") else ROOT / "runs") \
            / "screenshots" / "mlflow_compare.png"
        print(screenshot(uri, a.experiment, out.resolve(), a.width, a.height)[0])
        return 0
    except (ScreenshotError, subprocess.TimeoutExpired) as e:
        print(f"screenshot_mlflow: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
