"""How long the dashboard takes to open, as a user meets it: runs the browser test
(tests/test_browser.py, a fresh `streamlit run app.py` on the committed shelf, seen by
headless Chromium) a few times and reports each view's time against its target. The test
itself asserts no time (CI machines are shared and slow); this is where the targets live.

    python benchmarks/dashboard_load.py --repeat 3

Run it on a quiet machine; append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of the browser test (the median is reported)")
    args = parser.parse_args()
    runs = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as folder:
            runs.append(one_run(Path(folder)))
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in runs[-1].items() if k in TARGETS_S))
    print(f"\n{'view':<26}{'median s':>10}{'min s':>8}{'max s':>8}{'target s':>10}  verdict")
    for view, target in TARGETS_S.items():
        values = [run[view] for run in runs]
        median = statistics.median(values)
        verdict = "meets" if median <= target else "misses"
        print(f"{view:<26}{median:>10.2f}{min(values):>8.2f}{max(values):>8.2f}{target:>10.1f}  {verdict}")


if __name__ == "__main__":
    main()
