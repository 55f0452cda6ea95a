"""Every entry point answers malformed input with one clear message: the Python API, the
pipeline API, the file scenario, the command line (non-zero exit, no traceback) and the
dashboard upload. (Fuzzing of the API and the loaders: test_fuzz.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import nmsbench
from nmsbench import datasets
from nmsbench.cli import main
from nmsbench.pipeline import PipelineConfig, run_pipeline


def run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_boxes_whose_area_overflows_are_refused(dtype):
    big = torch.finfo(dtype).max
    boxes = torch.tensor([[0, 0, 1, 1], [0, 0, big, 2]], dtype=dtype)
    with pytest.raises(ValueError, match=r"boxes too large: row 1's area \(x2 - x1\) \* \(y2 - y1\) overflows"):
        nmsbench.run_nms("torchvision", boxes, torch.tensor([0.9, 0.8], dtype=dtype))
    wide = torch.tensor([[-big / 2, 0, big / 2 * 1.5, 1]], dtype=dtype)  # the width itself overflows
    with pytest.raises(ValueError, match="row 0's area"):
        nmsbench.validate_nms_inputs(wide, torch.tensor([0.5], dtype=dtype))


def test_half_precision_areas_are_checked_in_float32():
    boxes = torch.tensor([[0, 0, 300, 300]], dtype=torch.float16)  # area 90,000 > float16's 65,504
    nmsbench.validate_nms_inputs(boxes, torch.tensor([0.5], dtype=torch.float16))


def _raw(dtype=np.float32):
    raw = np.zeros((1, 4, 7), dtype)
    raw[..., :2], raw[..., 2:4], raw[..., 4:] = 100, 20, 0.9
    return raw


@pytest.mark.parametrize("call, message", [
    (lambda: run_pipeline("numpy", _raw(), {"conf_threshold": 0.1}), "config must be a PipelineConfig, got dict"),
    (lambda: run_pipeline("numpy", _raw(), device="tpu"), "device must be cpu or cuda, got 'tpu'"),
    (lambda: run_pipeline("numpy", _raw(np.float64) * np.array([1e300, 1, 1, 1, 1, 1, 1])),
     "raw detector output overflows float32, the pipelines' dtype (first at image 0, row 0, column 0"),
    (lambda: run_pipeline("numpy", _raw()[..., :5]), "must have shape [B, R, 5 + classes]"),
    (lambda: run_pipeline("numpy", _raw().astype(np.int32)), "must be floating point"),
    (lambda: run_pipeline("numpy", [[0.0] * 7]), "must be a numpy array or torch tensor, got list"),
])
def test_pipeline_api_bad_input(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert message in str(e.value)


def test_pipeline_api_empty_input_is_valid():
    assert run_pipeline("numpy", np.zeros((0, 5, 7), np.float32)) == []
    assert [len(d.rows) for d in run_pipeline("torch_batched_nms", np.zeros((2, 0, 7), np.float32),
                                             PipelineConfig())] == [0, 0]


def test_file_scenario_asking_for_more_boxes_than_the_file_holds(tmp_path):
    path = tmp_path / "b.npz"
    np.savez(path, boxes=np.array([[0, 0, 1, 1]], np.float32), scores=np.array([0.5], np.float32))
    with pytest.raises(ValueError, match="asked for n=2 boxes but the file has only 1"):
        datasets.generate("file", 2, path=str(path))


@pytest.mark.parametrize("args, message", [
    (["sweep", "--seed", "-1"], "-1 is not in the range x>=0"),
    (["sweep", "--n", "4", "--case-timeout", "0"], "the case timeout must be a positive number of seconds"),
    (["sweep", "--n", "4", "--repeat-noisy", "-2"], "-2 is not in the range x>=0"),
    (["sweep", "--n", "4", "--resume", "x.csv", "--out", "y.csv"], "--resume FILE writes to FILE; leave --out out"),
    (["pipeline", "--batch", "1000000000"], "GiB available"),
    (["pipeline", "--max-candidates", "100000000000"], "GiB available"),
    (["pipeline", "--seed", "-3"], "-3 is not in the range x>=0"),
])
def test_bad_options_exit_2_with_one_message(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not list(tmp_path.glob("*.csv"))


def test_exports_of_truncated_and_foreign_results(tmp_path):
    out = tmp_path / "run.csv"
    assert run("sweep", "--n", "4,8", "--impl", "torchvision", "--scenario", "uniform", "--min-run-time", "0.01",
               "--out", str(out)).exit_code == 0
    data = out.read_bytes()
    out.write_bytes(data[:-30])  # the last row cut short
    result = run("export", str(out))
    assert result.exit_code == 0, result.output
    assert "warning: " in result.output and "dropped a partial last row" in result.output
    assert "| 4 |" in result.output and "| 8 |" not in result.output
    garbage = tmp_path / "garbage.csv"
    garbage.write_bytes(bytes(range(256)) * 4)
    result = run("export", str(garbage))
    assert result.exit_code == 2 and "garbage.csv: not" in result.output and "Traceback" not in result.output
    npz = tmp_path / "boxes.csv"
    np.savez(tmp_path / "boxes.npz", boxes=np.zeros((1, 4)))
    npz.write_bytes((tmp_path / "boxes.npz").read_bytes())  # an npz named .csv
    result = run("export", str(npz))
    assert result.exit_code == 2 and "boxes.csv: not" in result.output


def test_a_truncated_upload_loads_its_complete_rows_with_a_warning(tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from dash_support import CPU_CSV, REPO

    monkeypatch.setenv("NMSBENCH_RESULTS_DIR", str(tmp_path))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=90)
    at.run()
    data = CPU_CSV.read_bytes()
    at.file_uploader(key="uploads").upload("cut.csv", data[: len(data) - 25], "text/csv").run()
    assert not at.exception and not at.sidebar.error
    warnings = [w.value for w in at.sidebar.warning]
    assert any(w.startswith("upload cut.csv: dropped a partial last row") for w in warnings), warnings
    rows = data.count(b"\n") - 1
    assert f"{rows - 1:,} rows from 1 file(s)" in " ".join(c.value for c in at.sidebar.caption)
