"""End to end: `streamlit run app.py` on localhost, seen by a real headless Chromium.

Uses Debian's chromium (README's test command installs it) through playwright, never a
browser that playwright downloads. Where chromium or playwright is missing the test skips
with the reason, except under CI (or NMSBENCH_REQUIRE_BROWSER=1), where that is a failure.
Screenshots go to $NMSBENCH_SCREENSHOTS when it is set (else the test's tmp folder).
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from dash_support import PIPELINE_CSV, REPO

CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and Path(p).exists()), None)
REQUIRED = bool(os.environ.get("CI") or os.environ.get("NMSBENCH_REQUIRE_BROWSER"))
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def _need(condition: bool, reason: str) -> None:
    if not condition:
        if REQUIRED:
            pytest.fail(f"{reason} (CI demands the browser test; README's test command installs chromium)")
        pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """The dashboard on a free localhost port, serving the committed results plus the
    frozen pipeline run of tests/data (results/ may hold no pipeline rows)."""
    port = _free_port()
    log = open(tmp_path / "streamlit.log", "w")
    folder = tmp_path / "results"
    folder.mkdir()
    for path in [*(REPO / "results").glob("*.csv"), *(REPO / "results").glob("*.json"), PIPELINE_CSV]:
        shutil.copy(path, folder)
    env = {**os.environ, "NMSBENCH_RESULTS_DIR": str(folder)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(REPO / "app.py"), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 45
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read().strip() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"streamlit did not come up: {(tmp_path / 'streamlit.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


# True once Streamlit's script run is over and the page's first plotly chart is the wanted
# figure with at least `lines` drawn SVG line paths (each with real path data).
CHARTS_READY = """({figure, lines}) => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    const plot = document.querySelector('.js-plotly-plot');
    if (!plot || !plot.layout || !plot.layout.meta || plot.layout.meta.figure !== figure) return false;
    const drawn = [...plot.querySelectorAll('.scatterlayer .trace path.js-line')]
        .filter(p => (p.getAttribute('d') || '').length > 20);
    return drawn.length >= lines;
}"""


def _not_blank(png: bytes) -> int:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        pixels = np.asarray(image.convert("RGB").resize((96, 96))).reshape(-1, 3)
    return len(np.unique(pixels, axis=0))


def test_dashboard_renders_in_chromium(server, tmp_path):
    _need(CHROMIUM is not None, "Debian chromium is not installed (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need(False, "playwright is not installed (pip install -e '.[dev]')")
    shots = Path(os.environ.get("NMSBENCH_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 2400})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server, wait_until="domcontentloaded")

            # the curves: once the script has run, plotly has drawn SVG lines with real path data
            page.wait_for_function(CHARTS_READY, arg={"figure": "time_vs_n", "lines": 6}, timeout=90_000)
            first = page.locator(".js-plotly-plot").first
            assert first.evaluate("el => el.layout.meta.figure") == "time_vs_n"
            assert first.evaluate("el => el.layout.yaxis.type") == "log" and first.evaluate("el => el.layout.xaxis.type") == "log"
            box = first.bounding_box()
            assert box and box["width"] > 400 and box["height"] > 300, box
            assert "Median time vs N" in page.inner_text("body")
            curves = page.screenshot()
            (shots / "dashboard-curves.png").write_bytes(curves)
            assert _not_blank(curves) > 50, "the curves screenshot is (nearly) blank"

            # the pipeline view: time per image vs batch, then the stage bars below it
            page.get_by_role("tab", name="Pipeline").click()
            page.wait_for_function(CHARTS_READY, arg={"figure": "pipeline_time_per_image", "lines": 8}, timeout=90_000)
            charts = page.locator(".js-plotly-plot")
            assert charts.nth(1).evaluate("el => el.layout.meta.figure") == "pipeline_stages"
            assert charts.nth(1).locator(".barlayer .trace").count() >= 2
            assert "Which stage costs what" in page.inner_text("body") and "speedup vs numpy" in page.inner_text("body")
            pipeline = page.screenshot()
            (shots / "dashboard-pipeline.png").write_bytes(pipeline)
            assert _not_blank(pipeline) > 50, "the pipeline screenshot is (nearly) blank"

            # the differences view: a canvas of coloured boxes and the agreement matrix
            page.get_by_role("tab", name="Suppression differences").click()
            page.wait_for_function(CHARTS_READY, arg={"figure": "boxes_canvas", "lines": 100}, timeout=90_000)
            canvas = page.locator(".js-plotly-plot").first
            assert canvas.locator(".scatterlayer .trace path.js-fill").count() >= 2
            legend = " ".join(canvas.locator(".legend text.legendtext").all_text_contents())
            assert "kept by both" in legend and "suppressed by both" in legend, legend
            heat = page.locator(".js-plotly-plot").nth(1)
            assert heat.evaluate("el => el.layout.meta.figure") == "agreement" and heat.evaluate("el => el.data[0].type") == "heatmap"
            diff = page.screenshot()
            (shots / "dashboard-differences.png").write_bytes(diff)
            assert _not_blank(diff) > 50, "the differences screenshot is (nearly) blank"
            assert not [e for e in errors if "plotly" in e.lower()], errors
        finally:
            browser.close()
