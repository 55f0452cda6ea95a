"""nmsbench.batched_nms and batched_nms_from_head on the CPU: property tests against a plain
per-image, per-class reference built on torchvision.ops.nms in a Python loop (batch sizes,
boxes, classes, ties, duplicates, empty images, nothing above the threshold, padding,
multi-label, class-agnostic, per-class caps, pre-NMS top-k, overflow), the threshold's
strictness, NaN handling, the registered op (torch.compile with fullgraph, torch.export,
fake tensors), bad input, and the CUDA host side's launches with the driver stubbed.
tests/test_batched_nms_gpu.py holds the CUDA kernels to the same reference on a GPU.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import numpy as np
import pytest
import torch
import torchvision
from hypothesis import given, settings
from hypothesis import strategies as st

import nmsbench
from nmsbench import batched

SCALE_EXAMPLES = 60


# ------------------------------------------------------------------ the reference

class Image(NamedTuple):
    indices: list  # input box of each detection, best first
    classes: list
    boxes: torch.Tensor  # [k, 4] in the arithmetic type
    scores: torch.Tensor  # [k]
    overflow: bool
    candidates: int


def arithmetic(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def reference(data, scores=None, labels=None, *, layout="scores", box_format="xyxy", iou_threshold,
              score_threshold=0.0, max_output_boxes=300, max_output_boxes_per_class=None, class_agnostic=False,
              multi_label=False, pre_nms_top_k=None, max_candidates=None) -> list[Image]:
    """The definition (nmsbench/batched.py's docstring), plainly: per image the candidates in
    index order, a stable sort by score, torchvision.ops.nms per class over them, the kept by
    rank, the per-class cap, the first max_output_boxes."""
    arith = arithmetic(data.dtype)
    threshold = torch.tensor(score_threshold, dtype=arith)  # rounded as `scores > t` rounds it
    images = []
    for b in range(data.shape[0]):
        x = data[b].to(arith)
        if layout == "scores":
            box, sc = x, scores[b].to(arith)
            sc = sc[:, None] if sc.dim() == 1 else sc
            rows = torch.ones(x.shape[0], dtype=torch.bool)
        else:
            x = x.T if layout == "yolov8" else x
            box = x[:, :4]
            if layout == "yolov5":
                rows = x[:, 4] > threshold
                sc = x[:, 4:5] * x[:, 5:]
            else:
                sc, rows = x[:, 4:], torch.ones(x.shape[0], dtype=torch.bool)
        if box_format == "cxcywh" or layout != "scores":
            box = torchvision.ops.box_convert(box, "cxcywh", "xyxy")
        n, classes = sc.shape
        above = (sc > threshold) & rows[:, None]
        if multi_label:
            i, c = torch.nonzero(above, as_tuple=True)  # row-major: box, then class
            cand = i * classes + c
        else:
            masked = torch.where(torch.isnan(sc), torch.tensor(-math.inf, dtype=arith), sc)
            best = masked.max(dim=1).values if classes else torch.zeros(0, dtype=arith)
            first_best = (masked == best[:, None]).to(torch.uint8).argmax(dim=1)
            i = torch.nonzero(above.any(dim=1)).flatten()
            c, cand = first_best[i], i
        cls = labels[b][i].to(torch.int64) if labels is not None else c
        s = sc[i, c]
        if len(cand) > batched.candidate_capacity(n, classes, multi_label, max_candidates):
            images.append(Image([], [], torch.zeros(0, 4, dtype=arith), torch.zeros(0, dtype=arith), True, len(cand)))
            continue
        order = torch.sort(s, descending=True, stable=True).indices  # candidates are in index order
        if pre_nms_top_k is not None:
            order = order[:pre_nms_top_k]
        group = torch.zeros_like(cls) if class_agnostic else cls
        kept = []  # rank positions
        for g in torch.unique(group[order]).tolist():
            members = [p for p in range(len(order)) if group[order[p]] == g]
            rank_scores = torch.arange(len(members), 0, -1, dtype=arith)  # torchvision sorts them back into rank order
            keep = torchvision.ops.nms(box[i[order[members]]], rank_scores, iou_threshold)
            kept += [members[k] for k in keep.tolist()]
        kept.sort()
        if max_output_boxes_per_class is not None:
            per_group, capped = {}, []
            for p in kept:
                g = int(group[order[p]])
                per_group[g] = per_group.get(g, 0) + 1
                if per_group[g] <= max_output_boxes_per_class:
                    capped.append(p)
            kept = capped
        chosen = order[kept[:max_output_boxes]]
        images.append(Image(i[chosen].tolist(), cls[chosen].tolist(), box[i[chosen]], s[chosen], False, len(cand)))
    return images


def bits(t: torch.Tensor) -> torch.Tensor:
    """The values' bit patterns (exact comparison, -0.0 apart from 0.0)."""
    return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_matches(det: nmsbench.BatchedDetections, refs: list[Image], dtype: torch.dtype) -> None:
    batch, k = det.boxes.shape[:2]
    assert len(refs) == batch
    assert det.boxes.dtype == det.scores.dtype == dtype
    assert det.num_detections.tolist() == [len(r.indices) for r in refs]
    assert det.overflow.tolist() == [r.overflow for r in refs]
    assert det.num_candidates.tolist() == [r.candidates for r in refs]
    for b, r in enumerate(refs):
        m = len(r.indices)
        assert det.indices[b, :m].tolist() == r.indices, b
        assert det.classes[b, :m].tolist() == r.classes, b
        assert torch.equal(bits(det.boxes[b, :m].cpu()), bits(r.boxes.to(dtype))), b
        assert torch.equal(bits(det.scores[b, :m].cpu()), bits(r.scores.to(dtype))), b
        assert (det.indices[b, m:] == -1).all() and (det.classes[b, m:] == -1).all()
        assert (bits(det.boxes[b, m:]) == 0).all() and (bits(det.scores[b, m:]) == 0).all()


# ------------------------------------------------------------------ inputs

SCORE_VALUES = [-1.0, 0.0, 0.125, 0.25, 0.5, 0.75, 1.0, 1.0, math.inf, math.nan]


def random_boxes(generator, shape, span: int = 16, side: int = 8) -> torch.Tensor:
    """xyxy boxes on an integer grid (duplicates, shared edges and zero areas are common)."""
    corner = torch.randint(0, span, (*shape, 2), generator=generator).double()
    size = torch.randint(0, side + 1, (*shape, 2), generator=generator).double()
    return torch.cat([corner, corner + size], dim=-1)


def cxcywh(boxes: torch.Tensor) -> torch.Tensor:
    """xyxy boxes [..., 4] as centre, width, height (a raw head's box fields)."""
    return torch.cat([(boxes[..., :2] + boxes[..., 2:]) / 2, boxes[..., 2:] - boxes[..., :2]], dim=-1)


def random_values(generator, shape, values=SCORE_VALUES) -> torch.Tensor:
    table = torch.tensor(values, dtype=torch.float64)
    return table[torch.randint(0, len(table), shape, generator=generator)]


@st.composite
def sizes(draw, max_batch: int, max_n: int) -> tuple[int, int, int]:
    """(B, N, C): mostly full batches of many boxes, sometimes empty ones."""
    batch = draw(st.sampled_from([max_batch, 2, 1, max_batch, 0]))
    n = draw(st.sampled_from(["many", "many", "many", "few", "none"]))
    n = {"many": max_n - draw(st.integers(0, max_n // 3)), "few": draw(st.integers(1, 4)), "none": 0}[n]
    return batch, n, draw(st.integers(1, 4))


@st.composite
def scored_cases(draw, max_batch: int = 3, max_n: int = 30):
    """(args, kwargs) of a batched_nms call on the CPU."""
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.float16]))
    batch, n, classes = draw(sizes(max_batch, max_n))
    mode = draw(st.sampled_from(["classes", "one score", "labels"]))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    box_format = draw(st.sampled_from(["xyxy", "cxcywh"]))
    boxes = random_boxes(generator, (batch, n), span=draw(st.sampled_from([16, 64])))
    if box_format == "cxcywh":
        boxes = torch.cat([(boxes[..., :2] + boxes[..., 2:]) / 2, boxes[..., 2:] - boxes[..., :2]], dim=-1)
    if draw(st.booleans()):
        values = [0.0, 0.25, 0.5, 0.5, 1.0]  # many ties
    else:
        values = SCORE_VALUES
    shape = (batch, n, classes) if mode == "classes" else (batch, n)
    scores = random_values(generator, shape, values)
    labels = torch.randint(0, 3, (batch, n), generator=generator) if mode == "labels" else None
    kwargs = dict(
        iou_threshold=draw(st.sampled_from([0.0, 0.3, 0.5, 0.7, 1.0])),
        score_threshold=draw(st.sampled_from([-1.0, 0.0, 0.25, 0.5])),
        max_output_boxes=draw(st.sampled_from([300, 300, 7, 3, 1, 0])),
        max_output_boxes_per_class=draw(st.sampled_from([None, None, 1, 2])),
        class_agnostic=draw(st.booleans()),
        multi_label=mode == "classes" and draw(st.booleans()),
        pre_nms_top_k=draw(st.sampled_from([None, None, None, 5, 20, 1])),
        max_candidates=draw(st.sampled_from([None, None, None, None, 40, 5, 1])),
        box_format=box_format,
    )
    return (boxes.to(dtype), scores.to(dtype), labels), kwargs


@st.composite
def head_cases(draw, max_batch: int = 3, max_n: int = 30):
    """(raw, layout, kwargs) of a batched_nms_from_head call on the CPU."""
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.float16]))
    layout = draw(st.sampled_from(["yolov5", "yolov8"]))
    batch, n, classes = draw(sizes(max_batch, max_n))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    boxes = random_boxes(generator, (batch, n), span=draw(st.sampled_from([16, 64])))
    centre = cxcywh(boxes)
    probabilities = [0.0, 0.2, 0.25, 0.5, 0.6, 0.9, 1.0]
    fields = [centre]
    if layout == "yolov5":
        fields.append(random_values(generator, (batch, n, 1), probabilities))
    fields.append(random_values(generator, (batch, n, classes), probabilities))
    raw = torch.cat(fields, dim=-1)
    if layout == "yolov8":
        raw = raw.transpose(1, 2).contiguous()
    kwargs = dict(
        iou_threshold=draw(st.sampled_from([0.0, 0.45, 0.7])),
        score_threshold=draw(st.sampled_from([0.0, 0.1, 0.25, 0.5])),
        max_output_boxes=draw(st.sampled_from([300, 5, 1])),
        max_output_boxes_per_class=draw(st.sampled_from([None, None, 2])),
        class_agnostic=draw(st.booleans()),
        multi_label=draw(st.booleans()),
        pre_nms_top_k=draw(st.sampled_from([None, None, 10])),
        max_candidates=draw(st.sampled_from([None, None, 8])),
    )
    return raw.to(dtype), layout, kwargs


# ------------------------------------------------------------------ against the reference

@settings(max_examples=SCALE_EXAMPLES)
@given(scored_cases())
def test_batched_nms_equals_the_per_class_torchvision_reference(case):
    (boxes, scores, labels), kwargs = case
    det = nmsbench.batched_nms(boxes, scores, labels, **kwargs)
    assert_matches(det, reference(boxes, scores, labels, **kwargs), boxes.dtype)


@settings(max_examples=SCALE_EXAMPLES)
@given(head_cases())
def test_batched_nms_from_head_equals_the_reference_on_both_layouts(case):
    raw, layout, kwargs = case
    det = nmsbench.batched_nms_from_head(raw, layout, **kwargs)
    assert_matches(det, reference(raw, layout=layout, **kwargs), raw.dtype)


def test_the_score_threshold_is_strict_and_rounded_to_the_scores_type():
    boxes = torch.tensor([[[0.0, 0, 1, 1], [5, 5, 6, 6], [10, 10, 11, 11]]])
    below = float(np.nextafter(np.float32(0.25), np.float32(0)))
    scores = torch.tensor([[0.25, below, float(np.nextafter(np.float32(0.25), np.float32(1)))]])
    det = nmsbench.batched_nms(boxes, scores, iou_threshold=0.5, score_threshold=0.25)
    assert det.indices[0, : det.num_detections[0]].tolist() == [2]  # 0.25 itself is no candidate
    det = nmsbench.batched_nms(boxes, scores, iou_threshold=0.5, score_threshold=below)  # ">= 0.25" in float32
    assert det.indices[0, : det.num_detections[0]].tolist() == [2, 0]
    # 0.1 rounds to float32's 0.100000001...: a float32 score of 0.1 is equal to it, so no candidate
    det = nmsbench.batched_nms(boxes, torch.full((1, 3), 0.1), iou_threshold=0.5, score_threshold=0.1)
    assert det.num_detections.tolist() == [0] and det.num_candidates.tolist() == [0]
    det = nmsbench.batched_nms(boxes.double(), torch.full((1, 3), 0.1).double(), iou_threshold=0.5,
                               score_threshold=0.1)
    assert det.num_detections.tolist() == [3]  # float32's 0.1 is above float64's


def test_ties_go_to_the_lower_index_and_duplicates_suppress_each_other():
    boxes = torch.tensor([[[0.0, 0, 10, 10]] * 4 + [[20.0, 20, 30, 30]] * 2])
    scores = torch.tensor([[0.5, 0.9, 0.9, 0.5, 0.9, 0.9]])
    det = nmsbench.batched_nms(boxes, scores, iou_threshold=0.5)
    assert det.indices[0, :2].tolist() == [1, 4] and det.num_detections.tolist() == [2]
    det = nmsbench.batched_nms(boxes, scores, torch.tensor([[0, 1, 2, 3, 0, 0]]), iou_threshold=0.5)
    assert det.indices[0, : det.num_detections[0]].tolist() == [1, 2, 4, 0, 3]


def test_multi_label_class_agnostic_and_the_per_class_cap():
    boxes = torch.tensor([[[0.0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]]])
    scores = torch.tensor([[[0.9, 0.8], [0.7, 0.1], [0.6, 0.3]]])
    one = dict(iou_threshold=0.5, score_threshold=0.2)
    det = nmsbench.batched_nms(boxes, scores, **one)
    assert det.indices[0, :2].tolist() == [0, 2] and det.classes[0, :2].tolist() == [0, 0]
    det = nmsbench.batched_nms(boxes, scores, multi_label=True, **one)
    assert list(zip(det.indices[0, :4].tolist(), det.classes[0, :4].tolist())) == [(0, 0), (0, 1), (2, 0), (2, 1)]
    det = nmsbench.batched_nms(boxes, scores, multi_label=True, class_agnostic=True, **one)
    assert list(zip(det.indices[0, :2].tolist(), det.classes[0, :2].tolist())) == [(0, 0), (2, 0)]
    det = nmsbench.batched_nms(boxes, scores, multi_label=True, max_output_boxes_per_class=1, **one)
    assert list(zip(det.indices[0, :2].tolist(), det.classes[0, :2].tolist())) == [(0, 0), (0, 1)]
    assert det.num_detections.tolist() == [2]


def test_an_overflowing_image_is_reported_and_gets_no_detections():
    boxes = random_boxes(torch.Generator().manual_seed(0), (3, 20)).float()
    scores = torch.rand(3, 20, 3, generator=torch.Generator().manual_seed(1))
    scores[1] = 0.0  # no candidates at all
    det = nmsbench.batched_nms(boxes, scores, iou_threshold=0.5, score_threshold=0.1, multi_label=True,
                               max_candidates=30)
    counts = (scores > 0.1).sum(dim=(1, 2)).tolist()
    assert det.num_candidates.tolist() == counts and det.overflow.tolist() == [c > 30 for c in counts]
    assert counts[0] > 30 and det.num_detections[0] == 0 and (det.indices[0] == -1).all()
    assert det.num_detections[1] == 0 and not det.overflow[1]


def test_candidates_past_the_cpu_backends_first_arrays_and_an_overflow_beyond_them():
    """More candidates than the CPU backend's first candidate arrays hold (they grow as they
    fill): the reference's detections, on every layout; and an image past a max_candidates
    above that first size overflows, counted in full, with no detections."""
    from nmsbench.variants import batched_cpu

    generator = torch.Generator().manual_seed(3)
    n, classes = 3000, 3
    boxes = random_boxes(generator, (2, n), span=400).float()
    scores = torch.rand(2, n, classes, generator=generator)
    kwargs = dict(iou_threshold=0.5, score_threshold=0.05, multi_label=True, max_output_boxes=1000)
    count = int((scores[0] > 0.05).sum())
    assert count > batched_cpu.FIRST_CANDIDATES
    det = nmsbench.batched_nms(boxes, scores, **kwargs)
    assert_matches(det, reference(boxes, scores, **kwargs), torch.float32)
    centre = cxcywh(boxes)
    for layout, raw in (("yolov5", torch.cat([centre, torch.ones(2, n, 1), scores], dim=-1)),
                        ("yolov8", torch.cat([centre, scores], dim=-1).transpose(1, 2).contiguous())):
        head = nmsbench.batched_nms_from_head(raw, layout, **kwargs)
        assert all(torch.equal(a, b) for a, b in zip(head, det)), layout
    limit = batched_cpu.FIRST_CANDIDATES + 100
    over = nmsbench.batched_nms(boxes, scores, max_candidates=limit, **kwargs)
    assert over.num_candidates[0] == count > limit and over.overflow[0] and over.num_detections[0] == 0


def test_nan_scores_never_pass_and_nan_boxes_overlap_nothing():
    boxes = torch.tensor([[[0.0, 0, 10, 10], [0, 0, 10, 10], [math.nan, 0, 10, 10], [0, 0, 10, 10]]])
    scores = torch.tensor([[[math.nan, 0.2], [0.9, math.nan], [0.8, 0.1], [0.7, 0.7]]])
    det = nmsbench.batched_nms(boxes, scores, iou_threshold=0.5, score_threshold=0.0)
    # row 0 takes class 1 (its NaN is never the best), row 2 is kept beside row 1 (NaN overlaps nothing)
    assert list(zip(det.indices[0, :3].tolist(), det.classes[0, :3].tolist())) == [(1, 0), (2, 0), (0, 1)]
    assert det.num_detections.tolist() == [3]


@pytest.mark.parametrize("multi_label", [False, True])
def test_the_yolov8_layout_equals_the_same_boxes_and_scores_row_by_row(multi_label):
    """The CPU backend reads YOLOv8's channels-first head a class at a time; its detections
    equal those of the same boxes (cxcywh) and scores given row by row: ties between an
    anchor's classes (the first of equal best), NaN scores (never above) and anchors with
    no class above included."""
    generator = torch.Generator().manual_seed(8)
    batch, n, classes = 3, 500, 4
    boxes = random_boxes(generator, (batch, n), span=64)
    centre = cxcywh(boxes)
    scores = random_values(generator, (batch, n, classes), [0.0, 0.1, 0.2, 0.25, 0.5, 0.9, 0.9, 1.0])
    scores[torch.rand(batch, n, classes, generator=generator) < 0.05] = math.nan
    raw = torch.cat([centre, scores], dim=-1).transpose(1, 2).contiguous()  # [B, 4 + C, A]
    kwargs = dict(iou_threshold=0.45, score_threshold=0.25, multi_label=multi_label, max_output_boxes=2000)
    v8 = nmsbench.batched_nms_from_head(raw, "yolov8", **kwargs)
    rows = nmsbench.batched_nms(centre, scores, box_format="cxcywh", **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(v8, rows))
    assert (v8.num_detections > 5).all() and (v8.num_candidates < n * (classes if multi_label else 1)).all()


def test_empty_inputs_give_padded_outputs():
    for batch, n, k in ((0, 5, 3), (2, 0, 3), (2, 5, 0)):
        det = nmsbench.batched_nms(torch.zeros(batch, n, 4), torch.ones(batch, n, 2), iou_threshold=0.5,
                                   max_output_boxes=k)
        assert det.boxes.shape == (batch, k, 4) and det.indices.shape == det.classes.shape == (batch, k)
        assert det.num_detections.tolist() == [0] * batch and det.overflow.shape == (batch,)


def test_float16_is_computed_in_float32_and_rounded_at_the_end():
    raw = torch.tensor([[[100.0, 100.0, 50.0, 30.0, 0.9, 0.7]]])
    half = nmsbench.batched_nms_from_head(raw.half(), iou_threshold=0.5, score_threshold=0.1)
    single = nmsbench.batched_nms_from_head(raw.half().float(), iou_threshold=0.5, score_threshold=0.1)
    assert half.boxes.dtype == torch.float16
    assert torch.equal(half.boxes, single.boxes.half()) and torch.equal(half.scores, single.scores.half())


# ------------------------------------------------------------------ the registered op

class Head(torch.nn.Module):
    def forward(self, raw):
        det = nmsbench.batched_nms_from_head(raw * 1.0, "yolov5", max_output_boxes=16)
        return det.num_detections, det.boxes, det.scores, det.classes, det.indices, det.overflow


def yolov5_raw(batch: int = 2, rows: int = 200, classes: int = 4, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    raw = torch.rand(batch, rows, 5 + classes, generator=generator)
    raw[..., :2] *= 640
    raw[..., 2:4] *= 120
    return raw


def test_the_op_path_equals_the_direct_path():
    raw = yolov5_raw()
    direct = nmsbench.batched_nms_from_head(raw)
    through_op = torch.ops.nmsbench.batched_nms(raw, None, None, "yolov5", "cxcywh", 0.45, 0.25, 300, None, False,
                                                False, None, None)
    assert all(torch.equal(a, b) for a, b in zip(direct, through_op))


def test_a_head_call_like_an_earlier_one_skips_the_checks_and_gives_the_same_answer(monkeypatch):
    """A head call with the parameters (values and types) and raw layout (dtype, shape,
    strides, device type) of an earlier one that passed the checks goes straight to the
    backend, with the earlier call's arguments; anything else is checked: another value or
    type of a parameter, another shape or dtype, a non-contiguous raw (never kept), a bad
    raw after a good one. Every answer equals the checked path's."""
    monkeypatch.setattr(batched, "_heads", {})
    checks = []
    check_inputs = batched._check_inputs
    monkeypatch.setattr(batched, "_check_inputs", lambda *a: checks.append(a[0].shape) or check_inputs(*a))

    def checked(raw, **kwargs):  # the checked path's answer
        p = batched._check_params(kwargs.get("layout", "yolov5"), "cxcywh", kwargs.get("iou_threshold", 0.45), 0.25,
                                  kwargs.get("max_output_boxes", 300), None, False, False, None, None)
        return nmsbench.BatchedDetections(*batched._run(raw, None, None, p))

    def same(a, b):
        return all(torch.equal(x, y) for x, y in zip(a, b))

    raw, other = yolov5_raw(), yolov5_raw(seed=1)
    first = nmsbench.batched_nms_from_head(raw)
    assert len(checks) == 1 and len(batched._heads) == 1
    for r in (raw, other, other.clone()):  # the same layout: no checks
        assert same(nmsbench.batched_nms_from_head(r), checked(r))
    assert len(checks) == 1 + 3  # (the three reference answers' own checks)
    assert same(first, checked(raw))
    checks.clear()
    nmsbench.batched_nms_from_head(raw, iou_threshold=0.5)  # another value
    nmsbench.batched_nms_from_head(raw, max_output_boxes=300)  # the default given: the same key as the first
    nmsbench.batched_nms_from_head(raw, iou_threshold=1)  # another type (int)
    nmsbench.batched_nms_from_head(raw.double())  # another dtype
    nmsbench.batched_nms_from_head(raw[:1])  # another shape
    assert len(checks) == 4 and len(batched._heads) == 5
    strided = torch.cat([raw, raw], dim=2)[..., ::2]  # the same shape and dtype, not contiguous
    assert not strided.is_contiguous()
    for _ in range(2):
        assert same(nmsbench.batched_nms_from_head(strided), checked(strided.contiguous()))
    assert len(checks) == 4 + 2 + 2 and len(batched._heads) == 5  # checked both times, never kept
    with pytest.raises(ValueError, match="must be a number"):
        nmsbench.batched_nms_from_head(raw, iou_threshold=math.nan)
    with pytest.raises(ValueError, match=r"shape \[B, R, 5 \+ C\]"):
        nmsbench.batched_nms_from_head(raw[..., :5])
    with pytest.raises(ValueError, match="max_output_boxes must be"):
        nmsbench.batched_nms_from_head(raw, max_output_boxes=300.0)


def test_a_module_ending_in_it_compiles_with_fullgraph():
    raw, module = yolov5_raw(), Head()
    eager = module(raw)
    compiled = torch.compile(module, fullgraph=True)(raw)
    assert all(torch.equal(a, b) for a, b in zip(eager, compiled))


def test_a_module_ending_in_it_exports_and_runs():
    raw, module = yolov5_raw(), Head()
    program = torch.export.export(module, (raw,))
    targets = [node.target for node in program.graph.nodes if node.op == "call_function"]
    assert torch.ops.nmsbench.batched_nms.default in targets
    other = yolov5_raw(seed=1)
    assert all(torch.equal(a, b) for a, b in zip(module(other), program.module()(other)))


def test_fake_tensors_get_the_padded_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        raw = mode.from_tensor(yolov5_raw(batch=3))
        det = nmsbench.batched_nms_from_head(raw, max_output_boxes=7)
        assert det.boxes.shape == (3, 7, 4) and det.scores.shape == det.indices.shape == (3, 7)
        assert det.num_detections.dtype == torch.int64 and det.overflow.dtype == torch.bool
        boxes, scores = mode.from_tensor(torch.zeros(2, 5, 4)), mode.from_tensor(torch.zeros(2, 5, 3))
        with pytest.raises(Exception, match="max_output_boxes"):
            nmsbench.batched_nms(boxes, scores, iou_threshold=0.5, max_output_boxes=-1)


# ------------------------------------------------------------------ bad input

B4 = torch.zeros(2, 5, 4)
S3 = torch.zeros(2, 5, 3)
BAD = [
    (lambda: nmsbench.batched_nms(B4.numpy(), S3, iou_threshold=0.5), "boxes must be a torch.Tensor"),
    (lambda: nmsbench.batched_nms(torch.zeros(2, 5, 5), S3, iou_threshold=0.5), r"shape \[B, N, 4\]"),
    (lambda: nmsbench.batched_nms(B4.int(), S3, iou_threshold=0.5), "float16, float32 or float64"),
    (lambda: nmsbench.batched_nms(B4.bfloat16(), S3.bfloat16(), iou_threshold=0.5), "float16, float32 or float64"),
    (lambda: nmsbench.batched_nms(B4, S3.double(), iou_threshold=0.5), "boxes' dtype"),
    (lambda: nmsbench.batched_nms(B4, torch.zeros(2, 4, 3), iou_threshold=0.5), r"scores must have shape"),
    (lambda: nmsbench.batched_nms(B4, torch.zeros(2, 5, 0), iou_threshold=0.5), r"scores must have shape"),
    (lambda: nmsbench.batched_nms(B4, S3, torch.zeros(2, 5, dtype=torch.int64), iou_threshold=0.5), "labels go with"),
    (lambda: nmsbench.batched_nms(B4, torch.zeros(2, 5), torch.zeros(2, 5), iou_threshold=0.5), "labels must be int"),
    (lambda: nmsbench.batched_nms(B4, torch.zeros(2, 5), torch.zeros(2, 4, dtype=torch.int64), iou_threshold=0.5),
     "labels must have"),
    (lambda: nmsbench.batched_nms(B4, torch.zeros(2, 5), iou_threshold=0.5, multi_label=True), "multi_label needs"),
    (lambda: nmsbench.batched_nms(B4.to("meta"), S3.to("meta"), iou_threshold=0.5), "cpu and cuda tensors"),
    (lambda: nmsbench.batched_nms(B4.to_sparse(), S3, iou_threshold=0.5), "dense tensor"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold=math.nan), "iou_threshold must be a number"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold=-0.1), "iou_threshold must be >= 0"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold="0.5"), "iou_threshold must be a number"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold=0.5, score_threshold=math.nan), "score_threshold"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold=0.5, max_output_boxes=-1), "max_output_boxes must be"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold=0.5, max_output_boxes=2.0), "max_output_boxes must be"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold=0.5, max_output_boxes_per_class=0), "per_class must be"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold=0.5, pre_nms_top_k=0), "pre_nms_top_k must be"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold=0.5, max_candidates=2**31), "max_candidates must be"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold=0.5, multi_label=1), "multi_label must be True or False"),
    (lambda: nmsbench.batched_nms(B4, S3, iou_threshold=0.5, box_format="xywh"), "box_format must be one of"),
    (lambda: nmsbench.batched_nms_from_head(torch.zeros(2, 10, 5)), r"shape \[B, R, 5 \+ C\]"),
    (lambda: nmsbench.batched_nms_from_head(torch.zeros(2, 4, 10), "yolov8"), r"shape \[B, 4 \+ C, A\]"),
    (lambda: nmsbench.batched_nms_from_head(torch.zeros(10, 85)), r"shape \[B, R, 5 \+ C\]"),
    (lambda: nmsbench.batched_nms_from_head(torch.zeros(2, 10, 85), "yolox"), "layout must be one of"),
]


@pytest.mark.parametrize("call,message", BAD, ids=[m for _, m in BAD])
def test_bad_input_is_a_value_error_naming_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_missing_backend_is_backend_unavailable(monkeypatch):
    import importlib.util

    from nmsbench import batched

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba" else real(name, *a))
    monkeypatch.setattr(batched, "_backends", {})  # as in a process whose first call this is
    with pytest.raises(nmsbench.BackendUnavailable, match="numba not installed"):
        nmsbench.batched_nms(B4, S3, iou_threshold=0.5)


# ------------------------------------------------------------------ the CUDA host side, stubbed

def stub_cuda_launches(monkeypatch, stream=lambda: 5, capturing=lambda: False):
    """The CUDA backend's launches, memset and device queries stubbed (CPU tensors stand in
    for the device's): returns the launches' records (kernel name, argument codes, grid,
    block, shared bytes, values), the memset sizes and each kernel's cooperative flag."""
    import nmsbench.cuda as _cuda
    from nmsbench.variants import batched_nms as backend

    records, zeroed, cooperative = [], [], {}

    class Kernel:
        def __init__(self, name):
            self.name, self.ptr = name, hash(name) & 0xFFFF

    def compiled(self, stream, *values):
        assert len(values) == len(self.codes), self.function.name
        records.append((self.function.name, self.codes, self.grid, self.block, self.shared_mem, values))
        cooperative[self.function.name] = self.cooperative

    monkeypatch.setattr(_cuda.CudaModule, "get", lambda self, name, dtype, device: Kernel(name))
    monkeypatch.setattr(_cuda.CompiledLaunch, "__call__", compiled)
    monkeypatch.setattr(backend, "_current_stream", lambda device: (0, stream()))
    monkeypatch.setattr(backend, "opted_in_shared_limit", lambda kernel, device: 227 * 1024)
    monkeypatch.setattr(backend, "resident_blocks", lambda kernel, threads, device: 6 * 132)
    monkeypatch.setattr(backend, "multiprocessors", lambda device: 132)
    monkeypatch.setattr(backend, "_zero", lambda address, size, stream: zeroed.append(size))
    monkeypatch.setattr(backend, "device_index", lambda device: 0)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", capturing)
    monkeypatch.setattr(backend, "_plans", {})
    monkeypatch.setattr(backend, "_output_rings", {})
    monkeypatch.setattr(backend, "_kept_scratch", {})
    return records, zeroed, cooperative


def _stubbed_head_call(backend, fused=None):
    """``backend.run`` on a zero YOLOv5 head [2, 100, 85] (conf 0.25, IoU 0.5, 300 a image):
    the call the host-side tests below repeat, with the CUDA launches stubbed (a batch this
    small takes fused_kernel unless ``fused`` is False)."""
    return backend.run(torch.zeros(2, 100, 85), None, None, layout="yolov5", cxcywh=True, n=100, classes=80,
                       multi_label=False, class_agnostic=False, iou_threshold=0.5, score_threshold=0.25,
                       max_output=300, max_per_class=300, top_k=batched.INT32_MAX, capacity=100, fused=fused)


def _counts_address(record) -> int:
    """The candidate counters' address in a stubbed nms_kernel or fused_kernel launch's record."""
    name, *_, values = record
    return values[13] if name == "fused_kernel" else values[0]


def test_the_cuda_launches_pack_their_kernels_signatures_on_every_path(monkeypatch):
    """Without a GPU: batched_nms.run's memset and two or three launches, with the driver
    stubbed, for every layout (YOLOv5 single-label rows through decode_rows_kernel), with
    and without the global merge and the whole-GPU sort, the spilled detections and the
    class-segmented path: each launch packs its kernel's C signature, with the sizes the
    plan promises. (One launch, fused_kernel: the next test.)"""
    from test_kernel_layout import c_signatures

    from nmsbench.variants import batched_nms as backend

    records, zeroed, cooperative = stub_cuda_launches(monkeypatch)
    signatures = c_signatures(backend.CUDA_MODULE.source())
    common = dict(cxcywh=True, class_agnostic=False, iou_threshold=0.5, score_threshold=0.25, max_per_class=300,
                  top_k=batched.INT32_MAX)
    for layout, data, scores, n, classes, multi_label in (
            ("scores", torch.zeros(3, 40000, 4), torch.zeros(3, 40000, 2), 40000, 2, False),
            ("yolov5", torch.zeros(3, 100, 85), None, 100, 80, False),
            ("yolov5", torch.zeros(3, 100, 85), None, 100, 80, True),
            ("yolov8", torch.zeros(3, 84, 100), None, 100, 80, False)):
        for max_output in (300, backend.KEPT_CACHE + 1, backend.GRAPH_MIN_OUTPUT):
            records.clear()
            backend._kept_scratch.clear()  # a fresh scratch: the memset below
            outputs = backend.run(data, scores, None, layout=layout, n=n, classes=classes, multi_label=multi_label,
                                  max_output=max_output, capacity=n, fused=False, **common)
            rows = layout == "yolov5" and not multi_label
            merged = n > backend.sort_capacity_for(n, torch.float32, 227 * 1024)
            # the overlap graph for many detections, the whole-GPU sort for a buffer beyond a block's sort
            graph = max_output >= backend.GRAPH_MIN_OUTPUT and n > backend.GRAPH_MIN_CANDIDATES
            wide = graph or (merged and n >= backend.WIDE_MIN_CAPACITY)
            assert [r[0] for r in records] == ["decode_rows_kernel" if rows else "decode_kernel",
                                               *(["wide_sort_kernel"] if wide else []), "nms_kernel"]
            assert zeroed[-1] == 4 * (3 + 4 * wide)  # the counts, then the barrier word and three round counters
            for name, codes, *_ in records:
                assert codes == signatures[name], name
            (_, _, decode_grid, decode_block, _, decode_values), *_, (_, _, nms_grid, nms_block, shared, values) = records
            per_block = backend.DECODE_THREADS * (decode_values[4] if rows else 1)
            assert decode_grid == (-(-n // per_block), 3) and nms_grid == (3,)
            assert not rows or decode_values[4] == 1  # three blocks of 100 rows are resident at once
            wide_min = (backend.GRAPH_MIN_CANDIDATES if graph else values[7]) if wide else 2**31 - 1
            assert values[9:11] == (wide_min, graph) and (values[11] != 0) == (merged or wide)
            assert (values[13] != 0) == graph and (values[14] != 0) == (max_output > backend.KEPT_CACHE)
            assert values[8] == backend.fast_max_for(n, torch.float32, 227 * 1024) == (1024 if n > 1024 else 128)
            assert shared == max(backend.nms_shared_bytes(values[7], torch.float32),
                                 backend.fast_shared_bytes(values[8])) <= 227 * 1024
            if wide:  # one cooperative block an SM's worth, the nms launch's records, sort buffers and state
                _, _, wide_grid, wide_block, _, wide_values = records[1]
                assert wide_grid == (6 * 132,) and wide_block == (backend.NMS_THREADS,) and cooperative[records[1][0]]
                assert wide_values[:5] == values[:5] and wide_values[5:9] == (3, n, wide_min, graph)
                assert wide_values[11] == 2**31 - 1 and wide_values[12:14] == values[11:13]
                assert wide_values[15] == values[13] and all(v != 0 for v in wide_values[14:21]) == graph
                assert wide_values[21] == values[0] + 4 * 3
            assert [tuple(t.shape) for t in outputs] == [(3,), (3, max_output, 4), (3, max_output), (3, max_output),
                                                         (3, max_output), (3,), (3,)]
    # the overlap graph runs in the whole-GPU pass: asking for it without that pass is refused
    with pytest.raises(ValueError, match="graph=True needs the whole-GPU pass"):
        backend.run(torch.zeros(3, 40000, 4), torch.zeros(3, 40000, 2), None, layout="scores", n=40000, classes=2,
                    multi_label=False, max_output=300, capacity=40000, wide=False, graph=True, **common)
    records.clear()  # wide=False holds every image to its block, however many detections are wanted
    backend.run(torch.zeros(3, 40000, 4), torch.zeros(3, 40000, 2), None, layout="scores", n=40000, classes=2,
                multi_label=False, max_output=backend.GRAPH_MIN_OUTPUT, capacity=40000, wide=False, **common)
    assert [r[0] for r in records] == ["decode_kernel", "nms_kernel"] and records[-1][-1][9:11] == (2**31 - 1, 0)


def test_small_batches_take_one_launch_with_the_two_kernels_arguments(monkeypatch):
    """Without a GPU: a batch whose decode grid fits the SMs at once (FUSED_WAVES) takes one
    fused_kernel launch on every layout, packing its C signature with the decode launch's
    grid and values and the nms launch's, 1,024 threads, shared memory for both, its done
    counters after the candidate counters and both zeroed on a fresh scratch; a call under
    graph capture takes the two launches unless fused=True; a larger grid (a batch of two
    YOLOv5 images of 25,200 rows on 132 SMs) takes the two launches, as does the whole-GPU
    pass, for which fused=True is refused."""
    from test_kernel_layout import c_signatures

    from nmsbench.variants import batched_nms as backend

    records, zeroed, _ = stub_cuda_launches(monkeypatch)
    signatures = c_signatures(backend.CUDA_MODULE.source())
    common = dict(cxcywh=True, class_agnostic=False, iou_threshold=0.5, score_threshold=0.25, max_per_class=300,
                  top_k=batched.INT32_MAX, max_output=300)
    for layout, data, scores, n, classes, multi_label in (
            ("scores", torch.zeros(3, 500, 4), torch.zeros(3, 500, 2), 500, 2, False),
            ("yolov5", torch.zeros(3, 100, 85), None, 100, 80, False),
            ("yolov5", torch.zeros(3, 100, 85), None, 100, 80, True),
            ("yolov8", torch.zeros(3, 84, 100), None, 100, 80, False)):
        call = dict(layout=layout, n=n, classes=classes, multi_label=multi_label, capacity=n, **common)
        records.clear()
        zeroed.clear()
        backend.run(data, scores, None, fused=False, **call)
        (decode, _, decode_grid, _, _, decode_values), (_, _, _, _, nms_shared, nms_values) = records
        records.clear()
        backend._kept_scratch.clear()  # a fresh scratch: the memset below
        outputs = backend.run(data, scores, None, **call)
        (name, codes, grid, block, shared, values), = records
        assert name == "fused_kernel" and codes == signatures[name]
        assert grid == decode_grid and block == (backend.NMS_THREADS,)
        assert shared == max(nms_shared, 16 * backend.DECODE_THREADS * backend.DECODE_ROWS_MAX)
        rows = decode == "decode_rows_kernel"
        assert rows == (layout == "yolov5" and not multi_label) and values[9] == int(rows)
        counts = values[13]
        assert values[14] == counts + 4 * 3 and zeroed[-1] == 4 * 2 * 3  # the done counters, zeroed with the counts

        def scratch(addresses, base):  # the two plans' scratch buffers lie at the same offsets
            return tuple(a - base if a else 0 for a in addresses)

        fused_records = scratch(values[13:14] + values[15:20], counts)
        if rows:  # data | batch n classes rows_per_thread score_threshold capacity | counts records
            assert (values[0], *values[5:8], values[10], *values[11:13]) == decode_values[:7]
            assert fused_records == scratch(decode_values[7:], decode_values[7])
        else:  # the same arguments, the rows flag and rows a thread between
            assert values[:9] + values[11:13] == decode_values[:11]
            assert fused_records == scratch(decode_values[11:], decode_values[11])
        # nms_kernel's: records, capacity, sort capacity, fast_max, sort and spill buffers, the NMS's numbers
        base = nms_values[0]
        assert fused_records == scratch(nms_values[:6], base) and values[12] == nms_values[6]
        assert values[20:22] == nms_values[7:9]
        assert scratch(values[22:26], counts) == scratch(nms_values[11:13] + nms_values[14:16], base)
        assert values[26:31] == nms_values[18:23]
        assert values[-7:] == tuple(t.data_ptr() for t in outputs)
    records.clear()  # captured in a CUDA graph: the two launches, unless one was asked for
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: True)
    for fused in (None, True):
        backend.run(torch.zeros(3, 100, 85), None, None, layout="yolov5", n=100, classes=80, multi_label=False,
                    capacity=100, fused=fused, **common)
    assert [r[0] for r in records] == ["decode_rows_kernel", "nms_kernel", "fused_kernel"]
    assert zeroed[-2:] == [4 * 2 * 3] * 2  # the plan's memset zeroes the done counters either way
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False)
    records.clear()  # 2 x 99 decode blocks: more than the SMs hold at once
    head = dict(layout="yolov5", n=25200, classes=80, multi_label=False, capacity=25200, **common)
    backend.run(torch.zeros(2, 25200, 85), None, None, **head)
    backend.run(torch.zeros(1, 25200, 85), None, None, **head)
    assert [r[0] for r in records] == ["decode_rows_kernel", "nms_kernel", "fused_kernel"]
    records.clear()
    wide = dict(layout="scores", n=40000, classes=2, multi_label=False, capacity=40000, **common)
    backend.run(torch.zeros(1, 40000, 4), torch.zeros(1, 40000, 2), None, **wide)
    assert [r[0] for r in records] == ["decode_kernel", "wide_sort_kernel", "nms_kernel"]
    with pytest.raises(ValueError, match="fused=True needs"):
        backend.run(torch.zeros(1, 40000, 4), torch.zeros(1, 40000, 2), None, fused=True, **wide)


@pytest.mark.parametrize("fused", [False, True])
def test_a_call_writes_an_earlier_calls_outputs_again_only_once_nothing_of_them_is_held(monkeypatch, fused):
    """A call's outputs are an earlier call's of its shape on its stream once nothing of that
    result is held, else new: the launch gets the returned tensors' addresses; a detector's
    loop (the last result held at the next call) alternates two sets; a result held whole,
    as a field, as a view of a field, as a NumPy array on its memory or as the backend's
    tuple itself is never written again; another stream and a graph capture get sets of
    their own, and the capture leaves the rings as they were; a ring keeps OUTPUT_RING sets."""
    from nmsbench.variants import batched_nms as backend

    stream, capturing = [5], [False]
    records, _, _ = stub_cuda_launches(monkeypatch, stream=lambda: stream[0], capturing=lambda: capturing[0])

    def call():
        det = batched.BatchedDetections(*_stubbed_head_call(backend, fused))
        assert records[-1][0] == ("fused_kernel" if fused else "nms_kernel")
        assert records[-1][-1][-7:] == tuple(t.data_ptr() for t in det)
        return det

    def address(det):
        return det.boxes.data_ptr()

    det = call()
    first = address(det)
    det = call()  # the first result still held (as `det`) at this call: a second set
    second = address(det)
    assert second != first
    for k in range(6):  # a detector's loop: the two sets in turn, no new one
        det = call()
        assert address(det) == (first if k % 2 == 0 else second)
    del det
    assert address(call()) in (first, second)
    held = {"whole": call(), "field": call().scores, "view": call().boxes[0, :5], "numpy": call().classes.numpy(),
            "tuple": _stubbed_head_call(backend, fused)}
    def written():  # what each holder sees (no reference kept beyond the holder's own)
        return [held["whole"].boxes, held["tuple"][1], held["field"], held["view"], torch.from_numpy(held["numpy"])]

    for tensor in written():
        tensor.fill_(3)
    for _ in range(3):
        det = call()
        for field in det:
            field.fill_(-1)  # what a later call would write
    assert all(bool((tensor == 3).all()) for tensor in written())
    ring = backend._output_rings[next(key for key in backend._output_rings if key[1] == 5)]
    assert len(ring) == backend.OUTPUT_RING
    before = {key: [s.addresses for s in ring] for key, ring in backend._output_rings.items()}
    stream[0] = 6
    other = call()
    capturing[0] = True
    captured = call()
    assert address(captured) not in {a[1] for sets in before.values() for a in sets} | {address(other)}
    assert {key: [s.addresses for s in ring] for key, ring in backend._output_rings.items() if key[1] == 5} == before
    assert [len(ring) for key, ring in backend._output_rings.items() if key[1] == 6] == [1]


def test_release_batched_memory_drops_what_the_cuda_backend_keeps_for_later_calls(monkeypatch):
    """nmsbench.release_batched_memory empties the CUDA backend's kept scratch and output
    sets (and does nothing before the backend was ever used): the next call allocates and
    zeroes a fresh scratch, and results already returned keep their values."""
    from nmsbench.variants import batched_nms as backend

    monkeypatch.setattr(batched, "_backends", {})
    nmsbench.release_batched_memory()  # the CUDA backend not loaded yet: nothing to drop
    _, zeroed, _ = stub_cuda_launches(monkeypatch)
    monkeypatch.setitem(batched._backends, "cuda", backend)

    def call():
        return _stubbed_head_call(backend)

    held = call()
    held[1].fill_(7.0)
    call()
    assert backend._kept_scratch and backend._output_rings and len(zeroed) == 1  # the second call reused both
    nmsbench.release_batched_memory()
    assert not backend._kept_scratch and not backend._output_rings
    call()
    assert len(zeroed) == 2 and bool((held[1] == 7.0).all())  # a fresh scratch, zeroed; the held result untouched


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_output_sets_carry_their_own_tensors_addresses(dtype):
    """The addresses each output set carries (computed from its chunk's, not read per view)
    are its tensors' own, empty fields (no batch, no slots) included; every set has the
    op's shapes and dtypes, is contiguous, starts on an OUTPUT_ALIGN boundary (torch.compile
    asserts 16-byte aligned outputs of a custom op) and shares no memory with another or
    between its own fields (a custom op's outputs may not); a set is unheld while only the
    op holds it, held while its tuple, a tensor or a view on its chunk is."""
    from nmsbench.variants import batched_nms as backend

    for batch, max_output, count in ((1, 300, 16), (3, 0, 5), (0, 5, 2), (2, 7, 1), (64, 300, 3)):
        sets = backend._output_sets(batch, max_output, dtype, torch.device("cpu"), count)
        assert len(sets) == count
        for made in sets:
            outputs = made.outputs
            assert made.addresses == tuple(t.data_ptr() for t in outputs)
            assert [tuple(t.shape) for t in outputs] == [(batch,), (batch, max_output, 4), (batch, max_output),
                                                         (batch, max_output), (batch, max_output), (batch,), (batch,)]
            assert [t.dtype for t in outputs] == [torch.int64, dtype, dtype, torch.int64, torch.int64, torch.bool,
                                                  torch.int64]
            assert all(t.is_contiguous() for t in outputs)
            assert all(t.storage_offset() * t.element_size() % backend.OUTPUT_ALIGN == 0 for t in outputs if t.numel())
            assert len({t.untyped_storage()._cdata for t in outputs}) == 7
            del outputs
        spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
                       for made in sets for t in made.outputs if t.numel())
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))  # no two overlap
        assert all(made.unheld() for made in sets)
        held = sets[0].outputs
        assert not sets[0].unheld() and all(made.unheld() for made in sets[1:])
        tensor = held[1]
        del held
        assert not sets[0].unheld()
        del tensor
        view = sets[-1].outputs[2][:1]  # a view on the chunk: every set of it is held
        assert not any(made.unheld() for made in sets)
        if count > 1:  # still held once the op has let go of another set of the chunk
            kept = sets[:-1]
            del sets
            assert not any(made.unheld() for made in kept)
            sets = kept
        del view
        assert all(made.unheld() for made in sets)


@pytest.mark.parametrize("fused", [False, True])
def test_an_eager_call_takes_the_zeroed_scratch_that_the_previous_call_on_its_stream_left(monkeypatch, fused):
    """Without the whole-GPU pass, an eager call reuses the scratch that the previous call
    of its shape on its stream left (nms_kernel leaves its counters zeroed): no memset, the
    same counters. A first call, another stream, a graph capture, a wide plan, a scratch
    above KEPT_SCRATCH_BYTES and a call that failed before its nms launch each get a fresh,
    zeroed scratch; the capture leaves the kept one as it was."""
    from nmsbench.variants import batched_nms as backend

    stream, capturing, failing = [5], [False], [False]
    records, zeroed, _ = stub_cuda_launches(monkeypatch, stream=lambda: stream[0], capturing=lambda: capturing[0])
    launch = backend.CompiledLaunch.__call__

    def maybe_failing(self, stream, *values):
        if failing[0] and self.function.name in ("nms_kernel", "fused_kernel"):
            raise RuntimeError("launch failed")
        launch(self, stream, *values)

    monkeypatch.setattr(backend.CompiledLaunch, "__call__", maybe_failing)
    boxes, scores = torch.zeros(2, 40000, 4), torch.zeros(2, 40000, 2)

    def call(wide=False):
        zeroed.clear()
        if wide:  # a buffer beyond one block's sort: the whole-GPU pass, whose counters the memset zeroes
            backend.run(boxes, scores, None, layout="scores", cxcywh=True, n=40000, classes=2, multi_label=False,
                        class_agnostic=False, iou_threshold=0.5, score_threshold=0.25, max_output=300,
                        max_per_class=300, top_k=batched.INT32_MAX, capacity=40000)
        else:
            _stubbed_head_call(backend, fused)
        return _counts_address(records[-1]), zeroed[:]  # the counters' address, the memsets

    zeroing = [4 * 2 * (2 if fused else 1)]  # the candidate counters (fused: then the done counters)
    first, memsets = call()
    assert memsets == zeroing
    assert call() == (first, [])  # the same scratch, already zeroed
    assert call() == (first, [])
    stream[0] = 6
    other, memsets = call()
    assert other != first and memsets == zeroing
    stream[0], capturing[0] = 5, True
    captured, memsets = call()
    assert captured not in (first, other) and memsets == zeroing
    capturing[0] = False
    assert call() == (first, [])  # the capture left stream 5's scratch as it was
    failing[0] = True
    with pytest.raises(RuntimeError, match="launch failed"):
        call()
    failing[0] = False
    after_failure, memsets = call()
    assert memsets == zeroing  # the failed call took the kept scratch with it: a fresh one, zeroed
    assert call() == (after_failure, [])
    for _ in range(2):  # the whole-GPU pass: a memset every call, nothing kept
        assert call(wide=True)[1] == [4 * (2 + 4)]
    assert len(backend._kept_scratch) == 2  # streams 5 and 6, the head's plan
    monkeypatch.setattr(backend, "KEPT_SCRATCH_BYTES", 1024)
    backend._plans.clear()
    for _ in range(2):  # too large to keep
        assert call()[1] == zeroing


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_the_shared_memory_sort_takes_what_fits(dtype):
    from nmsbench.variants import batched_nms as backend

    for limit in (48 * 1024, 99 * 1024, 227 * 1024):
        size = backend.sort_capacity_for(10**6, dtype, limit)
        assert size & (size - 1) == 0 and backend.nms_shared_bytes(size, dtype) <= limit
        assert backend.nms_shared_bytes(2 * size, dtype) > limit
    assert backend.sort_capacity_for(100, dtype, 227 * 1024) == 128  # no more than the capacity needs
    with pytest.raises(RuntimeError, match="shared memory"):
        backend.sort_capacity_for(100, dtype, 1024)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_the_class_segmented_path_takes_what_fits(dtype):
    """Its candidates: a power of two from 32 to a block's threads, no more than the
    capacity needs, within the shared memory; none for float64 (keys of 64 bits)."""
    from nmsbench.variants import batched_nms as backend

    if dtype == torch.float64:
        assert backend.fast_max_for(10**6, dtype, 227 * 1024) == 0
        return
    assert backend.fast_max_for(10**6, dtype, 227 * 1024) == backend.FAST_MAX == backend.NMS_THREADS
    assert backend.fast_max_for(100, dtype, 227 * 1024) == 128 and backend.fast_max_for(3, dtype, 227 * 1024) == 32
    for limit in (48 * 1024, 99 * 1024):
        size = backend.fast_max_for(10**6, dtype, limit)
        assert size & (size - 1) == 0 and 32 <= size < backend.FAST_MAX
        assert backend.fast_shared_bytes(size) <= limit < backend.fast_shared_bytes(2 * size)
    assert backend.fast_max_for(10**6, dtype, 1024) == 0
    # the region holds the worst mask (every candidate one class) and the sorts' buffers
    for size in (32, 256, 1024):
        assert backend.fast_shared_bytes(size) >= 4 * size * (size // 32) + 44 * size


def test_decode_rows_take_the_fewest_rows_a_thread_that_keep_the_grid_within_its_waves():
    from nmsbench.variants import batched_nms as backend

    resident = 6 * 132
    waves = backend.DECODE_WAVES * resident
    assert backend.rows_per_thread_for(1, 25200, resident) == 1
    assert backend.rows_per_thread_for(32, 25200, resident) == 1  # 32 x 99 blocks
    assert backend.rows_per_thread_for(64, 25200, resident) == 3  # 64 x 99 and 64 x 50 blocks are too many
    assert 64 * 99 > waves and 64 * 50 > waves and 64 * 33 <= waves
    assert backend.rows_per_thread_for(10**4, 25200, resident) == backend.DECODE_ROWS_MAX


def _carved_parts(source: str, function: str, end: str, sizes: dict) -> list[int]:
    """The byte counts of ``carve(at, ...)`` calls in ``function``'s body up to ``end``,
    evaluated with ``sizes`` (names in the expressions -> numbers)."""
    body = source[source.index(function):]
    body = body[:body.index(end)]
    parts = []
    for expression in re.findall(r"carve\(at, ([^;]+)\);", body):
        for name, value in sizes.items():
            expression = expression.replace(name, str(value))
        parts.append(int(eval(expression.replace("ull", ""), {})))  # only numbers and arithmetic are left
    return parts


def test_the_host_sizes_the_class_segmented_paths_shared_memory_as_the_kernel_carves_it():
    """fast_shared_bytes (the launch's dynamic shared memory) against the carve calls of
    segmented_nms and select_nms in the kernel's text, for every fast_max: each part
    rounded to 16 bytes (segmented_nms's then the region of the masks or the sorts' buffers
    and staged records). Read off the source, so a part added on one side only fails here
    rather than overrunning on a GPU."""
    from nmsbench.variants import batched_nms as backend

    source = backend.CUDA_MODULE.source()
    for fast_max in (32, 64, 128, 256, 512, 1024):
        sizes = {"sizeof(Box<A>)": 16, "sizeof(A)": 4, "fast_max": fast_max,
                 "NMS_WARPS": backend.NMS_THREADS // 32, "SELECT_MAX": backend.DEFINES["SELECT_MAX"]}
        parts = _carved_parts(source, "__device__ bool segmented_nms(", "unsigned char* region = at;", sizes)
        assert len(parts) >= 10
        region = max(4 * fast_max * (fast_max // 32), backend.REGION_BYTES_A_CANDIDATE * fast_max)
        assert backend.sorted_shared_bytes(fast_max) == sum(-(-p // 16) * 16 for p in parts) + region
        parts = _carved_parts(source, "__device__ bool select_nms(", "constexpr unsigned long long EMPTY", sizes)
        assert len(parts) >= 10
        assert backend.select_shared_bytes(fast_max) == sum(-(-p // 16) * 16 for p in parts)
        assert backend.fast_shared_bytes(fast_max) == max(backend.sorted_shared_bytes(fast_max),
                                                          backend.select_shared_bytes(fast_max))
    # the region's parts (offsets in bytes a candidate): the last, the labels staged by slot
    # (4 bytes), ends at REGION_BYTES_A_CANDIDATE
    body = source[source.index("__device__ bool segmented_nms("):]
    body = body[:body.index("const int tid = threadIdx.x")]
    offsets = sorted({int(k) for k in re.findall(r"region \+ (\d+)ull \* fast_max", body)})
    assert offsets[0] == 16 and offsets[-1] + 4 == backend.REGION_BYTES_A_CANDIDATE
