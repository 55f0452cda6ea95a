"""The conformance report's case families: seeded generators of small inputs, each aimed at
one convention where NMS implementations part ways (the threshold's side, tied scores,
zero-area boxes, class ids, float16, ...). ``large_n`` is built by the runner itself
(:mod:`nmsbench.conformance`): generated scenes of growing N against the exact references.

Every generator takes a numpy Generator and a count and returns that many
:class:`~nmsbench.conformance_oracle.Case` objects; a case's boxes hold values exactly
representable in its dtype, so what the oracle reads is what the implementation gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .conformance_oracle import Case, arithmetic_dtype, iou_matrix

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
EXTREME_IDS = (0, 1, INT32_MAX, INT32_MAX + 1, INT32_MIN, 2**32, 2**32 + 1, INT64_MAX, INT64_MIN)


@dataclass(frozen=True)
class CaseFamily:
    """A named family of cases; ``needs``: settings an implementation must take to be judged on it."""

    key: str
    title: str
    short: str                       # column header of the terminal table
    generate: Callable | None        # (rng, count) -> list[Case]; None for large_n
    needs: tuple = ()                # "score_threshold", "cap"
    refusal_expected: bool = False


def _boxes(rng, n: int, span: float = 48.0, size=(4.0, 24.0), integer: bool = False) -> np.ndarray:
    """n random boxes (float64) on a canvas of ``span``, sides in ``size``."""
    xy = rng.uniform(0, span, size=(n, 2))
    wh = rng.uniform(*size, size=(n, 2))
    if integer:
        xy, wh = np.floor(xy), np.ceil(wh)
    return np.concatenate([xy, xy + wh], axis=1)


def _scores(rng, n: int, dtype: str, ties: bool = False) -> np.ndarray:
    values = rng.choice([0.25, 0.5, 0.75], size=n) if ties else rng.uniform(0.05, 1.0, size=n)
    return values.astype(dtype)


def _pair_iou(pair: np.ndarray, dtype: str) -> float:
    return float(iou_matrix(pair.astype(dtype), arithmetic_dtype(dtype))[0, 1])


def _with_distractors(rng, core: np.ndarray, core_scores: np.ndarray, extra: int, dtype: str, labels=None):
    """The core boxes among ``extra`` random others (shifted away from the core), shuffled."""
    others = _boxes(rng, extra, span=96.0) + np.array([60.0, 0.0, 60.0, 0.0])
    boxes = np.concatenate([core.astype(np.float64), others]).astype(dtype)
    scores = np.concatenate([core_scores.astype(np.float64), rng.uniform(0.05, 1.0, extra)]).astype(dtype)
    order = rng.permutation(len(boxes))
    return boxes[order], scores[order], None if labels is None else labels[order]


def iou_at_threshold(rng, count: int) -> list[Case]:
    """A pair whose IoU is the threshold exactly, or one float step (float64 or the input's)
    below or above it, among distractors; Soft-NMS and Matrix NMS with the linear kernel."""
    cases = []
    for i in range(count):
        dtype = "float64" if i % 6 == 5 else "float32"
        while True:
            a = _boxes(rng, 1, span=16.0)[0]
            b = a + rng.uniform(-6, 6, size=4) * np.array([1, 1, 1, 1])
            b[2:] = np.maximum(b[2:], b[:2] + 1.0)
            pair = np.stack([a, b]).astype(dtype)
            v = _pair_iou(pair, dtype)
            if 0.05 < v < 0.95:
                break
        f = np.float32(v) if dtype == "float32" else np.float64(v)
        steps = [v, float(np.nextafter(v, -1.0)), float(np.nextafter(v, 2.0)),
                 float(np.nextafter(f, f.dtype.type(-1))), float(np.nextafter(f, f.dtype.type(2)))]
        threshold = steps[i % len(steps)]
        boxes, scores, _ = _with_distractors(rng, pair, np.array([0.9, 0.8]), int(rng.integers(2, 7)), dtype)
        what = ("at", "one float64 step below", "one float64 step above", "one input-dtype step below",
                "one input-dtype step above")[i % len(steps)]
        cases.append(Case(boxes, scores, None, threshold, params={"kernel": "linear"},
                          note=f"IoU {v!r}, threshold {what} it"))
    return cases


def tied_scores(rng, count: int) -> list[Case]:
    """Equal scores: which of two overlapping tied boxes is kept (a box and a slightly moved
    copy, among others), and the order of the kept indices (scores drawn from 3 values)."""
    cases = []
    for i in range(count):
        dtype = "float64" if i % 4 == 3 else "float32"
        n = int(rng.integers(3, 8))
        boxes = _boxes(rng, n, span=40.0 if i % 2 else 120.0)
        scores = _scores(rng, n, "float64", ties=True)
        if i % 2 == 0:  # box 1 is box 0 moved a little, with box 0's score
            boxes[1] = boxes[0] + rng.uniform(-1.0, 1.0, size=4)
            scores[1] = scores[0]
        order = rng.permutation(n)
        cases.append(Case(boxes[order].astype(dtype), scores[order].astype(dtype), None, 0.5,
                          note="a tied overlapping pair" if i % 2 == 0 else "scores drawn from 3 values"))
    return cases


def duplicates(rng, count: int) -> list[Case]:
    """Copies of one box (IoU 1) among others, the copies' scores equal in half the cases;
    thresholds 0.5, 0.9 and 1.0 (1 > 1 is false)."""
    cases = []
    for i in range(count):
        dtype = "float32"
        copies = int(rng.integers(2, 4))
        others = int(rng.integers(0, 4))
        boxes = np.concatenate([np.repeat(_boxes(rng, 1), copies, axis=0), _boxes(rng, others)])
        scores = rng.uniform(0.05, 1.0, size=copies + others)
        if i % 2 == 1:
            scores[:copies] = scores[0]
        order = rng.permutation(len(boxes))
        cases.append(Case(boxes[order].astype(dtype), scores[order].astype(dtype), None, (0.5, 0.9, 1.0)[i % 3],
                          note=f"{copies} copies of one box" + (", equal scores" if i % 2 == 1 else "")))
    return cases


def zero_area(rng, count: int) -> list[Case]:
    """Points, lines and coincident points beside ordinary boxes; thresholds 0 and 0.5."""
    cases = []
    for i in range(count):
        dtype = "float32"
        n = int(rng.integers(2, 7))
        boxes = _boxes(rng, n, span=24.0, integer=True)
        kind = rng.integers(0, 4, size=n)  # 0 box, 1 point, 2 vertical line, 3 horizontal line
        boxes[kind == 1, 2:] = boxes[kind == 1, :2]
        boxes[kind == 2, 2] = boxes[kind == 2, 0]
        boxes[kind == 3, 3] = boxes[kind == 3, 1]
        if n > 2 and i % 2:
            boxes[1] = boxes[0] = np.array([boxes[0, 0], boxes[0, 1], boxes[0, 0], boxes[0, 1]])  # coincident points
        cases.append(Case(boxes.astype(dtype), _scores(rng, n, dtype), None, (0.0, 0.5)[i % 2],
                          note="points and lines among boxes"))
    return cases


def centre_size(rng, count: int) -> list[Case]:
    """Boxes given as centre x, centre y, width, height (ONNX center_point_box = 1), one pair at
    the threshold; an implementation that takes corners gets box_convert's corners."""
    cases = []
    for i in range(count):
        dtype = "float32"
        n = int(rng.integers(3, 7))
        c = _boxes(rng, n, span=30.0)
        centres = np.stack([(c[:, 0] + c[:, 2]) / 2, (c[:, 1] + c[:, 3]) / 2, c[:, 2] - c[:, 0], c[:, 3] - c[:, 1]], 1)
        case = Case(centres.astype(dtype), _scores(rng, n, dtype), None, 0.5, fmt="cxcywh")
        iou = iou_matrix(case.corners(), arithmetic_dtype(dtype))
        np.fill_diagonal(iou, 0)
        v = float(iou.max())
        if 0 < v < 1 and i % 4 != 3:  # the largest IoU becomes the threshold, or one float step from it
            case.iou_threshold = (v, float(np.nextafter(v, -1.0)), float(np.nextafter(np.float32(v), np.float32(2))))[i % 4]
        where = (", the largest IoU is the threshold", ", the threshold one float64 step below the largest IoU",
                 ", the threshold one float32 step above the largest IoU", "")[i % 4]
        case.note = "centre format" + (where if 0 < v < 1 else "")
        cases.append(case)
    return cases


def score_at_threshold(rng, count: int) -> list[Case]:
    """The score threshold equal to one box's score, or one float step either side of it."""
    cases = []
    for i in range(count):
        dtype = "float32"
        n = int(rng.integers(2, 6))
        boxes = _boxes(rng, n, span=80.0).astype(dtype)
        scores = _scores(rng, n, dtype)
        at = scores[int(rng.integers(0, n))]
        threshold = (at, np.nextafter(at, np.float32(2)), np.nextafter(at, np.float32(-1)))[i % 3]
        cases.append(Case(boxes, scores, None, 0.5, score_threshold=float(threshold),
                          note=("score threshold at a score", "one step above a score", "one step below a score")[i % 3]))
    return cases


def per_class_caps(rng, count: int) -> list[Case]:
    """max_output_boxes_per_class (1 or 2) on overlapping boxes of one to three labels."""
    cases = []
    for i in range(count):
        dtype = "float32"
        n = int(rng.integers(3, 9))
        boxes = _boxes(rng, n, span=30.0).astype(dtype)
        labels = rng.integers(0, 1 + i % 3, size=n).astype(np.int64) if i % 3 else None
        cases.append(Case(boxes, _scores(rng, n, dtype), labels, 0.5, max_per_class=1 + i % 2,
                          note=f"at most {1 + i % 2} per class"))
    return cases


def class_id_extremes(rng, count: int) -> list[Case]:
    """Copies of one box, slightly moved (IoU well above the threshold), whose class ids sit at
    the int32 and int64 extremes: same ids suppress each other, ids 2^32 apart must not."""
    cases = []
    ids = np.array(EXTREME_IDS, dtype=np.int64)
    for i in range(count):
        dtype = "float32"
        n = int(rng.integers(2, 6))
        boxes = _boxes(rng, 1, span=40.0, size=(12.0, 40.0)) + rng.uniform(-1.0, 1.0, size=(n, 4))
        pool = ids[rng.choice(len(ids), size=2, replace=False)]
        if i % 3 == 0:
            pool = np.array([0, 2**32], dtype=np.int64)  # one class once cast to int32
        labels = pool[rng.integers(0, 2, size=n)]
        labels[:2] = pool
        cases.append(Case(boxes.astype(dtype), _scores(rng, n, dtype), labels, 0.5,
                          note="class ids " + ", ".join(map(str, pool))))
    return cases


def float16_inputs(rng, count: int) -> list[Case]:
    """float16 boxes and scores on a 1000-px canvas, with 80 labels (half the cases) or none."""
    cases = []
    for i in range(count):
        n = int(rng.integers(3, 9))
        boxes = _boxes(rng, n, span=1000.0, size=(20.0, 200.0)) * np.array([1, 1, 1, 1])
        boxes[n // 2:, :2] = boxes[0, :2] + rng.uniform(-20, 20, size=(n - n // 2, 2))  # overlaps
        boxes[n // 2:, 2:] = boxes[n // 2:, :2] + rng.uniform(20, 200, size=(n - n // 2, 2))
        labels = None if i % 2 == 0 else rng.integers(0, 80, size=n).astype(np.int64)
        if labels is not None:
            labels[n // 2:] = labels[0]
        cases.append(Case(boxes.astype("float16"), _scores(rng, n, "float16"), labels, 0.5,
                          note="float16" + (" with labels" if labels is not None else "")))
    return cases


def _scaled(rng, count: int, exponents: dict, note: str) -> list[Case]:
    cases = []
    for i in range(count):
        dtype = ("float32", "float64")[i % 2]
        k = exponents[dtype][(i // 2) % len(exponents[dtype])]
        n = int(rng.integers(2, 6))
        base = _boxes(rng, n, span=32.0, size=(4.0, 32.0), integer=True)
        base += 64.0 * rng.integers(0, 1024)  # the whole scene moved away from the origin
        boxes = np.ldexp(base, k).astype(dtype)
        labels = rng.integers(0, 3, size=n).astype(np.int64) if i % 3 == 2 else None
        cases.append(Case(boxes, _scores(rng, n, dtype), labels, 0.5, note=f"{note}: integer boxes × 2^{k}"))
    return cases


def huge_coordinates(rng, count: int) -> list[Case]:
    """Integer scenes scaled by 2^20 .. 2^56 (float32) and 2^100 .. 2^500 (float64): exact
    scalings, so the answer is the unscaled scene's, areas still finite."""
    return _scaled(rng, count, {"float32": (20, 40, 56), "float64": (100, 300, 500)}, "huge")


def tiny_coordinates(rng, count: int) -> list[Case]:
    """Integer scenes scaled by 2^-60 .. 2^-140 (float32) and 2^-500 .. 2^-1070 (float64): areas
    underflow to subnormals and to 0, where the IoU is 0."""
    return _scaled(rng, count, {"float32": (-60, -70, -140), "float64": (-500, -540, -1070)}, "tiny")


def empty_and_one(rng, count: int) -> list[Case]:
    """N = 0 and N = 1 (an ordinary box, a point, with an extreme label), float32 and float64."""
    shapes = []
    for dtype in ("float32", "float64"):
        shapes += [Case(np.zeros((0, 4), dtype=dtype), np.zeros(0, dtype=dtype), None, 0.5, note="empty"),
                   Case(np.zeros((0, 4), dtype=dtype), np.zeros(0, dtype=dtype), np.zeros(0, dtype=np.int64), 0.5,
                        note="empty, with labels"),
                   Case(np.array([[1, 2, 5, 9]], dtype=dtype), np.array([0.5], dtype=dtype), None, 0.5, note="one box"),
                   Case(np.array([[3, 3, 3, 3]], dtype=dtype), np.array([0.5], dtype=dtype), None, 0.0, note="one point"),
                   Case(np.array([[1, 2, 5, 9]], dtype=dtype), np.array([0.5], dtype=dtype),
                        np.array([INT64_MIN], dtype=np.int64), 0.5, note="one box, label int64 min")]
    return [shapes[i % len(shapes)] for i in range(count)]


def nan_inf(rng, count: int) -> list[Case]:
    """NaN or Inf in a coordinate or a score: the definition refuses them (a ValueError)."""
    bad = [("box", np.nan), ("box", np.inf), ("box", -np.inf), ("score", np.nan), ("score", np.inf), ("score", -np.inf)]
    cases = []
    for i in range(count):
        dtype = "float32"
        n = int(rng.integers(2, 5))
        boxes = _boxes(rng, n, span=20.0)
        scores = rng.uniform(0.05, 1.0, n)
        where, value = bad[i % len(bad)]
        row = int(rng.integers(0, n))
        if where == "box":
            boxes[row, int(rng.integers(0, 4))] = value
        else:
            scores[row] = value
        cases.append(Case(boxes.astype(dtype), scores.astype(dtype), None, 0.5, note=f"{value} in a {where}"))
    return cases


def random_small(rng, count: int) -> list[Case]:
    """Random scenes of 2 to 12 boxes, thresholds 0.3 / 0.5 / 0.7, labels in a third of them."""
    cases = []
    for i in range(count):
        dtype = "float64" if i % 5 == 4 else "float32"
        n = int(rng.integers(2, 13))
        boxes = _boxes(rng, n, span=40.0).astype(dtype)
        labels = rng.integers(0, 3, size=n).astype(np.int64) if i % 3 == 1 else None
        cases.append(Case(boxes, _scores(rng, n, dtype), labels, (0.3, 0.5, 0.7)[i % 3], note="random"))
    return cases


CASE_FAMILIES: dict[str, CaseFamily] = {f.key: f for f in (
    CaseFamily("iou_at_threshold", "IoU exactly at the threshold, and one float step either side", "IoU=t", iou_at_threshold),
    CaseFamily("tied_scores", "tied scores (which box is kept; order of the kept indices)", "ties", tied_scores),
    CaseFamily("duplicates", "duplicate boxes (IoU 1; threshold 1.0)", "dups", duplicates),
    CaseFamily("zero_area", "zero-area and point boxes", "zero", zero_area),
    CaseFamily("centre_size", "boxes given as centre and size", "cxcywh", centre_size),
    CaseFamily("score_at_threshold", "score threshold exactly at a score", "score=t", score_at_threshold,
               needs=("score_threshold",)),
    CaseFamily("per_class_caps", "per-class caps (max_output_boxes_per_class)", "caps", per_class_caps, needs=("cap",)),
    CaseFamily("class_id_extremes", "class ids at int32 and int64 extremes", "ids", class_id_extremes),
    CaseFamily("float16", "float16 inputs, with and without labels", "fp16", float16_inputs),
    CaseFamily("huge", "huge coordinates (exact scalings by 2^k)", "huge", huge_coordinates),
    CaseFamily("tiny", "tiny coordinates (subnormal and underflowing areas)", "tiny", tiny_coordinates),
    CaseFamily("empty_one", "empty input and one box", "0/1", empty_and_one),
    CaseFamily("nan_inf", "NaN or Inf (refusal expected)", "NaN", nan_inf, refusal_expected=True),
    CaseFamily("random", "random scenes of 2 to 12 boxes", "random", random_small),
    CaseFamily("large_n", "large N against the exact references (hard: hard_graph)", "large N", None),
)}


def generate(key: str, count: int, seed: int = 0) -> list[Case]:
    """``count`` cases of case family ``key``, deterministic from ``seed``."""
    family = CASE_FAMILIES[key]
    if family.generate is None:
        raise ValueError(f"{key} is built by the runner, not generated here")
    rng = np.random.default_rng([seed, sorted(CASE_FAMILIES).index(key)])
    return family.generate(rng, count)
