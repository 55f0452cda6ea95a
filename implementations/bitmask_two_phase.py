"""Two-phase bitmask NMS (the LeetCUDA fix in seeds/two-phase-bitmask-nms.zh.txt).

Phase 1 builds a suppression bitmask with the seed's 32-bit layout: row i, word w, bit k
is 1 iff box i suppresses box w*32 + k. Each row starts at the word holding box i + 1,
aligned down to 32, and bits for boxes at or before i stay 0, so every row uses the same
global bit numbering. Phase 2 resolves greedily in rank order, OR-ing each kept box's row
into a running "removed" bitmap. On the GPU phase 1 is a warp ballot per 32 boxes and
phase 2 a single block; here phase 1 is numba ``prange`` and phase 2 a plain loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from nmsbench.registry import register

from ._cpu import JIT, balanced_row, box_iou, keep_from_sorted, resolve_greedy, sorted_inputs

WORD_BITS = 32


@njit(parallel=True, **JIT)
def suppression_mask_32(b, labels, iou_threshold):
    n = b.shape[0]
    words = (n + 31) // 32
    mask = np.zeros((n, words), dtype=np.uint32)
    for k in prange(n):
        i = balanced_row(k, n)
        for w in range((i + 1) // 32, words):
            bits = np.uint32(0)
            for lane in range(32):
                j = w * 32 + lane
                if j > i and j < n and labels[i] == labels[j] and box_iou(b, i, j) > iou_threshold:
                    bits |= np.uint32(1) << np.uint32(lane)
            mask[i, w] = bits
    return mask


@register(
    name="bitmask_two_phase", family="hard", devices=("cpu",), exact=True, requires=("numba",),
    summary="numba: 32-bit suppression bitmask (seed layout), then the sequential greedy resolve",
)
def bitmask_two_phase_cpu(boxes, scores, *, iou_threshold, labels=None):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    mask = suppression_mask_32(sorted_boxes, sorted_labels, iou_threshold)
    return keep_from_sorted(order, resolve_greedy(mask, WORD_BITS))
