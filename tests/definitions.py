"""Reference definitions of the NMS families, in plain Python.

Written from the family semantics in DESIGN.md ("The one interface"), independently of
``implementations/`` and of ``nmsbench.boxes``: slow, literal and obviously correct is
the point. Tests hold every registered implementation to these.

Arithmetic follows torchvision's CPU NMS kernel exactly, with numpy *scalars in the
input dtype* (np.float32 for float32 input), so that exact implementations can match
these index for index:

    area  = (x2 - x1) * (y2 - y1)
    w     = max(0, min(x2_i, x2_j) - max(x1_i, x1_j))      (h likewise, with y)
    inter = w * h
    iou   = inter / (area_i + area_j - inter)              (0 where the union is 0)

and the suppression test ``iou > iou_threshold`` with ``iou_threshold`` a Python float,
so the comparison happens in float64 (as torchvision's ``ovr > iou_threshold`` does,
with ``iou_threshold`` a C++ double).

Rank: descending score, ties by lower input index.

Inputs may be torch tensors, numpy arrays or lists (lists are read as float32).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "rank",
    "iou",
    "hard_nms",
    "allpairs_nms",
    "matrix_final_scores",
    "matrix_nms",
    "soft_nms",
    "diou_penalty",
    "diou_nms",
    "weighted_nms",
]


# --------------------------------------------------------------------------- inputs


def _to_numpy(x, dtype=None):
    if x is None:
        return None
    if hasattr(x, "detach"):  # a torch tensor
        return x.detach().cpu().numpy()
    arr = np.asarray(x)
    if dtype is not None and arr.dtype.kind in "iuf" and not isinstance(x, np.ndarray):
        arr = arr.astype(dtype)
    return arr


def _inputs(boxes, scores, labels):
    b = _to_numpy(boxes, np.float32)
    n = 0 if b.size == 0 else b.shape[0]
    b = b.reshape(n, 4)
    s = _to_numpy(scores, b.dtype).reshape(n)
    if labels is None:
        lab = [0] * n
    else:
        lab = [int(v) for v in _to_numpy(labels).reshape(n)]
    # rows of numpy scalars, in the input dtype
    rows = [tuple(b[k, c] for c in range(4)) for k in range(n)]
    return rows, s, lab


def rank(scores) -> list[int]:
    """Input indices by descending score, ties by lower input index.

    Scores are compared as given (a tensor or array in its own dtype; a list as float32).
    """
    s = _to_numpy(scores, np.float32).reshape(-1)
    return sorted(range(s.shape[0]), key=lambda k: (-float(s[k]), k))


# --------------------------------------------------------------------------- IoU


def iou(a, b):
    """IoU of box ``a`` (the higher-ranked one) with box ``b``, as a numpy scalar.

    ``a`` and ``b`` are sequences of 4 numpy scalars of one dtype; every intermediate
    stays in that dtype. Python's min/max on two arguments pick the same operand as
    std::min/std::max do, so even the signs of zeros follow torchvision.
    """
    ax1, ay1, ax2, ay2 = a
    bx1, by1, bx2, by2 = b
    zero = type(ax1)(0)
    with np.errstate(all="ignore"):
        area_a = (ax2 - ax1) * (ay2 - ay1)
        area_b = (bx2 - bx1) * (by2 - by1)
        xx1 = max(ax1, bx1)
        yy1 = max(ay1, by1)
        xx2 = min(ax2, bx2)
        yy2 = min(ay2, by2)
        w = max(zero, xx2 - xx1)
        h = max(zero, yy2 - yy1)
        inter = w * h
        union = area_a + area_b - inter
        if union == 0:
            return zero
        return inter / union


def _suppresses(a, b, iou_threshold: float) -> bool:
    # float(np.float32) is exact, and comparing against a Python float is a float64
    # comparison: torchvision's `ovr > iou_threshold` with a double threshold.
    return float(iou(a, b)) > float(iou_threshold)


# --------------------------------------------------------------------------- families


def hard_nms(boxes, scores, iou_threshold: float, labels=None) -> list[int]:
    """Greedy NMS: in rank order, a box is kept iff no *kept* higher-ranked box of its
    label has IoU > iou_threshold with it. Result in rank order."""
    rows, s, lab = _inputs(boxes, scores, labels)
    keep: list[int] = []
    for j in rank(s):
        if all(
            not _suppresses(rows[i], rows[j], iou_threshold) for i in keep if lab[i] == lab[j]
        ):
            keep.append(j)
    return keep


def allpairs_nms(boxes, scores, iou_threshold: float, labels=None) -> list[int]:
    """All-pairs NMS: a box is suppressed iff *any* higher-ranked box of its label (kept
    or not) has IoU > iou_threshold with it. Result in rank order."""
    rows, s, lab = _inputs(boxes, scores, labels)
    order = rank(s)
    keep: list[int] = []
    for pos, j in enumerate(order):
        if all(
            not _suppresses(rows[i], rows[j], iou_threshold)
            for i in order[:pos]
            if lab[i] == lab[j]
        ):
            keep.append(j)
    return keep


def matrix_final_scores(
    boxes, scores, labels=None, kernel: str = "gaussian", sigma: float = 0.5
) -> list[float]:
    """SOLOv2 Matrix NMS final score (score * decay) of *every* box, in input order.

    IoUs are computed in the input dtype (as above), everything after that in float64:

        cmax_i  = max IoU of i with its higher-ranked same-label boxes (0 if none)
        decay_j = min over higher-ranked same-label i of f(iou_ij) / f(cmax_i)   (1 if none)
        gaussian: f(iou_ij)/f(cmax_i) = exp((cmax_i^2 - iou_ij^2) / sigma)
        linear:   f(iou_ij)/f(cmax_i) = (1 - iou_ij) / (1 - cmax_i); a parent with
                  1 - cmax_i == 0 constrains nothing and is skipped.
    """
    if kernel not in ("gaussian", "linear"):
        raise ValueError(f"unknown kernel {kernel!r}")
    rows, s, lab = _inputs(boxes, scores, labels)
    order = rank(s)
    n = len(rows)
    # higher-ranked same-label parents of each box, with their IoU as a Python float
    parents: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for pos, j in enumerate(order):
        for i in order[:pos]:
            if lab[i] == lab[j]:
                parents[j].append((i, float(iou(rows[i], rows[j]))))
    cmax = [max((v for _, v in parents[k]), default=0.0) for k in range(n)]
    final = []
    for j in range(n):
        ratios = []
        for i, v in parents[j]:
            if kernel == "gaussian":
                ratios.append(math.exp((cmax[i] ** 2 - v**2) / sigma))
            else:
                if 1.0 - cmax[i] == 0.0:
                    continue
                ratios.append((1.0 - v) / (1.0 - cmax[i]))
        decay = min(ratios) if ratios else 1.0
        final.append(float(s[j]) * decay)
    return final


def matrix_nms(
    boxes,
    scores,
    labels=None,
    kernel: str = "gaussian",
    sigma: float = 0.5,
    score_threshold: float = 0.05,
) -> tuple[list[int], list[float]]:
    """Matrix NMS: (keep, final scores of the kept boxes).

    Kept iff final score >= score_threshold; ordered by descending final score, ties by
    lower input index.
    """
    final = matrix_final_scores(boxes, scores, labels, kernel=kernel, sigma=sigma)
    keep = [j for j in range(len(final)) if final[j] >= score_threshold]
    keep.sort(key=lambda j: (-final[j], j))
    return keep, [final[j] for j in keep]


def soft_nms(boxes, scores, iou_threshold: float, labels=None, kernel: str = "gaussian", sigma: float = 0.5,
             score_threshold: float = 0.001) -> tuple[list[int], list[float]]:
    """Soft-NMS (Bodla et al. 2017, Algorithm 1): (picks in pick order, their final scores).

    Current scores start as float64 of the input; a box below ``score_threshold`` is
    dropped at once. Each step picks the highest current score (ties by lower input
    index), emits it, and multiplies every remaining same-label box's current score by
    linear: 1 - iou where iou >= iou_threshold, else 1; gaussian: exp(-iou^2 / sigma),
    with the IoU in the input dtype (as above) taken as a Python float.
    """
    if kernel not in ("gaussian", "linear"):
        raise ValueError(f"unknown kernel {kernel!r}")
    rows, s, lab = _inputs(boxes, scores, labels)
    current = {k: float(s[k]) for k in range(len(rows)) if float(s[k]) >= score_threshold}
    keep: list[int] = []
    final: list[float] = []
    while current:
        m = min(current, key=lambda k: (-current[k], k))
        final.append(current.pop(m))
        keep.append(m)
        for j in list(current):
            if lab[j] != lab[m]:
                continue
            v = float(iou(rows[m], rows[j]))
            if kernel == "linear":
                f = 1.0 - v if v >= iou_threshold else 1.0
            else:
                f = math.exp(-(v * v) / sigma)
            current[j] *= f
            if current[j] < score_threshold:
                del current[j]
    return keep, final


def diou_penalty(a, b, beta: float = 1.0) -> float:
    """(rho^2 / c^2)^beta of boxes ``a`` and ``b``: rho the distance between their centres,
    c the diagonal of their smallest enclosing box, in float64 with every length divided by
    s = the larger side of the enclosing box first (so no square overflows); 0 where s is 0."""
    ax1, ay1, ax2, ay2 = (float(v) for v in a)
    bx1, by1, bx2, by2 = (float(v) for v in b)
    cw = max(ax2, bx2) - min(ax1, bx1)
    ch = max(ay2, by2) - min(ay1, by1)
    s = max(cw, ch)
    if s == 0.0:
        return 0.0
    dx = ((ax1 / 2.0 + ax2 / 2.0) - (bx1 / 2.0 + bx2 / 2.0)) / s
    dy = ((ay1 / 2.0 + ay2 / 2.0) - (by1 / 2.0 + by2 / 2.0)) / s
    cw, ch = cw / s, ch / s
    return ((dx * dx + dy * dy) / (cw * cw + ch * ch)) ** beta


def diou_nms(boxes, scores, iou_threshold: float, labels=None, beta: float = 1.0) -> list[int]:
    """DIoU-NMS (Zheng et al. 2020): greedy NMS in rank order, a box kept iff no kept
    higher-ranked same-label box i has iou > 0 and iou - diou_penalty > iou_threshold with
    it (a pair with IoU 0 never suppresses; a NaN penalty, from lengths near the float64
    limit, does not either)."""
    rows, s, lab = _inputs(boxes, scores, labels)
    keep: list[int] = []
    for j in rank(s):
        if not any(lab[i] == lab[j] and float(iou(rows[i], rows[j])) > 0
                   and float(iou(rows[i], rows[j])) - diou_penalty(rows[i], rows[j], beta) > float(iou_threshold)
                   for i in keep):
            keep.append(j)
    return keep


def weighted_nms(boxes, scores, iou_threshold: float, labels=None) -> tuple[list[int], list[list[float]]]:
    """Merge NMS as YOLOv5's ``merge=True``: (greedy keep, each kept box moved).

    Kept box m becomes sum(w_j * box_j) / sum(w_j) over the same-label input boxes j with
    iou(m, j) > iou_threshold and m itself, w_j = max(score_j, 0), summed in float64 in
    input order; it stays where it was if the weights sum to 0. Coordinates as float64
    (the implementations round them to the input dtype).
    """
    rows, s, lab = _inputs(boxes, scores, labels)
    keep = hard_nms(boxes, scores, iou_threshold, labels)
    moved = []
    for m in keep:
        acc, total = [0.0] * 4, 0.0
        for j in range(len(rows)):
            if lab[j] != lab[m] or not (j == m or _suppresses(rows[m], rows[j], iou_threshold)):
                continue
            w = max(float(s[j]), 0.0)
            total += w
            for c in range(4):
                acc[c] += w * float(rows[j][c])
        moved.append([a / total for a in acc] if total > 0 else [float(v) for v in rows[m]])
    return keep, moved
