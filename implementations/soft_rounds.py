"""soft_rounds: Soft-NMS (family ``soft``) on CUDA, our own design (soft_rounds.cu).

Soft-NMS picks one box at a time, but a pick decays only the boxes it overlaps, so boxes
far apart can be picked at once. Three steps:

- the decay graph: the pairs whose factor f can be below 1 (IoU > 0, and for the linear
  kernel IoU >= iou_threshold; same label; both above the score threshold at the start),
  found by O(N^2) pair tests spread over the GPU, kept in neighbour lists;
- the picks, in parallel rounds: each round picks every undecided box that no undecided
  neighbour outranks, and each box keeps its picked neighbours' factors in the
  definition's pick order, so every final score is the product the definition forms,
  factor for factor;
- the picks sorted by final score (ties by lower index): the definition's order.

Three paths (``choose_path``; ``path=`` forces one): "one_block" (chosen up to ``BLOCK_MAX_N``
boxes, ``LINEAR_BLOCK_MAX_N`` with the linear kernel; forced up to ``ONE_BLOCK_CAPACITY``):
``soft_rows_kernel`` lists each box's neighbours into a row of N slots, then ``soft_block_kernel`` runs the rounds and the sort in
one block, shared memory holding the boxes' state: one wait. "rounds": ``soft_pairs_kernel``
counts, a cumsum offsets and the kernel lists again (O(N + E) memory; a wait for the number
of pairs), then ``soft_rounds_kernel`` runs the rounds over the whole GPU in one cooperative
launch, and torch sorts the picks. "graph_rounds" (forced only, until measured): the same
rounds on lists from the overlap graph's grids of cells (``overlap_graph.graph_rows``), so
neither the pair search nor the memory is O(N^2).

The linear kernel's results are the definition's bit for bit; the gaussian kernel's
factors come from CUDA's ``exp`` (within 1 ulp of the C library's), so its final scores
agree to rounding and ``exact`` is False: the GPU tests check the same picks in the same
order with scores to 1e-12. Why the rounds are exact: soft_rounds.cu and DESIGN.md.
"""

from __future__ import annotations

import numpy as np
import torch

from nmsbench.boxes import NMSResult
from nmsbench.cuda import (CUDA_DTYPES, CudaModule, KernelPath, PathTable, blocks, device_index, grid_barrier_address,
                           host_count, kept_count, on_torch_stream, opted_in_shared_limit, resident_blocks)
from nmsbench.families import SOFT_PARAMS
from nmsbench.memory_guard import check_fits
from nmsbench.registry import register


# Rows per block and columns per chunk of the pair kernel; threads of the rounds kernel and
# of the one-block kernel (NVRTC -D).
DEFINES = {"PAIR_ROWS": 128, "PAIR_CHUNK": 512, "ROW_CHUNK": 64, "ROUND_THREADS": 512, "BLOCK_THREADS": 1024}
PAIR_ROWS, PAIR_CHUNK, ROUND_THREADS = DEFINES["PAIR_ROWS"], DEFINES["PAIR_CHUNK"], DEFINES["ROUND_THREADS"]
ROW_CHUNK, BLOCK_THREADS = DEFINES["ROW_CHUNK"], DEFINES["BLOCK_THREADS"]
BOXES_PER_WARP = 2  # the rounds grid: enough warps for this many boxes each, as far as the GPU holds them at once
# "one_block": the chooser takes it up to BLOCK_MAX_N boxes, LINEAR_BLOCK_MAX_N for the
# linear kernel (where it beat the rounds path: the linear kernel's sparser graph and fewer
# rounds favour the rounds path sooner); forced with path=, the kernel takes up to ONE_BLOCK_CAPACITY (its rows
# of n slots, n x n neighbours and entries at 12 bytes a slot, stay a few hundred MB, its
# int16 box indices hold n, and its shared memory is checked on the device)
BLOCK_MAX_N = 2048
LINEAR_BLOCK_MAX_N = 1024
ONE_BLOCK_CAPACITY = 4096

CUDA_MODULE = CudaModule(
    "soft_rounds.cu",
    templates={
        # boxes scores labels | n linear threshold score_threshold | slots neighbours
        "soft_pairs_kernel": "QQQiiddQQ",
        # boxes scores | n linear threshold sigma score_threshold | slots chunks neighbours | state arrays ...
        "soft_rounds_kernel": "QQiiddd" + "QiQ" + "Q" * 10,
        # boxes scores labels | n linear threshold score_threshold | degree neighbours
        "soft_rows_kernel": "QQQiiddQQ",
        # boxes scores | n linear threshold sigma score_threshold | rows, outputs
        "soft_block_kernel": "QQiiddd" + "Q" * 9,
    },
    defines=DEFINES,
)


def block_shared_bytes(n: int, dtype: torch.dtype) -> int:
    """soft_block_kernel's dynamic shared memory, as laid out in soft_rounds.cu: n boxes,
    current scores (8 bytes) and seven ints."""
    return n * ((32 if dtype == torch.float64 else 16) + 8 + 28)


# The table's questions take (n, dtype, padded, device, labels, kernel="gaussian"): the
# decay kernel sets one_block's limit for the chooser.

def _refuses_padded(n, dtype, padded, device, labels, **context):
    return "it has no padded output" if padded else None


def _refuses_one_block(n, dtype, padded, device, labels, **context):
    if padded:
        return _refuses_padded(n, dtype, padded, device, labels)
    if n > ONE_BLOCK_CAPACITY:
        return f"it takes at most {ONE_BLOCK_CAPACITY} boxes"
    if device is not None:
        kernel = CUDA_MODULE.get("soft_block_kernel", dtype, device)
        if block_shared_bytes(n, dtype) > opted_in_shared_limit(kernel, device):
            return "its shared memory does not fit one block on this GPU"
    return None


def _passes_over_one_block(n, dtype, padded, device, labels, kernel="gaussian"):
    limit = LINEAR_BLOCK_MAX_N if kernel == "linear" else BLOCK_MAX_N
    return None if n <= limit else f"above {limit} boxes ({kernel} kernel) the rounds are faster"


def _forced_only(n, dtype, padded, device, labels, **context):
    return "forced only, until measured"


# forced with path=; else choose_path's (never graph_rounds yet)
PATHS = PathTable("soft_rounds", (
    KernelPath("one_block", _refuses_one_block, _passes_over_one_block),
    KernelPath("rounds", _refuses_padded),
    KernelPath("graph_rounds", _refuses_padded, _forced_only),
))


def check_path(path: str, n: int, dtype: torch.dtype, padded: bool = False, device: torch.device | None = None,
               labels: bool = False) -> None:
    """A ValueError where ``path`` is no path or cannot take this input (the signature of
    hard_fused's, which the sanitizer run and the GPU tests call)."""
    PATHS.check(path, n, dtype, padded, device, labels)


def choose_path(n: int, dtype: torch.dtype = torch.float32, padded: bool = False, device: torch.device | None = None,
                labels: bool = False, kernel: str = "gaussian") -> str:
    """"one_block" up to BLOCK_MAX_N boxes (LINEAR_BLOCK_MAX_N for ``kernel`` "linear"), where
    its shared memory fits, else "rounds" (hard_fused's signature and the decay kernel:
    ``padded`` and ``labels`` change nothing here)."""
    return PATHS.choose(n, dtype, False, device, labels, kernel=kernel)


def rounds_grid(n: int, dtype: torch.dtype, device: torch.device) -> int:
    """Blocks of the cooperative rounds launch at ``n``: BOXES_PER_WARP boxes a warp, at
    most what the GPU holds at once (a cooperative launch needs them all resident)."""
    resident = resident_blocks(CUDA_MODULE.get("soft_rounds_kernel", dtype, device), ROUND_THREADS, device)
    if resident == 0:
        raise RuntimeError("soft_rounds: this GPU cannot hold one block of its rounds kernel")
    return min(resident, blocks(n, ROUND_THREADS // 32 * BOXES_PER_WARP))


def decay_graph(launch, boxes, scores, labels, linear: bool, iou_threshold: float, score_threshold: float):
    """(slots, neighbours): the decay graph's lists; box i's neighbours are
    neighbours[slots[i * chunks] : slots[(i + 1) * chunks]] (one host synchronization, for
    the number of pairs)."""
    n, device = boxes.shape[0], boxes.device
    chunks = blocks(n, PAIR_CHUNK)
    kernel = CUDA_MODULE.get("soft_pairs_kernel", boxes.dtype, device)
    grid = (blocks(n, PAIR_ROWS), chunks)
    args = (boxes, scores, labels, n, int(linear), np.float64(iou_threshold), np.float64(score_threshold))
    check_fits("soft_rounds", 16 * n * chunks, device, n=n,
               formula=f"N²/{PAIR_CHUNK // 16} bytes: its pair counts and slots, per box and chunk of {PAIR_CHUNK}")
    counts = torch.zeros(n * chunks, dtype=torch.int64, device=device)  # rows of dropped boxes stay 0
    launch(kernel, grid, (PAIR_ROWS,), (*args, counts, None))
    slots = torch.zeros(n * chunks + 1, dtype=torch.int64, device=device)
    torch.cumsum(counts, 0, out=slots[1:])
    pairs = int(slots[-1])
    check_fits("soft_rounds", 4 * pairs, device, n=n, formula=f"4 bytes for each of its {pairs} overlapping pairs")
    neighbours = torch.empty(max(pairs, 1), dtype=torch.int32, device=device)
    launch(kernel, grid, (PAIR_ROWS,), (*args, slots, neighbours))
    return slots, neighbours, chunks, pairs


def grid_decay_graph(launch, boxes, labels, linear: bool, iou_threshold: float):
    """decay_graph's lists from the overlap graph's grids of cells (overlap_graph.graph_rows,
    both directions), O(N + E) work where few pairs overlap: the pairs whose factor can be
    below 1 (IoU > 0; linear: IoU >= iou_threshold, asked as IoU > the double just below
    it). Boxes below the score threshold keep their rows: the rounds never read them."""
    from .overlap_graph import device_grid, graph_rows

    above = float(np.nextafter(iou_threshold, -np.inf)) if linear and iou_threshold > 0 else 0.0
    grid = device_grid(boxes, labels=labels) if boxes.shape[0] else None
    indptr, indices, pairs = graph_rows(launch, grid, boxes.shape[0], above, False, boxes.device)
    return indptr, indices, 1, pairs


def soft_rounds_state(boxes, scores, labels, *, iou_threshold, kernel, sigma, score_threshold, grid: bool = False):
    """The rounds' outcome: (current scores (float64), picked_round, rounds, pairs), on the
    decay graph of ``decay_graph`` (all pairs tested) or, with ``grid``, of ``grid_decay_graph``."""
    n, device = boxes.shape[0], boxes.device
    boxes, scores = boxes.detach().contiguous(), scores.detach().contiguous()
    labels = None if labels is None else labels.detach().to(torch.int64).contiguous()
    linear = kernel == "linear"
    with on_torch_stream(device) as launch:
        if grid:
            slots, neighbours, chunks, pairs = grid_decay_graph(launch, boxes, labels, linear, iou_threshold)
        else:
            slots, neighbours, chunks, pairs = decay_graph(launch, boxes, scores, labels, linear, iou_threshold,
                                                           score_threshold)
        current = torch.empty(n, dtype=torch.float64, device=device)
        ints = torch.empty((4, n), dtype=torch.int32, device=device)  # state, picked_round, lengths
        entry_box = torch.empty(max(pairs, 1), dtype=torch.int32, device=device)
        entry_factor = torch.empty(max(pairs, 1), dtype=torch.float64, device=device)
        counters = torch.empty(4, dtype=torch.int32, device=device)  # three round counters, the rounds taken
        index = device_index(device)
        launch(CUDA_MODULE.get("soft_rounds_kernel", boxes.dtype, device), (rounds_grid(n, boxes.dtype, device),),
               (ROUND_THREADS,),
               (boxes, scores, n, int(linear), np.float64(iou_threshold), np.float64(sigma),
                np.float64(score_threshold), slots, chunks, neighbours, current, ints[0], ints[1], ints[2], ints[3],
                entry_box, entry_factor, counters, np.uint64(grid_barrier_address(index, launch.stream)),
                counters[3:]),
               cooperative=True)
    return current, ints[1], counters[3], pairs


@register(
    name="soft_rounds", family="soft", devices=("cuda",), exact=False, requires=("cupy",), params=SOFT_PARAMS,
    dtypes=CUDA_DTYPES, host_sync=True,
    summary="CUDA: the decay graph (pair lists), then parallel rounds of picks in one cooperative launch, "
            "products in the definition's order",
    style=("#00DDDD", "hexagon-open"),
)
def soft_rounds(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold, path=None):
    """``path``: one of ``PATHS`` (forced), else ``choose_path``'s."""
    n, device = boxes.shape[0], boxes.device
    if path is not None:
        check_path(path, n, boxes.dtype, device=device if n else None)
    if n == 0:
        return NMSResult(torch.empty(0, dtype=torch.int64, device=device),
                         torch.empty(0, dtype=scores.dtype, device=device))
    params = dict(iou_threshold=iou_threshold, kernel=kernel, sigma=sigma, score_threshold=score_threshold)
    path = path or choose_path(n, boxes.dtype, device=device, kernel=kernel)
    if path == "one_block":
        keep, final = one_block(boxes, scores, labels, **params)
    else:
        current, picked_round, _, _ = soft_rounds_state(boxes, scores, labels, **params, grid=path == "graph_rounds")
        picked = torch.nonzero(picked_round >= 0).squeeze(1)  # ascending index: the stable sort's ties
        final, order = torch.sort(current[picked], descending=True, stable=True)
        keep = picked[order]
    if scores.dtype == torch.float16:  # float16 is computed in float32: round there first
        final = final.to(torch.float32)
    return NMSResult(keep, final.to(scores.dtype))


def one_block(boxes, scores, labels, *, iou_threshold, kernel, sigma, score_threshold):
    """(keep, final scores in float64): soft_rows_kernel's rows, then soft_block_kernel; one wait."""
    n, device = boxes.shape[0], boxes.device
    boxes, scores = boxes.detach().contiguous(), scores.detach().contiguous()
    labels = None if labels is None else labels.detach().to(torch.int64).contiguous()
    check_fits("soft_rounds", 12 * n * n, device, n=n, formula="12 N² bytes: its one-block path's N x N rows")
    degree = torch.zeros(n + 1, dtype=torch.int32, device=device)  # then the rounds taken
    rows = torch.empty(n * n, dtype=torch.int32, device=device)  # neighbours, entry boxes (int16 each)
    factors = torch.empty(n * n, dtype=torch.float64, device=device)
    outputs = torch.empty(2 * n + 1, dtype=torch.int64, device=device)  # keep, final scores (float64), count
    host = host_count(device)
    base, out = rows.data_ptr(), outputs.data_ptr()
    linear = int(kernel == "linear")
    with on_torch_stream(device) as launch:
        launch(CUDA_MODULE.get("soft_rows_kernel", boxes.dtype, device), (blocks(n, PAIR_ROWS), blocks(n, ROW_CHUNK)),
               (PAIR_ROWS,), (boxes, scores, labels, n, linear, np.float64(iou_threshold), np.float64(score_threshold),
                              degree, np.uint64(base)))
        launch(CUDA_MODULE.get("soft_block_kernel", boxes.dtype, device), (1,), (BLOCK_THREADS,),
               (boxes, scores, n, linear, np.float64(iou_threshold), np.float64(sigma), np.float64(score_threshold),
                degree, np.uint64(base), np.uint64(base + 2 * n * n), factors, outputs, np.uint64(out + 8 * n),
                np.uint64(out + 16 * n), np.uint64(host.address), np.uint64(degree.data_ptr() + 4 * n)),
               shared_mem=block_shared_bytes(n, boxes.dtype))
    kept = kept_count(host, device, n, "soft_rounds")
    return outputs[:kept], outputs[n:2 * n].view(torch.float64)[:kept]
