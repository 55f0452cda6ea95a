"""hard_fused's CPU backend (numba): exact greedy NMS over blocks of rank order.

For each block of ``CPU_BLOCK`` boxes, both threads test the block's boxes against every
box kept before it (vectorized, no branches), then the block is resolved among itself
sequentially. Work is O(N x kept) like torchvision's loop, but SIMD and parallel.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from nmsbench.boxes import NMSResult
from nmsbench.inputs import report_bad_values, row_ok
from nmsbench.registry import register

from .._cpu import JIT, sorted_inputs

SUMMARY_CPU = "numba: blocks of rank order tested against all kept boxes in parallel (SIMD), then resolved in-block"
CPU_BLOCK = 256  # boxes per block of rank order


@njit(inline="always", **JIT)
def _overlap(ax1, ay1, ax2, ay2, a_area, bx1, by1, bx2, by2, b_area, threshold):
    """torchvision's CPU arithmetic (w, h clamped at 0; a NaN from 0/0 never exceeds)."""
    w = min(ax2, bx2) - max(ax1, bx1)
    h = min(ay2, by2) - max(ay1, by1)
    w = max(w, w - w)
    h = max(h, h - h)
    inter = w * h
    return np.float64(inter / (a_area + b_area - inter)) > threshold


@njit(parallel=True, **JIT)
def _suppressed_by_kept(x1, y1, x2, y2, area, label, start, stop, kept, kept_label, n_kept, threshold, out):
    """out[j - start] = how many of the first n_kept kept boxes suppress row j."""
    kx1, ky1, kx2, ky2, karea = kept[0], kept[1], kept[2], kept[3], kept[4]
    for j in prange(start, stop):
        hits = 0
        for t in range(n_kept):  # contiguous and branch-free: vectorized
            hits += _overlap(kx1[t], ky1[t], kx2[t], ky2[t], karea[t],
                             x1[j], y1[j], x2[j], y2[j], area[j], threshold) & (kept_label[t] == label[j])
        out[j - start] = hits


@njit(**JIT)
def _values_ok(x1, y1, x2, y2, scores):
    """run_nms's value rules (inputs.row_ok) over the columns, in any row order."""
    ok = True
    for i in range(x1.shape[0]):
        ok &= row_ok(x1[i], y1[i], x2[i], y2[i], scores[i])
    return ok


@njit(**JIT)
def _greedy_blocks(b, label, threshold, block, scores, check_values):
    """(kept rank positions ascending, whether the values passed). With ``check_values``
    the rows are checked first (``scores`` in any order) and bad input returns at once.
    ``kept`` holds the kept boxes' x1, y1, x2, y2 and area as five contiguous rows (so the
    test against them vectorizes), ``kept_label`` their labels."""
    n = b.shape[0]
    x1, y1, x2, y2 = b[:, 0].copy(), b[:, 1].copy(), b[:, 2].copy(), b[:, 3].copy()
    area = (x2 - x1) * (y2 - y1)
    positions = np.empty(n, dtype=np.int64)
    if check_values and not _values_ok(x1, y1, x2, y2, scores):
        return positions[:0], False
    kept = np.empty((5, n), dtype=b.dtype)
    kept_label = np.empty(n, dtype=np.int64)
    n_kept = 0
    hits = np.zeros(block, dtype=np.int64)
    for start in range(0, n, block):
        stop = min(n, start + block)
        _suppressed_by_kept(x1, y1, x2, y2, area, label, start, stop, kept, kept_label, n_kept, threshold, hits)
        first_in_block = n_kept
        for j in range(start, stop):
            if hits[j - start] != 0:
                continue
            alive = True
            for t in range(first_in_block, n_kept):
                if kept_label[t] == label[j] and _overlap(kept[0, t], kept[1, t], kept[2, t], kept[3, t], kept[4, t],
                                                          x1[j], y1[j], x2[j], y2[j], area[j], threshold):
                    alive = False
                    break
            if alive:
                kept[0, n_kept], kept[1, n_kept], kept[2, n_kept], kept[3, n_kept] = x1[j], y1[j], x2[j], y2[j]
                kept[4, n_kept], kept_label[n_kept] = area[j], label[j]
                positions[n_kept] = j
                n_kept += 1
    return positions[:n_kept], True


@register(name="hard_fused", family="hard", devices=("cpu",), exact=True, requires=("numba",), summary=SUMMARY_CPU,
          checks_values=True, style=("#D55E00", "diamond"))
def hard_fused_cpu(boxes, scores, *, iou_threshold, labels=None, check_values=False):
    """``check_values``: run_nms's value rules in the op's own pass (``checks_values``)."""
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    positions, values_ok = _greedy_blocks(sorted_boxes, sorted_labels, np.float64(iou_threshold), CPU_BLOCK,
                                          scores.detach().numpy(), check_values)
    if not values_ok:
        report_bad_values(boxes, scores)
    return NMSResult(order[torch.from_numpy(positions)])
