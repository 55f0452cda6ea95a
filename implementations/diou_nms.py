"""DIoU-NMS (family ``diou``, nmsbench.families): greedy NMS whose overlap test subtracts
the distance between the boxes' centres (Zheng et al., AAAI 2020).

``diou_nms`` (numba, CPU): boxes in rank order; each kept box removes the later boxes its
test suppresses, in one pass over them (split over the threads when many are left).
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from nmsbench.families import DIOU_PARAMS
from nmsbench.registry import register

from ._cpu import JIT, box_iou, keep_from_sorted, sorted_inputs

PARALLEL_MIN = 4096  # later boxes from which a kept box's pass is split over the threads


@njit(inline="always", **JIT)
def diou_penalty(b, i, j, beta):
    """(rho^2 / c^2)^beta of rows i and j, in float64 (0 where c is 0)."""
    dx = (np.float64(b[i, 0]) + np.float64(b[i, 2])) / 2.0 - (np.float64(b[j, 0]) + np.float64(b[j, 2])) / 2.0
    dy = (np.float64(b[i, 1]) + np.float64(b[i, 3])) / 2.0 - (np.float64(b[j, 1]) + np.float64(b[j, 3])) / 2.0
    cw = max(np.float64(b[i, 2]), np.float64(b[j, 2])) - min(np.float64(b[i, 0]), np.float64(b[j, 0]))
    ch = max(np.float64(b[i, 3]), np.float64(b[j, 3])) - min(np.float64(b[i, 1]), np.float64(b[j, 1]))
    c2 = cw * cw + ch * ch
    if c2 == 0.0:
        return 0.0
    return ((dx * dx + dy * dy) / c2) ** beta


@njit(inline="always", **JIT)
def _remove_from(b, labels, removed, i, lo, hi, iou_threshold, beta):
    for j in range(lo, hi):
        if not removed[j] and labels[j] == labels[i]:
            if np.float64(box_iou(b, i, j)) - diou_penalty(b, i, j, beta) > iou_threshold:
                removed[j] = True


@njit(parallel=True, **JIT)
def diou_greedy(b, labels, iou_threshold, beta, threads):
    n = b.shape[0]
    removed = np.zeros(n, dtype=np.bool_)
    kept = np.empty(n, dtype=np.int64)
    count = 0
    for i in range(n):
        if removed[i]:
            continue
        kept[count] = i
        count += 1
        rest = n - i - 1
        if rest < PARALLEL_MIN:
            _remove_from(b, labels, removed, i, i + 1, n, iou_threshold, beta)
        else:
            chunks = threads
            size = (rest + chunks - 1) // chunks
            for c in prange(chunks):
                _remove_from(b, labels, removed, i, i + 1 + c * size, min(n, i + 1 + (c + 1) * size), iou_threshold, beta)
    return kept[:count]


@register(
    name="diou_nms", family="diou", devices=("cpu",), exact=True, requires=("numba",), params=DIOU_PARAMS,
    summary="numba: in rank order, each kept box removes the later boxes over the DIoU threshold (threads over chunks)",
)
def diou_nms_cpu(boxes, scores, *, iou_threshold, labels=None, beta):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    return keep_from_sorted(order, diou_greedy(sorted_boxes, sorted_labels, float(iou_threshold), float(beta),
                                               get_num_threads()))
