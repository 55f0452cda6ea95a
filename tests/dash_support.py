"""Shared data for the dashboard, figure, table and export tests.

``committed`` are the reference runs under results/ (CUDA and host CPU of one H200
machine); ``cpu_results`` is a tiny CPU-only sweep made here through the real CLI, once
per test session.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nmsbench.cli import main

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
COMMITTED = sorted(RESULTS.glob("*.csv"))
CUDA_CSV = next(p for p in COMMITTED if "cuda" in p.name)
CPU_CSV = next(p for p in COMMITTED if "cpu" in p.name)


@pytest.fixture(scope="session")
def cpu_results(tmp_path_factory) -> Path:
    """A CPU-only results CSV: 3 implementations x 2 scenarios x N = 16, 32, 64."""
    out = tmp_path_factory.mktemp("cpu-run") / "cpu.csv"
    result = CliRunner().invoke(main, [
        "sweep", "--n", "16..64", "--impl", "torchvision,allpairs,matrix_naive", "--scenario", "uniform,chain",
        "--min-run-time", "0.005", "--threads", "1", "--out", str(out),
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out
