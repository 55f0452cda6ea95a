"""DIoU-NMS (family ``diou``, nmsbench.families): greedy NMS whose overlap test subtracts
the distance between the boxes' centres (Zheng et al., AAAI 2020).

``diou_nms`` (numba, CPU): boxes in rank order; each kept box removes the later boxes its
test suppresses, in one pass over them (serial: a parallel loop per kept box cost more
in thread wake-ups than it saved).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from nmsbench.families import DIOU_PARAMS
from nmsbench.registry import register

from ._cpu import JIT, box_iou, keep_from_sorted, sorted_inputs


@njit(inline="always", **JIT)
def diou_penalty(b, i, j, beta):
    """(rho^2 / c^2)^beta of rows i and j in float64, every length divided by the enclosing
    box's larger side first (no square overflows); 0 where that side is 0."""
    ax1, ay1, ax2, ay2 = np.float64(b[i, 0]), np.float64(b[i, 1]), np.float64(b[i, 2]), np.float64(b[i, 3])
    bx1, by1, bx2, by2 = np.float64(b[j, 0]), np.float64(b[j, 1]), np.float64(b[j, 2]), np.float64(b[j, 3])
    cw = max(ax2, bx2) - min(ax1, bx1)
    ch = max(ay2, by2) - min(ay1, by1)
    s = max(cw, ch)
    if s == 0.0:
        return 0.0
    dx = ((ax1 / 2.0 + ax2 / 2.0) - (bx1 / 2.0 + bx2 / 2.0)) / s
    dy = ((ay1 / 2.0 + ay2 / 2.0) - (by1 / 2.0 + by2 / 2.0)) / s
    cw, ch = cw / s, ch / s
    return ((dx * dx + dy * dy) / (cw * cw + ch * ch)) ** beta


@njit(**JIT)
def diou_greedy(b, labels, iou_threshold, beta):
    """Rank positions kept (rows of ``b`` in rank order), ascending."""
    n = b.shape[0]
    removed = np.zeros(n, dtype=np.bool_)
    kept = np.empty(n, dtype=np.int64)
    count = 0
    for i in range(n):
        if removed[i]:
            continue
        kept[count] = i
        count += 1
        for j in range(i + 1, n):
            if not removed[j] and labels[j] == labels[i]:
                v = np.float64(box_iou(b, i, j))
                if v > 0 and v - diou_penalty(b, i, j, beta) > iou_threshold:  # the penalty is >= 0
                    removed[j] = True
    return kept[:count]


@register(
    name="diou_nms", family="diou", devices=("cpu",), exact=True, requires=("numba",), params=DIOU_PARAMS,
    summary="numba: in rank order, each kept box removes the later boxes over the DIoU threshold",
)
def diou_nms_cpu(boxes, scores, *, iou_threshold, labels=None, beta):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    return keep_from_sorted(order, diou_greedy(sorted_boxes, sorted_labels, float(iou_threshold), float(beta)))
