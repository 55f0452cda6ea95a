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


def kept_per_label(select, labels: torch.Tensor | None) -> np.ndarray:
    """The input indices a library's NMS keeps: ``select(where)`` returns the indices, into
    the boxes ``where`` picks, that it keeps; it is called once with ``slice(None)`` (every
    box) without labels, else once per distinct label (``where``: that label's input indices,
    every int64 label kept distinct), so only boxes of one label ever meet."""
    if labels is None:
        return np.asarray(select(slice(None)), dtype=np.int64).reshape(-1)
    lab = labels.detach().to(torch.int64).numpy()
    parts = [where[np.asarray(select(where), dtype=np.int64).reshape(-1)]
             for where in (np.flatnonzero(lab == value) for value in np.unique(lab))]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def result_by_score(kept: np.ndarray, scores: torch.Tensor) -> NMSResult:
    """Kept input indices by descending score, ties by lower input index (the stable sort
    taking them in ascending order, not in the order the labels were visited)."""
    keep = torch.from_numpy(np.sort(kept).astype(np.int64))
    return NMSResult(keep[score_order(scores[keep])]) if keep.numel() else NMSResult(keep)


# --------------------------------------------------------------------------- overlap graph

# neighbour entries the overlap graph may hold (16 bytes each: 4 GiB); past it a backend takes
# its dense path, O(N^2) time, which at a million boxes would take hours where the graph of a
# constant-density scene (tens of neighbours a box) takes seconds and a GiB or two
GRAPH_MAX_PAIRS = 1 << 28
# a graph of more than N^2 / this many pairs is not worth building: the backends on the
# graph (hard_graph, soft_nms, matrix_graph) take their dense path instead
DENSE_FRACTION = 32


SIZE_CLASSES = 4  # octaves of box size, each with a grid of its own (the last takes every smaller box)


@njit(inline="always", **JIT)
def _window(lo, hi, origin, side, cells):
    """The cells [first, last] of one axis of a class's grid that a corner in (lo, hi) can
    lie in, clamped to the grid before any conversion to an integer: near the float64
    limit a bound overflows to an infinity (or NaN), which widens the window, never
    narrows it."""
    q = (lo - origin) / side  # compared as floats: numba's floor of a NaN or an infinity is no integer
    first = 0 if not q > 0.0 else (cells - 1 if q >= cells else int(math.floor(q)))
    r = (hi - origin) / side
    last = cells - 1 if not r < cells - 1 else (0 if r < 0.0 else int(math.floor(r)))
    return first, last


def _cells(values: np.ndarray, cells: int, nan_to: int) -> np.ndarray:
    """Cell indices from float positions, floored and clamped to [0, cells) in float before
    the conversion (bounds that overflowed: infinities to the edges, NaN to ``nan_to``)."""
    return np.clip(np.nan_to_num(np.floor(values), nan=nan_to, posinf=cells - 1, neginf=0), 0, cells - 1
                   ).astype(np.int64)


def _neighbour_rows(b, labels, grid, above, indptr):
    """The same-label boxes that overlap each box with IoU > ``above``: in every size class,
    the boxes whose corner lies in the cells the box's window covers. With ``indptr``
    empty, (their count per box, -, -); else (-, the rows' boxes, their IoUs), row i
    filled from indptr[i]."""
    x0, y0, sides, gxs, gys, cell0, starts, by_cell = grid
    n = b.shape[0]
    fill = indptr.shape[0] > 0
    counts = np.zeros(0 if fill else n, dtype=np.int64)
    indices = np.empty(indptr[n] if fill else 0, dtype=np.int64)
    ious = np.empty(indptr[n] if fill else 0, dtype=np.float64)
    for i in prange(n):
        w = indptr[i] if fill else 0
        for k in range(sides.shape[0]):
            if gxs[k] == 0:
                continue
            xl, xh = _window(np.float64(b[i, 0]) - sides[k], np.float64(b[i, 2]), x0, sides[k], gxs[k])
            yl, yh = _window(np.float64(b[i, 1]) - sides[k], np.float64(b[i, 3]), y0, sides[k], gys[k])
            for yy in range(yl, yh + 1):
                row = cell0[k] + yy * gxs[k]
                for q in range(starts[row + xl], starts[row + xh + 1]):  # cells xl..xh of a grid row are adjacent
                    j = by_cell[q]
                    if j != i and labels[j] == labels[i]:
                        v = np.float64(box_iou(b, i, j))
                        if v > above:
                            if fill:
                                indices[w] = j
                                ious[w] = v
                            w += 1
        if not fill:
            counts[i] = w
    return counts, indices, ious


_NEIGHBOUR_ROWS = serial_and_parallel(_neighbour_rows)
GRAPH_PARALLEL_MIN = 4096  # boxes from which the graph's rows are built by the threads
WINDOW_FACTOR = 4  # pairs the cells may test per pair the graph may hold, before it gives up (None: dense)


@np.errstate(over="ignore", invalid="ignore")  # bounds near the float64 limit: _cells clamps them
def _size_class_grids(b: np.ndarray):
    """Boxes split by size (octaves down from the largest side, SIZE_CLASSES of them), each
    class on a grid of square cells at least as wide as its own largest side (at most about
    4 n_k cells), boxes binned by their x1, y1 corner: (grid, the number of pairs the
    windows would test). A box's window in class k, its box widened left and down by the
    class's cell side, covers the corners of every class-k box that can intersect it."""
    n = b.shape[0]
    x1, y1 = b[:, 0].astype(np.float64), b[:, 1].astype(np.float64)
    w, h = b[:, 2].astype(np.float64) - x1, b[:, 3].astype(np.float64) - y1
    size = np.maximum(w, h)
    largest = float(size.max())
    ratio = largest / np.maximum(size, largest * 2.0 ** -SIZE_CLASSES)
    size_class = np.minimum(np.floor(np.log2(ratio)).astype(np.int64), SIZE_CLASSES - 1)
    x0, y0 = float(x1.min()), float(y1.min())
    span = max(float(x1.max()) - x0, float(y1.max()) - y0)
    reach = max(float(np.max(np.abs(x1))), float(np.max(np.abs(y1))), largest)
    sides, gxs, gys = np.ones(SIZE_CLASSES), np.zeros(SIZE_CLASSES, np.int64), np.zeros(SIZE_CLASSES, np.int64)
    cell_of = np.zeros(n, dtype=np.int64)
    cell0 = np.zeros(SIZE_CLASSES, dtype=np.int64)
    total, filled, tests = 0, [], 0
    for k in range(SIZE_CLASSES):
        members = np.flatnonzero(size_class == k)
        cell0[k] = total
        if members.size == 0:
            continue
        # a slack far above the rounding of the cell arithmetic: every corner that can reach
        # a box lies in its window's cells
        side = max(float(size[members].max()) * (1 + 1e-6) + 1e-9 * reach, span / math.sqrt(4.0 * members.size + 16),
                   1e-300)
        cells = int(math.sqrt(4.0 * members.size + 16)) + 2  # per axis: what the side allows
        cx, cy = _cells((x1[members] - x0) / side, cells, cells - 1), _cells((y1[members] - y0) / side, cells, cells - 1)
        gx, gy = int(cx.max()) + 1, int(cy.max()) + 1
        sides[k], gxs[k], gys[k] = side, gx, gy
        cell_of[members] = total + cy * gx + cx
        total += gx * gy
        filled.append(k)
    by_cell = np.argsort(cell_of, kind="stable")
    per_cell = np.bincount(cell_of, minlength=total)
    starts = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(per_cell, out=starts[1:])
    for k in filled:  # the pairs every box's window in class k would test (summed-area table)
        gx, gy, side = int(gxs[k]), int(gys[k]), sides[k]
        table = np.zeros((gy + 1, gx + 1), dtype=np.int64)
        table[1:, 1:] = per_cell[cell0[k]:cell0[k] + gx * gy].reshape(gy, gx).cumsum(0).cumsum(1)
        xl, xh = _cells((x1 - side - x0) / side, gx, 0), _cells((x1 + w - x0) / side, gx, gx - 1)
        yl, yh = _cells((y1 - side - y0) / side, gy, 0), _cells((y1 + h - y0) / side, gy, gy - 1)
        tests += int((table[yh + 1, xh + 1] - table[yl, xh + 1] - table[yh + 1, xl] + table[yl, xl]).sum())
    return (x0, y0, sides, gxs, gys, cell0, starts, by_cell), tests


def overlap_graph(b: np.ndarray, labels: np.ndarray, max_pairs: int = GRAPH_MAX_PAIRS, above: float = 0.0,
                  max_tests: int | None = None):
    """The same-label pairs of boxes (input order) whose IoU is > ``above`` (compared in
    float64, as a Python float threshold is; 0: every overlapping pair), as rows of
    neighbours: (indptr, indices, ious) with row i at indptr[i]:indptr[i + 1], ious in
    float64 of the input dtype's IoU (torchvision's arithmetic, exactly symmetric); None
    when the graph would hold more than ``max_pairs`` entries, or finding it would test
    more than ``max_tests`` pairs (default WINDOW_FACTOR x max_pairs): the caller then
    takes its dense path. Found on grids of cells, one per size class (``_size_class_grids``),
    so at constant density the work grows with N + E even where box sizes vary; the rows
    are built by the threads from ``GRAPH_PARALLEL_MIN`` boxes."""
    n = b.shape[0]
    if n == 0:
        return np.zeros(1, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    x1, y1 = b[:, 0].astype(np.float64), b[:, 1].astype(np.float64)
    largest = max(float(np.max(b[:, 2].astype(np.float64) - x1)), float(np.max(b[:, 3].astype(np.float64) - y1)))
    if largest <= 0:  # every box has zero area: no pair overlaps
        return np.zeros(n + 1, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    grid, tests = _size_class_grids(b)
    if tests > (WINDOW_FACTOR * max_pairs if max_tests is None else max_tests):  # give up before the work
        return None
    parallel = int(n >= GRAPH_PARALLEL_MIN)
    rows = _NEIGHBOUR_ROWS[parallel]
    counts = rows(b, labels, grid, float(above), np.zeros(0, dtype=np.int64))[0]
    if counts.sum() > max_pairs:
        return None
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    _, indices, ious = rows(b, labels, grid, float(above), indptr)
    return indptr, indices, ious
