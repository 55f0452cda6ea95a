"""The pipeline benchmark's contenders (issue 42): each equals the numpy reference on raw
heads of both layouts, the yolov8 layout decodes as the yolov5 one, an unavailable
contender gives skipped rows with its reason, and a small `nmsbench pipeline` run writes
rows for every contender. CPU only; tests/test_pipeline_gpu.py has the CUDA side."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from nmsbench.cli import main
from nmsbench.datasets.synthetic_raw import synthetic_raw, to_yolov8
from nmsbench.pipeline import (RULE, Pipeline, PipelineConfig, compare_detections, decode_numpy, pipelines,
                               register_pipeline, run_pipeline, unregister_pipeline, validate_raw)
from nmsbench.pipeline_bench import PipelineGrid, run_pipeline_bench
from test_pipeline import as_tuples, plain_reference

F32 = np.float32
CONTENDERS = ["ultralytics_loop", "torchvision_batched_nms", "onnxruntime_nms", "batched_op"]
ISSUE_CONTENDERS = ["numpy", *CONTENDERS, "cupy_seed_kernels", "batched_op_graph"]
AVAILABLE = [name for name in CONTENDERS if pipelines()[name].availability("cpu")[0]]
PROBS = [0.0, 0.1, 0.25, 0.3, 0.5, 0.75, 1.0]  # few values: ties, and products equal to a threshold


@st.composite
def raw_heads(draw):
    """(raw yolov5 [B, R, 5 + C], the same heads) with coordinates on a quarter-pixel grid, so
    that ultralytics' class offsets and torchvision's coordinate trick add exactly."""
    batch = draw(st.integers(0, 3))
    rows = draw(st.integers(0, 24))
    classes = draw(st.integers(1, 4))
    quarter = st.integers(0, 256).map(lambda v: v / 4)
    row = st.tuples(quarter, quarter, quarter, quarter, st.sampled_from(PROBS),
                    st.lists(st.sampled_from(PROBS), min_size=classes, max_size=classes))
    raw = np.zeros((batch, rows, 5 + classes), dtype=np.float32)
    for b in range(batch):
        image = draw(st.lists(row, min_size=rows, max_size=rows))
        for r, (cx, cy, w, h, obj, cls) in enumerate(image):
            raw[b, r] = [cx, cy, w, h, obj, *cls]
        if rows and draw(st.booleans()):  # duplicates: one row copied over others
            raw[b, draw(st.integers(0, rows - 1))] = raw[b, draw(st.integers(0, rows - 1))]
    return raw


@pytest.mark.parametrize("name", AVAILABLE)
@settings(max_examples=40, deadline=None)
@given(raw=raw_heads(), layout=st.sampled_from(["yolov5", "yolov8"]), conf=st.sampled_from([0.0, 0.25, 0.5, 0.9]),
       iou=st.sampled_from([0.25, 0.5, 0.75]), max_det=st.sampled_from([1, 3, 300]))
def test_each_contender_equals_the_numpy_reference(name, raw, layout, conf, iou, max_det):
    """IoU thresholds that float32 holds exactly: ONNX Runtime compares in float32."""
    raw = to_yolov8(raw) if layout == "yolov8" else raw
    config = PipelineConfig(conf, iou, max_det, layout=layout)
    reference = run_pipeline("numpy", raw, config)
    detections = run_pipeline(name, raw, config)
    assert len(detections) == len(reference)
    for b, (det, ref) in enumerate(zip(detections, reference)):
        assert as_tuples(det) == as_tuples(ref), (name, b)
        assert as_tuples(ref) == plain_reference(raw[b], conf, iou, max_det, layout=layout)


@pytest.mark.parametrize("name", ["numpy", *AVAILABLE])
def test_contenders_on_detector_like_heads_of_both_layouts(name):
    for layout in ("yolov5", "yolov8"):
        raw = synthetic_raw(2, seed=7, layout=layout)
        for conf in (0.25, 0.01):
            config = PipelineConfig(conf, 0.45, 300, layout=layout)
            agreement = compare_detections(run_pipeline(name, raw, config), run_pipeline("numpy", raw, config))
            assert agreement["jaccard"] == 1.0 and agreement["mismatched"] == 0 and agreement["kept"] > 0, layout


def test_the_yolov8_layout_decodes_as_the_yolov5_one():
    raw = synthetic_raw(2, seed=3)
    v8 = to_yolov8(raw)
    assert v8.shape == (2, 84, raw.shape[1]) and v8.flags.c_contiguous
    np.testing.assert_array_equal(v8[:, 4:, 17], raw[:, 17, 5:] * raw[:, 17, 4:5])
    np.testing.assert_array_equal(synthetic_raw(2, seed=3, layout="yolov8"), v8)
    for conf in (0.25, 0.001):
        for a, b in zip(decode_numpy(raw, conf, (640, 640), rule=RULE),
                        decode_numpy(v8, conf, (640, 640), "yolov8", RULE)):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("raw, message", [
    (np.zeros((1, 4, 5), np.float32), "raw yolov8 output must have shape"),
    (np.zeros((1, 6, 3), np.int32), "must be floating point"),
    (np.full((1, 6, 3), 0.5, np.float32) + np.eye(6, 3, -4, dtype=np.float32), "row 0 has class 0 score = 1.5"),
])
def test_bad_yolov8_input_is_a_clear_error(raw, message):
    with pytest.raises(ValueError, match=message):
        validate_raw(raw, "yolov8")
    with pytest.raises(ValueError, match="layout must be one of"):
        PipelineConfig(layout="yolov7")


def test_one_call_contenders_have_the_total_stage_only():
    assert pipelines()["batched_op"].stages == ("total",) and pipelines()["batched_op_graph"].devices == ("cuda",)
    prepared = pipelines()["batched_op"].build(synthetic_raw(1, seed=2), PipelineConfig(), "cpu")
    assert prepared.stages == ("total",) and prepared.decode is None
    assert as_tuples(prepared.detections()[0]) == as_tuples(run_pipeline("numpy", synthetic_raw(1, seed=2))[0])


def test_unavailable_contenders_give_skipped_rows_with_reasons():
    register_pipeline(Pipeline("test_needs_a_package", "needs a missing package", ("cpu",), "hard",
                               lambda raw, config, device: None, requires=("not_a_package_nmsbench",)))
    register_pipeline(Pipeline("test_yolov5_only", "reads yolov5 only", ("cpu",), "hard",
                               pipelines()["numpy"].build, layouts=("yolov5",)))
    try:
        rows = []
        grid = PipelineGrid(pipelines=["test_needs_a_package", "test_yolov5_only", "batched_op_graph",
                                       "cupy_seed_kernels"], sources=["real", "synthetic_yolov8"], batches=[1],
                            stages=["total"], timers=["wall"], min_run_time=0.001, rounds=1)
        run_pipeline_bench(grid, rows.append)
    finally:
        unregister_pipeline("test_needs_a_package")
        unregister_pipeline("test_yolov5_only")
    why = {(r["scenario"], r["impl"]): (r["status"], r["error"]) for r in rows}
    assert why[("real", "test_needs_a_package")] == ("skipped", "not_a_package_nmsbench not installed")
    assert why[("synthetic_yolov8", "test_yolov5_only")] == ("skipped", "test_yolov5_only reads the yolov5 layout only")
    assert why[("real", "test_yolov5_only")][0] == "ok"
    assert why[("real", "batched_op_graph")] == ("skipped", "batched_op_graph has no cpu path")
    assert why[("real", "cupy_seed_kernels")] == ("skipped", "cupy_seed_kernels has no cpu path")
    assert not pipelines()["cupy_seed_kernels"].reads("yolov8")[0]


def test_a_small_pipeline_run_writes_rows_for_every_contender(tmp_path):
    out = tmp_path / "pipe.csv"
    result = CliRunner().invoke(main, [
        "pipeline", "--source", "real,synthetic_yolov8", "--batch", "1", "--pipeline", ",".join(ISSUE_CONTENDERS),
        "--timer", "wall", "--min-run-time", "0.001", "--rounds", "1", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert set(frame.impl) == set(ISSUE_CONTENDERS) and set(frame.timer) == {"wall"}
    ok = frame[frame.status == "ok"]
    assert set(ok.impl) == {"numpy", *AVAILABLE}
    assert (ok.jaccard == 1.0).all() and (ok.mismatched == 0).all() and (ok.median_us > 0).all()
    assert set(frame[frame.impl.str.startswith("batched_op")].stage) == {"total"}
    assert set(frame[frame.impl == "ultralytics_loop"].stage) == {"decode", "nms", "total"}
    skipped = frame[frame.status == "skipped"]
    assert set(skipped.impl) >= {"cupy_seed_kernels", "batched_op_graph"} and skipped.error.str.len().min() > 0
    assert {json.loads(p).get("layout", "yolov5") for p in frame.params} == {"yolov5", "yolov8"}


@pytest.mark.parametrize("args, message", [
    (["--source", "synthetic_yolov9"], "unknown source synthetic_yolov9"),
    (["--pipeline", "ultralytics"], "unknown pipeline ultralytics"),
])
def test_bad_options_exit_2(tmp_path, args, message):
    result = CliRunner().invoke(main, ["pipeline", *args, "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 2 and message in result.output
