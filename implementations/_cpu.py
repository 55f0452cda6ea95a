"""Shared pieces of the numba CPU backends: sorted inputs, the IoU, balanced rows, results.

Every numba kernel works on boxes already sorted by rank (descending score, ties by lower
input index), so "higher-ranked" is simply "lower row"; results are mapped back to the
input order through ``order`` before they leave the backend.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

from nmsbench.boxes import NMSResult, score_order

# numpy's error model: 0/0 gives NaN (as in torchvision's C++), not ZeroDivisionError.
JIT = dict(cache=True, error_model="numpy")


@njit(inline="always", **JIT)
def box_iou(b, i, j):
    """IoU of rows i and j of ``b``, in b's dtype, with torchvision's arithmetic.

    A NaN (0/0 for two zero-area boxes) never compares greater than a threshold, which is
    what makes it count as IoU 0.
    """
    w = min(b[i, 2], b[j, 2]) - max(b[i, 0], b[j, 0])
    h = min(b[i, 3], b[j, 3]) - max(b[i, 1], b[j, 1])
    if w > 0 and h > 0:
        inter = w * h
        area_i = (b[i, 2] - b[i, 0]) * (b[i, 3] - b[i, 1])
        area_j = (b[j, 2] - b[j, 0]) * (b[j, 3] - b[j, 1])
        return inter / (area_i + area_j - inter)
    return w - w  # zero in b's dtype (w is finite: inputs are validated)


@njit(inline="always", **JIT)
def balanced_row(k, n):
    """Map 0, 1, 2, 3, ... to rows 0, n-1, 1, n-2, ...

    Row j of a triangular loop costs ~j, so a static split of ``prange(n)`` over this
    order gives every thread the same work.
    """
    k = np.int64(k)  # a prange index may be unsigned; keep the row index signed
    half = k >> 1
    return half if (k & 1) == 0 else np.int64(n) - 1 - half


@njit(**JIT)
def resolve_greedy(mask, word_bits):
    """Greedy resolve over a suppression bitmask: rank positions kept, ascending.

    ``mask[i, w]`` bit k says box i suppresses box ``w * word_bits + k`` (only boxes after
    i). Walk boxes in rank order; keep one iff no kept box has removed it, then OR its
    row into the running ``removed`` words (from its own word on: earlier words are done).
    """
    n, words = mask.shape
    removed = np.zeros(words, dtype=mask.dtype)
    kept = np.empty(n, dtype=np.int64)
    count = 0
    for i in range(n):
        if (removed[i // word_bits] >> (i % word_bits)) & 1 == 0:
            kept[count] = i
            count += 1
            for w in range(i // word_bits, words):
                removed[w] |= mask[i, w]
    return kept[:count]


def sorted_inputs(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor | None):
    """(order, sorted boxes as numpy, sorted labels as int64 numpy; zeros without labels)."""
    order = score_order(scores)
    sorted_boxes = boxes.detach()[order].contiguous().numpy()
    if labels is None:
        sorted_labels = np.zeros(boxes.shape[0], dtype=np.int64)
    else:
        sorted_labels = labels.detach()[order].to(torch.int64).contiguous().numpy()
    return order, sorted_boxes, sorted_labels


def keep_from_sorted(order: torch.Tensor, kept_positions: np.ndarray) -> NMSResult:
    """Kept rank positions (ascending) mapped back to input indices, in rank order."""
    return NMSResult(order[torch.from_numpy(np.ascontiguousarray(kept_positions, dtype=np.int64))])
