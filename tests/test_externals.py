"""The libraries' own NMS entries (ONNX Runtime, OpenCV, ensemble-boxes): registered with
their families, unavailable with the reason where their package is missing, and equal to
their family's definition on the property-test inputs away from the places where their
conventions differ (scores tied, an IoU within rounding of the threshold, zero-area boxes,
ensemble-boxes' late score threshold); where they differ, the sweep's agreement columns
say how far (README: why)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import definitions as D
import nmsbench
import nmsbench.registry as registry
from test_properties import EXTERNAL, Case, near_threshold

EXPECTED = {"onnxruntime": ("hard", "onnxruntime"), "opencv": ("hard", "cv2"),
            "ensemble_boxes": ("hard", "ensemble_boxes"), "ensemble_boxes_soft": ("soft", "ensemble_boxes")}


def test_each_external_is_registered_with_its_family_and_not_exact():
    assert set(EXPECTED) == set(EXTERNAL)
    for name, (family, package) in EXPECTED.items():
        impl = registry.get(name)
        assert impl.family == family and not impl.exact, name
        assert package in impl.backends["cpu"].requires, name


def test_a_missing_package_makes_it_unavailable_with_the_reason(monkeypatch):
    monkeypatch.setitem(registry._INSTALLED, "cv2", False)
    monkeypatch.setattr(registry, "ROUTES", {})
    ok, reason = registry.get("opencv").backend("cpu").availability()
    assert not ok and reason == "cv2 not installed"
    with pytest.raises(registry.BackendUnavailable, match="opencv on cpu is unavailable: cv2 not installed"):
        nmsbench.run_nms("opencv", torch.zeros(1, 4), torch.ones(1))


def require(name: str) -> None:
    ok, reason = registry.get(name).backend("cpu").availability()
    if not ok:
        pytest.skip(f"{name}: {reason}")


@st.composite
def cases(draw, dtype: torch.dtype, max_n: int = 40) -> Case:
    """Boxes of positive area, overlapping often (a 100-px canvas, sides 1-60 px), distinct
    scores in [1/16, 1], labels or none: the inputs on which the libraries' conventions
    cannot matter, but for an IoU within rounding of the threshold (:func:`comparable`)."""
    npd = np.float32 if dtype == torch.float32 else np.float64
    n = draw(st.integers(0, max_n), label="n")
    corner = np.array(draw(st.lists(st.integers(0, 100), min_size=2 * n, max_size=2 * n)), dtype=npd).reshape(n, 2)
    side = np.array(draw(st.lists(st.integers(1, 60), min_size=2 * n, max_size=2 * n)), dtype=npd).reshape(n, 2)
    step = npd(draw(st.sampled_from([1.0, 0.5, 0.37])))
    boxes = np.concatenate([corner * step, (corner + side) * step], axis=1).astype(npd)
    # distinct and irregular: no decayed score of one box meets another's exactly (their orders of picks would differ)
    scores = np.array(draw(st.lists(st.floats(0.0625, 1.0, width=32), min_size=n, max_size=n, unique=True)), dtype=npd)
    labels = None
    if draw(st.booleans()):
        labels = np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=np.int64)
    return Case(boxes, scores, labels)


def comparable(case: Case, thr: float) -> bool:
    """No same-label IoU within rounding of the threshold."""
    return not near_threshold(case, thr, band=1e-4)


@pytest.mark.parametrize("name", ["onnxruntime", "opencv", "ensemble_boxes"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_hard_entries_are_greedy_nms_away_from_their_conventions(name, data):
    require(name)
    dtype = torch.float32 if name == "onnxruntime" else data.draw(st.sampled_from([torch.float32, torch.float64]))
    case = data.draw(cases(dtype), label="case")
    thr = data.draw(st.sampled_from([0.3, 0.5, 0.7, 0.45]), label="iou_threshold")
    assume(comparable(case, thr))
    boxes, scores, labels = case.tensors()
    keep = nmsbench.run_nms(name, boxes, scores, iou_threshold=thr, labels=labels).keep.tolist()
    assert keep == D.hard_nms(case.boxes, case.scores, thr, case.labels)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_ensemble_boxes_soft_is_soft_nms_away_from_its_conventions(data):
    require("ensemble_boxes_soft")
    case = data.draw(cases(torch.float64), label="case")
    thr = data.draw(st.sampled_from([0.3, 0.5, 0.7]), label="iou_threshold")
    kernel = data.draw(st.sampled_from(["gaussian", "linear"]), label="kernel")
    # no duplicates: a linear decay takes a duplicate's score to 0, which the family keeps at
    # threshold 0 (>=) and ensemble-boxes drops (>)
    assume(comparable(case, thr) and len({tuple(r) for r in case.boxes.tolist()}) == len(case.boxes))
    boxes, scores, labels = case.tensors()
    # score threshold 0: nothing else decays below it, so its late threshold drops what the family's drops
    got = nmsbench.run_nms("ensemble_boxes_soft", boxes, scores, iou_threshold=thr, labels=labels, kernel=kernel,
                           score_threshold=0.0)
    keep, final = D.soft_nms(case.boxes, case.scores, thr, case.labels, kernel=kernel, score_threshold=0.0)
    assume(len(set(final)) == len(final))  # decayed scores tied: their order of picks may differ
    assert sorted(got.keep.tolist()) == sorted(keep)
    mine = dict(zip(got.keep.tolist(), got.scores.tolist()))
    for j, f in zip(keep, final):
        assert mine[j] == pytest.approx(f, rel=1e-6, abs=1e-9)


def test_where_the_conventions_differ_they_say_so():
    require("ensemble_boxes")
    zero_area = torch.tensor([[0.0, 0.0, 1.0, 1.0], [5.0, 5.0, 5.0, 5.0]])
    scores = torch.tensor([0.9, 0.8])
    assert nmsbench.run_nms("torchvision", zero_area, scores, iou_threshold=0.5).keep.tolist() == [0, 1]
    assert nmsbench.run_nms("ensemble_boxes", zero_area, scores, iou_threshold=0.5).keep.tolist() == [0]  # dropped


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_externals_run_in_a_sweep_and_report_their_agreement(name):
    require(name)
    from nmsbench.runner import Grid, run_sweep

    rows = []
    run_sweep(Grid(impls=[name], devices=["cpu"], dtypes=["float32"], scenarios=["clustered"], ns=[200], ious=[0.5],
                   timers=["wall"], min_run_time=0.01, threads=1, rounds=1), rows.append)
    (row,) = rows
    assert row["status"] == "ok" and 0 <= row["jaccard"] <= 1 and row["kept"] > 0
    if EXPECTED[name][0] == "hard":  # greedy NMS to rounding: on this box set, the same kept set
        assert row["jaccard"] == 1.0 and row["extra"] == row["missing"] == 0


@pytest.mark.parametrize("score_threshold, center_point_box", [(False, 0), (True, 1)])
def test_the_onnx_model_declares_its_opsets_oldest_ir_version(monkeypatch, score_threshold, center_point_box):
    """An onnx newer than the onnxruntime beside it writes an IR version that runtime refuses
    ("Unsupported model IR version"); every NMS model built here declares the oldest IR
    version its opset allows, and still runs."""
    onnx = pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    from nmsbench.onnx_model import OPSET, nms_session

    built = []
    real = onnxruntime.InferenceSession
    monkeypatch.setattr(onnxruntime, "InferenceSession", lambda model, *a, **k: built.append(model) or real(model, *a, **k))
    session = nms_session("nms", [1, None, 4], [1, 1, None], score_threshold=score_threshold,
                          center_point_box=center_point_box)
    model = onnx.load_model_from_string(built[0])
    assert model.ir_version == onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", OPSET)])
    assert model.ir_version < onnx.IR_VERSION
    assert model.graph.node[0].attribute[0].i == center_point_box
    feeds = {"boxes": np.array([[[0, 0, 1, 1], [0, 0, 1, 1.1], [5, 5, 6, 6]]], np.float32),
             "scores": np.array([[[0.9, 0.8, 0.7]]], np.float32),
             "max_output_boxes_per_class": np.array([3], np.int64), "iou_threshold": np.array([0.5], np.float32)}
    if score_threshold:
        feeds["score_threshold"] = np.array([0.0], np.float32)
    kept = session.run(None, feeds)[0][:, 2].tolist()
    assert kept == [0, 2]  # the second box overlaps the first at IoU 0.91 in either box format
