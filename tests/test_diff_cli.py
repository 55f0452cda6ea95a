"""`nmsbench diff` (nmsbench.cli.diff_command): one regenerated box set, every
implementation's keep and final scores, written to a JSON file the dashboard reads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from dash_support import DIFF_IMPLS, diff_results  # noqa: F401  (fixture)
from nmsbench import datasets, differences, run_nms
from nmsbench.cli import diff_command
from nmsbench.differences import default_diff_path


def test_the_file_holds_the_sweeps_box_set_and_each_keep(diff_results):
    data = json.loads(diff_results.read_text())
    assert data["format"] == "nmsbench-diff" and data["format_version"] == 1
    assert data["case"] == {"scenario": "chain", "overlap": 0.6, "n": 256, "seed": 0, "iou_threshold": 0.5, "classes": 1,
                            "device": "cpu", "canvas": "fixed"}
    box_set = datasets.generate("chain", 256, overlap=0.6, seed=0)  # exactly what a sweep's case times
    assert np.array_equal(np.asarray(data["boxes"]), box_set.boxes.numpy().astype(float))
    assert np.array_equal(np.asarray(data["scores"]), box_set.scores.numpy().astype(float))
    assert set(data["implementations"]) == set(DIFF_IMPLS)
    for name, entry in data["implementations"].items():
        result = run_nms(name, box_set.boxes, box_set.scores, iou_threshold=0.5)
        assert entry["keep"] == result.keep.tolist(), name
        if result.scores is None:
            assert entry["final_scores"] is None
        else:
            assert np.allclose(entry["final_scores"], result.scores.numpy())
    matrix = data["implementations"]["matrix_naive"]
    assert matrix["family"] == "matrix" and matrix["params"] == {"kernel": "gaussian", "sigma": 0.5, "score_threshold": 0.05}
    assert data["environment"]["torch"] == torch.__version__ and data["created"] == data["environment"]["timestamp"]
    assert data["command"].startswith("nmsbench diff --scenario chain --overlap 0.6 --n 256 --seed 0 --iou 0.5")


def test_read_case_gives_back_what_was_written(diff_results):
    case = differences.read_case(diff_results)
    assert case.n == 256 and case.boxes.shape == (256, 4) and set(case.keeps) == set(DIFF_IMPLS)
    assert set(case.finals) == {"matrix_naive"} and len(case.finals["matrix_naive"]) == len(case.keeps["matrix_naive"])
    codes, counts = differences.classify(case.n, case.keeps["torchvision"], case.keeps["allpairs"])
    assert counts["only A"] > 0 and counts["only B"] == 0  # all-pairs over-suppresses chains
    left = differences.remaining_score(case, ["matrix_naive"])
    kept = case.keeps["matrix_naive"]
    assert np.isnan(np.delete(left, kept)).all()
    assert np.allclose(left[kept], case.finals["matrix_naive"] / case.scores[kept]) and (left[kept] <= 1 + 1e-9).all()


def test_the_command_reruns_the_same_file(diff_results, tmp_path):
    again = tmp_path / "again.json"
    command = json.loads(diff_results.read_text())["command"].split()
    args = command[2:command.index("--out")] + ["--out", str(again)]
    result = CliRunner().invoke(diff_command, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    first, second = (json.loads(p.read_text()) for p in (diff_results, again))
    assert first["boxes"] == second["boxes"]
    assert {k: v["keep"] for k, v in first["implementations"].items()} == {k: v["keep"] for k, v in second["implementations"].items()}


def test_params_reach_the_implementations_that_take_them(tmp_path):
    out = tmp_path / "diff.json"
    result = CliRunner().invoke(diff_command, ["--n", "64", "--impl", "torchvision,matrix_naive", "--param", "score_threshold=0.3",
                                               "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["implementations"]["matrix_naive"]["params"]["score_threshold"] == 0.3
    assert min(data["implementations"]["matrix_naive"]["final_scores"]) >= 0.3
    assert data["implementations"]["torchvision"]["params"] == {}
    assert "matrix_naive: keeps" in result.output and f"wrote {out}" in result.output


@pytest.mark.parametrize("args, message", [
    (["--impl", "nope"], "unknown implementation(s) nope"),
    (["--overlap", "99"], "runs from"),
    (["--param", "sigma"], "is not KEY=VALUE"),
    (["--impl", "torchvision", "--param", "sigma=0.5"], "no chosen implementation takes sigma"),
    (["--impl", "matrix_naive", "--param", "kernel=cubic"], "kernel"),
    (["--scenario", "nowhere"], "nowhere"),
])
def test_bad_options_are_one_clear_message(tmp_path, args, message):
    result = CliRunner().invoke(diff_command, [*args, "--n", "16", "--out", str(tmp_path / "d.json")])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "d.json").exists()


def test_an_existing_file_needs_force(tmp_path):
    out = tmp_path / "d.json"
    out.write_text("{}")
    result = CliRunner().invoke(diff_command, ["--n", "16", "--impl", "torchvision", "--out", str(out)])
    assert result.exit_code == 2 and "--force" in result.output and out.read_text() == "{}"  # a usage error, as for sweep
    result = CliRunner().invoke(diff_command, ["--n", "16", "--impl", "torchvision", "--out", str(out), "--force"])
    assert result.exit_code == 0 and json.loads(out.read_text())["case"]["n"] == 16


def test_the_default_file_goes_under_results_runs():
    path = default_diff_path()
    assert path.parent.as_posix() == "results/runs" and path.name.startswith("diff-") and path.suffix == ".json"


def test_a_file_that_is_not_a_diff_is_named(tmp_path):
    bad = tmp_path / "diff-x.json"
    bad.write_text('{"format": "nmsbench-diff", "case": {"scenario": "chain"}}')
    with pytest.raises(ValueError, match="diff-x.json: an `nmsbench diff` file without"):
        differences.read_case(bad)
    bad.write_text("not json")
    with pytest.raises(ValueError, match="diff-x.json: not readable JSON"):
        differences.read_case(bad)


def test_diff_files_are_found_at_the_top_and_under_runs(tmp_path):
    for path in ("diff-a.json", "runs/diff-b.json", "runs/x/diff-c.json", "archive/diff-d.json", "other.json"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    assert [p.name for p in differences.diff_files(tmp_path)] == ["diff-a.json", "diff-b.json", "diff-c.json"]
    assert "diff-d.json" in [p.name for p in differences.diff_files(tmp_path, include_archive=True)]
    assert differences.diff_files(tmp_path / "nowhere") == []


def test_nothing_that_runs_writes_no_file(tmp_path):
    out = tmp_path / "d.json"
    # soft_rounds has no cpu backend, with or without a GPU
    result = CliRunner().invoke(diff_command, ["--n", "16", "--impl", "soft_rounds", "--device", "cpu", "--out", str(out)])
    assert result.exit_code == 1 and "no implementation ran on cpu" in result.output and "soft_rounds" in result.output
    assert not out.exists()


def test_cuda_without_a_gpu_is_the_usage_error_every_command_gives(tmp_path, monkeypatch):
    from nmsbench.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "d.json"
    diff = CliRunner().invoke(diff_command, ["--n", "16", "--impl", "torchvision", "--device", "cuda", "--out", str(out)])
    sweep = CliRunner().invoke(main, ["sweep", "--n", "16", "--impl", "torchvision", "--device", "cuda",
                                      "--out", str(tmp_path / "s.csv")])
    message = "--device cuda was asked for, but no CUDA device is available here"
    assert diff.exit_code == sweep.exit_code == 2 and message in diff.output and message in sweep.output, diff.output
    assert diff.output.splitlines()[-1] == sweep.output.splitlines()[-1]  # the same line
    assert not out.exists()


def _boxes_csv(path, rows):
    path.write_text("x1,y1,x2,y2,score\n" + "".join(f"{x1},{y1},{x2},{y2},{s}\n" for x1, y1, x2, y2, s in rows))
    return path


# two overlapping pairs (IoU 0.68 and 0.82) and a lone box: greedy NMS at IoU 0.5 keeps rows 0, 2 and 4
MY_BOXES = [(0, 0, 10, 10, 0.9), (1, 1, 11, 11, 0.8), (50, 50, 60, 60, 0.7), (50, 50, 60, 61, 0.95), (100, 0, 120, 5, 0.1)]


def test_a_diff_on_my_own_boxes_file(tmp_path):
    boxes = _boxes_csv(tmp_path / "mine.csv", MY_BOXES)
    out = tmp_path / "diff-mine.json"
    result = CliRunner().invoke(diff_command, ["--scenario", "file", "--file", str(boxes), "--impl", "torchvision,allpairs",
                                               "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["case"]["scenario"] == "file" and data["case"]["n"] == 5 and data["case"]["file"] == str(boxes)  # every box
    assert np.allclose(data["boxes"], [row[:4] for row in MY_BOXES]) and np.allclose(data["scores"], [r[4] for r in MY_BOXES])
    assert sorted(data["implementations"]["torchvision"]["keep"]) == [0, 3, 4]
    assert f"--scenario file --file {boxes}" in data["command"] and "--n 5" in data["command"]
    case = differences.read_case(out)
    assert case.scenario == "file" and case.file == str(boxes) and case.n == 5
    again = tmp_path / "again.json"  # the recorded command makes the same file
    command = data["command"].split()
    assert CliRunner().invoke(diff_command, command[2:command.index("--out")] + ["--out", str(again)]).exit_code == 0
    assert json.loads(again.read_text())["boxes"] == data["boxes"]


def test_n_takes_the_first_boxes_of_my_file(tmp_path):
    boxes = _boxes_csv(tmp_path / "mine.csv", MY_BOXES)
    case = differences.run_grid(differences.DiffGrid(scenario="file", file=str(boxes), n=3, impls=["torchvision"]))
    assert case.n == 3 and np.allclose(case.boxes, [row[:4] for row in MY_BOXES[:3]])
    assert differences.run_grid(differences.DiffGrid(scenario="file", file=str(boxes), impls=["torchvision"])).n == 5


@pytest.mark.parametrize("args, option, message", [
    (["--scenario", "file"], "--file", "needs a boxes file (--file PATH)"),
    (["--file", "{csv}"], "--file", "only read by the file scenario"),
    (["--scenario", "file", "--file", "{csv}", "--n", "6"], "--n", "holds 5 boxes; --n asks for 6"),
    (["--scenario", "file", "--file", "{missing}"], "--file", "no such file"),
    (["--scenario", "file", "--file", "{csv}", "--canvas", "density"], "--canvas", "synthetic scenarios"),
])
def test_a_bad_file_case_is_a_usage_error(tmp_path, args, option, message):
    names = {"csv": str(_boxes_csv(tmp_path / "mine.csv", MY_BOXES)), "missing": str(tmp_path / "nowhere.csv")}
    result = CliRunner().invoke(diff_command, [a.format(**names) for a in args] + ["--out", str(tmp_path / "d.json")])
    assert result.exit_code == 2 and message in result.output and option in result.output, result.output
    assert not (tmp_path / "d.json").exists()


def test_moved_boxes_and_soft_scores_travel_through_the_file_and_onto_the_canvas(tmp_path):
    from nmsbench import plots

    case = differences.run_case("clustered", 120, seed=1, impls=["torchvision", "weighted_nms", "soft_nms"])
    assert set(case.moved) == {"weighted_nms"} and set(case.finals) == {"soft_nms"}
    assert case.moved["weighted_nms"].shape == (len(case.keeps["weighted_nms"]), 4)
    assert np.array_equal(case.keeps["weighted_nms"], case.keeps["torchvision"])  # it keeps what greedy NMS keeps
    assert not np.allclose(case.moved["weighted_nms"], case.boxes[case.keeps["weighted_nms"]])  # and moves them
    back = differences.read_case(differences.write_case(case, tmp_path / "diff-moved.json"))
    assert np.array_equal(back.moved["weighted_nms"], case.moved["weighted_nms"])
    assert np.allclose(back.finals["soft_nms"], case.finals["soft_nms"])
    codes, _ = differences.classify(case.n, case.keeps["torchvision"], case.keeps["weighted_nms"])
    fig = plots.boxes_canvas(case.boxes, codes, ("torchvision", "weighted_nms"), moved={"weighted_nms": back.moved["weighted_nms"]})
    (trace,) = [t for t in fig.data if (t.meta or {}).get("role") == "moved"]
    assert trace.line.dash == "dash" and trace.meta["count"] == len(case.keeps["weighted_nms"])
    data = json.loads((tmp_path / "diff-moved.json").read_text())
    data["implementations"]["weighted_nms"]["moved_boxes"] = data["implementations"]["weighted_nms"]["moved_boxes"][:-1]
    bad = tmp_path / "diff-bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="weighted_nms has moved boxes of shape"):
        differences.read_case(bad)


def test_a_diff_on_the_density_canvas_regenerates_the_sweeps_boxes(tmp_path):
    out = tmp_path / "diff-density.json"
    result = CliRunner().invoke(diff_command, ["--scenario", "uniform", "--n", "4096", "--canvas", "density",
                                               "--impl", "torchvision,hard_graph", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "uniform (density canvas)" in result.output
    data = json.loads(out.read_text())
    assert data["case"]["canvas"] == "density" and "--canvas density" in data["command"]
    box_set = datasets.generate("uniform", 4096, seed=0, canvas="density")
    assert np.array_equal(np.asarray(data["boxes"]), box_set.boxes.numpy().astype(float))
    case = differences.read_case(out)
    assert case.canvas == "density" and np.array_equal(case.keeps["hard_graph"], case.keeps["torchvision"])
