"""Post-processing pipelines (nmsbench.pipeline) and `nmsbench pipeline`, on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from nmsbench import BackendUnavailable, NMSResult, register
from nmsbench.cli import main
from nmsbench.datasets import real
from nmsbench.datasets.synthetic_raw import ROWS, synthetic_raw
from nmsbench.pipeline import (RULE, CandidateOverflow, Detections, Pipeline, PipelineConfig, Prepared, compare_detections,
                               decode_numpy, decode_torch, empty_buffer, get_pipeline, pipelines, register_pipeline,
                               run_pipeline, unregister_pipeline, validate_raw)
from nmsbench.pipeline_bench import PipelineGrid, run_pipeline_bench
from nmsbench.registry import unregister
from nmsbench.results import COLUMNS

F32 = np.float32


@pytest.fixture(scope="module")
def recorded():
    """The recorded raw rows: [2, 6000, 85] (bus.jpg, zidane.jpg at 640)."""
    raw, keys, size = real.real_raw(2)
    assert keys == ["bus.jpg@640", "zidane.jpg@640"] and size == 640
    return raw


@pytest.fixture(scope="module")
def synthetic():
    return synthetic_raw(3, seed=5)


def plain_reference(image: np.ndarray, conf: float, iou: float, max_det: int, size: float = 640,
                    layout: str = "yolov5") -> list[tuple]:
    """Decode, per-class greedy NMS and max_det, written out row by row in float32 scalars,
    by the pipelines' rule: score = objectness x class (yolov5) or the class score (yolov8),
    the first best product, strictly above the float32 threshold, boxes not clipped.

    Returns (row, x1, y1, x2, y2, score, label) by descending score, ties by lower row.
    """
    rows = image.T if layout == "yolov8" else image
    candidates = []
    for r in range(rows.shape[0]):
        values = [F32(v) for v in rows[r]]
        scores = values[4:] if layout == "yolov8" else [values[4] * c for c in values[5:]]
        score = max(scores)
        label = scores.index(score)  # the first maximum
        if not score > F32(conf):
            continue
        cx, cy, hw, hh = values[0], values[1], values[2] * F32(0.5), values[3] * F32(0.5)
        candidates.append((r, cx - hw, cy - hh, cx + hw, cy + hh, score, label))
    candidates.sort(key=lambda c: (-c[5], c[0]))
    kept = []
    for c in candidates:
        suppressed = False
        for k in kept:
            if k[6] != c[6]:
                continue
            w = max(F32(0), min(k[3], c[3]) - max(k[1], c[1]))
            h = max(F32(0), min(k[4], c[4]) - max(k[2], c[2]))
            inter = w * h
            union = (k[3] - k[1]) * (k[4] - k[2]) + (c[3] - c[1]) * (c[4] - c[2]) - inter
            if union > 0 and float(inter / union) > iou:
                suppressed = True
                break
        if not suppressed:
            kept.append(c)
    return kept[:max_det]


def as_tuples(det: Detections) -> list[tuple]:
    det = det.numpy()
    return [(int(r), *map(F32, b), F32(s), int(lab)) for r, b, s, lab in zip(det.rows, det.boxes, det.scores, det.labels)]


# ---------------------------------------------------------------- the CPU reference

@pytest.mark.parametrize("conf", [0.25, 0.05, 0.001])
@pytest.mark.parametrize("iou", [0.45, 0.7])
def test_numpy_reference_equals_plain_python_on_recorded_rows(recorded, conf, iou):
    config = PipelineConfig(conf, iou, max_det=300, input_size=(640, 640))
    detections = run_pipeline("numpy", recorded, config)
    for image, det in zip(recorded, detections):
        assert as_tuples(det) == plain_reference(image, conf, iou, 300, 640)


def test_plain_python_agrees_on_synthetic_rows_too(synthetic):
    config = PipelineConfig(0.25, 0.45, max_det=20)
    (det,) = run_pipeline("numpy", synthetic[:1], config)
    assert len(det.rows) == 20  # max_det binds here
    assert as_tuples(det) == plain_reference(synthetic[0], 0.25, 0.45, 20, 640)


def test_recorded_detections_look_like_the_photos(recorded):
    """At YOLOv5's defaults the bus photo gives people (and the zidane photo people and a tie)."""
    names = real.load_real().class_names
    bus, zidane = run_pipeline("numpy", recorded, PipelineConfig(0.25, 0.45))
    assert [names[i] for i in bus.labels] == ["person"] * len(bus.labels) and len(bus.labels) >= 3
    assert {names[i] for i in zidane.labels} >= {"person", "tie"}
    assert (np.diff(bus.scores) <= 0).all()


# ---------------------------------------------------------------- every pipeline against it

HARD = sorted(name for name, p in pipelines().items() if p.nms_family == "hard" and p.availability("cpu")[0])


@pytest.mark.parametrize("name", HARD)
@pytest.mark.parametrize("conf", [0.25, 0.01, 0.001])
def test_hard_pipelines_equal_the_numpy_reference(recorded, synthetic, name, conf):
    for raw in (recorded, synthetic):
        config = PipelineConfig(conf, 0.45, 300, 4096, (640, 640))
        reference = run_pipeline("numpy", raw, config)
        detections = run_pipeline(name, raw, config)
        for det, ref in zip(detections, reference):
            assert as_tuples(det) == as_tuples(ref)
        assert compare_detections(detections, reference)["jaccard"] == 1.0


def assert_stages_repeat(name: str, raw, device: str) -> None:
    """The benchmark times each stage alone, again and again: `nms` on one decoded batch
    called repeatedly, and `decode` and `run` likewise, must give the same detections."""
    config = PipelineConfig(0.05, 0.45, 300, 4096, (640, 640))
    prepared = pipelines()[name].build(raw, config, device)
    expected = [d.numpy() for d in prepared.detections()]
    if prepared.stages == ("total",):  # one call: it repeats
        outcomes = [prepared.run() for _ in range(3)]
    else:
        candidates = prepared.decode()
        outcomes = [prepared.nms(candidates), prepared.nms(candidates), prepared.nms(prepared.decode()), prepared.run()]
    for outcome in outcomes:
        got = [d.numpy() for d in prepared.finish(outcome)]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert all(np.array_equal(a, b) for a, b in zip(g, e)), f"{name}: a repeated stage changed the output"


@pytest.mark.parametrize("name", sorted(n for n, p in pipelines().items() if "cpu" in p.devices))
def test_stages_can_be_timed_alone_and_repeated(recorded, name):
    assert_stages_repeat(name, recorded, "cpu")


def test_torch_front_end_equals_numpy_decode(recorded, synthetic):
    for raw in (recorded, synthetic):
        for conf in (0.5, 0.25, 0.01, 1e-4):
            buffer = decode_torch(torch.from_numpy(raw), conf, (640, 640), empty_buffer(len(raw), 20_000, "cpu"))
            for b, ref in enumerate(decode_numpy(raw, conf, (640, 640), rule=RULE)):
                got = buffer.image(b).numpy()
                for a, e in zip(got, ref):
                    np.testing.assert_array_equal(a, e)


def test_confidence_is_compared_in_float32_strictly():
    conf = 0.3  # float32(0.3) = 0.30000001..., above 0.3: a float64 comparison would keep the first row
    raw = np.zeros((1, 3, 85), dtype=np.float32)
    raw[0, :, :4] = [[10, 10, 4, 4], [50, 50, 4, 4], [90, 90, 4, 4]]
    raw[0, :, 4] = 1.0
    raw[0, :, 5] = [F32(conf), np.nextafter(F32(conf), F32(1)), F32(0.9)]
    for name in HARD + ["torch+allpairs"]:
        (det,) = run_pipeline(name, raw, PipelineConfig(conf))
        assert sorted(det.numpy().rows.tolist()) == [1, 2], name
    assert [c[0] for c in plain_reference(raw[0], conf, 0.45, 300, 640)] == [2, 1]


def test_allpairs_pipeline_suppresses_a_subset_and_the_difference_is_counted(recorded):
    config = PipelineConfig(0.001, 0.45, max_det=10_000)  # max_det does not bind
    reference = run_pipeline("numpy", recorded, config)
    detections = run_pipeline("torch+allpairs", recorded, config)
    agreement = compare_detections(detections, reference)
    assert agreement["extra"] == 0 and agreement["missing"] > 0 and agreement["mismatched"] == 0
    for det, ref in zip(detections, reference):
        assert set(det.rows.tolist()) <= set(ref.rows.tolist())


def test_max_det_and_order(synthetic):
    for name in ("numpy", "torch_batched_nms"):
        for det in run_pipeline(name, synthetic, PipelineConfig(0.01, 0.45, max_det=7)):
            det = det.numpy()
            assert len(det.rows) == 7 and (np.diff(det.scores) <= 0).all()


def test_empty_batches_and_images():
    raw = np.zeros((2, 100, 85), dtype=np.float32)  # nothing passes
    for name in HARD + ["torch+allpairs"]:
        out = run_pipeline(name, raw)
        assert len(out) == 2 and all(len(d.rows) == 0 for d in out)
    assert run_pipeline("numpy", np.zeros((0, 10, 85), np.float32)) == []


# ---------------------------------------------------------------- the fixed buffer

def test_candidate_overflow_is_reported_never_dropped(recorded):
    counts = [len(c.rows) for c in decode_numpy(recorded, 0.01, (640, 640), rule=RULE)]
    small = PipelineConfig(0.01, 0.45, max_candidates=min(counts) - 1)
    with pytest.raises(CandidateOverflow, match=r"buffer overflow: 2 of 2 images .* nothing was dropped") as info:
        run_pipeline("torch_batched_nms", recorded, small)
    assert info.value.counts == counts and info.value.capacity == min(counts) - 1
    exact = PipelineConfig(0.01, 0.45, max_candidates=max(counts))  # a full buffer is fine
    assert compare_detections(run_pipeline("torch_batched_nms", recorded, exact),
                              run_pipeline("numpy", recorded, exact))["jaccard"] == 1.0
    one_over = PipelineConfig(0.01, 0.45, max_candidates=max(counts) - 1)
    with pytest.raises(CandidateOverflow, match="1 of 2 images"):
        run_pipeline("torch+torchvision", recorded, one_over)


def test_overflow_becomes_error_rows_in_the_benchmark():
    rows = []
    grid = PipelineGrid(pipelines=["numpy", "torch_batched_nms"], devices=["cpu"], sources=["synthetic"], batches=[2],
                        confs=[0.001], max_candidates=64, stages=["total"], timers=["wall"], min_run_time=0.001)
    counts = run_pipeline_bench(grid, rows.append)
    assert {key: counts[key] for key in ("ok", "error", "skipped")} == {"ok": 1, "error": 1, "skipped": 0}
    assert set(counts["time"]) == {"total_s", "timed_s", "prepared_s", "other_s"}
    by_impl = {r["impl"]: r for r in rows}
    assert by_impl["numpy"]["status"] == "ok"
    assert by_impl["torch_batched_nms"]["status"] == "error"
    assert "candidate buffer overflow" in by_impl["torch_batched_nms"]["error"]
    assert "median_us" not in by_impl["torch_batched_nms"]


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("make, message", [
    (lambda r: r[0, 0], r"shape \[B, R, 5 \+ classes\]"),
    (lambda r: r[..., :5], r"shape \[B, R, 5 \+ classes\]"),
    (lambda r: r[None], r"got \[1, 2, 6000, 85\]"),
    (lambda r: r.astype(np.int32), "must be floating point"),
    (lambda r: _poke(r, (1, 17, 3), np.nan), r"NaN or Inf \(first at image 1, row 17, column 3"),
    (lambda r: _poke(r, (0, 5, 40), np.inf), "NaN or Inf"),
    (lambda r: _poke(r, (0, 9, 2), -3.0), "width and height must be >= 0; image 0, row 9 has w"),
    (lambda r: _poke(r, (1, 2, 4), 1.5), "row 2 has objectness = 1.5"),
    (lambda r: _poke(r, (1, 2, 7), -2.0), "sigmoid already applied.*class 2 score = -2"),
    (lambda r: [1, 2, 3], "numpy array or torch tensor"),
])
def test_bad_raw_input_is_a_clear_error(recorded, make, message):
    with pytest.raises(ValueError, match=message):
        validate_raw(make(recorded.copy()))
    with pytest.raises(ValueError, match=message):
        run_pipeline("torch_batched_nms", make(recorded.copy()))


def _poke(raw, index, value):
    raw[index] = value
    return raw


def test_a_single_image_and_tensors_are_accepted(recorded):
    one = run_pipeline("numpy", recorded[0])
    assert len(one) == 1
    again = run_pipeline("numpy", torch.from_numpy(recorded[:1]))
    assert as_tuples(one[0]) == as_tuples(again[0])
    validate_raw(torch.from_numpy(recorded))


@pytest.mark.parametrize("kwargs, message", [
    ({"conf_threshold": 1.5}, "conf_threshold must be a number in"),
    ({"iou_threshold": float("nan")}, "iou_threshold must be"),
    ({"max_det": 0}, "max_det must be a positive integer"),
    ({"max_candidates": 2.5}, "max_candidates must be a positive integer"),
    ({"input_size": (640,)}, "input_size must be"),
    ({"input_size": (640, -1)}, "input_size must be"),
])
def test_bad_config_is_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PipelineConfig(**kwargs)


def test_unknown_and_unavailable_pipelines():
    with pytest.raises(ValueError, match="unknown pipeline 'nope'"):
        get_pipeline("nope")
    if not torch.cuda.is_available():
        with pytest.raises(BackendUnavailable, match="no CUDA device"):
            run_pipeline("torch_batched_nms", np.zeros((1, 4, 85), np.float32), device="cuda")
    with pytest.raises(BackendUnavailable, match="numpy has no cuda path"):
        run_pipeline("numpy", np.zeros((1, 4, 85), np.float32), device="cuda")


# ---------------------------------------------------------------- the registry of pipelines

def test_listed_pipelines_and_the_extension_point():
    known = pipelines()
    assert {"numpy", "torch_batched_nms", "torch+torchvision", "torch+bitmask_two_phase",
            "torch+bitmask_classic", "torch+allpairs"} <= set(known)
    assert not any("matrix" in name for name in known)  # score-changing families are not post-processing NMS here
    assert known["cupy_seed_kernels"].devices == ("cuda",)  # registered by implementations/yolo_postprocess.py
    for name, p in known.items():  # whatever says it runs on the CPU does
        if p.availability("cpu")[0]:
            assert len(run_pipeline(name, np.zeros((1, 8, 85), np.float32))) == 1

    calls = []

    def build(raw, config, device):
        from nmsbench.pipeline import Prepared
        return Prepared(lambda: calls.append("decode") or raw, lambda c: [Detections(*(np.zeros(0),) * 4) for _ in c])

    register_pipeline(Pipeline("test_plugin", "a plug-in", ("cpu",), "hard", build))
    try:
        assert "test_plugin" in pipelines()
        with pytest.raises(ValueError, match="is taken"):
            register_pipeline(Pipeline("test_plugin", "again", ("cpu",), "hard", build))
        with pytest.raises(ValueError, match="is taken"):
            register_pipeline(Pipeline("torch+mine", "derived names are reserved", ("cpu",), "hard", build))
        run_pipeline("test_plugin", np.zeros((2, 8, 85), np.float32))
        assert calls == ["decode"]
    finally:
        unregister_pipeline("test_plugin")


def test_a_newly_registered_hard_nms_gets_a_pipeline(recorded):
    @register(name="test_pipeline_nms", family="hard", devices=("cpu",), exact=True)
    def via_torchvision(boxes, scores, *, iou_threshold, labels=None):
        from nmsbench.api import run_nms
        return NMSResult(run_nms("torchvision", boxes, scores, iou_threshold, labels=labels).keep)

    try:
        assert "torch+test_pipeline_nms" in pipelines()
        config = PipelineConfig(0.01)
        assert compare_detections(run_pipeline("torch+test_pipeline_nms", recorded, config),
                                  run_pipeline("numpy", recorded, config))["jaccard"] == 1.0
    finally:
        unregister("test_pipeline_nms")


# ---------------------------------------------------------------- the synthetic source

def test_synthetic_raw_is_yolov5_shaped_and_deterministic():
    a = synthetic_raw(2, seed=3)
    assert a.shape == (2, ROWS, 85) == (2, 25_200, 85) and a.dtype == np.float32
    validate_raw(a)
    np.testing.assert_array_equal(a[:1], synthetic_raw(1, seed=3))  # image b does not depend on B
    assert not np.array_equal(a, synthetic_raw(2, seed=4))
    per_image = [len(c.rows) for c in decode_numpy(a, 0.25, (640, 640), rule=RULE)]
    assert all(30 <= k <= 2000 for k in per_image)  # a detector-like few hundred candidates at conf 0.25
    low = [len(c.rows) for c in decode_numpy(a, 0.001, (640, 640), rule=RULE)]
    assert all(k > h for k, h in zip(low, per_image))


# ---------------------------------------------------------------- the benchmark and its command

def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_pipeline_command_writes_tidy_rows(tmp_path):
    out = tmp_path / "pipe.csv"
    result = run("pipeline", "--batch", "1,2", "--pipeline", "numpy,torch_batched_nms,torch+allpairs",
                 "--conf", "0.25,0.01", "--min-run-time", "0.001", "--threads", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert list(frame.columns) == COLUMNS
    assert len(frame) == 3 * 2 * 2 * 3 * 3  # sources x batches x confs x pipelines x stages
    assert set(frame.status) == {"ok"} and set(frame.benchmark) == {"pipeline"}
    assert set(frame.stage) == {"decode", "nms", "total"}
    assert set(frame.scenario) == {"real", "synthetic", "synthetic_yolov8"}
    assert (frame.median_us > 0).all() and (frame.timer == "wall").all()
    realrows = frame[frame.scenario == "real"]
    assert set(realrows.n) == {6000} and set(realrows.input_size) == {640}
    assert set(realrows.image) == {"bus.jpg", "bus.jpg,zidane.jpg"}
    assert set(frame[frame.scenario != "real"].n) == {25_200}
    hard = frame[frame.impl != "torch+allpairs"]
    assert (hard.jaccard == 1.0).all() and (hard.mismatched == 0).all() and (hard.kept == hard.ref_kept).all()
    allpairs = frame[frame.impl == "torch+allpairs"]
    assert (allpairs.extra + allpairs.missing >= 0).all() and (allpairs.family == "allpairs").all()
    assert (frame.candidates >= frame.kept).all()
    assert json.loads(frame.params.iloc[0]) == {"max_candidates": 4096, "max_det": 300}
    v8 = frame[frame.scenario == "synthetic_yolov8"]
    assert {json.loads(p)["layout"] for p in v8.params} == {"yolov8"}
    # the same detections in the other layout: the same counts as the yolov5 rows
    v5 = frame[frame.scenario == "synthetic"].set_index(["batch", "overlap", "impl", "stage"]).kept
    assert v8.set_index(["batch", "overlap", "impl", "stage"]).kept.sort_index().equals(v5.sort_index())
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["command"].startswith("nmsbench pipeline --batch 1,2 --device cpu --source real,synthetic,synthetic_yolov8")
    assert "µs per image" in result.output


def test_pipeline_list_and_default_output(tmp_path, monkeypatch):
    listed = run("pipeline", "--list")
    assert listed.exit_code == 0 and "torch_batched_nms" in listed.output and "numpy" in listed.output
    monkeypatch.chdir(tmp_path)
    result = run("pipeline", "--batch", "1", "--source", "real", "--pipeline", "numpy", "--stage", "total",
                 "--min-run-time", "0.001")
    assert result.exit_code == 0, result.output
    written = list((tmp_path / "results" / "runs").glob("pipeline-*-cpu.csv"))
    assert len(written) == 1 and len(pd.read_csv(written[0])) == 1


@pytest.mark.parametrize("args, message", [
    (["--batch", "0"], "positive whole numbers"),
    (["--batch", "x"], "whole numbers"),
    (["--device", "tpu"], "choose cpu and/or cuda"),
    (["--device", ""], "none given: choose cpu and/or cuda"),  # not a run of no rows
    (["--source", "video"], "unknown source video"),
    (["--pipeline", "nope"], "unknown pipeline nope"),
    (["--conf", "2"], "must lie in [0, 1]"),
    (["--recording", "bus.jpg@1312"], "recordings with raw rows are bus.jpg@640, zidane.jpg@640"),
    (["--stage", "paint"], "choose from decode, nms, total"),
    (["--max-candidates", "0"], "0 is not in the range"),
    (["--timer", "graph"], "unknown timer graph; choose from wall, api, device, events"),
    (["--rounds", "0"], "0 is not in the range"),
])
def test_bad_pipeline_options_exit_nonzero(tmp_path, args, message):
    result = run("pipeline", *args, "--out", str(tmp_path / "x.csv"))
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "x.csv").exists()


def test_the_pipeline_command_module_imports_first():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import nmsbench.pipeline_bench; from nmsbench.cli import main; "
                           "assert 'pipeline' in main.commands"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_seed_kernel_pipeline_is_listed_for_cuda_only():
    from nmsbench.variants import yolo_postprocess

    pipeline = pipelines()["cupy_seed_kernels"]
    assert pipeline.devices == ("cuda",) and pipeline.nms_family == "allpairs"
    available, reason = pipeline.availability("cpu")
    assert not available and "no cpu path" in reason
    if not torch.cuda.is_available():
        assert pipeline.availability("cuda") in ((False, "no CUDA device"), (False, "cupy not installed"))
    source = yolo_postprocess.CUDA_MODULE.path.read_text()
    for kernel in yolo_postprocess.CUDA_MODULE.expressions:
        assert f"void {kernel}(" in source


def test_seed_kernel_survivors_are_sorted_on_the_host():
    from nmsbench.variants.yolo_postprocess import _sorted_detections

    # x1, y1, x2, y2, score, label, raw row, in atomic slot order
    out = np.array([[0, 0, 1, 1, 0.5, 3, 10], [0, 0, 2, 2, 0.9, 1, 12], [1, 1, 2, 2, 0.5, 2, 4]], dtype=np.float32)
    d = _sorted_detections(out, max_det=2)
    assert d.rows.tolist() == [12, 4] and d.labels.tolist() == [1, 2] and d.rows.dtype == np.int64
    assert d.boxes.tolist() == [[0, 0, 2, 2], [1, 1, 2, 2]] and d.scores.tolist() == [np.float32(0.9), 0.5]
    assert len(_sorted_detections(out[:0], 5).rows) == 0


# ---------------------------------------------------------------- stopping, resuming, timeouts

PIPE_GRID = ["pipeline", "--source", "real", "--batch", "1,2", "--pipeline", "numpy,torch_batched_nms",
             "--stage", "decode,total", "--min-run-time", "0.001", "--threads", "1"]


def test_a_cut_pipeline_run_resumes_with_only_the_missing_rows(tmp_path, monkeypatch):
    from nmsbench import pipeline_bench
    from nmsbench.results import case_key

    out = tmp_path / "pipe.csv"
    assert run(*PIPE_GRID, "--out", str(out)).exit_code == 0
    whole = pd.read_csv(out)
    assert len(whole) == 2 * 2 * 2  # batches x pipelines x stages
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:4]))  # header + 3 rows: the second case has one of its two stage rows
    ran = []
    real_run_group = pipeline_bench._run_group

    def recording_run_group(known, members, *args):
        ran.extend((row["batch"], row["impl"], row["stage"]) for _, rows in members for row in rows)
        return real_run_group(known, members, *args)

    monkeypatch.setattr(pipeline_bench, "_run_group", recording_run_group)
    result = run(*PIPE_GRID, "--resume", str(out))
    assert result.exit_code == 0, result.output
    assert "(3 already there)" in result.output
    final = pd.read_csv(out)
    keys = [case_key(row) for row in final.astype(object).where(final.notna(), "").to_dict("records")]
    assert len(final) == 8 and len(set(keys)) == 8
    assert out.read_bytes().splitlines(keepends=True)[:4] == lines[:4]  # written rows are kept as they were, byte for byte
    assert set(final.status) == {"ok"} and (final.candidates >= final.kept).all()
    first_three = {(r.batch, r.impl, r.stage) for r in whole.iloc[:3].itertuples()}
    assert set(ran) == {(r.batch, r.impl, r.stage) for r in whole.itertuples()} - first_three
    meta = json.loads(out.with_suffix(".json").read_text())
    assert "--resume" in meta["resumed"][0]["command"]
    # nothing left: a second resume runs nothing
    ran.clear()
    again = run(*PIPE_GRID, "--resume", str(out))
    assert again.exit_code == 0 and ran == [] and len(pd.read_csv(out)) == 8


def test_pipeline_resume_refuses_sweep_files_and_contradictory_options(tmp_path):
    sweep_file = tmp_path / "sweep.csv"
    assert run("sweep", "--impl", "torchvision", "--scenario", "uniform", "--n", "4", "--min-run-time", "0.01",
               "--out", str(sweep_file)).exit_code == 0
    refused = run(*PIPE_GRID, "--resume", str(sweep_file))
    assert refused.exit_code == 2 and "holds nms rows; `nmsbench pipeline` resumes only its own (pipeline) files" in \
        refused.output
    both = run(*PIPE_GRID, "--resume", str(sweep_file), "--out", str(tmp_path / "other.csv"))
    assert both.exit_code == 2 and "leave --out out" in both.output
    forced = run(*PIPE_GRID, "--resume", str(sweep_file), "--force")
    assert forced.exit_code == 2 and "contradicts" in forced.output
    missing = run(*PIPE_GRID, "--resume", str(tmp_path / "none.csv"))
    assert missing.exit_code == 2 and "no such file" in missing.output


def test_a_pipeline_past_the_case_timeout_becomes_error_rows_and_the_run_goes_on(tmp_path):
    import time

    def build(raw, config, device):
        reference = get_pipeline("numpy").build(raw, config, device)

        def slow_decode():
            time.sleep(30)
            return reference.decode()

        return Prepared(slow_decode, reference.nms)

    register_pipeline(Pipeline("test_hangs", "sleeps in decode", ("cpu",), "hard", build))
    try:
        out = tmp_path / "pipe.csv"
        started = time.monotonic()
        result = run("pipeline", "--source", "real", "--batch", "1", "--pipeline", "test_hangs,numpy", "--stage", "total",
                     "--min-run-time", "0.001", "--threads", "1", "--case-timeout", "0.5", "--out", str(out))
        assert time.monotonic() - started < 20
    finally:
        unregister_pipeline("test_hangs")
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out).set_index("impl")
    assert frame.loc["test_hangs", "status"] == "error"
    assert "CaseTimeout: stopped after the case timeout of 0.5 s (--case-timeout)" in frame.loc["test_hangs", "error"]
    assert frame.loc["numpy", "status"] == "ok"
    meta = json.loads(out.with_suffix(".json").read_text())
    assert "--case-timeout 0.5" in meta["command"]
