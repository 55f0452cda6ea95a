"""How long the dashboard takes to open, as a user meets it: runs the browser test
(tests/test_browser.py, a fresh `streamlit run app.py` on the committed shelf, seen by
headless Chromium) a few times and reports each view's time against its target. The test
itself asserts no time (CI machines are shared and slow); this is where the targets live.

Beside each run (alternating which goes first) it times the machine's floor the same way:
a fresh server whose page holds one small plotly chart and computes nothing. Most of that
is the browser loading Streamlit's scripts and plotly.js (about 5 MB), so the floor says
how much of the first chart's time any Streamlit page with a chart would take here.

    python benchmarks/dashboard_load.py --repeat 5

Run it on a quiet machine; append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST = "tests/test_browser.py::test_dashboard_renders_in_chromium"
TARGETS_S = {"first chart": 5.0, "Pipeline": 4.0, "Suppression differences": 4.0, "Environment & data": 4.0,
             "Curves again": 4.0}


def one_run(folder: Path) -> dict[str, float]:
    """The times of one run of the browser test (it writes them to dashboard-times.txt)."""
    env = dict(os.environ, NMSBENCH_SCREENSHOTS=str(folder), NMSBENCH_REQUIRE_BROWSER="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST], cwd=REPO, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the browser test failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    times = {}
    for line in (folder / "dashboard-times.txt").read_text().splitlines():
        name, _, value = line.rpartition(": ")
        times[name] = float(value)
    return times


FLOOR_APP = """
import plotly.graph_objects as go
import streamlit as st

fig = go.Figure([go.Scatter(x=list(range(10)), y=[i * j for j in range(10)], mode="lines+markers") for i in range(8)])
fig.update_layout(meta={"figure": "time_vs_n"})
st.plotly_chart(fig)
"""


def floor_run(folder: Path) -> float:
    """Seconds from opening a fresh server's page to its one small chart drawn, measured as
    the browser test measures the dashboard's first chart (its flags and condition)."""
    sys.path.insert(0, str(REPO / "tests"))
    import test_browser  # its Chromium flags and the first-chart condition
    from playwright.sync_api import sync_playwright

    app = folder / "floor.py"
    app.write_text(FLOOR_APP)
    with socket.socket() as probe:  # a free localhost port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true",
                               "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats",
                               "false", "--server.fileWatcherType", "none"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read().strip() == b"ok":
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    sys.exit("the floor page's streamlit server did not come up")
            time.sleep(0.3)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=test_browser.CHROMIUM, args=test_browser.FLAGS)
            try:
                page = browser.new_page(viewport={"width": 1600, "height": 2400})
                start = time.monotonic()
                page.goto(url, wait_until="commit")
                page.wait_for_function(test_browser.FIRST_DRAWN, arg={"figure": "time_vs_n", "lines": 6}, timeout=90_000,
                                       polling=50)
                return time.monotonic() - start
            finally:
                browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of the browser test (the median is reported)")
    args = parser.parse_args()
    runs, floors = [], []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as folder:
            if i % 2:
                runs.append(one_run(Path(folder)))
                floors.append(floor_run(Path(folder)))
            else:
                floors.append(floor_run(Path(folder)))
                runs.append(one_run(Path(folder)))
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in runs[-1].items() if k in TARGETS_S)
              + f"; floor {floors[-1]:.2f} s")
    print(f"\n{'view':<26}{'median s':>10}{'min s':>8}{'max s':>8}{'target s':>10}  verdict")
    for view, target in TARGETS_S.items():
        values = [run[view] for run in runs]
        median = statistics.median(values)
        verdict = "meets" if median <= target else "misses"
        print(f"{view:<26}{median:>10.2f}{min(values):>8.2f}{max(values):>8.2f}{target:>10.1f}  {verdict}")
    print(f"{'floor (one small chart)':<26}{statistics.median(floors):>10.2f}{min(floors):>8.2f}{max(floors):>8.2f}"
          f"{'':>10}  the same measure on a page that computes nothing")
    ratios = [run["first chart"] / floor for run, floor in zip(runs, floors)]
    print(f"first chart / floor, run by run: median {statistics.median(ratios):.2f} "
          f"({', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
