"""Batched NMS on CUDA: the host side of batched_nms.cu (``nmsbench.batched_nms`` and
``nmsbench.batched_nms_from_head`` call :func:`run` for CUDA tensors).

A call is a memset of the per-image candidate counters and two launches on torch's
current stream, with no host synchronization and no allocation whose size depends on
the data, so it can be captured in a CUDA graph:

1. ``decode_kernel`` (a thread per row and image): decode, score threshold, and the
   image's candidates appended to fixed records of ``capacity`` rows per image;
2. ``nms_kernel`` (a block per image): sort, greedy NMS per class, the best
   ``max_output`` in rank order, padded outputs, overflow flags.

Outputs and scratch are torch allocations (one for the scratch). Inputs are validated by
``nmsbench.batched`` before they get here. Why the kernels are built this way:
implementations/DESIGN.md.
"""

from __future__ import annotations

import functools

import torch

from ._cuda import CompiledLaunch, CudaModule, Scratch, _current_stream, cached_plan, device_index, opted_in_shared_limit

# The kernels' compile-time constants (NVRTC -D): threads of decode_kernel's blocks and of
# nms_kernel's one block per image, the candidates nms_kernel takes a tile at a time
# (a multiple of 32, at most 32 * 32 and at most NMS_THREADS), the detections it
# keeps in shared memory for the tests of later tiles (the rest wait in global memory),
# and the most candidates an image ranks by counting (a thread each, O(n^2) comparisons
# and two barriers) rather than by the bitonic sort's log^2 barriers.
DEFINES = {"DECODE_THREADS": 256, "NMS_THREADS": 1024, "TILE": 256, "KEPT_CACHE": 512, "COUNT_RANK_MAX": 512}
DECODE_THREADS, NMS_THREADS, TILE, KEPT_CACHE = (DEFINES[k] for k in ("DECODE_THREADS", "NMS_THREADS", "TILE",
                                                                       "KEPT_CACHE"))
CUDA_MODULE = CudaModule(
    "batched_nms.cu",
    templates={
        # data scores labels | layout cxcywh batch n classes multi_label score_threshold capacity | counts records...
        "decode_kernel": "QQQiiiiiidiQQQQQQ",
        # counts records... | capacity sort_capacity | sort buffers, spill | classes multi agnostic iou max_output
        # max_per_class top_k | outputs
        "nms_kernel": "QQQQQQiiQQQQiiidiiiQQQQQQQ",
    },
    defines=DEFINES,
)
LAYOUTS = {"scores": 0, "yolov5": 1, "yolov8": 2}  # batched_nms.cu's LAYOUT_*
MAX_GRID_Y = 65535  # decode_kernel's images per launch row (it loops over more)
MIN_SORT_CAPACITY = 32


def _round16(size: int) -> int:
    return -(-size // 16) * 16


@functools.lru_cache(maxsize=64)
def nms_shared_bytes(sort_capacity: int, dtype: torch.dtype) -> int:
    """nms_kernel's dynamic shared memory, carved in batched_nms.cu's order (each part
    rounded up to 16 bytes): the sort's keys and slots, the tile (boxes, areas, classes,
    slots, mask, keeps, two bit words a 32 candidates) and the cached detections."""
    value = 8 if dtype == torch.float64 else 4  # the arithmetic type: float16 is computed in float32
    words = TILE // 32
    parts = (8 * sort_capacity, 4 * sort_capacity,
             4 * value * TILE, value * TILE, 8 * TILE, 4 * TILE, 4 * TILE * words, 4 * TILE, 4 * words, 4 * words,
             4 * value * KEPT_CACHE, value * KEPT_CACHE, 8 * KEPT_CACHE)
    return sum(_round16(p) for p in parts)


def sort_capacity_for(capacity: int, dtype: torch.dtype, limit: int) -> int:
    """The candidates nms_kernel sorts in shared memory: a power of two, no more than
    ``capacity`` needs, as many as ``limit`` bytes of dynamic shared memory hold; an image
    with more candidates sorts chunks of this many and merges them in global memory."""
    wanted = 1
    while wanted < capacity:
        wanted *= 2
    size = max(wanted, MIN_SORT_CAPACITY)
    while size > MIN_SORT_CAPACITY and nms_shared_bytes(size, dtype) > limit:
        size //= 2
    if nms_shared_bytes(size, dtype) > limit:
        raise RuntimeError(f"batched_nms: nms_kernel needs {nms_shared_bytes(size, dtype)} bytes of shared memory, "
                           f"the device gives a block {limit}")
    return size


class _Plan:
    """One call shape's launches (argument layouts compiled) and scratch layout."""

    def __init__(self, dtype: torch.dtype, device: torch.device, batch: int, n: int, capacity: int, max_output: int,
                 sort_capacity: int | None):
        index = device_index(device)
        arith = torch.float64 if dtype == torch.float64 else torch.float32
        nms = CUDA_MODULE.get("nms_kernel", dtype, device)
        limit = opted_in_shared_limit(nms, device)
        if sort_capacity is None:
            sort_capacity = sort_capacity_for(capacity, dtype, limit)
        elif sort_capacity < MIN_SORT_CAPACITY or sort_capacity & (sort_capacity - 1) or (
                nms_shared_bytes(sort_capacity, dtype) > limit):
            raise ValueError(f"sort_capacity must be a power of two >= {MIN_SORT_CAPACITY} whose shared memory fits "
                             f"the device, got {sort_capacity}")
        self.sort_capacity = sort_capacity
        shared = nms_shared_bytes(self.sort_capacity, dtype)
        self.decode = CompiledLaunch(CUDA_MODULE.get("decode_kernel", dtype, device),
                                     (-(-max(n, 1) // DECODE_THREADS), min(batch, MAX_GRID_Y)), (DECODE_THREADS,),
                                     CUDA_MODULE.codes["decode_kernel"], index)
        self.nms = CompiledLaunch(nms, (batch,), (NMS_THREADS,), CUDA_MODULE.codes["nms_kernel"], index, shared)
        records = batch * capacity
        merged = capacity > self.sort_capacity  # an image may need the global merge
        spilled = max_output > KEPT_CACHE  # detections past the shared cache
        self.buffers = dict(
            counts=(batch, torch.int32), keys=(records, torch.int64), cands=(records, torch.int32),
            classes=(records, torch.int64), boxes=(4 * records, arith), scores=(records, arith),
            sort_keys=(2 * records if merged else 0, torch.int64), sort_slots=(2 * records if merged else 0, torch.int32),
            spill_boxes=(4 * batch * max_output if spilled else 0, arith),
            spill_classes=(batch * max_output if spilled else 0, torch.int64),
        )
        self.merged, self.spilled = merged, spilled


_plans: dict = {}


def _zero(address: int, size: int, stream: int) -> None:
    """cudaMemsetAsync on the raw ``stream`` (captured as a memset node inside a graph)."""
    from cupy_backends.cuda.api import runtime

    runtime.memsetAsync(address, 0, size, stream)


def run(data: torch.Tensor, scores: torch.Tensor | None, labels: torch.Tensor | None, *, layout: str, cxcywh: bool,
        n: int, classes: int, multi_label: bool, class_agnostic: bool, iou_threshold: float, score_threshold: float,
        max_output: int, max_per_class: int, top_k: int, capacity: int,
        sort_capacity: int | None = None) -> tuple[torch.Tensor, ...]:
    """The padded outputs (num_detections, boxes, scores, classes, indices, overflow,
    num_candidates) for validated, contiguous CUDA inputs: ``data`` the boxes [B, N, 4] or
    the raw head, ``scores`` [B, N, classes] (layout "scores"), ``labels`` int64 [B, N] or
    None; ``n`` rows (anchors) a image; ``max_per_class`` and ``top_k`` already resolved
    to numbers (no cap: ``max_output`` and ``n * classes``). ``sort_capacity`` (tests and
    probes) sets how many candidates an image sorts in shared memory, a power of two (None:
    as many as fit, ``sort_capacity_for``); more take the merge in global memory."""
    device, dtype, batch = data.device, data.dtype, data.shape[0]
    num_detections = torch.empty(batch, dtype=torch.int64, device=device)
    boxes = torch.empty(batch, max_output, 4, dtype=dtype, device=device)
    out_scores = torch.empty(batch, max_output, dtype=dtype, device=device)
    out_classes = torch.empty(batch, max_output, dtype=torch.int64, device=device)
    indices = torch.empty(batch, max_output, dtype=torch.int64, device=device)
    overflow = torch.empty(batch, dtype=torch.bool, device=device)
    num_candidates = torch.empty(batch, dtype=torch.int64, device=device)
    outputs = (num_detections, boxes, out_scores, out_classes, indices, overflow, num_candidates)
    if batch == 0:
        return outputs
    plan = cached_plan(_plans, (dtype, device_index(device), batch, n, capacity, max_output, sort_capacity), _Plan,
                       dtype, device, batch, n, capacity, max_output, sort_capacity)
    scratch = Scratch(device, **plan.buffers)
    _, stream = _current_stream(device)
    if torch.cuda.current_device() != device_index(device):
        with torch.cuda.device(device):
            _zero(scratch.counts, 4 * batch, stream)
    else:
        _zero(scratch.counts, 4 * batch, stream)
    scores_address = scores.data_ptr() if scores is not None else 0
    labels_address = labels.data_ptr() if labels is not None else 0
    records = (scratch.keys, scratch.cands, scratch.classes, scratch.boxes, scratch.scores)
    plan.decode(stream, data.data_ptr(), scores_address, labels_address, LAYOUTS[layout], int(cxcywh), batch, n,
                classes, int(multi_label), float(score_threshold), capacity, scratch.counts, *records)
    plan.nms(stream, scratch.counts, *records, capacity, plan.sort_capacity,
             scratch.sort_keys if plan.merged else 0, scratch.sort_slots if plan.merged else 0,
             scratch.spill_boxes if plan.spilled else 0, scratch.spill_classes if plan.spilled else 0,
             classes, int(multi_label), int(class_agnostic), float(iou_threshold), max_output, max_per_class, top_k,
             *(t.data_ptr() for t in outputs))
    # The scratch must outlive the kernels: torch's allocator is stream-ordered, so freeing
    # it here (on this stream) only lets later work on the same stream reuse it.
    return outputs
