"""Batched NMS on CUDA: the host side of batched_nms.cu (``nmsbench.batched_nms`` and
``nmsbench.batched_nms_from_head`` call :func:`run` for CUDA tensors).

A call is a memset of the per-image candidate counters (unless it reuses a scratch whose
counters the last call left zeroed, below) and two or three launches on torch's current
stream, with no host synchronization and no allocation whose size
depends on the data, so it can be captured in a CUDA graph:

1. ``decode_rows_kernel`` (YOLOv5 heads, single label: a block of rows, a warp per row
   above the objectness threshold) or ``decode_kernel`` (a thread per row and image):
   decode, score threshold, and the image's candidates appended to fixed records of
   ``capacity`` rows per image;
2. only where an image may hold at least ``WIDE_MIN_CAPACITY`` candidates, more than
   nms_kernel's block sorts in shared memory, or where ``max_output`` is at least
   ``GRAPH_MIN_OUTPUT``: ``wide_sort_kernel`` (cooperative, the whole GPU) sorts the
   images that have more candidates than that block sorts (with many detections wanted:
   than ``GRAPH_MIN_CANDIDATES``) and, in the second case, resolves them by greedy NMS
   on the overlap graph;
3. ``nms_kernel`` (a block per image): sort, greedy NMS per class, the best
   ``max_output`` in rank order, padded outputs, overflow flags.

An eager call of a batch whose decode grid fits the GPU's SMs at once (``FUSED_WAVES``: a
batch of one on the usual heads) takes one launch instead of 1 and 3: ``fused_kernel``,
whose blocks decode as 1's do and whose last block to finish an image runs 3's NMS for it.
A call captured in a CUDA graph keeps the two (a replay pays no launch's host time).

The memset and the decode are queued before the outputs are taken, so the GPU starts
while the host works; the outputs are an earlier call's of the same shape on the same
stream, written again once nothing of that result is held (``_output_rings``), or new.
An eager call without the whole-GPU pass also takes the scratch that the previous call
of its shape on its stream left (``_kept_scratch``): nms_kernel zeroes each image's
counter once it has read it, so that call needs neither an allocation nor the memset.
Outputs and scratch are torch allocations (one for the scratch). Inputs are validated by
``nmsbench.batched`` before they get here. Why the kernels are built this way:
implementations/DESIGN.md.
"""

from __future__ import annotations

import collections
import functools
import math
import sys

import torch

from nmsbench.cuda import (CompiledLaunch, CudaModule, Scratch, _current_stream, cached_plan, device_index,
                           multiprocessors, opted_in_shared_limit, resident_blocks)

# The kernels' compile-time constants (NVRTC -D): threads of the decode kernels' blocks,
# the most rows a decode_rows_kernel thread takes (its objectness loads in flight at
# once) and the class-score loads a lane has in flight for a row; threads of nms_kernel's
# one block per image, the candidates its tile path takes a tile at a time (a multiple of
# 32, at most 32 * 32 and at most NMS_THREADS), the detections it keeps in shared memory
# for the tests of later tiles (the rest wait in global memory), the most candidates an
# image ranks by counting (a thread each, O(n^2) comparisons and two barriers) rather than
# by the bitonic sort's log^2 barriers, and the most entries the class-segmented path's
# two sorts rank by counting (all the block's threads sharing the O(n^2) comparisons)
# rather than by the merge sort. FAST_MAX: the most candidates of the
# class-segmented path (a thread each, at most NMS_THREADS); SELECT_MAX: the largest class
# (a multiple of 32, at most 32 * 32) of an image that path takes without sorting the image
# (select_nms: classes grouped by a hash table; its masks sized for it), larger ones sorted.
# WIDE_CHUNK: the candidates a block of wide_sort_kernel sorts in shared memory, WIDE_SHARE
# the outputs a thread of its merge passes takes (a binary search and a short merge),
# WIDE_SIZE_CLASSES the box widths its overlap graph searches apart (factors of two), with
# WIDE_EXTENTS numbers each, WIDE_ROW_SLOTS the higher neighbours a candidate's row keeps
# (the highest-ranked; a longer row is searched again where those are all removed).
DEFINES = {"DECODE_THREADS": 256, "DECODE_ROWS_MAX": 4, "DECODE_CLASS_LOADS": 3, "NMS_THREADS": 1024, "TILE": 256,
           "KEPT_CACHE": 512, "COUNT_RANK_MAX": 512, "COUNT_SORT_MAX": 256, "SELECT_MAX": 256, "WIDE_CHUNK": 2048, "WIDE_SHARE": 4,
           "WIDE_SIZE_CLASSES": 16, "WIDE_EXTENTS": 5, "WIDE_ROW_SLOTS": 16}
DECODE_THREADS, DECODE_ROWS_MAX, NMS_THREADS, TILE, KEPT_CACHE = (
    DEFINES[k] for k in ("DECODE_THREADS", "DECODE_ROWS_MAX", "NMS_THREADS", "TILE", "KEPT_CACHE"))
FAST_MAX = NMS_THREADS
# decode_rows_kernel's grid, in rounds of resident blocks, before a thread takes more rows:
# the strided objectness reads are bound by memory bandwidth, which many short blocks use
# as well as a few long ones, while a few long ones leave a longer tail.
DECODE_WAVES = 4
# From this many candidates an image (its buffer's capacity, known before the data) a call
# adds wide_sort_kernel, which sorts the images that have more candidates than one block
# sorts in shared memory with the whole GPU: that block's chunks and merges in global
# memory take milliseconds from tens of thousands of candidates, while below this the
# extra launch would be a fixed cost on every call of the usual detector heads.
WIDE_MIN_CAPACITY = 32768
# From this many detections an image wide_sort_kernel also resolves the images of more than
# GRAPH_MIN_CANDIDATES candidates on the overlap graph: nms_kernel tests each candidate
# against every detection so far, which for thousands of detections costs milliseconds to
# seconds on one block, where the graph tests only the candidates whose boxes can meet.
GRAPH_MIN_OUTPUT = 1024
GRAPH_MIN_CANDIDATES = 1024
# fused_kernel (decode and NMS in one launch) where the decode's grid, B times its blocks an
# image, fits this many rounds of the GPU's SMs (a fused block takes an SM: nms_kernel's
# shared memory): a batch of one on the usual heads. A launch less saves its host time,
# which a small batch's eager call waits on, though the fused decode takes a little more
# GPU time; from two images of those heads the one launch was slower on every timer.
FUSED_WAVES = 1
INT32_MAX = 2**31 - 1
WIDE_WORDS = 4  # after the counts: wide_sort_kernel's grid barrier word and three round counters
CUDA_MODULE = CudaModule(
    "batched_nms.cu",
    templates={
        # data scores labels | layout cxcywh batch n classes multi_label score_threshold capacity | counts records...
        "decode_kernel": "QQQiiiiiidiQQQQQQ",
        # data | batch n classes rows_per_thread score_threshold capacity | counts records...
        "decode_rows_kernel": "QiiiidiQQQQQQ",
        # counts records... | capacity sort_capacity fast_max wide_min graph | sort buffers, state, spill |
        # classes multi agnostic iou max_output max_per_class top_k | outputs
        "nms_kernel": "QQQQQQiiiiiQQQQQiiidiiiQQQQQQQ",
        # data scores labels | layout cxcywh batch n classes multi_label rows rows_per_thread score_threshold
        # capacity | counts done records... | sort_capacity fast_max | sort buffers, spill | agnostic iou max_output
        # max_per_class top_k | outputs
        "fused_kernel": "QQQiiiiiiiidiQQQQQQQiiQQQQidiiiQQQQQQQ",
        # counts keys cands classes boxes | batch capacity wide_min graph agnostic iou top_k | sort buffers,
        # rank_of state, cell buffers, extents, rows, row lengths, barrier
        "wide_sort_kernel": "QQQQQiiiiidiQQQQQQQQQQ",
    },
    defines=DEFINES,
    # the most candidates of a class that the class-segmented path resolves lazily (a warp
    # testing each keep's row against the live candidates after it; at most 32 * 32); larger
    # classes take suppression masks, which test every pair but side by side. Read by no host
    # code: a probe may compare other values (NMSBENCH_CUDA_TUNABLES=LAZY_MAX=...).
    tunables={"LAZY_MAX": 256},
)
LAYOUTS = {"scores": 0, "yolov5": 1, "yolov8": 2}  # batched_nms.cu's LAYOUT_*
MAX_GRID_Y = 65535  # decode_kernel's images per launch row (it loops over more)
# decode_rows_block's lists, bytes a listed row (three ints and a score in the arithmetic
# type: float, or double for float64); batched_nms.cu's decode_lists_bytes
DECODE_LISTS_ROW_BYTES = (12 + 4, 12 + 8)
MIN_SORT_CAPACITY = 32
# The class-segmented path's shared region a candidate, outside the masks: the sort's two
# buffers (24 bytes), the keeps staged for the second sort (12) and the records staged by
# slot before the gather (box, score, candidate index, label: 28).
REGION_BYTES_A_CANDIDATE = 72


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


def fast_shared_bytes(fast_max: int) -> int:
    """The class-segmented path's dynamic shared memory for ``fast_max`` candidates (a power
    of two, 0: no such path): the larger of its two forms, segmented_nms (sorted) and
    select_nms (``select_shared_bytes``)."""
    return max(sorted_shared_bytes(fast_max), select_shared_bytes(fast_max))


def select_shared_bytes(fast_max: int) -> int:
    """select_nms's dynamic shared memory, carved in batched_nms_segmented.cuh's order (each
    part rounded up to 16 bytes): by position keys, boxes, areas, scores, candidate indices
    and labels; the hash table's classes, counts and run starts (2 fast_max slots); by
    segment first, size and mask offset; the keeps' keys and positions; by rank in a run
    its position, box and area; the masks (SELECT_MAX / 32 words a candidate at most).
    Float arithmetic only."""
    if not fast_max:
        return 0
    parts = (8 * fast_max, 16 * fast_max, 4 * fast_max, 4 * fast_max, 4 * fast_max, 4 * fast_max,
             16 * fast_max, 8 * fast_max, 8 * fast_max, 4 * fast_max, 4 * fast_max, 4 * fast_max, 8 * fast_max,
             4 * fast_max, 4 * fast_max, 16 * fast_max, 4 * fast_max, 4 * fast_max * (DEFINES["SELECT_MAX"] // 32))
    return sum(_round16(p) for p in parts)


def sorted_shared_bytes(fast_max: int) -> int:
    """segmented_nms's dynamic shared memory for ``fast_max`` candidates, carved in
    batched_nms_segmented.cuh's order (each part rounded up to 16 bytes): by position
    classes, boxes, areas, scores, candidate indices and labels; by segment first, end and
    mask offset; the keep bits; then one region for the masks (at most fast_max rows of
    fast_max / 32 words) or the sorts' buffers, the staged keeps and the records staged by
    slot (REGION_BYTES_A_CANDIDATE). Float arithmetic only."""
    if not fast_max:
        return 0
    region = max(fast_max * fast_max // 8, REGION_BYTES_A_CANDIDATE * fast_max)
    parts = (4 * fast_max, 16 * fast_max, 4 * fast_max, 4 * fast_max, 4 * fast_max, 4 * fast_max, 4 * fast_max,
             4 * fast_max, 4 * fast_max, 4 * (fast_max // 32), region)
    return sum(_round16(p) for p in parts)


def fast_max_for(capacity: int, dtype: torch.dtype, limit: int) -> int:
    """The most candidates an image may have for nms_kernel's class-segmented path: a power
    of two from 32 to FAST_MAX, no more than ``capacity`` needs, whose shared memory fits
    ``limit``; 0 for float64 (its score keys take the whole 64 bits) or where none fits."""
    if dtype == torch.float64:
        return 0
    size = 32
    while size < min(capacity, FAST_MAX):
        size *= 2
    while size >= 32 and fast_shared_bytes(size) > limit:
        size //= 2
    return size if size >= 32 else 0


def rows_per_thread_for(batch: int, n: int, resident: int) -> int:
    """decode_rows_kernel's rows a thread: the fewest (so the most, shortest blocks) that
    keep the grid within DECODE_WAVES rounds of the blocks the device holds at once, at
    most DECODE_ROWS_MAX."""
    rows = 1
    while rows < DECODE_ROWS_MAX and batch * -(-n // (DECODE_THREADS * rows)) > DECODE_WAVES * resident:
        rows += 1
    return rows


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
                 sort_capacity: int | None, rows_kernel: bool, fast_max: int | None, rows_per_thread: int | None,
                 wide: bool | None, graph: bool | None, fused: bool | None):
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
        self.fast_max = fast_max_for(capacity, dtype, limit)
        if fast_max is not None:
            if fast_max and (fast_max & (fast_max - 1) or not 32 <= fast_max <= self.fast_max):  # 0 for float64
                raise ValueError(f"fast_max must be 0 or a power of two in [32, {self.fast_max}], got {fast_max}")
            self.fast_max = fast_max
        shared = max(nms_shared_bytes(self.sort_capacity, dtype), fast_shared_bytes(self.fast_max))
        self.rows_per_thread = 1
        if rows_kernel:
            kernel = CUDA_MODULE.get("decode_rows_kernel", dtype, device)
            resident = resident_blocks(kernel, DECODE_THREADS, device)
            self.rows_per_thread = rows_per_thread or rows_per_thread_for(batch, n, resident)
            if not 1 <= self.rows_per_thread <= DECODE_ROWS_MAX:
                raise ValueError(f"rows_per_thread must be in [1, {DECODE_ROWS_MAX}], got {rows_per_thread}")
            decode_blocks = -(-max(n, 1) // (DECODE_THREADS * self.rows_per_thread))  # an image's
            self.decode = CompiledLaunch(kernel, (decode_blocks, min(batch, MAX_GRID_Y)), (DECODE_THREADS,),
                                         CUDA_MODULE.codes["decode_rows_kernel"], index)
        else:
            decode_blocks = -(-max(n, 1) // DECODE_THREADS)
            self.decode = CompiledLaunch(CUDA_MODULE.get("decode_kernel", dtype, device),
                                         (decode_blocks, min(batch, MAX_GRID_Y)), (DECODE_THREADS,),
                                         CUDA_MODULE.codes["decode_kernel"], index)
        self.rows_kernel = rows_kernel
        self.nms = CompiledLaunch(nms, (batch,), (NMS_THREADS,), CUDA_MODULE.codes["nms_kernel"], index, shared)
        records = batch * capacity
        merged = capacity > self.sort_capacity  # an image may need the global merge
        if graph is None:  # wide=False holds every image to its block
            graph = wide is not False and max_output >= GRAPH_MIN_OUTPUT and capacity > GRAPH_MIN_CANDIDATES
        self.graph = graph
        self.wide = self.graph or (merged and capacity >= WIDE_MIN_CAPACITY if wide is None else wide)
        if wide is False and self.graph:
            raise ValueError("graph=True needs the whole-GPU pass (wide)")
        self.fused = self._fused(fused, dtype, device, batch, decode_blocks, shared, index)
        # A graph replay pays no launch's host time, and the fused decode's GPU time is a
        # little longer: captured calls take the two launches unless fused=True was asked.
        self.fused_in_graphs = fused is True
        # the images wide_sort_kernel takes: those of more than wide_min candidates
        self.wide_min = (GRAPH_MIN_CANDIDATES if self.graph else self.sort_capacity) if self.wide else INT32_MAX
        if self.wide:
            kernel = CUDA_MODULE.get("wide_sort_kernel", dtype, device)
            self.wide_sort = CompiledLaunch(kernel, (resident_blocks(kernel, NMS_THREADS, device),), (NMS_THREADS,),
                                            CUDA_MODULE.codes["wide_sort_kernel"], index, cooperative=True)
        sorted_globally = merged or self.wide
        spilled = max_output > KEPT_CACHE  # detections past the shared cache
        self.buffers = dict(
            # the candidate counters, then wide_sort_kernel's words or fused_kernel's done counters
            counts=(batch + max(WIDE_WORDS, batch), torch.int32), keys=(records, torch.int64),
            cands=(records, torch.int32),
            classes=(records, torch.int64), boxes=(4 * records, arith), scores=(records, arith),
            sort_keys=(2 * records if sorted_globally else 0, torch.int64),
            sort_slots=(2 * records if sorted_globally else 0, torch.int32),
            rank_of=(records if self.graph else 0, torch.int32), state=(records if self.graph else 0, torch.int32),
            cell_keys=(2 * records if self.graph else 0, torch.int64),
            cell_slots=(2 * records if self.graph else 0, torch.int32),
            extents=(batch * (1 + DEFINES["WIDE_EXTENTS"] * DEFINES["WIDE_SIZE_CLASSES"]) if self.graph else 0,
                     torch.int64),
            rows=(records * DEFINES["WIDE_ROW_SLOTS"] if self.graph else 0, torch.int32),
            row_lengths=(records if self.graph else 0, torch.int32),
            spill_boxes=(4 * batch * max_output if spilled else 0, arith),
            spill_classes=(batch * max_output if spilled else 0, torch.int64),
        )
        self.merged, self.spilled = merged, spilled
        # the scratch's layout, as Scratch carves it, made once: a call allocates its bytes
        offset = 0
        self.scratch_offsets = {}
        for name, (count, item) in self.buffers.items():
            self.scratch_offsets[name] = offset
            offset += -(-count * item.itemsize // Scratch.ALIGN) * Scratch.ALIGN
        self.scratch_bytes = max(offset, 1)
        self.keeps_scratch = not self.wide and self.scratch_bytes <= KEPT_SCRATCH_BYTES
        o = self.scratch_offsets
        self.counts_offset = o["counts"]
        self.zeroed_bytes = 4 * (batch + WIDE_WORDS if self.wide else 2 * batch if self.fused else batch)
        self.record_offsets = tuple(o[name] for name in ("keys", "cands", "classes", "boxes", "scores"))
        self.nms_offsets = (o["sort_keys"] if sorted_globally else None, o["sort_slots"] if sorted_globally else None,
                            o["state"] if self.graph else None,
                            o["spill_boxes"] if spilled else None, o["spill_classes"] if spilled else None)
        graph_buffers = ("rank_of", "state", "cell_keys", "cell_slots", "extents", "rows", "row_lengths")
        self.graph_offsets = tuple(o[name] if self.graph else None for name in graph_buffers)

    def _fused(self, fused: bool | None, dtype: torch.dtype, device: torch.device, batch: int, decode_blocks: int,
               shared: int, index: int) -> bool:
        """Whether the plan takes fused_kernel (``fused``: as asked, None: where the decode's
        grid fits FUSED_WAVES rounds of the SMs), and its launch if so. Never with the
        whole-GPU pass, or past a grid row of images."""
        possible = not self.wide and batch <= MAX_GRID_Y
        if fused is None:
            fused = possible and batch * decode_blocks <= FUSED_WAVES * multiprocessors(device)
        elif fused and not possible:
            raise ValueError("fused=True needs a batch within one grid row and no whole-GPU pass")
        if not fused:
            return False
        kernel = CUDA_MODULE.get("fused_kernel", dtype, device)
        shared = max(shared, DECODE_LISTS_ROW_BYTES[dtype == torch.float64] * DECODE_THREADS * DECODE_ROWS_MAX)
        limit = opted_in_shared_limit(kernel, device)
        if shared > limit:  # its own static shared memory is a little more than nms_kernel's
            return False
        self.fused_launch = CompiledLaunch(kernel, (decode_blocks, batch), (NMS_THREADS,),
                                           CUDA_MODULE.codes["fused_kernel"], index, shared)
        return True

    def addresses(self, base: int) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The device addresses of a scratch at ``base``: the counts, the records, nms_kernel's
        buffers and the overlap graph's (0 for a buffer the plan does not use). Made once per
        scratch: a kept scratch carries them."""
        def at(offsets):
            return tuple(0 if offset is None else base + offset for offset in offsets)

        return base + self.counts_offset, at(self.record_offsets), at(self.nms_offsets), at(self.graph_offsets)


_plans: dict = {}
_runtime = None  # cupy_backends' runtime API, imported on the first call
# A call's outputs are an output set: seven tensors and their addresses. Sets are made
# OUTPUT_SETS at a time (seven allocations of [sets, ...], unbound into each set's views:
# a call's share of the allocations is a fraction of one) and kept per (plan, raw stream):
# those never returned yet, and a short ring of those returned. A later call writes a
# returned set again once nothing of it is held: no reference to its tuple or its tensors
# beyond the op's, and no other tensor or array on the memory of its chunk (each tensor's
# use count, and its chunk's storages', as when they were made). It looks at the ring's
# RING_CHECKS oldest sets, else takes a new one. A detector's loop, which holds at most
# its last result at its next call, then makes no tensors at all (making seven views was a
# large share of a batch of one's host time); a held result is never written again. A set
# is reused only on its own stream, in stream order after the kernels that read it there.
# None is taken or kept while a CUDA graph is captured (the graph's outputs belong to its
# pool).
_fresh_outputs: dict = {}
_output_rings: dict = {}
OUTPUT_SETS = 16
OUTPUT_CHUNK_BYTES = 2**20  # a held result keeps its chunk's memory
OUTPUT_RING = 4
RING_CHECKS = 2
OUTPUTS_KEPT = 64  # (plan, stream) entries held at most before the caches are emptied
OUTPUT_ALIGN = 256  # bytes; cudaMalloc's alignment, which code after the op may assume
# Scratch left by eager calls, one per (plan, raw stream), for plans without the whole-GPU
# pass (whose grid barrier and round counters the memset also zeroes) and of at most
# KEPT_SCRATCH_BYTES: nms_kernel zeroes each image's candidate counter once it has read
# it, so the next call on that stream finds its counters zeroed, after the previous call's
# kernels in stream order, and skips the scratch's allocation and the memset, host steps
# that a batch of one's eager call waits on. A call takes the scratch out of the cache
# and puts it back after its nms launch: two threads calling on one stream never share
# one, and a call that fails between the two leaves none behind. Under graph capture none
# is taken or left (the graph's scratch belongs to its pool, zeroed by its memset node).
_kept_scratch: dict = {}
KEPT_SCRATCH_BYTES = 16 * 2**20
KEPT_SCRATCH_SETS = 8  # scratch held at most before the cache is emptied


def _zero(address: int, size: int, stream: int) -> None:
    """cudaMemsetAsync on the raw ``stream`` (captured as a memset node inside a graph)."""
    global _runtime
    if _runtime is None:
        from cupy_backends.cuda.api import runtime

        _runtime = runtime
    _runtime.memsetAsync(address, 0, size, stream)


def run(data: torch.Tensor, scores: torch.Tensor | None, labels: torch.Tensor | None, *, layout: str, cxcywh: bool,
        n: int, classes: int, multi_label: bool, class_agnostic: bool, iou_threshold: float, score_threshold: float,
        max_output: int, max_per_class: int, top_k: int, capacity: int, sort_capacity: int | None = None,
        fast_max: int | None = None, rows_per_thread: int | None = None, wide: bool | None = None,
        graph: bool | None = None, fused: bool | None = None) -> tuple[torch.Tensor, ...]:
    """The padded outputs (num_detections, boxes, scores, classes, indices, overflow,
    num_candidates) for validated, contiguous CUDA inputs: ``data`` the boxes [B, N, 4] or
    the raw head, ``scores`` [B, N, classes] (layout "scores"), ``labels`` int64 [B, N] or
    None; ``n`` rows (anchors) a image; ``max_per_class`` and ``top_k`` already resolved
    to numbers (no cap: ``max_output`` and ``n * classes``). ``sort_capacity`` (tests and
    probes) sets how many candidates an image sorts in shared memory, a power of two (None:
    as many as fit, ``sort_capacity_for``); more take the merge in global memory.
    ``fast_max`` (likewise) the most candidates of the class-segmented path (0: never;
    None: ``fast_max_for``), ``rows_per_thread`` decode_rows_kernel's rows a thread (None:
    ``rows_per_thread_for``), ``wide`` whether wide_sort_kernel sorts the images beyond
    ``sort_capacity`` (None: from ``WIDE_MIN_CAPACITY``), ``graph`` whether it also
    resolves those beyond ``GRAPH_MIN_CANDIDATES`` (None: from ``GRAPH_MIN_OUTPUT``),
    ``fused`` whether one fused_kernel launch does the decode and the NMS (None: from
    ``FUSED_WAVES``)."""
    device, dtype, batch = data.device, data.dtype, data.shape[0]
    if batch == 0:
        return _output_sets(batch, max_output, dtype, device, 1)[0].outputs
    rows_kernel = layout == "yolov5" and not multi_label
    plan = cached_plan(_plans, (dtype, device_index(device), batch, n, capacity, max_output, sort_capacity,
                                rows_kernel, fast_max, rows_per_thread, wide, graph, fused), _Plan, dtype, device,
                       batch, n, capacity, max_output, sort_capacity, rows_kernel, fast_max, rows_per_thread, wide,
                       graph, fused)
    index, stream = _current_stream(device)
    capturing = torch._C._cuda_isCurrentStreamCapturing()
    keep = plan.keeps_scratch and not capturing
    # The scratch must outlive the kernels: torch's allocator is stream-ordered, so freeing
    # it when this call returns (on this stream) only lets later work on the stream reuse it.
    scratch = _kept_scratch.pop((plan, stream), None) if keep else None
    fresh = scratch is None
    if fresh:
        memory = torch.empty(plan.scratch_bytes, dtype=torch.uint8, device=device)
        scratch = memory, plan.addresses(memory.data_ptr())
    memory, (counts, records, nms_buffers, graph_buffers) = scratch
    if fresh:
        if torch._C._cuda_getDevice() != index:
            with torch.cuda.device(device):
                _zero(counts, plan.zeroed_bytes, stream)
        else:
            _zero(counts, plan.zeroed_bytes, stream)
    one_launch = plan.fused and (plan.fused_in_graphs or not capturing)
    if one_launch:
        outputs, addresses = _take_outputs(plan, stream, capturing, batch, max_output, dtype, device)
        sort_keys, sort_slots, _, spill_boxes, spill_classes = nms_buffers
        plan.fused_launch(stream, data.data_ptr(), scores.data_ptr() if scores is not None else 0,
                          labels.data_ptr() if labels is not None else 0, LAYOUTS[layout], int(cxcywh), batch, n,
                          classes, int(multi_label), int(plan.rows_kernel), plan.rows_per_thread,
                          float(score_threshold), capacity, counts, counts + 4 * batch, *records, plan.sort_capacity,
                          plan.fast_max, sort_keys, sort_slots, spill_boxes, spill_classes, int(class_agnostic),
                          float(iou_threshold), max_output, max_per_class, top_k, *addresses)
    elif plan.rows_kernel:
        plan.decode(stream, data.data_ptr(), batch, n, classes, plan.rows_per_thread, float(score_threshold), capacity,
                    counts, *records)
    else:
        scores_address = scores.data_ptr() if scores is not None else 0
        labels_address = labels.data_ptr() if labels is not None else 0
        plan.decode(stream, data.data_ptr(), scores_address, labels_address, LAYOUTS[layout], int(cxcywh), batch, n,
                    classes, int(multi_label), float(score_threshold), capacity, counts, *records)
    if plan.wide:
        plan.wide_sort(stream, counts, *records[:4], batch, capacity, plan.wide_min, int(plan.graph),
                       int(class_agnostic), float(iou_threshold), top_k, *nms_buffers[:2], *graph_buffers,
                       counts + 4 * batch)
    if not one_launch:
        outputs, addresses = _take_outputs(plan, stream, capturing, batch, max_output, dtype, device)  # while the GPU decodes
        plan.nms(stream, counts, *records, capacity, plan.sort_capacity, plan.fast_max, plan.wide_min,
                 int(plan.graph), *nms_buffers, classes, int(multi_label), int(class_agnostic), float(iou_threshold),
                 max_output, max_per_class, top_k, *addresses)
    if keep:  # its counters are zero once this call's nms_kernel has run
        if len(_kept_scratch) >= KEPT_SCRATCH_SETS:
            _kept_scratch.clear()
        _kept_scratch[plan, stream] = scratch
    del memory, scratch
    return outputs


def _take_outputs(plan: _Plan, stream: int, capturing: bool, batch: int, max_output: int, dtype: torch.dtype,
                  device: torch.device) -> tuple[tuple[torch.Tensor, ...], tuple[int, ...]]:
    """A call's outputs and their addresses: one of the RING_CHECKS oldest sets its plan and
    stream returned before where nothing of it is held any more, else one never returned
    (under graph capture always a new set, kept nowhere)."""
    if capturing:
        made = _output_sets(batch, max_output, dtype, device, 1)[0]
        return made.outputs, made.addresses
    key = plan, stream
    ring = _output_rings.get(key)
    if ring is None:
        if len(_output_rings) >= OUTPUTS_KEPT:
            _output_rings.clear()
        ring = _output_rings[key] = collections.deque()
    for _ in range(min(RING_CHECKS, len(ring))):  # oldest first; each goes back as the newest
        try:
            candidate = ring.popleft()  # out of the ring: no other thread takes it meanwhile
        except IndexError:  # another thread took the last one
            break
        unheld = candidate.unheld()
        outputs = candidate.outputs  # held from here on, for other threads too
        ring.append(candidate)
        if unheld:
            return outputs, candidate.addresses
    made = None
    fresh = _fresh_outputs.get(key)
    if fresh:
        try:
            made = fresh.pop()
        except IndexError:  # another thread took the last one
            pass
    if made is None:
        sets = _output_sets(batch, max_output, dtype, device, output_sets_for(batch, max_output, dtype))
        made = sets.pop()
        if len(_fresh_outputs) >= OUTPUTS_KEPT:
            _fresh_outputs.clear()
        _fresh_outputs[key] = sets
    outputs = made.outputs
    ring.append(made)
    while len(ring) > OUTPUT_RING:
        try:
            ring.popleft()
        except IndexError:
            break
    return outputs, made.addresses


def release() -> None:
    """Drop the scratch and output sets kept for later eager calls
    (``nmsbench.release_batched_memory``); a set already taken by a call is that call's."""
    _kept_scratch.clear()
    _fresh_outputs.clear()
    _output_rings.clear()


@functools.lru_cache(maxsize=256)
def _set_layout(batch: int, max_output: int, dtype: torch.dtype) -> tuple[tuple, ...]:
    """One output set's seven fields in output order: each field's [sets, ...] shape after
    the sets, its strides (from one set's view to the next: its own elements, rounded up
    to OUTPUT_ALIGN bytes; then contiguous), its dtype and its bytes from set to set."""
    slots = (batch, max_output)
    layout = []
    for shape, field_dtype in (((batch,), torch.int64), ((*slots, 4), dtype), (slots, dtype), (slots, torch.int64),
                               (slots, torch.int64), ((batch,), torch.bool), ((batch,), torch.int64)):
        itemsize = field_dtype.itemsize
        step = -(-math.prod(shape) * itemsize // OUTPUT_ALIGN) * OUTPUT_ALIGN  # 0 for an empty field
        strides = (step // itemsize, *(math.prod(shape[k + 1:]) for k in range(len(shape))))
        layout.append((shape, strides, field_dtype, step))
    return tuple(layout)


class _OutputSet:
    """One call's seven outputs (num_detections, boxes, scores, classes, indices, overflow,
    num_candidates), their addresses, and the use counts that say whether anything outside
    the op still holds them or their chunk's memory."""

    __slots__ = ("outputs", "addresses", "_storages", "_chunk", "_counts")

    def __init__(self, outputs: tuple, addresses: tuple, storages: tuple, chunk: list):
        self.outputs, self.addresses, self._storages = outputs, addresses, storages
        # Every set's outputs of the chunk, kept while any of its sets is: a set the op and
        # its caller let go of would free its views and lower the storages' use counts, so
        # that a view the caller holds of another set could pass for none.
        self._chunk = chunk
        self._counts = None  # set by _output_sets once only the op holds its tensors

    def _use_counts(self) -> tuple:
        """The tuple's references, each tensor's references and uses, the chunk's storages' uses."""
        outputs = self.outputs
        return (sys.getrefcount(outputs), tuple(map(sys.getrefcount, outputs)),
                tuple(map(torch.Tensor._use_count, outputs)), tuple(map(torch._C._storage_Use_Count, self._storages)))

    def unheld(self) -> bool:
        """Whether nothing outside the op holds this set's tuple, its tensors or its chunk's memory."""
        return self._use_counts() == self._counts


def output_sets_for(batch: int, max_output: int, dtype: torch.dtype) -> int:
    """How many output sets one allocation makes: OUTPUT_SETS, fewer where they would take
    more than OUTPUT_CHUNK_BYTES (at least one)."""
    per_set = sum(step for _, _, _, step in _set_layout(batch, max_output, dtype))
    return max(1, min(OUTPUT_SETS, OUTPUT_CHUNK_BYTES // max(per_set, 1)))


def _output_sets(batch: int, max_output: int, dtype: torch.dtype, device: torch.device, count: int) -> list[_OutputSet]:
    """``count`` sets of uninitialised outputs of the op's shapes and dtypes: one allocation
    a field for all of them (a custom op's outputs may not share memory), each set's
    tensors views of its own part, starting on an OUTPUT_ALIGN boundary as a fresh
    allocation would (torch.compile asserts that a custom op's outputs are 16-byte aligned)."""
    layout = _set_layout(batch, max_output, dtype)
    fields = [torch.empty_strided((count, *shape), strides, dtype=field_dtype, device=device)
              for shape, strides, field_dtype, _ in layout]
    views = [field.unbind(0) for field in fields]
    # set k's view starts k steps on (an empty field's views all have address 0, as its own)
    bases = [field.data_ptr() if step else 0 for field, (_, _, _, step) in zip(fields, layout)]
    steps = [step for _, _, _, step in layout]
    storages = tuple(field.untyped_storage()._cdata for field in fields)
    chunk = list(zip(*views))
    sets = [_OutputSet(outputs, tuple([base + k * step for base, step in zip(bases, steps)]), storages, chunk)
            for k, outputs in enumerate(chunk)]
    del fields, views
    for made in sets:  # the counts of an unheld set: no reference left but the set's own
        made._counts = made._use_counts()
    return sets
