"""End to end: `streamlit run app.py` on localhost, seen by a real headless Chromium.

Uses Debian's chromium (README's test command installs it) through playwright, never a
browser that playwright downloads. The server is fresh (its first script run is part of
the time to the first chart) and serves the committed reference shelf. The test checks that
every view renders; it asserts no time (CI machines are shared and slow): the times a user
meets on opening the dashboard are written to dashboard-times.txt, and
benchmarks/dashboard_load.py runs this test and reports them against their targets.
Where chromium or playwright is missing the test skips
with the reason, except under CI (or NMSBENCH_REQUIRE_BROWSER=1), where that is a failure.
Screenshots go to $NMSBENCH_SCREENSHOTS when it is set (else the test's tmp folder).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
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


def _serve(tmp_path, shelf_files, runs=None):
    """The dashboard on a free localhost port, serving ``shelf_files`` of the committed
    reference shelf plus, as a user's own run under runs/, the frozen pipeline run of
    tests/data (the shelf may hold no pipeline rows), or what ``runs(folder)`` writes
    instead; yields its URL."""
    port = _free_port()
    log = open(tmp_path / "streamlit.log", "w")
    folder = tmp_path / "results"
    (folder / "runs").mkdir(parents=True)
    for path in shelf_files:
        shutil.copy(path, folder)
    if runs is None:
        shutil.copy(PIPELINE_CSV, folder / "runs")
    else:
        runs(folder)
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


SHELF = [*(REPO / "results").glob("*.csv"), *(REPO / "results").glob("*.json")]


@pytest.fixture
def server(tmp_path):
    """The dashboard serving the whole committed reference shelf (its CSVs, sidecars and diff files)."""
    yield from _serve(tmp_path, SHELF)


@pytest.fixture
def server_without_accuracy(tmp_path):
    """The dashboard serving the shelf without its accuracy run (a test uploads its own rows)."""
    yield from _serve(tmp_path, [path for path in SHELF if "accuracy" not in path.name])


# the Curves view's chart tabs (all but the first) and the figure each draws
CURVE_TABS = {"Speedup": "speedup_vs_n", "Wall vs GPU time": "wall_vs_device", "Peak memory": "memory_vs_n",
              "Time vs overlap": "time_vs_overlap"}

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

# True once the page's first plotly chart is the wanted figure with at least `lines` drawn
# line paths, while the script may still be drawing the charts below it: what a user sees.
FIRST_DRAWN = """({figure, lines}) => {
    const plot = document.querySelector('.js-plotly-plot');
    if (!plot || !plot.layout || !plot.layout.meta || plot.layout.meta.figure !== figure) return false;
    return [...plot.querySelectorAll('.scatterlayer .trace path.js-line')]
        .filter(p => (p.getAttribute('d') || '').length > 20).length >= lines;
}"""

# True once the script run is over and a table under a heading saying ``heading`` is on the page.
TABLE_READY = """(heading) => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    const panel = [...document.querySelectorAll('[role="tabpanel"]')].find(p => p.offsetParent !== null);
    return !!panel && panel.innerText.includes(heading) && !!panel.querySelector('[data-testid="stDataFrame"]');
}"""


def _not_blank(png: bytes) -> int:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        pixels = np.asarray(image.convert("RGB").resize((96, 96))).reshape(-1, 3)
    return len(np.unique(pixels, axis=0))


def _timed(page, condition: str, arg, timeout_ms: int = 90_000) -> float:
    start = time.monotonic()
    page.wait_for_function(condition, arg=arg, timeout=timeout_ms, polling=50)
    return time.monotonic() - start


@contextlib.contextmanager
def _browser_page(tmp_path, height: int):
    """(page, its page errors, the screenshot folder): a Chromium page 1600 px wide, closed
    afterwards; the test skipped (failed under CI) for want of chromium or playwright."""
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
            page = browser.new_page(viewport={"width": 1600, "height": height})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page, errors, shots
        finally:
            browser.close()


def test_dashboard_renders_in_chromium(server, tmp_path):
    times: dict[str, float] = {}
    with _browser_page(tmp_path, 2400) as (page, errors, shots):
        start = time.monotonic()
        page.goto(server, wait_until="commit")

        # the curves: plotly has drawn the first chart's SVG lines with real path data; then the script ends
        page.wait_for_function(FIRST_DRAWN, arg={"figure": "time_vs_n", "lines": 6}, timeout=90_000, polling=50)
        times["first chart"] = time.monotonic() - start
        page.wait_for_function(CHARTS_READY, arg={"figure": "time_vs_n", "lines": 6}, timeout=90_000, polling=50)
        times["whole first view"] = time.monotonic() - start
        first = page.locator(".js-plotly-plot").first
        assert first.evaluate("el => el.layout.meta.figure") == "time_vs_n"
        assert first.evaluate("el => el.layout.yaxis.type") == "log" and first.evaluate("el => el.layout.xaxis.type") == "log"
        box = first.bounding_box()
        assert box and box["width"] > 400 and box["height"] > 300, box
        assert "Median time vs N" in page.inner_text("body")
        # one legend entry per implementation and machine, not per commit; at most 12 a chart in the default view
        legend = first.locator(".legend .traces").count()
        lines = first.evaluate("el => new Set(el.data.filter(t => t.meta && t.meta.role === 'line').map(t => t.name)).size")
        keys = first.evaluate("el => el.data.filter(t => t.meta && t.meta.role === 'key').length")  # "hollow: noisy"
        times["legend entries"] = legend
        assert legend == lines + keys and lines <= 12 and keys <= 1, (legend, lines, keys)
        assert page.locator(".js-plotly-plot").count() == 1  # one chart at a time: the others are tabs
        curves = page.screenshot()
        (shots / "dashboard-curves.png").write_bytes(curves)
        assert _not_blank(curves) > 50, "the curves screenshot is (nearly) blank"
        # every chart tab draws its chart with at most 12 legend entries ("hollow: noisy" left out)
        for tab, figure in CURVE_TABS.items():
            page.get_by_role("tab", name=tab, exact=True).click()
            page.wait_for_function(CHARTS_READY, arg={"figure": figure, "lines": 1}, timeout=90_000, polling=50)
            chart = page.locator(".js-plotly-plot").first
            entries = chart.locator(".legend text.legendtext").all_text_contents()
            shown = [e for e in entries if not e.startswith("hollow marker")]
            assert len(shown) <= 12, (figure, shown)
            if figure == "time_vs_overlap":  # it opens at the N most lines have; its caption names each line without it
                drawn = chart.evaluate("el => el.data.filter(t => t.meta && t.meta.role === 'line').length")
                named = re.search(r"Not measured at N = \d+: (.*?)\.(?:\s|$)", page.inner_text("body"))
                missing = named.group(1).split(", ") if named else []
                assert drawn + len(missing) == lines, (drawn, missing, lines)
        page.get_by_role("tab", name="Time vs N", exact=True).click()

        # the pipeline view: time per image vs batch, then the stage bars below it
        page.get_by_role("tab", name="Pipeline").click()
        times["Pipeline"] = _timed(page, CHARTS_READY, {"figure": "pipeline_time_per_image", "lines": 8})
        charts = page.locator(".js-plotly-plot")
        assert charts.nth(1).evaluate("el => el.layout.meta.figure") == "pipeline_stages"
        assert charts.nth(1).locator(".barlayer .trace").count() >= 2
        assert "Which stage costs what" in page.inner_text("body") and "speedup vs numpy" in page.inner_text("body")
        pipeline = page.screenshot()
        (shots / "dashboard-pipeline.png").write_bytes(pipeline)
        assert _not_blank(pipeline) > 50, "the pipeline screenshot is (nearly) blank"

        # the differences view: a canvas of coloured boxes read from a diff file, and the agreement matrix
        page.get_by_role("tab", name="Suppression differences").click()
        times["Suppression differences"] = _timed(page, CHARTS_READY, {"figure": "boxes_canvas", "lines": 3})
        canvas = page.locator(".js-plotly-plot").first
        assert canvas.locator(".scatterlayer .trace path.js-fill").count() >= 2
        legend_text = " ".join(canvas.locator(".legend text.legendtext").all_text_contents())
        assert "kept by both" in legend_text and "suppressed by both" in legend_text, legend_text
        canvas_width = canvas.bounding_box()["width"]
        heat = page.locator(".js-plotly-plot").nth(1)
        assert heat.evaluate("el => el.layout.meta.figure") == "agreement" and heat.evaluate("el => el.data[0].type") == "heatmap"
        diff = page.screenshot()
        (shots / "dashboard-differences.png").write_bytes(diff)
        assert _not_blank(diff) > 50, "the differences screenshot is (nearly) blank"
        assert canvas_width > 600, canvas_width  # the canvas takes the wider column

        # the environment: one compact table of the runs, the commands folded away
        page.get_by_role("tab", name="Environment & data").click()
        times["Environment & data"] = _timed(page, TABLE_READY, "The selected runs")
        (shots / "dashboard-environment.png").write_bytes(page.screenshot())
        height = page.locator('[data-testid="stMainBlockContainer"]').bounding_box()["height"]
        assert height < 1600, height  # a table per run, not a page of command blocks

        # back to the curves: drawn again within the same bound
        page.get_by_role("tab", name="Curves").click()
        times["Curves again"] = _timed(page, CHARTS_READY, {"figure": "time_vs_n", "lines": 6})
        assert not [e for e in errors if "plotly" in e.lower()], errors
    print("browser times (s):", {k: round(v, 2) for k, v in times.items()})
    (shots / "dashboard-times.txt").write_text("".join(f"{k}: {v:.2f}\n" for k, v in times.items()))


# True once the script run is over and the page's first plotly chart is the Pareto figure
# with at least `points` markers drawn.
PARETO_READY = """(points) => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
    const plot = document.querySelector('.js-plotly-plot');
    if (!plot || !plot.layout || !plot.layout.meta || plot.layout.meta.figure !== 'pareto') return false;
    return plot.querySelectorAll('.scatterlayer .trace .points path.point').length >= points;
}"""


def test_accuracy_tab_renders_in_chromium(server_without_accuracy, tmp_path):
    """Accuracy rows uploaded in the sidebar: the Accuracy tab draws their Pareto chart (a
    marker per setting, the front's step line), the table of AP and AR per variant, and a
    point's hover gives its numbers."""
    from dash_support import SETTINGS, accuracy_csv, small_run

    upload = tmp_path / "accuracy-made-up.csv"
    upload.write_bytes(accuracy_csv(small_run()))
    with _browser_page(tmp_path, 1800) as (page, errors, shots):
        page.goto(server_without_accuracy, wait_until="commit")
        page.wait_for_function(CHARTS_READY, arg={"figure": "time_vs_n", "lines": 6}, timeout=90_000, polling=50)
        page.locator('[data-testid="stSidebar"] input[type="file"]').set_input_files(str(upload))
        page.get_by_role("tab", name="Accuracy").click()
        page.wait_for_function(PARETO_READY, arg=2 * len(SETTINGS), timeout=90_000, polling=50)
        chart = page.locator(".js-plotly-plot").first
        assert chart.evaluate("el => el.layout.xaxis.type") == "log"
        points = chart.locator(".scatterlayer .trace .points path.point")
        assert points.count() == 2 * len(SETTINGS) + chart.evaluate("el => el.layout.meta.front")  # markers and rings
        fronts = chart.locator(".scatterlayer .trace path.js-line")  # the two sources' step lines
        assert fronts.count() == 2 and all(len(fronts.nth(i).get_attribute("d") or "") > 20 for i in range(2))
        legend = " ".join(chart.locator(".legend text.legendtext").all_text_contents())
        assert "Pareto front" in legend and "hard_fused" in legend and "bitmask_classic" not in legend
        body = page.inner_text("body")
        assert "AP@[.5:.95] vs NMS time per image" in body and "AP and AR per variant" in body
        # the table's component loads its script after the chart: waited for, not counted at once
        page.locator('[role="tabpanel"] [data-testid="stDataFrame"]').first.wait_for(timeout=60_000)
        # the hover of hard_fused's fastest point (the crowd panel's front) gives its numbers
        # d3 binds each trace group to its trace and each marker to its point
        index = chart.evaluate("""el => [...el.querySelectorAll('.scatterlayer .trace .points path.point')].findIndex(p => {
            const trace = (p.closest('.trace').__data__ || [{}])[0].trace;
            return trace && trace.meta && trace.meta.impl === 'hard_fused' && trace.xaxis === 'x' && p.__data__.x === 95;
        })""")
        assert index >= 0
        point = points.nth(index)
        point.hover(force=True)
        page.wait_for_selector(".hoverlayer .hovertext", timeout=10_000)
        hover = " ".join(page.locator(".hoverlayer .hovertext").all_text_contents())
        assert "hard_fused" in hover and "95 µs per image" in hover and "on the Pareto front" in hover, hover
        shot = page.screenshot(full_page=True)
        (shots / "dashboard-accuracy.png").write_bytes(shot)
        assert _not_blank(shot) > 50, "the accuracy screenshot is (nearly) blank"
        assert not [e for e in errors if "plotly" in e.lower()], errors


def test_the_committed_accuracy_run_renders_in_chromium(server, tmp_path):
    """The reference shelf's accuracy run (every implementation, three scene sets, CPU and
    CUDA): the Accuracy tab draws a panel per source and device, every measured setting a
    marker, each panel's front a step line."""
    import pandas as pd

    committed = pd.read_csv(REPO / "results" / "h200-accuracy.csv")
    measured = committed[(committed.status == "ok") & committed.ap.notna()]
    settings = len(measured.drop_duplicates(["scenario", "device", "impl", "params", "iou_threshold"]))
    panels = len(measured.drop_duplicates(["scenario", "device"]))
    with _browser_page(tmp_path, 2400) as (page, _, shots):
        page.goto(server, wait_until="commit")
        page.wait_for_function(CHARTS_READY, arg={"figure": "time_vs_n", "lines": 6}, timeout=90_000, polling=50)
        page.get_by_role("tab", name="Accuracy").click()
        page.wait_for_function(PARETO_READY, arg=settings, timeout=90_000, polling=50)
        chart = page.locator(".js-plotly-plot").first
        front = chart.evaluate("el => el.layout.meta.front")
        assert chart.locator(".scatterlayer .trace .points path.point").count() == settings + front
        assert chart.locator(".scatterlayer .trace path.js-line").count() == panels
        shot = page.screenshot(full_page=True)
        (shots / "dashboard-accuracy-committed.png").write_bytes(shot)
        assert _not_blank(shot) > 50, "the screenshot is (nearly) blank"


def _two_runs(folder):
    """A made-up base run and a newer one under runs/, with raw samples (see compare_support)."""
    from compare_support import ENV_A, ENV_B, timed, write_run

    scenarios = ("uniform", "clustered")
    write_run(folder / "base.csv", [timed(100 * n / 256, 10 * n + i, n=n, scenario=s)
                                    for i, s in enumerate(scenarios) for n in (256, 512, 1024, 2048)], ENV_A)
    write_run(folder / "runs" / "new.csv", [timed(100 * n / 256 * (1.3 if n == 512 else 0.7 if n == 2048 else 1),
                                                  10 * n + i + 5, n=n, scenario=s, **({"kept": 9} if n == 1024 and i else {}))
                                            for i, s in enumerate(scenarios) for n in (256, 512, 1024, 2048)], ENV_B)


@pytest.fixture
def server_with_two_runs(tmp_path):
    """The dashboard serving two made-up runs only."""
    yield from _serve(tmp_path, [], runs=_two_runs)


def test_compare_runs_renders_in_chromium(server_with_two_runs, tmp_path):
    """The Compare runs view: the verdict counts, then the table, rows to look at first."""
    with _browser_page(tmp_path, 1400) as (page, errors, shots):
        page.goto(server_with_two_runs, wait_until="commit")
        page.wait_for_function(CHARTS_READY, arg={"figure": "time_vs_n", "lines": 1}, timeout=90_000, polling=50)
        page.get_by_role("tab", name="Compare runs").click()
        page.wait_for_function(TABLE_READY, arg="Two runs, case by case", timeout=90_000, polling=50)
        panel = page.locator('[role="tabpanel"]:visible')
        metrics = dict(zip(panel.locator('[data-testid="stMetricLabel"]').all_inner_texts(),
                           panel.locator('[data-testid="stMetricValue"]').all_inner_texts()))
        assert metrics == {"changed": "1", "slower": "2", "faster": "2", "same": "3"}, metrics
        shot = page.screenshot(full_page=True)
        (shots / "dashboard-compare.png").write_bytes(shot)
        assert _not_blank(shot) > 50, "the compare screenshot is (nearly) blank"
        assert not errors, errors
