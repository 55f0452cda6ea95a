"""Shared data for the dashboard, figure, table and export tests.

``SAMPLES`` (tests/data) are frozen excerpts of the first H200 reference runs (schema 1:
CUDA rows with device timers, peak memory and skipped implementations; host CPU rows),
so the tests' numbers do not move when results/ is re-measured; ``COMMITTED`` are whatever
runs results/ holds now (tests on them check only that everything renders);
``cpu_results`` is a tiny CPU-only sweep made here through the real CLI, once per session;
``PIPELINE_CSV`` a small frozen ``nmsbench pipeline`` run of the development machine;
``diff_results`` an ``nmsbench diff`` file made here through the real command.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
COMMITTED = sorted(RESULTS.glob("*.csv"))
DATA = REPO / "tests" / "data"
CUDA_CSV = DATA / "h200-cuda.csv"      # chain, clustered, crowd; torchvision + matrix_naive ok, the rest skipped
CPU_CSV = DATA / "h200-host-cpu.csv"   # chain, clustered, crowd; six implementations
SAMPLES = [CPU_CSV, CUDA_CSV]
# `nmsbench pipeline --batch 1,8 --conf 0.25,0.001 --threads 1 --pipeline numpy,torch_batched_nms,torch+bitmask_two_phase,
# torch+allpairs` on the 2-core development machine (CPU only; real and synthetic; the sidecar JSON has the command)
PIPELINE_CSV = DATA / "pipeline-devbox-cpu.csv"


def with_made_up_cuda_rows(frame, factor: float = 4.0):
    """``frame`` plus, for every pipeline but numpy, a copy of its rows on device cuda that
    take 1/factor of the time: NOT a measurement, only a known ratio for tests of the CPU
    vs GPU views (no GPU rows are committed that were not measured on a GPU)."""
    import pandas as pd

    twin = frame[(frame["benchmark"] == "pipeline") & (frame["impl"] != "numpy")].copy()
    twin["device"] = "cuda"
    twin["gpu"] = "made-up GPU"
    twin["median_us"] = twin["median_us"] / factor
    twin["iqr_us"] = twin["iqr_us"] / factor
    if "hardware" in twin.columns:
        twin["hardware"] = twin["machine"] + ": made-up GPU"
    return pd.concat([frame, twin], ignore_index=True)


@pytest.fixture(scope="session")
def cpu_results(tmp_path_factory) -> Path:
    """A CPU-only results CSV: 3 implementations x 2 scenarios x N = 16, 32, 64."""
    from nmsbench.cli import main  # here, not at import: the browser and app tests need no CLI

    out = tmp_path_factory.mktemp("cpu-run") / "cpu.csv"
    result = CliRunner().invoke(main, [
        "sweep", "--n", "16..64", "--impl", "torchvision,allpairs,matrix_naive", "--scenario", "uniform,chain",
        "--min-run-time", "0.005", "--threads", "1", "--out", str(out),
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def pipeline_results(tmp_path_factory) -> Path:
    """A schema-2 file of `nmsbench pipeline` rows (benchmark=pipeline, batch, stage)."""
    from nmsbench.cli import main

    out = tmp_path_factory.mktemp("pipeline-run") / "pipeline.csv"
    result = CliRunner().invoke(main, [
        "pipeline", "--batch", "1", "--source", "synthetic", "--pipeline", "numpy,torch_batched_nms",
        "--min-run-time", "0.005", "--threads", "1", "--out", str(out),
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


DIFF_IMPLS = ["torchvision", "allpairs", "bitmask_two_phase", "matrix_naive"]


@pytest.fixture(scope="session")
def diff_results(tmp_path_factory) -> Path:
    """`nmsbench diff` on chain boxes (N = 256, where greedy and all-pairs differ) with a
    Matrix NMS variant among the implementations, on the CPU."""
    from nmsbench.diff_cli import diff_command

    out = tmp_path_factory.mktemp("diff-run") / "diff-chain-256.json"
    result = CliRunner().invoke(diff_command, ["--scenario", "chain", "--n", "256", "--overlap", "0.6", "--impl",
                                               ",".join(DIFF_IMPLS), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out
