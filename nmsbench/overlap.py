"""Realized overlap of a box set: how much each box overlaps the boxes ranked above it.

Computed with a numba kernel that never builds the n x n IoU matrix: boxes are sorted by
x1 and each box only visits the boxes whose x-range can intersect its own. IoU arithmetic
is that of :func:`nmsbench.boxes.pairwise_iou`, in the boxes' dtype (float32 or float64).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from .boxes import score_order, validate_nms_inputs


@njit(parallel=True, cache=True, error_model="numpy")
def _max_iou_kernel(x1, y1, x2, y2, area, rank, labels, lo, hi):  # pragma: no cover
    """Per box j, the max IoU over boxes i in [lo[j], hi[j]) with lower rank and equal label.

    All arrays are in x1 order, so the inner loop reads memory contiguously.
    """
    n = x1.shape[0]
    out = np.zeros(n, dtype=np.float32)
    for j in prange(n):
        jx1, jy1, jx2, jy2, jarea, jrank, jlabel = x1[j], y1[j], x2[j], y2[j], area[j], rank[j], labels[j]
        best = 0.0
        for i in range(lo[j], hi[j]):
            w = min(x2[i], jx2) - max(x1[i], jx1)
            h = min(y2[i], jy2) - max(y1[i], jy1)
            # w <= 0 or h <= 0 means IoU 0, which cannot raise the maximum
            if w > 0 and h > 0 and rank[i] < jrank and labels[i] == jlabel:
                inter = w * h
                iou = inter / (area[i] + jarea - inter)
                if iou > best:
                    best = iou
        out[j] = best
    return out


def max_iou_with_higher_ranked(boxes: torch.Tensor, scores: torch.Tensor,
                               labels: torch.Tensor | None = None) -> torch.Tensor:
    """Float32 (n,) tensor: entry j is the max IoU of box j with any box ranked above it.

    Rank is descending score with ties by lower input index (``score_order``); with
    ``labels`` only same-label boxes count. The top box (and any box overlapping no
    higher-ranked box) gets 0. Runs on the CPU whatever the inputs' device.
    """
    validate_nms_inputs(boxes, scores, labels)
    n = int(boxes.shape[0])
    if n == 0:
        return torch.zeros(0, dtype=torch.float32)
    dtype = torch.float64 if boxes.dtype == torch.float64 else torch.float32
    b = boxes.detach().to("cpu", dtype).numpy()
    x1, y1, x2, y2 = (b[:, k] for k in range(4))
    area = (x2 - x1) * (y2 - y1)  # elementwise in the boxes' dtype, like pairwise_iou

    rank = np.empty(n, dtype=np.int64)
    rank[score_order(scores.detach().cpu()).numpy()] = np.arange(n)
    lab = labels.detach().cpu().to(torch.int64).numpy() if labels is not None else np.zeros(n, dtype=np.int64)

    # Box i can only intersect box j if x1_i < x2_j and x2_i > x1_j. In x1 order the first
    # is a prefix; for the second, x1_i >= x1_j - max width is necessary. The bound is
    # widened by a relative 1e-9 so float64 rounding can only admit extra pairs, never drop one.
    by_x1 = np.argsort(x1, kind="stable")
    x1, y1, x2, y2, area, rank, lab = (np.ascontiguousarray(a[by_x1]) for a in (x1, y1, x2, y2, area, rank, lab))
    x1_64 = x1.astype(np.float64)
    max_width = float((x2.astype(np.float64) - x1_64).max()) * (1 + 1e-9)
    left = x1_64 - max_width - 1e-9 * (np.abs(x1_64) + max_width)
    lo = np.searchsorted(x1_64, left, side="left").astype(np.int64)
    hi = np.searchsorted(x1_64, x2.astype(np.float64), side="left").astype(np.int64)

    out = np.empty(n, dtype=np.float32)
    out[by_x1] = _max_iou_kernel(x1, y1, x2, y2, area, rank, lab, lo, hi)
    return torch.from_numpy(out)


def realized_overlap(boxes, scores, labels=None) -> dict:
    """Summary of realized overlap: ``{"mean_max_iou": float}`` (0.0 for an empty set)."""
    per_box = max_iou_with_higher_ranked(boxes, scores, labels)
    return {"mean_max_iou": float(per_box.double().mean()) if per_box.numel() else 0.0}
