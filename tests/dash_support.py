"""Shared data for the dashboard, figure, table and export tests.

``SAMPLES`` (tests/data) are frozen excerpts of the first H200 reference runs (schema 1:
CUDA rows with device timers, peak memory and skipped implementations; host CPU rows),
so the tests' numbers do not move when results/ is re-measured; ``COMMITTED`` are whatever
runs results/ holds now (tests on them check only that everything renders);
``cpu_results`` is a tiny CPU-only sweep made here through the real CLI, once per session;
``PIPELINE_CSV`` a small frozen ``nmsbench pipeline`` run of the development machine;
``diff_results`` an ``nmsbench diff`` file made here through the real command;
``small_run`` accuracy rows (``nmsbench accuracy``, results schema 8) made up with known
fronts, for the accuracy views.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
COMMITTED = sorted(p for p in RESULTS.glob("*.csv") if "conformance" not in p.name)  # conformance reports: another schema
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

    pipeline = frame["benchmark"] == "pipeline"
    frame = frame.assign(gpu=frame["gpu"].astype(object).where(~pipeline, "made-up GPU"))  # as a GPU machine's CPU rows
    twin = frame[(frame["benchmark"] == "pipeline") & (frame["impl"] != "numpy")].copy()
    twin["device"] = "cuda"
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
    from nmsbench.cli import diff_command

    out = tmp_path_factory.mktemp("diff-run") / "diff-chain-256.json"
    result = CliRunner().invoke(diff_command, ["--scenario", "chain", "--n", "256", "--overlap", "0.6", "--impl",
                                               ",".join(DIFF_IMPLS), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


# --- made-up accuracy rows (benchmark = accuracy): known numbers, known fronts ---------------

FAMILIES = {"torchvision": "hard", "hard_fused": "hard", "soft_nms": "soft", "matrix_naive": "matrix", "allpairs": "allpairs"}
LINEAR, GAUSSIAN = '{"kernel": "linear", "sigma": 0.5}', '{"kernel": "gaussian", "sigma": 0.5}'


def accuracy_row(impl: str, time_us: float, ap: float, *, scenario: str = "scenes-crowd", iou: float = 0.5,
                 params: str = "{}", device: str = "cpu", status: str = "ok", **metrics) -> dict:
    """One results row of `nmsbench accuracy` as the schema has it; the metrics other than
    AP default to numbers derived from it, so each is told apart in the tables."""
    import json

    from nmsbench.results import COLUMNS, SCHEMA_VERSION

    row = {c: "" for c in COLUMNS}
    row.update(
        schema_version=SCHEMA_VERSION, benchmark="accuracy", impl=impl, family=FAMILIES.get(impl, "hard"), device=device,
        dtype="float32", timer="wall", scenario=scenario, n=4000, iou_threshold=iou, seed=0, params=params, status=status,
        error="" if status == "ok" else "made-up failure", median_us=time_us if status == "ok" else float("nan"),
        iqr_us=time_us * 0.05, runs=200, kept=900, ap=ap, ap50=min(ap + 0.2, 1), ap75=ap * 0.9, ar100=min(ap + 0.1, 1),
        ar100_crowded=ap * 0.8 if scenario == "scenes-crowd" else float("nan"), images=200, detections=18000,
        source_params=json.dumps({"objects": 8, "jitter": 0.1}), machine="box", cpu="Some CPU", git_commit="abc1234",
        timestamp="2026-12-01T00:00:00+00:00",
    )
    row.update(metrics)
    return row


def frame_of(rows):
    """The rows as the views get them: written as a results CSV and loaded."""
    import io

    from nmsbench import tables

    return tables.load_results([io.BytesIO(accuracy_csv(rows))], names=["made-up.csv"])


def accuracy_csv(rows) -> bytes:
    """The rows as a results CSV."""
    import pandas as pd

    from nmsbench.results import COLUMNS

    return pd.DataFrame(rows, columns=COLUMNS).to_csv(index=False).encode()


# a small run: two sources; torchvision and hard_fused keep the same boxes (same AP), soft_nms
# has two kernels, matrix_naive ignores the IoU threshold; one skipped row
SETTINGS = [
    ("torchvision", "{}", 0.5, 310.0, 0.402), ("torchvision", "{}", 0.7, 330.0, 0.371),
    ("hard_fused", "{}", 0.5, 95.0, 0.402), ("hard_fused", "{}", 0.7, 97.0, 0.371),
    ("soft_nms", LINEAR, 0.5, 900.0, 0.431), ("soft_nms", GAUSSIAN, 0.5, 1400.0, 0.447),
    ("matrix_naive", '{"kernel": "gaussian"}', 0.5, 120.0, 0.395), ("allpairs", "{}", 0.5, 60.0, 0.310),
]


def small_run() -> list[dict]:
    rows = []
    for scenario, shift in (("scenes-crowd", 0.0), ("scenes-sparse", 0.15)):
        for impl, params, iou, time_us, ap in SETTINGS:
            rows.append(accuracy_row(impl, time_us, ap + shift, scenario=scenario, iou=iou, params=params))
    rows.append(accuracy_row("bitmask_classic", 0, 0, status="skipped"))
    return rows
