"""The overlap graph on the GPU: the pairs of boxes that overlap, in O(N + E) memory, and
greedy NMS and Matrix NMS resolved on them (overlap_graph.cu).

- ``device_grid``: the grids of cells by box size that ``_cpu.overlap_graph`` uses, their
  statistics and cells by three kernels on a GPU (torch elsewhere: CI holds that form to a
  brute-force pair test), one host read;
- ``window_tests`` / ``graph_tests``: the pairs the rows kernel would test on a grid, before
  any of them is (torch / a kernel): the dispatcher's density estimate;
- ``graph_rows`` (two passes, CSR) and ``slot_rows`` (one pass, ``ROW_SLOTS`` a box):
  each box's neighbours above a threshold;
- ``greedy_on_graph``: greedy NMS on the rows in rounds in one cooperative launch:
  torchvision's indices, labels included;
- ``matrix_on_graph``: Matrix NMS's decay from the rows of higher-ranked neighbours with
  IoU > 0 (``matrix_graph``'s arithmetic on the CPU);
- ``dispatch``: the one place that chooses between the graph and a dense path, for
  ``hard_graph``'s and ``matrix_graph``'s CUDA backends.

GPU tests: tests/test_overlap_graph_gpu.py; the design: implementations/DESIGN.md.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from nmsbench.boxes import NMSResult, result_by_final_score, score_order

from ._cpu import SIZE_CLASSES
from ._cuda import CudaModule, blocks, device_index, grid_barrier_address, on_torch_stream, resident_blocks

DEFINES = {"SIZE_CLASSES": SIZE_CLASSES, "ROW_THREADS": 256, "ROUND_THREADS": 512}
ROW_THREADS, ROUND_THREADS = DEFINES["ROW_THREADS"], DEFINES["ROUND_THREADS"]
ROW_SLOTS = 64  # greedy's rows in one pass, this many entries a box (a longer row: two passes, graph_rows)

# The dispatcher between the graph and a dense path (hard_graph's and matrix_graph's CUDA backends).
PATHS = ("dense", "graph")
# Below GRAPH_MIN_N boxes the dense path, whatever the density: counting the windows' tests
# (the grid and graph_tests_kernel) would cost a large share of what the dense path costs.
GRAPH_MIN_N = 65536
DENSE_TESTS_DIVISOR = 160  # from GRAPH_MIN_N: the graph where its windows test at most n^2 / this many pairs


def dispatch(n: int, path: str | None, op: str, on_graph, dense):
    """The one place that chooses between the graph and a dense path for a call of ``n``
    boxes: ``dense()`` below GRAPH_MIN_N or where ``path="dense"`` forces it; else
    ``on_graph(max_tests)`` (the result, or None where the grid found more than
    ``max_tests`` pair tests: then ``dense()``), ``max_tests`` None where ``path="graph"``
    forces the graph. A ValueError naming ``op`` for a path that does not exist."""
    if path is not None and path not in PATHS:
        raise ValueError(f"{op}: no path {path!r}; the paths are {', '.join(PATHS)}")
    if path == "dense" or (path is None and n < GRAPH_MIN_N):
        return dense()
    result = on_graph(None if path == "graph" else n * n // DENSE_TESTS_DIVISOR)
    return dense() if result is None else result


CUDA_MODULE = CudaModule(
    "overlap_graph.cu",
    templates={
        # boxes labels | n threshold higher_only | grid_doubles grid_ints starts by_cell | counts indptr indices
        # boxes labels | n threshold higher_only | grid_table starts by_cell | counts indptr indices | slots overflow
        "graph_rows_kernel": "QQidi" + "QQQ" + "QQQ" + "iQ",
        "graph_tests_kernel": "QiQQQ",  # boxes n grid_table starts | tests
        "grid_extent_kernel": "QiQ",  # boxes n | extent
        "grid_classes_kernel": "QiQQ",  # boxes n extent | classes
        "grid_cells_kernel": "QiQQQ",  # boxes n extent grid_table | cells
        "graph_decay_kernel": "QiQQidQQ",  # boxes n | indptr indices | linear sigma | cmax decay
    },
    plain={"greedy_rounds_kernel": "iQQiQ" + "QQQQ"},  # n | indptr counts slots indices | state counters barrier rounds
    defines=DEFINES,
)


class DeviceGrid(NamedTuple):
    """``_cpu._size_class_grids``' grid: the origin, each class's cell side, cells per row
    and rows (0: an empty class) and first cell, and the boxes listed cell after cell
    (``by_cell``, from ``starts``); ``table``: the same numbers on the boxes' device as the
    kernels read them (x0, y0, then the classes' sides, gx, gy and first cells, in double)."""

    x0: float
    y0: float
    sides: list[float]
    gxs: list[int]
    gys: list[int]
    cell0: list[int]
    starts: torch.Tensor
    by_cell: torch.Tensor
    table: torch.Tensor


def device_grid(boxes: torch.Tensor) -> DeviceGrid | None:
    """The grid of ``boxes`` (finite, as run_nms checks them), on their device; None where
    no box has a side above 0 (no pair overlaps). The classes' sides and cell counts follow
    ``_cpu._size_class_grids``' formulas; a class's corners are binned in double as the
    kernel's windows are computed, and clamped into the grid (a window clamps the same way,
    so a clamped corner is still found). One host read, of a few statistics. On a GPU three
    kernels take the statistics and the cells (``_cuda_statistics``; torch's operations
    would cost the host more than the GPU spends); elsewhere torch does
    (``_torch_statistics``): CI holds that form to a brute-force pair test."""
    k, device = SIZE_CLASSES, boxes.device
    statistics = _cuda_statistics if boxes.is_cuda else _torch_statistics
    stats, cells_of = statistics(boxes)
    largest_f, x0, y0, x1_max, y1_max, x1_reach, y1_reach = stats[:7]
    if not largest_f > 0:
        return None
    members, class_size, class_x1, class_y1 = stats[7:7 + k], stats[7 + k:7 + 2 * k], stats[7 + 2 * k:7 + 3 * k], \
        stats[7 + 3 * k:]
    span = max(x1_max - x0, y1_max - y0)
    reach = max(x1_reach, y1_reach, largest_f)
    sides, gxs, gys, cell0 = [1.0] * k, [0] * k, [0] * k, [0] * k
    total = 0
    for c in range(k):
        cell0[c] = total
        if members[c] == 0:
            continue
        side = max(class_size[c] * (1 + 1e-6) + 1e-9 * reach, span / math.sqrt(4.0 * members[c] + 16), 1e-300)
        cells = int(math.sqrt(4.0 * members[c] + 16)) + 2
        gx = min(max(int(math.floor((class_x1[c] - x0) / side)), 0), cells - 1) + 1
        gy = min(max(int(math.floor((class_y1[c] - y0) / side)), 0), cells - 1) + 1
        sides[c], gxs[c], gys[c] = side, gx, gy
        total += gx * gy
    if total >= 2**31:
        raise ValueError(f"overlap_graph: {total} cells do not fit the kernels' int32 cell numbers")
    table = torch.tensor([x0, y0, *sides, *gxs, *gys, *cell0], dtype=torch.float64, device=device)
    cells_sorted, by_cell = torch.sort(cells_of(table), stable=True)
    # starts[c]: the first position whose cell is c or later (a binary search per cell, no atomics)
    starts = torch.searchsorted(cells_sorted, torch.arange(total + 1, dtype=torch.int32, device=device))
    return DeviceGrid(x0, y0, sides, gxs, gys, cell0, starts, by_cell, table)


def _torch_statistics(boxes: torch.Tensor):
    """(device_grid's statistics as floats: the extent, then per class its count, largest size,
    x1 and y1; a function of the grid's table giving each box's cell, int32), with torch."""
    k, device = SIZE_CLASSES, boxes.device
    b = boxes.to(torch.float64)
    x1, y1 = b[:, 0], b[:, 1]
    size = torch.maximum(b[:, 2] - x1, b[:, 3] - y1)
    largest = size.max()
    ratio = torch.nan_to_num(largest / torch.maximum(size, largest * 2.0 ** -k), nan=1.0)  # points only: 0/0
    # floor(log2(ratio)) exactly, as the ratio's binary exponent (ratio >= 1; the kernels' ilogb)
    size_class = torch.clamp(torch.frexp(ratio).exponent - 1, max=k - 1).to(torch.int64)
    member = size_class[:, None] == torch.arange(k, device=device)  # (n, classes)
    # each class's largest size, x1 and y1 (-inf where empty): a masked max over the boxes
    class_max = torch.where(member[:, :, None], torch.stack([size, x1, y1], 1)[:, None, :], -math.inf).amax(0)
    stats = torch.cat([torch.stack([largest, x1.min(), y1.min(), x1.max(), y1.max(), x1.abs().max(), y1.abs().max()]),
                       member.sum(0).to(torch.float64), class_max.T.reshape(-1)]).tolist()

    def cells_of(table):
        side_of, gx_of, gy_of, cell0_of = (table[2 + c * k:2 + (c + 1) * k][size_class] for c in range(4))
        cx = torch.minimum(torch.clamp(torch.floor((x1 - table[0]) / side_of), min=0), gx_of - 1)
        cy = torch.minimum(torch.clamp(torch.floor((y1 - table[1]) / side_of), min=0), gy_of - 1)
        return (cell0_of + cy * gx_of + cx).to(torch.int32)  # exact in double: far below 2^53

    return stats, cells_of


def _cuda_statistics(boxes: torch.Tensor):
    """``_torch_statistics`` by ``grid_extent_kernel``, ``grid_classes_kernel`` and
    ``grid_cells_kernel`` (the doubles reduced as order-preserving integer keys, decoded here)."""
    n, device, k = boxes.shape[0], boxes.device, SIZE_CLASSES
    boxes = boxes.contiguous()
    keys = torch.zeros(7 + 4 * k, dtype=torch.int64, device=device)
    keys[1:3] = -1  # the minima start at the largest key
    extent, classes = keys[:7], keys[7:]
    with on_torch_stream(device) as launch:
        launch(CUDA_MODULE.get("grid_extent_kernel", boxes.dtype, device), (blocks(n, ROW_THREADS),), (ROW_THREADS,),
               (boxes, n, extent))
        launch(CUDA_MODULE.get("grid_classes_kernel", boxes.dtype, device), (blocks(n, ROW_THREADS),),
               (ROW_THREADS,), (boxes, n, extent, classes))
    raw = keys.cpu().numpy().view(np.uint64)  # the one host read
    positive = raw >> np.uint64(63) == 1
    values = np.where(positive, raw & np.uint64(0x7FFFFFFFFFFFFFFF), ~raw).view(np.float64)
    counts = raw[7:7 + k].astype(np.float64)
    stats = [*values[:7].tolist(), *counts.tolist(),
             *np.where(np.tile(counts > 0, 3), values[7 + k:], -math.inf).tolist()]  # an empty class's max: -inf

    def cells_of(table):
        cells = torch.empty(n, dtype=torch.int32, device=device)
        with on_torch_stream(device) as launch:
            launch(CUDA_MODULE.get("grid_cells_kernel", boxes.dtype, device), (blocks(n, ROW_THREADS),),
                   (ROW_THREADS,), (boxes, n, extent, table, cells))
        return cells

    return stats, cells_of


def grid_tuple(grid: DeviceGrid) -> tuple:
    """``grid`` as ``_cpu._neighbour_rows`` takes it (NumPy, on the host)."""
    return (grid.x0, grid.y0, np.array(grid.sides), np.array(grid.gxs, dtype=np.int64),
            np.array(grid.gys, dtype=np.int64), np.array(grid.cell0, dtype=np.int64), grid.starts.cpu().numpy(),
            grid.by_cell.cpu().numpy())


def window_tests(boxes: torch.Tensor, grid: DeviceGrid) -> int:
    """How many pairs ``graph_rows_kernel`` would test on ``grid``: over every box and class,
    the boxes whose corners lie in its window's cells (itself included), from a summed-area
    table of each class's cell counts; torch on the boxes' device, one host read. The
    work the graph would cost before it is built: a dispatcher's density estimate."""
    b = boxes.to(torch.float64)
    per_cell = grid.starts[1:] - grid.starts[:-1]
    total = torch.zeros((), dtype=torch.int64, device=boxes.device)
    for side, gx, gy, first in zip(grid.sides, grid.gxs, grid.gys, grid.cell0):
        if gx == 0:
            continue
        table = torch.zeros((gy + 1, gx + 1), dtype=torch.int64, device=boxes.device)
        table[1:, 1:] = per_cell[first:first + gx * gy].view(gy, gx).cumsum(0).cumsum(1)

        def cells(position, count):  # the kernel's window arithmetic: floored, clamped into the grid
            return torch.clamp(torch.floor(position / side), 0, count - 1).to(torch.int64)

        xl, xh = cells(b[:, 0] - side - grid.x0, gx), cells(b[:, 2] - grid.x0, gx)
        yl, yh = cells(b[:, 1] - side - grid.y0, gy), cells(b[:, 3] - grid.y0, gy)
        total += (table[yh + 1, xh + 1] - table[yl, xh + 1] - table[yh + 1, xl] + table[yl, xl]).sum()
    return int(total)


def graph_tests(launch, boxes: torch.Tensor, grid: DeviceGrid) -> int:
    """``window_tests`` on the GPU (``graph_tests_kernel``: the rows of ``starts`` bound each
    window, no pair is tested), one host read: what the rows would cost before they are
    built."""
    n = boxes.shape[0]
    tests = torch.zeros(1, dtype=torch.int64, device=boxes.device)
    launch(CUDA_MODULE.get("graph_tests_kernel", boxes.dtype, boxes.device), (blocks(n, ROW_THREADS),),
           (ROW_THREADS,), (boxes, n, grid.table, grid.starts, tests))
    return int(tests)


def graph_rows(launch, boxes: torch.Tensor, labels: torch.Tensor | None, threshold: float, higher_only: bool,
               grid: DeviceGrid | None = None):
    """(indptr int64 (n + 1), indices int32, pairs): each box's same-label neighbours with
    IoU above ``threshold`` (0: every intersecting box), the higher-ranked ones only (lower
    indices: ``boxes`` are in rank order) where ``higher_only``; ``indices`` holds at least
    one element (a kernel argument even without pairs), its first ``pairs`` the rows. One
    host read, for the number of pairs. ``grid``: ``device_grid(boxes)`` where the caller
    has built it."""
    n, device = boxes.shape[0], boxes.device
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
    if grid is None and n:
        grid = device_grid(boxes)
    if grid is None:
        return indptr, torch.empty(1, dtype=torch.int32, device=device), 0
    kernel = CUDA_MODULE.get("graph_rows_kernel", boxes.dtype, device)
    args = (boxes, labels, n, np.float64(threshold), int(higher_only), grid.table, grid.starts, grid.by_cell)
    counts = torch.zeros(n, dtype=torch.int64, device=device)  # zeroed: a recorded, unrun launch gives empty rows
    launch(kernel, (blocks(n, ROW_THREADS),), (ROW_THREADS,), (*args, counts, None, None, 0, None))
    torch.cumsum(counts, 0, out=indptr[1:])
    pairs = int(indptr[-1])
    indices = torch.empty(max(pairs, 1), dtype=torch.int32, device=device)
    launch(kernel, (blocks(n, ROW_THREADS),), (ROW_THREADS,), (*args, None, indptr, indices, 0, None))
    return indptr, indices, pairs


def slot_rows(launch, boxes: torch.Tensor, labels: torch.Tensor | None, threshold: float, grid: DeviceGrid,
              slots: int = ROW_SLOTS):
    """(counts int64 (n), indices int32 (n * slots), overflow int32 (1)): each box's
    higher-ranked same-label neighbours above ``threshold``, row i at ``indices[i * slots]``,
    built in one pass and no host read; ``overflow`` becomes 1 where a row is longer than
    ``slots`` (then those rows are cut short and the caller takes ``graph_rows``)."""
    n, device = boxes.shape[0], boxes.device
    counts = torch.zeros(n, dtype=torch.int64, device=device)
    indices = torch.empty(n * slots, dtype=torch.int32, device=device)
    overflow = torch.zeros(1, dtype=torch.int32, device=device)
    launch(CUDA_MODULE.get("graph_rows_kernel", boxes.dtype, device), (blocks(n, ROW_THREADS),), (ROW_THREADS,),
           (boxes, labels, n, np.float64(threshold), 1, grid.table, grid.starts, grid.by_cell, counts, None, indices,
            slots, overflow))
    return counts, indices, overflow


def greedy_grid(n: int, device: torch.device) -> int:
    """Blocks of the cooperative rounds launch: a thread per box, at most what the GPU holds
    at once (a cooperative launch needs them all resident)."""
    resident = resident_blocks(CUDA_MODULE.get("greedy_rounds_kernel", None, device), ROUND_THREADS, device)
    if resident == 0:
        raise RuntimeError("overlap_graph: this GPU cannot hold one block of its rounds kernel")
    return max(1, min(resident, blocks(n, ROUND_THREADS)))


def _ranked(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor | None):
    """(order, the boxes and labels in rank order): input indices by descending score, ties
    by lower index, and what the kernels read, contiguous."""
    order = score_order(scores)
    ranked_labels = None if labels is None else labels.detach().to(torch.int64).index_select(0, order)
    return order, boxes.detach().index_select(0, order), ranked_labels


class GraphGreedy(NamedTuple):
    """``greedy_on_graph``'s answer: the result (None where the graph gave way to the dense
    path), the pairs the windows test (0 where not counted), and the rows and rounds as
    the kernels left them (device tensors, for a probe: ``pairs``, ``rounds``)."""

    result: NMSResult | None
    tests: int
    counts: torch.Tensor | None = None  # each box's row length
    counters: torch.Tensor | None = None
    two_pass: bool = False  # a row outgrew its slots: the rows were built again by graph_rows

    @property
    def pairs(self) -> int:
        """The pairs above the threshold (summed here, on a probe's request: one host read)."""
        return 0 if self.counts is None else int(self.counts.sum())

    @property
    def rounds(self) -> int:
        return 0 if self.counters is None else int(self.counters[3])


def greedy_on_graph(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float,
                    labels: torch.Tensor | None = None, max_tests: int | None = None,
                    slots: int = ROW_SLOTS) -> GraphGreedy:
    """Greedy NMS on the overlap graph: the boxes ranked by score (ties by lower index), the
    grid, the rows of higher-ranked neighbours above the threshold (``slot_rows``, or
    ``graph_rows`` where a row outgrows ``slots``; 0: always), then the rounds; input
    indices by descending score, as torchvision's. ``max_tests``: where the windows would
    test more pairs than that, stop before the rows and return no result (the caller's
    dense path is cheaper there)."""
    n, device = boxes.shape[0], boxes.device
    if n == 0:
        return GraphGreedy(NMSResult(torch.empty(0, dtype=torch.int64, device=device)), 0)
    order, ranked, ranked_labels = _ranked(boxes, scores, labels)
    grid = device_grid(ranked)
    if grid is None:  # points only: nothing overlaps, every box is kept
        return GraphGreedy(NMSResult(order), 0)
    with on_torch_stream(device) as launch:
        tests = graph_tests(launch, ranked, grid) if max_tests is not None else 0
        if max_tests is not None and tests > max_tests:
            return GraphGreedy(None, tests)
        threshold = float(iou_threshold)
        if slots > 0:
            counts, indices, overflow = slot_rows(launch, ranked, ranked_labels, threshold, grid, slots)
            state, counters = _greedy_rounds(launch, n, None, counts, slots, indices)
            kept = torch.nonzero(state == 1).squeeze(1)  # waits for the GPU: the overflow word is written
            if not int(overflow):
                return GraphGreedy(NMSResult(order[kept]), tests, counts, counters)
        indptr, indices, _ = graph_rows(launch, ranked, ranked_labels, threshold, True, grid)
        state, counters = _greedy_rounds(launch, n, indptr, None, 0, indices)
    return GraphGreedy(NMSResult(order[torch.nonzero(state == 1).squeeze(1)]), tests, indptr.diff(), counters,
                       slots > 0)


def _greedy_rounds(launch, n: int, indptr, counts, slots: int, indices):
    """(state: 1 kept, 2 removed; counters, the rounds taken at [3]): greedy_rounds_kernel in
    one cooperative launch on the rows (indptr's, or ``slots`` a box with ``counts``)."""
    device = indices.device
    state = torch.empty(n, dtype=torch.int32, device=device)
    counters = torch.empty(4, dtype=torch.int32, device=device)  # three round counters, the rounds taken
    launch(CUDA_MODULE.get("greedy_rounds_kernel", None, device), (greedy_grid(n, device),), (ROUND_THREADS,),
           (n, indptr, counts, slots, indices, state, counters,
            np.uint64(grid_barrier_address(device_index(device), launch.stream)), counters[3:]),
           cooperative=True)
    return state, counters


def matrix_on_graph(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor | None, *, kernel: str,
                    sigma: float, score_threshold: float, max_tests: int | None = None) -> NMSResult | None:
    """Matrix NMS (family ``matrix``) from the overlap graph: cmax and the decay of every box
    from its higher-ranked overlapping neighbours, final scores in float64 (kept where
    >= score_threshold, as the definition decides), ordered by the scores returned. None
    where the windows would test more than ``max_tests`` pairs (see greedy_on_graph)."""
    n, device = boxes.shape[0], boxes.device
    if n == 0:
        return NMSResult(torch.empty(0, dtype=torch.int64, device=device), torch.empty(0, dtype=scores.dtype,
                                                                                        device=device))
    order, ranked, ranked_labels = _ranked(boxes, scores, labels)
    grid = device_grid(ranked)
    with on_torch_stream(device) as launch:
        if grid is not None and max_tests is not None and graph_tests(launch, ranked, grid) > max_tests:
            return None
        indptr, indices, _ = graph_rows(launch, ranked, ranked_labels, 0.0, True, grid)
        cmax = torch.empty(n, dtype=torch.float64, device=device)
        decay = torch.empty(n, dtype=torch.float64, device=device)
        decay_kernel = CUDA_MODULE.get("graph_decay_kernel", boxes.dtype, device)
        args = (ranked, n, indptr, indices, int(kernel == "linear"), np.float64(sigma), cmax)
        launch(decay_kernel, (blocks(n, ROW_THREADS),), (ROW_THREADS,), (*args, None))
        launch(decay_kernel, (blocks(n, ROW_THREADS),), (ROW_THREADS,), (*args, decay))
    final = scores.detach()[order].to(torch.float64) * decay
    kept = (final >= score_threshold).nonzero().squeeze(1)
    return result_by_final_score(order[kept], final[kept].to(scores.dtype))
