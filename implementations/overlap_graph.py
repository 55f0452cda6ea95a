"""The overlap graph on the GPU: the pairs of boxes that overlap, in O(N + E) memory, and
greedy NMS resolved on them (overlap_graph.cu).

- ``device_grid``: the grids of cells by box size that ``_cpu.overlap_graph`` uses, built
  with torch on the boxes' own device (one host read, of a few statistics); CI holds the
  grid to the CPU's rows (``_cpu._neighbour_rows`` on it finds every overlapping pair);
- ``window_tests``: the pairs the rows kernel would test on a grid (summed-area tables of
  the cells), before any of them is: the density estimate for a dispatcher;
- ``graph_rows``: ``graph_rows_kernel`` counts each box's neighbours, a cumsum offsets the
  rows (one host read, for the number of pairs), and the kernel fills them;
- ``greedy_on_graph``: greedy NMS on the rows of higher-ranked neighbours, in rounds in
  one cooperative launch: torchvision's indices, labels included;
- ``matrix_on_graph``: Matrix NMS's decay from the rows of higher-ranked neighbours with
  IoU > 0 (``matrix_graph``'s arithmetic on the CPU), O(N + E) memory.

No implementation chooses it yet (soft_rounds' ``graph_rounds`` path takes its rows only
when forced): once the GPU tests (tests/test_overlap_graph_gpu.py) have run on a GPU,
``hard_graph`` gains a CUDA backend with the dispatcher between this path and hard_fused's
dense ones.
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

CUDA_MODULE = CudaModule(
    "overlap_graph.cu",
    templates={
        # boxes labels | n threshold higher_only | grid_doubles grid_ints starts by_cell | counts indptr indices
        "graph_rows_kernel": "QQidi" + "QQQQ" + "QQQ",
        "graph_decay_kernel": "QiQQidQQ",  # boxes n | indptr indices | linear sigma | cmax decay
    },
    plain={"greedy_rounds_kernel": "iQQQQQQ"},  # n | indptr indices | state counters barrier rounds
    defines=DEFINES,
)


class DeviceGrid(NamedTuple):
    """``_cpu._size_class_grids``' grid: the origin, each class's cell side, cells per row
    and rows (0: an empty class) and first cell, and the boxes listed cell after cell
    (``by_cell``, from ``starts``); tensors on the boxes' device."""

    x0: float
    y0: float
    sides: list[float]
    gxs: list[int]
    gys: list[int]
    cell0: list[int]
    starts: torch.Tensor
    by_cell: torch.Tensor


def device_grid(boxes: torch.Tensor) -> DeviceGrid | None:
    """The grid of ``boxes`` (finite, as run_nms checks them), on their device; None where
    no box has a side above 0 (no pair overlaps). The classes' sides and cell counts follow
    ``_cpu._size_class_grids``' formulas; a class's corners are binned in double as the
    kernel's windows are computed, and clamped into the grid (a window clamps the same way,
    so a clamped corner is still found)."""
    b = boxes.to(torch.float64)
    x1, y1 = b[:, 0], b[:, 1]
    size = torch.maximum(b[:, 2] - x1, b[:, 3] - y1)
    largest = size.max()
    ratio = torch.nan_to_num(largest / torch.maximum(size, largest * 2.0 ** -SIZE_CLASSES), nan=1.0)  # points only: 0/0
    size_class = torch.clamp(torch.floor(torch.log2(ratio)), max=SIZE_CLASSES - 1).to(torch.int64)

    def class_max(values):
        out = torch.full((SIZE_CLASSES,), -math.inf, dtype=torch.float64, device=boxes.device)
        return out.scatter_reduce(0, size_class, values, "amax")

    counts = torch.bincount(size_class, minlength=SIZE_CLASSES).to(torch.float64)
    stats = torch.cat([torch.stack([largest, x1.min(), y1.min(), x1.max(), y1.max(), x1.abs().max(), y1.abs().max()]),
                       counts, class_max(size), class_max(x1), class_max(y1)]).tolist()  # the one host read
    largest_f, x0, y0, x1_max, y1_max, x1_reach, y1_reach = stats[:7]
    if not largest_f > 0:
        return None
    k = SIZE_CLASSES
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
    device = boxes.device
    side_of = torch.tensor(sides, dtype=torch.float64, device=device)[size_class]
    gx_of = torch.tensor(gxs, dtype=torch.float64, device=device)[size_class]
    gy_of = torch.tensor(gys, dtype=torch.float64, device=device)[size_class]
    cx = torch.minimum(torch.clamp(torch.floor((x1 - x0) / side_of), min=0), gx_of - 1)
    cy = torch.minimum(torch.clamp(torch.floor((y1 - y0) / side_of), min=0), gy_of - 1)
    cell_of = torch.tensor(cell0, dtype=torch.int64, device=device)[size_class] + (cy * gx_of + cx).to(torch.int64)
    by_cell = torch.sort(cell_of, stable=True).indices
    starts = torch.zeros(total + 1, dtype=torch.int64, device=device)
    torch.cumsum(torch.bincount(cell_of, minlength=total), 0, out=starts[1:])
    return DeviceGrid(x0, y0, sides, gxs, gys, cell0, starts, by_cell)


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


def graph_rows(launch, boxes: torch.Tensor, labels: torch.Tensor | None, threshold: float, higher_only: bool):
    """(indptr int64 (n + 1), indices int32, pairs): each box's same-label neighbours with
    IoU above ``threshold`` (0: every intersecting box), the higher-ranked ones only (lower
    indices: ``boxes`` are in rank order) where ``higher_only``; ``indices`` holds at least
    one element (a kernel argument even without pairs), its first ``pairs`` the rows. One
    host read, for the number of pairs."""
    n, device = boxes.shape[0], boxes.device
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
    grid = device_grid(boxes) if n else None
    if grid is None:
        return indptr, torch.empty(1, dtype=torch.int32, device=device), 0
    doubles = torch.tensor([grid.x0, grid.y0, *grid.sides], dtype=torch.float64, device=device)
    ints = torch.tensor([*grid.gxs, *grid.gys, *grid.cell0], dtype=torch.int64, device=device)
    kernel = CUDA_MODULE.get("graph_rows_kernel", boxes.dtype, device)
    args = (boxes, labels, n, np.float64(threshold), int(higher_only), doubles, ints, grid.starts, grid.by_cell)
    counts = torch.zeros(n, dtype=torch.int64, device=device)  # zeroed: a recorded, unrun launch gives empty rows
    launch(kernel, (blocks(n, ROW_THREADS),), (ROW_THREADS,), (*args, counts, None, None))
    torch.cumsum(counts, 0, out=indptr[1:])
    pairs = int(indptr[-1])
    indices = torch.empty(max(pairs, 1), dtype=torch.int32, device=device)
    launch(kernel, (blocks(n, ROW_THREADS),), (ROW_THREADS,), (*args, None, indptr, indices))
    return indptr, indices, pairs


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
    ranked_labels = None if labels is None else labels.detach().to(torch.int64)[order].contiguous()
    return order, boxes.detach()[order].contiguous(), ranked_labels


def greedy_on_graph(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float,
                    labels: torch.Tensor | None = None) -> tuple[NMSResult, int, int]:
    """(greedy NMS's result, the pairs above the threshold, the rounds taken): the boxes
    ranked by score (ties by lower index), the rows of higher-ranked neighbours, then the
    rounds. Input indices by descending score, as torchvision's."""
    n, device = boxes.shape[0], boxes.device
    if n == 0:
        return NMSResult(torch.empty(0, dtype=torch.int64, device=device)), 0, 0
    order, ranked, ranked_labels = _ranked(boxes, scores, labels)
    with on_torch_stream(device) as launch:
        indptr, indices, pairs = graph_rows(launch, ranked, ranked_labels, float(iou_threshold), higher_only=True)
        state = torch.empty(n, dtype=torch.int32, device=device)
        counters = torch.empty(4, dtype=torch.int32, device=device)  # three round counters, the rounds taken
        launch(CUDA_MODULE.get("greedy_rounds_kernel", None, device), (greedy_grid(n, device),), (ROUND_THREADS,),
               (n, indptr, indices, state, counters,
                np.uint64(grid_barrier_address(device_index(device), launch.stream)), counters[3:]),
               cooperative=True)
    keep = order[torch.nonzero(state == 1).squeeze(1)]
    return NMSResult(keep), pairs, int(counters[3])


def matrix_on_graph(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor | None, *, kernel: str,
                    sigma: float, score_threshold: float) -> NMSResult:
    """Matrix NMS (family ``matrix``) from the overlap graph: cmax and the decay of every box
    from its higher-ranked overlapping neighbours, final scores in float64 (kept where
    >= score_threshold, as the definition decides), ordered by the scores returned."""
    n, device = boxes.shape[0], boxes.device
    if n == 0:
        return NMSResult(torch.empty(0, dtype=torch.int64, device=device), torch.empty(0, dtype=scores.dtype,
                                                                                        device=device))
    order, ranked, ranked_labels = _ranked(boxes, scores, labels)
    with on_torch_stream(device) as launch:
        indptr, indices, _ = graph_rows(launch, ranked, ranked_labels, 0.0, higher_only=True)
        cmax = torch.empty(n, dtype=torch.float64, device=device)
        decay = torch.empty(n, dtype=torch.float64, device=device)
        decay_kernel = CUDA_MODULE.get("graph_decay_kernel", boxes.dtype, device)
        args = (ranked, n, indptr, indices, int(kernel == "linear"), np.float64(sigma), cmax)
        launch(decay_kernel, (blocks(n, ROW_THREADS),), (ROW_THREADS,), (*args, None))
        launch(decay_kernel, (blocks(n, ROW_THREADS),), (ROW_THREADS,), (*args, decay))
    final = scores.detach()[order].to(torch.float64) * decay
    kept = (final >= score_threshold).nonzero().squeeze(1)
    return result_by_final_score(order[kept], final[kept].to(scores.dtype))
