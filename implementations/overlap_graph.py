"""The overlap graph on the GPU: the pairs of boxes that overlap, in O(N + E) memory, and
greedy NMS and Matrix NMS resolved on them (overlap_graph.cu).

- ``grid_layout``: the grids of cells by box size that ``_cpu.overlap_graph`` uses, from
  the boxes' statistics (four kernels on a GPU, torch elsewhere: CI holds that form to a
  brute-force pair test), one host read, which also brings the density estimate: the
  pairs the windows of a sample of the boxes would test (``sample_count``);
- ``device_grid``: the boxes ranked, binned and copied into cell order;
- ``graph_rows`` (two passes, CSR) and ``slot_rows`` (one pass, ``ROW_SLOTS`` a box):
  each box's neighbours above a threshold;
- ``greedy_on_graph``: greedy NMS on the rows in rounds in one cooperative launch:
  torchvision's indices, labels included;
- ``matrix_on_graph``: Matrix NMS's decay from the rows of higher-ranked neighbours with
  IoU > 0 (``matrix_graph``'s arithmetic on the CPU);
- ``dispatch``: the one place that chooses between the graph and a dense path, for
  ``hard_graph``'s and ``matrix_graph``'s CUDA backends;
- ``window_tests``: the pairs a grid's windows test, counted with torch (tests, probes).

GPU tests: tests/test_overlap_graph_gpu.py; the design: implementations/DESIGN.md.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from nmsbench.boxes import NMSResult, result_by_final_score, score_order
from nmsbench.cuda import (CudaModule, KernelPath, PathTable, blocks, device_index, grid_barrier_address, host_count,
                           on_torch_stream, rank_by_score, resident_blocks)

from ._cpu import SIZE_CLASSES

DEFINES = {"SIZE_CLASSES": SIZE_CLASSES, "ROW_THREADS": 256, "ROUND_THREADS": 512, "SAMPLE_THREADS": 256}
ROW_THREADS, ROUND_THREADS, SAMPLE_THREADS = DEFINES["ROW_THREADS"], DEFINES["ROUND_THREADS"], DEFINES["SAMPLE_THREADS"]
# The rows kernel's lanes a box: enough for about ROW_LANE_TARGET threads, MIN_ROW_LANES to
# MAX_ROW_LANES, else one (a group of lanes reads a window's row side by side, at the cost of a
# ballot a step; one lane a box leaves a small N's GPU idle, and a group of two gained nothing).
ROW_LANE_TARGET, MIN_ROW_LANES, MAX_ROW_LANES = 1 << 20, 4, 8
# Ranking: rank_by_score's launches up to this many boxes (little host work), torch.sort above.
RANK_KERNEL_MAX_N = 131072
ROW_SLOTS = 64  # greedy's rows in one pass, this many entries a box (a longer row: two passes, graph_rows)

# Below GRAPH_MIN_N boxes the dense path, whatever the density: the graph's fixed cost (the
# grid, its host reads) would be a large share of what the dense path costs.
GRAPH_MIN_N = 65536
DENSE_TESTS_DIVISOR = 16  # from GRAPH_MIN_N: the graph where its windows test at most n^2 / this many pairs
# The density estimate: the pairs the windows of a sample of the boxes test, scaled to all n;
# the sample compares about SAMPLED_PAIRS (sample, box) pairs, at least MIN_SAMPLES samples.
SAMPLED_PAIRS, MIN_SAMPLES = 1 << 24, 64


# The dispatcher between the graph and a dense path (hard_graph's and matrix_graph's CUDA
# backends): from GRAPH_MIN_N boxes the graph is tried first, and gives way to the dense
# path where its density estimate finds too many pair tests (``dispatch``).
PATHS = PathTable("overlap_graph", (
    KernelPath("dense", passes_over=lambda n, *call, **context: None if n < GRAPH_MIN_N else
               f"from {GRAPH_MIN_N} boxes the graph is tried first"),
    KernelPath("graph"),
))


def dispatch(n: int, path: str | None, op: str, on_graph, dense):
    """The one place that chooses between the graph and a dense path for a call of ``n``
    boxes: ``dense()`` below GRAPH_MIN_N or where ``path="dense"`` forces it; else
    ``on_graph(max_tests)`` (the result, or None where the density estimate found more than
    ``max_tests`` pair tests: then ``dense()``), ``max_tests`` None where ``path="graph"``
    forces the graph. A ValueError naming ``op`` for a path that does not exist."""
    if path is not None:
        PATHS.check(path, n, op=op)
    if (path or PATHS.choose(n)) == "dense":
        return dense()
    result = on_graph(None if path == "graph" else n * n // DENSE_TESTS_DIVISOR)
    return dense() if result is None else result


CUDA_MODULE = CudaModule(
    "overlap_graph.cu",
    templates={
        # cell_boxes cell_rank cell_labels | n threshold higher_only | grid_table starts | counts indptr indices
        # | slots overflow lanes
        "graph_rows_kernel": "QQQ" + "idi" + "QQ" + "QQQ" + "iQi",
        "grid_extent_kernel": "QiQ",  # boxes n | extent
        "grid_classes_kernel": "QiQQ",  # boxes n extent | classes
        "sampled_tests_kernel": "QiiQQQ",  # boxes n samples extent grid_table | tests
        "grid_cells_kernel": "QQidQQ",  # boxes order n largest grid_table | cells
        "cell_order_kernel": "QQQiQQQQ",  # boxes order labels n by_cell | cell_boxes cell_rank cell_labels
        "graph_decay_kernel": "QQiQQidQQ",  # boxes order n | indptr indices | linear sigma | cmax decay
    },
    plain={"greedy_rounds_kernel": "iQQiQ" + "QQQQ",  # n | indptr counts slots indices | state counters barrier rounds
           "grid_table_kernel": "QQ"},  # keys | table
    defines=DEFINES,
)
KEYS = 7 + 4 * SIZE_CLASSES  # the statistics' keys: the extent, then per class count, largest size, x1, y1
TABLE = 3 + 4 * SIZE_CLASSES  # the grid's table (x0, y0, per class side, gx, gy, first cell) and its cells in all


class GridLayout(NamedTuple):
    """``_cpu._size_class_grids``' grid before any box is binned: the origin, each class's
    cell side, cells per row and rows (0: an empty class) and first cell, the cells in all,
    the largest box side (which gives the classes); ``table``: the same numbers on the
    boxes' device as the kernels read them (x0, y0, then the classes' sides, gx, gy and
    first cells, in double)."""

    x0: float
    y0: float
    sides: list[float]
    gxs: list[int]
    gys: list[int]
    cell0: list[int]
    total: int
    largest: float
    table: torch.Tensor


class DeviceGrid(NamedTuple):
    """A layout with the boxes binned: ``starts`` (int32, total + 1) bounds each cell's
    positions in the cell order, where ``cell_boxes``, ``cell_rank`` (int32) and
    ``cell_labels`` (int64, or None) hold the boxes, their ranks and labels; within a cell
    the ranks ascend."""

    layout: GridLayout
    starts: torch.Tensor
    cell_rank: torch.Tensor
    cell_boxes: torch.Tensor
    cell_labels: torch.Tensor | None


def row_lanes(n: int) -> int:
    """The rows kernel's lanes a box for ``n`` boxes: 1, or a power of two from
    MIN_ROW_LANES to MAX_ROW_LANES."""
    lanes = 1
    while lanes < MAX_ROW_LANES and n * lanes < ROW_LANE_TARGET:
        lanes *= 2
    return lanes if lanes >= MIN_ROW_LANES else 1


def sample_count(n: int) -> int:
    """How many boxes the density estimate samples among ``n``."""
    return min(n, max(MIN_SAMPLES, SAMPLED_PAIRS // max(n, 1)))


def sample_positions(n: int, samples: int, device) -> torch.Tensor:
    """The sampled boxes' positions: k * n // samples for k < samples (as the kernel takes them)."""
    return torch.arange(samples, dtype=torch.int64, device=device) * n // samples


def grid_layout(boxes: torch.Tensor, samples: int = 0) -> tuple[GridLayout | None, int]:
    """(the grid of ``boxes`` (finite, as run_nms checks them), None where no box has a side
    above 0 (no pair overlaps); the pairs the rows kernel would test from the windows of
    ``samples`` boxes at ``sample_positions``, 0 without samples). The classes' sides and
    cell counts follow ``_cpu._size_class_grids``' formulas; nothing depends on the boxes'
    order. On a GPU four kernels (and the sample's fifth) and one host read, of a few
    numbers (``_cuda_layout``); elsewhere torch (``_torch_layout``), which CI holds to a
    brute-force pair test."""
    boxes = boxes.detach().contiguous()
    return (_cuda_layout if boxes.is_cuda else _torch_layout)(boxes, min(samples, boxes.shape[0]))


def _size_classes(b: torch.Tensor, largest: float) -> torch.Tensor:
    """Each box's size class (float64 boxes): floor(log2(largest / max(size, largest /
    2^SIZE_CLASSES))), exactly as the ratio's binary exponent (the kernels' ilogb), at most
    SIZE_CLASSES - 1; 0 where every box is a point."""
    size = torch.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1])
    # a tensor divided: a Python number over a tensor is torch's reciprocal times the number
    top = torch.tensor(largest, dtype=torch.float64, device=b.device)
    ratio = torch.nan_to_num(top / torch.clamp(size, min=largest * 2.0 ** -SIZE_CLASSES), nan=1.0)
    return torch.clamp(torch.frexp(ratio).exponent - 1, max=SIZE_CLASSES - 1).to(torch.int64)


def _layout_of(stats: list[float], device) -> GridLayout | None:
    """The layout from the statistics (the extent, then per class its count, largest size,
    x1 and y1; an empty class's maxima -inf): grid_table_kernel's formulas on the host."""
    k = SIZE_CLASSES
    largest, x0, y0, x1_max, y1_max, x1_reach, y1_reach = stats[:7]
    if not largest > 0:
        return None
    members, class_size, class_x1, class_y1 = stats[7:7 + k], stats[7 + k:7 + 2 * k], stats[7 + 2 * k:7 + 3 * k], \
        stats[7 + 3 * k:]
    span = max(x1_max - x0, y1_max - y0)
    reach = max(x1_reach, y1_reach, largest)
    sides, gxs, gys, cell0 = [1.0] * k, [0] * k, [0] * k, [0] * k
    total = 0
    for c in range(k):
        cell0[c] = total
        if members[c] == 0:
            continue
        root = math.sqrt(4.0 * members[c] + 16)
        side = max(class_size[c] * (1 + 1e-6) + 1e-9 * reach, span / root, 1e-300)
        cells = int(root) + 2
        gx = min(max(int(math.floor((class_x1[c] - x0) / side)), 0), cells - 1) + 1
        gy = min(max(int(math.floor((class_y1[c] - y0) / side)), 0), cells - 1) + 1
        sides[c], gxs[c], gys[c] = side, gx, gy
        total += gx * gy
    table = torch.tensor([x0, y0, *sides, *gxs, *gys, *cell0, total], dtype=torch.float64, device=device)
    return _checked(GridLayout(x0, y0, sides, gxs, gys, cell0, total, largest, table))


def _checked(layout: GridLayout) -> GridLayout:
    if layout.total >= 2**31:
        raise ValueError(f"overlap_graph: {layout.total} cells do not fit the kernels' int32 cell numbers")
    return layout


def _torch_layout(boxes: torch.Tensor, samples: int):
    """grid_layout with torch: the statistics, the layout on the host, the sample's tests as
    window tests over the cells' counts."""
    k, device = SIZE_CLASSES, boxes.device
    b = boxes.to(torch.float64)
    x1, y1 = b[:, 0], b[:, 1]
    size = torch.maximum(b[:, 2] - x1, b[:, 3] - y1)
    largest = float(size.max())
    size_class = _size_classes(b, largest)
    member = size_class[:, None] == torch.arange(k, device=device)  # (n, classes)
    # each class's largest size, x1 and y1 (-inf where empty): a masked max over the boxes
    class_max = torch.where(member[:, :, None], torch.stack([size, x1, y1], 1)[:, None, :], -math.inf).amax(0)
    extent = torch.stack([size.max(), x1.min(), y1.min(), x1.max(), y1.max(), x1.abs().max(), y1.abs().max()])
    stats = torch.cat([extent, member.sum(0).to(torch.float64), class_max.T.reshape(-1)]).tolist()
    layout = _layout_of(stats, device)
    if layout is None or samples == 0:
        return layout, 0
    per_cell = torch.bincount(_torch_cells(boxes, None, layout), minlength=layout.total)
    return layout, _window_tests(boxes[sample_positions(boxes.shape[0], samples, device)], layout, per_cell)


def _cuda_layout(boxes: torch.Tensor, samples: int):
    """grid_layout by grid_extent_kernel, grid_classes_kernel, grid_table_kernel and
    sampled_tests_kernel (the doubles reduced as order-preserving integer keys), one host
    read of the keys, the table and the tests."""
    n, device = boxes.shape[0], boxes.device
    numbers = torch.zeros(KEYS + TABLE + 1, dtype=torch.int64, device=device)
    keys, table, tests = numbers[:KEYS], numbers[KEYS:KEYS + TABLE].view(torch.float64), numbers[KEYS + TABLE:]
    with on_torch_stream(device) as launch:
        launch(CUDA_MODULE.get("grid_extent_kernel", boxes.dtype, device), (blocks(n, ROW_THREADS),), (ROW_THREADS,),
               (boxes, n, keys))
        launch(CUDA_MODULE.get("grid_classes_kernel", boxes.dtype, device), (blocks(n, ROW_THREADS),),
               (ROW_THREADS,), (boxes, n, keys, keys[7:]))
        launch(CUDA_MODULE.get("grid_table_kernel", None, device), (1,), (1,), (keys, table))
        if samples:
            launch(CUDA_MODULE.get("sampled_tests_kernel", boxes.dtype, device),
                   (blocks(n, SAMPLE_THREADS), blocks(samples, SAMPLE_THREADS)), (SAMPLE_THREADS,),
                   (boxes, n, samples, keys, table, tests))
    raw = numbers.cpu().numpy()  # the one host read
    largest = float(_key_values(raw[:1].view(np.uint64))[0])
    if not largest > 0:
        return None, 0
    values = raw[KEYS:KEYS + TABLE].view(np.float64)
    k = SIZE_CLASSES
    ints = values[2 + k:].astype(np.int64).tolist()
    layout = GridLayout(float(values[0]), float(values[1]), values[2:2 + k].tolist(), ints[:k], ints[k:2 * k],
                        ints[2 * k:3 * k], ints[3 * k], largest, table)
    return _checked(layout), int(raw[-1])


def _key_values(raw: np.ndarray) -> np.ndarray:
    """Doubles from the kernels' order-preserving keys (uint64)."""
    positive = raw >> np.uint64(63) == 1
    return np.where(positive, raw & np.uint64(0x7FFFFFFFFFFFFFFF), ~raw).view(np.float64)


def _torch_cells(boxes: torch.Tensor, order: torch.Tensor | None, layout: GridLayout) -> torch.Tensor:
    """Each box's cell (int32), the boxes in rank order (box r is boxes[order[r]]), with torch."""
    k, table = SIZE_CLASSES, layout.table
    b = (boxes if order is None else boxes[order]).to(torch.float64)
    size_class = _size_classes(b, layout.largest)
    side_of, gx_of, gy_of, cell0_of = (table[2 + c * k:2 + (c + 1) * k][size_class] for c in range(4))
    cx = torch.minimum(torch.clamp(torch.floor((b[:, 0] - table[0]) / side_of), min=0), gx_of - 1)
    cy = torch.minimum(torch.clamp(torch.floor((b[:, 1] - table[1]) / side_of), min=0), gy_of - 1)
    return (cell0_of + cy * gx_of + cx).to(torch.int32)  # exact in double: far below 2^53


def device_grid(boxes: torch.Tensor, order: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                layout: GridLayout | None = None) -> DeviceGrid | None:
    """The boxes binned on their grid (``layout``, else ``grid_layout(boxes)``), None where
    there is none (no box has a side above 0): rank r is box ``order[r]`` (r where order is
    None), labels (int64) by the same index as boxes. Each box's cell (a kernel, or torch),
    a stable sort of the cells, each cell's start (a binary search per cell, no atomics),
    and the boxes, ranks and labels copied into cell order."""
    boxes = boxes.detach().contiguous()
    layout = layout if layout is not None else grid_layout(boxes)[0]
    if layout is None:
        return None
    device = boxes.device
    cells = (_cuda_cells if boxes.is_cuda else _torch_cells)(boxes, order, layout)
    cells_sorted, by_cell = torch.sort(cells, stable=True)
    starts = torch.searchsorted(cells_sorted, torch.arange(layout.total + 1, dtype=torch.int32, device=device),
                                out_int32=True)
    cell_boxes, cell_rank, cell_labels = (_cuda_cell_order if boxes.is_cuda else _torch_cell_order)(
        boxes, order, labels, by_cell)
    return DeviceGrid(layout, starts, cell_rank, cell_boxes, cell_labels)


def _cuda_cells(boxes: torch.Tensor, order: torch.Tensor | None, layout: GridLayout) -> torch.Tensor:
    """_torch_cells by grid_cells_kernel."""
    n, device = boxes.shape[0], boxes.device
    cells = torch.empty(n, dtype=torch.int32, device=device)
    with on_torch_stream(device) as launch:
        launch(CUDA_MODULE.get("grid_cells_kernel", boxes.dtype, device), (blocks(n, ROW_THREADS),), (ROW_THREADS,),
               (boxes, order, n, np.float64(layout.largest), layout.table, cells))
    return cells


def _torch_cell_order(boxes, order, labels, by_cell):
    """(boxes, ranks (int32), labels or None) at each position of the cell order, where
    position q holds rank ``by_cell[q]``, that is box order[by_cell[q]]."""
    source = by_cell if order is None else order[by_cell]
    return boxes[source], by_cell.to(torch.int32), None if labels is None else labels[source]


def _cuda_cell_order(boxes, order, labels, by_cell):
    """_torch_cell_order by cell_order_kernel."""
    n, device = boxes.shape[0], boxes.device
    cell_boxes = torch.empty_like(boxes)
    cell_rank = torch.empty(n, dtype=torch.int32, device=device)
    cell_labels = None if labels is None else torch.empty(n, dtype=torch.int64, device=device)
    with on_torch_stream(device) as launch:
        launch(CUDA_MODULE.get("cell_order_kernel", boxes.dtype, device), (blocks(n, ROW_THREADS),), (ROW_THREADS,),
               (boxes, order, labels, n, by_cell, cell_boxes, cell_rank, cell_labels))
    return cell_boxes, cell_rank, cell_labels


def grid_tuple(grid: DeviceGrid) -> tuple:
    """``grid`` as ``_cpu._neighbour_rows`` takes it (NumPy, on the host; box indices are ranks)."""
    layout = grid.layout
    return (layout.x0, layout.y0, np.array(layout.sides), np.array(layout.gxs, dtype=np.int64),
            np.array(layout.gys, dtype=np.int64), np.array(layout.cell0, dtype=np.int64),
            grid.starts.cpu().numpy().astype(np.int64), grid.cell_rank.cpu().numpy().astype(np.int64))


def window_tests(boxes: torch.Tensor, grid: DeviceGrid) -> int:
    """How many pairs ``graph_rows_kernel`` would test from the windows of ``boxes`` (all
    of a grid's boxes: every pair it tests, each box itself included) on ``grid``: over
    every box and class, the boxes whose corners lie in its window's cells, from a
    summed-area table of each class's cell counts; torch on the boxes' device, one host read."""
    return _window_tests(boxes, grid.layout, (grid.starts[1:] - grid.starts[:-1]).to(torch.int64))


def _window_tests(boxes: torch.Tensor, grid: GridLayout, per_cell: torch.Tensor) -> int:
    b = boxes.to(torch.float64)
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


def estimated_tests(n: int, samples: int, sampled: int) -> int:
    """The pairs all n boxes' windows would test, from ``sampled``: those ``samples`` boxes' windows test."""
    return sampled * n // samples if samples else 0


def graph_rows(launch, grid: DeviceGrid | None, n: int, threshold: float, higher_only: bool, device):
    """(indptr int64 (n + 1), indices int32, pairs): each box's same-label neighbours with
    IoU above ``threshold`` (0: every intersecting box), the higher-ranked ones only (lower
    ranks) where ``higher_only``, on ``grid`` (``device_grid``; None: no pair overlaps);
    on ``device``; ``indices`` holds at least one element (a kernel argument even without pairs), its
    first ``pairs`` the rows. Two passes (count, fill) and one host read, for the number
    of pairs."""
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
    if grid is None:
        return indptr, torch.empty(1, dtype=torch.int32, device=device), 0
    kernel = CUDA_MODULE.get("graph_rows_kernel", grid.cell_boxes.dtype, grid.starts.device)
    args = (grid.cell_boxes, grid.cell_rank, grid.cell_labels, n, np.float64(threshold), int(higher_only),
            grid.layout.table, grid.starts)
    counts = torch.zeros(n, dtype=torch.int64, device=device)  # zeroed: a recorded, unrun launch gives empty rows
    lanes = row_lanes(n)
    launch(kernel, (blocks(n * lanes, ROW_THREADS),), (ROW_THREADS,), (*args, counts, None, None, 0, None, lanes))
    torch.cumsum(counts, 0, out=indptr[1:])
    pairs = int(indptr[-1])
    indices = torch.empty(max(pairs, 1), dtype=torch.int32, device=device)
    launch(kernel, (blocks(n * lanes, ROW_THREADS),), (ROW_THREADS,), (*args, None, indptr, indices, 0, None, lanes))
    return indptr, indices, pairs


def slot_rows(launch, grid: DeviceGrid, n: int, threshold: float, slots: int = ROW_SLOTS):
    """(counts int64 (n), indices int32 (n * slots), overflow): each box's higher-ranked
    same-label neighbours above ``threshold``, row i at ``indices[i * slots]``, built in one
    pass and no host read; ``overflow`` (a ``HostCount``: pinned host memory the kernel
    writes) holds 1 once the launch has run where a row is longer than ``slots`` (then
    those rows are cut short and the caller takes ``graph_rows``), else 0."""
    device = grid.starts.device
    counts = torch.zeros(n, dtype=torch.int64, device=device)
    indices = torch.empty(n * slots, dtype=torch.int32, device=device)
    overflow = host_count(device, "graph overflow")
    overflow.value[0] = 0
    lanes = row_lanes(n)
    launch(CUDA_MODULE.get("graph_rows_kernel", grid.cell_boxes.dtype, device), (blocks(n * lanes, ROW_THREADS),),
           (ROW_THREADS,), (grid.cell_boxes, grid.cell_rank, grid.cell_labels, n, np.float64(threshold), 1,
                            grid.layout.table, grid.starts, counts, None, indices, slots, overflow.address, lanes))
    return counts, indices, overflow


def greedy_grid(n: int, device: torch.device) -> int:
    """Blocks of the cooperative rounds launch: a thread per box, at most what the GPU holds
    at once (a cooperative launch needs them all resident)."""
    resident = resident_blocks(CUDA_MODULE.get("greedy_rounds_kernel", None, device), ROUND_THREADS, device)
    if resident == 0:
        raise RuntimeError("overlap_graph: this GPU cannot hold one block of its rounds kernel")
    return max(1, min(resident, blocks(n, ROUND_THREADS)))


class GraphGreedy(NamedTuple):
    """``greedy_on_graph``'s answer: the result (None where the graph gave way to the dense
    path), the pairs the windows would test as the sample estimates them (0 where not
    estimated), and the rows and rounds as the kernels left them (device tensors, for a
    probe: ``pairs``, ``rounds``)."""

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


def _graph_inputs(boxes: torch.Tensor, labels: torch.Tensor | None, max_tests: int | None):
    """(boxes contiguous, labels int64, layout, estimated tests; or layout None where no pair
    overlaps, or the layout False where the estimate is above ``max_tests``: the caller
    gives way to its dense path)."""
    n = boxes.shape[0]
    boxes = boxes.detach().contiguous()
    labels = None if labels is None else labels.detach().to(torch.int64).contiguous()
    samples = sample_count(n) if max_tests is not None else 0
    layout, sampled = grid_layout(boxes, samples)
    tests = estimated_tests(n, samples, sampled)
    if layout is not None and max_tests is not None and tests > max_tests:
        return boxes, labels, False, tests
    return boxes, labels, layout, tests


def _order(boxes: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Input indices by descending score, ties by lower index (score_order's): on a GPU, up
    to RANK_KERNEL_MAX_N boxes whose scores have their dtype, rank_by_score's launches
    (their host work is a fraction of torch.sort's; above that size its merge costs the
    GPU more than the sort), else score_order."""
    if boxes.is_cuda and scores.dtype == boxes.dtype and boxes.shape[0] <= RANK_KERNEL_MAX_N:
        with on_torch_stream(boxes.device) as launch:
            return rank_by_score(launch, boxes, scores.detach(), None)[0]
    return score_order(scores)


def greedy_on_graph(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float,
                    labels: torch.Tensor | None = None, max_tests: int | None = None,
                    slots: int = ROW_SLOTS) -> GraphGreedy:
    """Greedy NMS on the overlap graph: the grid's layout (with the density estimate where
    ``max_tests`` is given: where the windows would test more pairs than that, no result,
    before any box is ranked), the boxes ranked by score (ties by lower index) and binned,
    the rows of higher-ranked neighbours above the threshold (``slot_rows``, or
    ``graph_rows`` where a row outgrows ``slots``; 0: always), then the rounds; input
    indices by descending score, as torchvision's."""
    n, device = boxes.shape[0], boxes.device
    if n == 0:
        return GraphGreedy(NMSResult(torch.empty(0, dtype=torch.int64, device=device)), 0)
    boxes, labels, layout, tests = _graph_inputs(boxes, labels, max_tests)
    if layout is False:
        return GraphGreedy(None, tests)
    order = _order(boxes, scores)
    if layout is None:  # points only: nothing overlaps, every box is kept
        return GraphGreedy(NMSResult(order), tests)
    grid = device_grid(boxes, order, labels, layout)
    threshold = float(iou_threshold)
    with on_torch_stream(device) as launch:
        if slots > 0:
            counts, indices, overflow = slot_rows(launch, grid, n, threshold, slots)
            state, counters = greedy_rounds(launch, n, None, counts, slots, indices)
            kept = torch.nonzero(state == 1).squeeze(1)  # waits for the GPU: the overflow word is written
            if not overflow.value[0]:
                return GraphGreedy(NMSResult(order[kept]), tests, counts, counters)
        indptr, indices, _ = graph_rows(launch, grid, n, threshold, True, device)
        state, counters = greedy_rounds(launch, n, indptr, None, 0, indices)
    return GraphGreedy(NMSResult(order[torch.nonzero(state == 1).squeeze(1)]), tests, indptr.diff(), counters,
                       slots > 0)


def greedy_rounds(launch, n: int, indptr, counts, slots: int, indices):
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
    boxes, labels, layout, _ = _graph_inputs(boxes, labels, max_tests)
    if layout is False:
        return None
    order = _order(boxes, scores)
    grid = None if layout is None else device_grid(boxes, order, labels, layout)
    with on_torch_stream(device) as launch:
        indptr, indices, _ = graph_rows(launch, grid, n, 0.0, True, device)
        cmax = torch.empty(n, dtype=torch.float64, device=device)
        decay = torch.empty(n, dtype=torch.float64, device=device)
        decay_kernel = CUDA_MODULE.get("graph_decay_kernel", boxes.dtype, device)
        args = (boxes, order, n, indptr, indices, int(kernel == "linear"), np.float64(sigma), cmax)
        launch(decay_kernel, (blocks(n, ROW_THREADS),), (ROW_THREADS,), (*args, None))
        launch(decay_kernel, (blocks(n, ROW_THREADS),), (ROW_THREADS,), (*args, decay))
    final = scores.detach()[order].to(torch.float64) * decay
    kept = (final >= score_threshold).nonzero().squeeze(1)
    return result_by_final_score(order[kept], final[kept].to(scores.dtype))
