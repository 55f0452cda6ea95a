"""The synthetic scenarios' canvas: fixed (1024 px at every N) or density (its side grows as
sqrt(N), so each box keeps as many neighbours at any N), through generate, the sweep's
grid and rows, the CLI and older results files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from nmsbench import datasets, runner
from nmsbench.cli import main
from nmsbench.datasets.synthetic import CANVAS, canvas_extent
from nmsbench.results import read_results
from nmsbench.variants._cpu import overlap_graph


@pytest.mark.parametrize("scenario", datasets.SYNTHETIC)
def test_the_density_canvas_is_the_fixed_one_at_1024_boxes_and_keeps_the_density_beyond(scenario):
    fixed = datasets.generate(scenario, 1024, seed=3)
    assert torch.equal(fixed.boxes, datasets.generate(scenario, 1024, seed=3, canvas="fixed").boxes)
    assert torch.equal(fixed.boxes, datasets.generate(scenario, 1024, seed=3, canvas="density").boxes)

    def neighbours(n: int, canvas: str) -> float:
        boxes = datasets.generate(scenario, n, seed=3, canvas=canvas).boxes.numpy()
        indptr = overlap_graph(boxes, np.zeros(n, dtype=np.int64), max_pairs=1 << 30)[0]
        return indptr[-1] / n

    at_1024, at_16384 = neighbours(1024, "density"), neighbours(16384, "density")
    assert at_16384 == pytest.approx(at_1024, rel=0.25)  # the same workload per box
    big = datasets.generate(scenario, 16384, seed=3, canvas="density")
    assert big.meta["extent"] == canvas_extent("density", 16384) == 4 * CANVAS
    assert float(big.boxes.max()) <= 4 * CANVAS and float(big.boxes.min()) >= 0
    if scenario in ("uniform", "clustered"):  # (crowd, chain and degenerate shrink their boxes with N on it, by design)
        assert neighbours(16384, "fixed") > 2 * at_16384  # the fixed canvas gets crowded instead


def test_a_canvas_is_refused_where_it_means_nothing():
    with pytest.raises(ValueError, match="canvas must be one of fixed, density, got 'huge'"):
        datasets.generate("uniform", 8, canvas="huge")
    with pytest.raises(ValueError, match="canvas='density' is for the synthetic scenarios"):
        datasets.generate("real", 8, canvas="density")
    with pytest.raises(ValueError, match="unknown canvas huge") as caught:
        runner.Grid(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[8],
                    ious=[0.5], canvases=["huge"])
    assert caught.value.field == "canvases"
    with pytest.raises(ValueError, match="a canvas is for the synthetic scenarios"):
        runner.Grid(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["real"], ns=[8],
                    ious=[0.5], canvases=["density"])


def test_rows_name_their_canvas_and_the_cli_reproduces_it(tmp_path):
    out = tmp_path / "run.csv"
    result = CliRunner().invoke(main, ["sweep", "--impl", "torchvision", "--scenario", "uniform,real", "--n", "64,4096",
                                       "--canvas", "fixed,density", "--timer", "wall", "--min-run-time", "0.01",
                                       "--threads", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = read_results(out)
    uniform = frame[frame["scenario"] == "uniform"]
    assert sorted(uniform["canvas"]) == ["density", "density", "fixed", "fixed"]
    assert set(frame.loc[frame["scenario"] == "real", "canvas"].fillna("")) == {""}
    assert "density canvas" in result.output  # the summary tells the two canvases apart
    meta = json.loads(out.with_suffix(".json").read_text())
    assert "--canvas fixed,density" in meta["command"] and meta["grid"]["canvases"] == ["fixed", "density"]
    grid = runner.Grid(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform", "real"],
                       ns=[64, 4096], ious=[0.5], timers=["wall"], canvases=["fixed", "density"])
    assert grid.count() == len(frame)


def test_older_files_are_on_the_fixed_canvas(tmp_path):
    path = tmp_path / "old.csv"
    pd.DataFrame({"schema_version": [5, 5], "impl": "torchvision", "family": "hard", "device": "cpu", "dtype": "float32",
                  "timer": "wall", "scenario": ["uniform", "file"], "overlap": 0.5, "classes": 1, "n": 64,
                  "iou_threshold": 0.5, "seed": 0, "params": "{}", "status": "ok", "median_us": 1.0}).to_csv(path, index=False)
    assert list(read_results(path)["canvas"]) == ["fixed", ""]
