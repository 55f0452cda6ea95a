"""All-pairs parallel NMS (the YOLOv5 GPU post-processing seed's rule).

Each box decides alone: it is suppressed iff *any* higher-ranked box with the same label
overlaps it above the threshold, kept or not. No sequential resolve, so it parallelizes
perfectly, and overlap chains over-suppress compared with greedy NMS.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from nmsbench.registry import register

from ._cpu import JIT, balanced_row, box_iou, keep_from_sorted, sorted_inputs


@njit(parallel=True, **JIT)
def suppressed_by_any_parent(b, labels, iou_threshold):
    n = b.shape[0]
    suppressed = np.zeros(n, dtype=np.bool_)
    for k in prange(n):
        j = balanced_row(k, n)
        for i in range(j):
            if labels[i] == labels[j] and box_iou(b, i, j) > iou_threshold:
                suppressed[j] = True
                break
    return suppressed


@register(
    name="allpairs", family="allpairs", devices=("cpu",), exact=True, requires=("numba",),
    summary="numba prange: each box scans its higher-ranked boxes, class-aware",
)
def allpairs_cpu(boxes, scores, *, iou_threshold, labels=None):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    suppressed = suppressed_by_any_parent(sorted_boxes, sorted_labels, iou_threshold)
    return keep_from_sorted(order, np.flatnonzero(~suppressed))
