"""`nmsbench accuracy` end to end on the CPU: a COCO-format fixture, synthetic scenes, resume,
error and skipped rows."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from nmsbench import register
from nmsbench.accuracy import synthetic_source
from nmsbench.cli import main
from nmsbench.registry import unregister
from nmsbench.results import COLUMNS, read_results

ACCURACY_COLUMNS = ("ap", "ap50", "ap75", "ar100", "ar100_crowded", "images", "detections", "source_params")


def coco_fixture(tmp_path):
    """Six images, 1 to 3 objects each of two categories; candidates: each object exactly
    (score 0.6 to 0.95) and a duplicate shifted by a fifth of its width (IoU 2/3, score
    0.3), plus one background box per image of category 2 (score 0.05)."""
    rng = np.random.default_rng(0)
    images, annotations, candidates = [], [], []
    for image_id in range(1, 7):
        images.append({"id": image_id, "width": 400, "height": 300})
        for k in range(1 + image_id % 3):
            x, y, w, h = 20 + 120 * k, float(rng.uniform(10, 100)), 80.0, float(rng.uniform(60, 150))
            category = 1 + k % 2
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": category,
                                "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0})
            candidates.append({"image_id": image_id, "category_id": category, "bbox": [x, y, w, h],
                               "score": float(rng.uniform(0.6, 0.95))})
            candidates.append({"image_id": image_id, "category_id": category, "bbox": [x + w / 5, y, w, h],
                               "score": 0.3})
        candidates.append({"image_id": image_id, "category_id": 2, "bbox": [300, 250, 30, 30], "score": 0.05})
    annotations_path, candidates_path = tmp_path / "instances.json", tmp_path / "preds.json"
    annotations_path.write_text(json.dumps({"images": images, "annotations": annotations,
                                            "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}))
    candidates_path.write_text(json.dumps(candidates))
    return candidates_path, annotations_path, len(annotations), len(candidates)


def run(args):
    result = CliRunner().invoke(main, args)
    return result


def test_your_own_candidates_end_to_end(tmp_path):
    candidates, annotations, objects, total = coco_fixture(tmp_path)
    out = tmp_path / "acc.csv"
    result = run(["accuracy", "--candidates", str(candidates), "--annotations", str(annotations),
                  "--impl", "torchvision,soft_nms,hard_fused", "--iou", "0.5", "--threads", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "accuracy · coco · cpu · 6 images" in result.output and "AR@100" in result.output
    frame = read_results(out)
    assert list(frame.columns) == COLUMNS and len(frame) == 3
    assert (frame["benchmark"] == "accuracy").all() and (frame["scenario"] == "coco").all()
    assert (frame["image"] == "preds.json").all() and (frame["status"] == "ok").all()
    assert (frame["n"] == total).all() and (frame["images"] == 6).all() and (frame["runs"] >= 1).all()
    assert json.loads(frame["source_params"].iloc[0]) == {"annotations": "instances.json", "candidates": "preds.json"}
    by_impl = frame.set_index("impl")
    # greedy NMS at 0.5 removes every duplicate (IoU 2/3) and keeps each object's exact box,
    # the background boxes overlap nothing: every object found first, AP 1
    for name in ("torchvision", "hard_fused"):
        assert by_impl.loc[name, "kept"] == objects + 6 and by_impl.loc[name, "ap"] == pytest.approx(1.0)
        assert by_impl.loc[name, "ar100"] == pytest.approx(1.0)
    # Soft-NMS keeps the duplicates with decayed scores, below every exact box: AP 1 too
    assert by_impl.loc["soft_nms", "kept"] == total and by_impl.loc["soft_nms", "ap"] == pytest.approx(1.0)
    assert (frame["median_us"] > 0).all() and (frame["iqr_us"] >= 0).all()
    assert json.loads(by_impl.loc["soft_nms", "params"])["kernel"] == "gaussian"


def test_bad_candidates_are_refused_naming_file_entry_and_field(tmp_path):
    candidates, annotations, _, _ = coco_fixture(tmp_path)
    data = json.loads(candidates.read_text())
    data[4]["category_id"] = 12
    candidates.write_text(json.dumps(data))
    out = tmp_path / "acc.csv"
    result = run(["accuracy", "--candidates", str(candidates), "--annotations", str(annotations), "--impl",
                  "torchvision", "--out", str(out)])
    assert result.exit_code == 2
    assert "preds.json: entry 4, field 'category_id': 12 is not a category of instances.json" in " ".join(result.output.split())
    assert not out.exists()


@pytest.mark.parametrize("args, says", [
    (["--candidates", "{c}"], "--candidates and --annotations go together"),
    (["--candidates", "{c}", "--annotations", "{a}", "--source", "scenes-crowd"], "with --candidates the source is your files"),
    (["--image-ids", "1"], "give those too"),
    (["--source", "scenes-moon"], "unknown source scenes-moon"),
    (["--impl", "nope"], "unknown implementation nope"),
    (["--param", "sigmaa=1"], "no selected implementation takes sigmaa"),
    (["--impl", "soft_nms", "--param", "kernel=box"], "kernel must be 'gaussian' or 'linear'"),
    (["--iou", "1.5"], "must lie in [0, 1]"),
])
def test_bad_options_are_refused(tmp_path, args, says):
    candidates, annotations, _, _ = coco_fixture(tmp_path)
    args = [a.format(c=candidates, a=annotations) for a in args]
    result = run(["accuracy", *args, "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 2 and says in " ".join(result.output.split()), result.output


def test_synthetic_run_rows_resume_errors_and_skips(tmp_path):
    @register(name="test_accuracy_raises", family="hard", devices=("cpu",), exact=True)
    def raises(boxes, scores, *, iou_threshold, labels=None):
        raise RuntimeError("this implementation always fails")

    try:
        out = tmp_path / "acc.csv"
        args = ["accuracy", "--images", "5", "--impl", "torchvision,soft_nms,test_accuracy_raises,soft_rounds",
                "--source", "scenes-sparse,scenes-crowd", "--param", "kernel=linear,gaussian", "--threads", "1",
                "--out", str(out)]
        result = run(args)
        assert result.exit_code == 0, result.output
        frame = read_results(out)
        # 2 sources x (torchvision, soft_nms x 2 kernels, the failing one, soft_rounds x 2 kernels)
        assert len(frame) == 2 * 6 and (frame["benchmark"] == "accuracy").all()
        assert (frame["timer"] == "wall").all() and (frame["dtype"] == "float32").all()
        failed = frame[frame["impl"] == "test_accuracy_raises"]
        assert (failed["status"] == "error").all() and failed["error"].str.contains("always fails").all()
        skipped = frame[frame["impl"] == "soft_rounds"]
        assert (skipped["status"] == "skipped").all() and skipped["error"].str.contains("no cpu backend").all()
        ok = frame[frame["status"] == "ok"]
        assert len(ok) == 2 * 3 and set(ok["impl"]) == {"torchvision", "soft_nms"}
        assert set(ok[ok["impl"] == "soft_nms"]["params"].map(lambda p: json.loads(p)["kernel"])) == {"linear", "gaussian"}
        for source, rows in ok.groupby("scenario"):
            expected = synthetic_source(source, images=5, seed=0)
            assert (rows["n"] == expected.n).all() and (rows["images"] == 5).all() and (rows["runs"] % 5 == 0).all()
            assert (rows["source_params"] == expected.source_params).all() and (rows["seed"] == 0).all()
        for column in ACCURACY_COLUMNS[:4]:
            assert ok[column].between(0, 1).all() and ok[column].gt(0).all(), column
        assert ok[ok["scenario"] == "scenes-crowd"]["ar100_crowded"].notna().all()
        assert (ok["detections"] <= ok["kept"]).all() and (ok["detections"] <= 100 * 5).all()

        again = run(["accuracy", *args[1:-2], "--resume", str(out)])
        assert again.exit_code == 0, again.output
        assert len(read_results(out)) == len(frame)  # complete: nothing appended
    finally:
        unregister("test_accuracy_raises")


def test_a_stopped_run_resumes_with_the_rows_it_lacks(tmp_path):
    out = tmp_path / "acc.csv"
    args = ["accuracy", "--images", "4", "--impl", "torchvision,hard_fused", "--source", "scenes-clustered",
            "--threads", "1"]
    assert run([*args, "--out", str(out)]).exit_code == 0
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:-1]))  # the last row lost
    result = run([*args, "--resume", str(out)])
    assert result.exit_code == 0, result.output
    frame = read_results(out)
    assert sorted(frame["impl"]) == ["hard_fused", "torchvision"]


def test_help_explains_the_command():
    result = run(["accuracy", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for words in ("COCO", "--candidates", "--annotations", "--image-ids", "scenes-crowd", "ar100", "--resume", "--rounds"):
        assert words in text


def test_ap_is_in_percent_wherever_it_is_shown():
    """One unit: the results CSV holds COCO's fractions; what a person reads (the export
    tables, the Pareto plot, the help) gives AP and AR in % with one decimal."""
    from pathlib import Path

    import pandas as pd

    from nmsbench import plots

    committed = Path(__file__).resolve().parent.parent / "results" / "h200-accuracy.csv"
    frame = read_results(committed)
    rows = frame[(frame["scenario"] == "scenes-crowd") & (frame["device"] == "cpu") & (frame["status"] == "ok")
                 & (frame["params"] == "{}") & (frame["iou_threshold"] == 0.5)].set_index("impl")
    result = run(["export", str(committed), "--benchmark", "accuracy", "--scenario", "scenes-crowd", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "crowded images (%)" in result.output
    cells = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in result.output.splitlines()
             if line.startswith("| ") and not line.startswith("| implementation")}
    assert cells["torchvision"] == f"{100 * rows.loc['torchvision', 'ap']:.1f}"
    assert all(cells[name] == f"{100 * rows.loc[name, 'ap']:.1f}" for name in rows.index if name in cells)
    fig = plots.pareto(frame[frame["scenario"] == "scenes-crowd"], "ap")
    assert fig.layout.yaxis.title.text.endswith("(%)")
    (torchvision,) = [t for t in fig.data if t.name == "torchvision" and (t.meta or {}).get("role") == "points"
                      and len(t.y) == 1 and t.legendgroup == "torchvision" and t.x[0] == rows.loc["torchvision", "median_us"]]
    assert torchvision.y[0] == pytest.approx(100 * rows.loc["torchvision", "ap"])
    assert 0 < rows["ap"].max() <= 1 and not pd.isna(rows.loc["torchvision", "ap"])  # the CSV: fractions
    assert "show them in %, one decimal" in " ".join(run(["accuracy", "--help"]).output.split())
