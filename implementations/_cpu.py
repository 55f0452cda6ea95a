"""Shared pieces of the numba CPU backends: sorted inputs, the IoU, balanced rows, results.

Every numba kernel works on boxes already sorted by rank (descending score, ties by lower
input index), so "higher-ranked" is simply "lower row"; results are mapped back to the
input order through ``order`` before they leave the backend.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from nmsbench.boxes import NMSResult, score_order

# numpy's error model: 0/0 gives NaN (as in torchvision's C++), not ZeroDivisionError.
JIT = dict(cache=True, error_model="numpy")


def serial_and_parallel(fn):
    """(serial, parallel) numba compilations of one kernel written with ``prange``: a
    ``parallel=True`` function pays for its thread pool on every call and every parallel
    loop, which is most of a small input's time, so small inputs take the serial one (where
    prange is range). Each has a name of its own, so their on-disk caches stay apart."""
    import types

    def compiled(suffix, **options):
        copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix, fn.__defaults__, fn.__closure__)
        copy.__qualname__ = fn.__qualname__ + suffix
        copy.__doc__ = fn.__doc__
        return njit(**options, **JIT)(copy)

    return compiled("_serial"), compiled("_parallel", parallel=True)


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


@njit(**JIT)
def greedy_kept(b, labels, iou_threshold):
    """Rank positions greedy NMS keeps (rows of ``b`` in rank order), ascending: each kept
    row removes the later same-label rows it overlaps above the threshold."""
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
            if not removed[j] and labels[j] == labels[i] and box_iou(b, i, j) > iou_threshold:
                removed[j] = True
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


# --------------------------------------------------------------------------- overlap graph

GRAPH_MAX_PAIRS = 1 << 25  # neighbour entries the overlap graph may hold (16 bytes each); denser inputs take a dense path


def _neighbour_counts(b, labels, cell_x, cell_y, gx, gy, starts, by_cell, above):
    """Per box, how many same-label boxes overlap it with IoU > ``above``, among the boxes
    of the 3 x 3 grid cells around its own (cells as wide as the largest box side)."""
    n = b.shape[0]
    counts = np.zeros(n, dtype=np.int64)
    for i in prange(n):
        c = 0
        for yy in range(max(cell_y[i] - 1, 0), min(cell_y[i] + 2, gy)):
            for xx in range(max(cell_x[i] - 1, 0), min(cell_x[i] + 2, gx)):
                cell = yy * gx + xx
                for q in range(starts[cell], starts[cell + 1]):
                    j = by_cell[q]
                    if j != i and labels[j] == labels[i] and np.float64(box_iou(b, i, j)) > above:
                        c += 1
        counts[i] = c
    return counts


def _neighbour_fill(b, labels, cell_x, cell_y, gx, gy, starts, by_cell, above, indptr):
    n = b.shape[0]
    indices = np.empty(indptr[n], dtype=np.int64)
    ious = np.empty(indptr[n], dtype=np.float64)
    for i in prange(n):
        w = indptr[i]
        for yy in range(max(cell_y[i] - 1, 0), min(cell_y[i] + 2, gy)):
            for xx in range(max(cell_x[i] - 1, 0), min(cell_x[i] + 2, gx)):
                cell = yy * gx + xx
                for q in range(starts[cell], starts[cell + 1]):
                    j = by_cell[q]
                    if j != i and labels[j] == labels[i]:
                        v = np.float64(box_iou(b, i, j))
                        if v > above:
                            indices[w] = j
                            ious[w] = v
                            w += 1
    return indices, ious


_NEIGHBOUR_COUNTS = serial_and_parallel(_neighbour_counts)
_NEIGHBOUR_FILL = serial_and_parallel(_neighbour_fill)
GRAPH_PARALLEL_MIN = 4096  # boxes from which the graph's rows are built by the threads
WINDOW_FACTOR = 4  # pairs the cells may test per pair the graph may hold, before it gives up (None: dense)


def overlap_graph(b: np.ndarray, labels: np.ndarray, max_pairs: int = GRAPH_MAX_PAIRS, above: float = 0.0):
    """The same-label pairs of boxes (input order) whose IoU is > ``above`` (compared in
    float64, as a Python float threshold is; 0: every overlapping pair), as rows of
    neighbours: (indptr, indices, ious) with row i at indptr[i]:indptr[i + 1], ious in float64 of the input dtype's IoU (torchvision's
    arithmetic, exactly symmetric); None when the graph would hold more than ``max_pairs``
    entries (the caller then takes its dense path). Found on a grid of cells as wide as
    the largest box side (a box meets only the boxes of the 3 x 3 cells around its own), so
    at constant density the work grows with N + E; the rows are built by the threads from
    ``GRAPH_PARALLEL_MIN`` boxes."""
    n = b.shape[0]
    if n == 0:
        return np.zeros(1, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    x1, y1 = b[:, 0].astype(np.float64), b[:, 1].astype(np.float64)
    largest = max(float(np.max(b[:, 2].astype(np.float64) - x1)), float(np.max(b[:, 3].astype(np.float64) - y1)))
    if largest <= 0:  # every box has zero area: no pair overlaps
        return np.zeros(n + 1, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    # cells at least as wide as the largest side, with a slack far above the rounding of the
    # cell arithmetic: two boxes that intersect lie in neighbouring cells (or one cell)
    reach = max(float(np.max(np.abs(x1))), float(np.max(np.abs(y1))), largest)
    side = largest * (1 + 1e-6) + 1e-9 * reach
    span = max(float(x1.max() - x1.min()), float(y1.max() - y1.min()))
    side = max(side, span / math.sqrt(4.0 * n + 16))  # at most about 4 n cells
    cell_x = ((x1 - x1.min()) / side).astype(np.int64)
    cell_y = ((y1 - y1.min()) / side).astype(np.int64)
    gx, gy = int(cell_x.max()) + 1, int(cell_y.max()) + 1
    cells = cell_y * gx + cell_x
    by_cell = np.argsort(cells, kind="stable")
    per_cell = np.bincount(cells, minlength=gx * gy)
    starts = np.zeros(gx * gy + 1, dtype=np.int64)
    np.cumsum(per_cell, out=starts[1:])
    # the pairs the 3 x 3 neighbourhoods would test: give up early when they are too many
    padded = np.pad(per_cell.reshape(gy, gx), 1)
    around = sum(padded[dy:dy + gy, dx:dx + gx] for dy in range(3) for dx in range(3))
    if int((per_cell.reshape(gy, gx) * around).sum()) > WINDOW_FACTOR * max_pairs:
        return None
    parallel = int(n >= GRAPH_PARALLEL_MIN)
    grid = (cell_x, cell_y, gx, gy, starts, by_cell)
    counts = _NEIGHBOUR_COUNTS[parallel](b, labels, *grid, float(above))
    if counts.sum() > max_pairs:
        return None
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices, ious = _NEIGHBOUR_FILL[parallel](b, labels, *grid, float(above), indptr)
    return indptr, indices, ious
