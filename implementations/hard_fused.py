"""hard_fused: exact greedy NMS (family hard), our own design for the H200.

Same indices as torchvision, index for index (ties by lower input index), any N, with
labels. Where torchvision spends its time decides the design:

- **Small N is launches and host syncs** (sort, index_select, mask kernel, gather,
  masked_select, each with host work). For N <= 160 one block of one launch does all of
  it in shared memory: rank by counting, the suppression mask a (row, word) per thread, and the
  greedy resolve in one warp whose lane w holds "removed" word w. The host waits once:
  the kernel writes the count into mapped pinned memory (``_cuda.HostCount``), so no
  copy is launched.
- **160 < N <= 1024, eager calls: one cooperative launch** (``mid_nms_kernel``, N / 32
  blocks of 32 warps): each block ranks its 32 boxes by counting over all N score keys
  in shared memory, a grid barrier, each block writes its 32 ballot-mask rows from all N
  ranked boxes in shared memory, a grid barrier, and block 0 resolves from shared memory. Three launches and two allocations
  were most of the op there on the H200 host. ``cuLaunchCooperativeKernel`` makes every
  block resident at once or refuses the launch, so the barrier cannot hang; padded
  (graph) calls take the three-kernel path below.
- The suppression mask (``tile_mask_kernel``) by 32 x 32 tiles: a warp holds 32 column
  boxes in registers (lane k box k). Each lane marks the tile's rows that may suppress
  its column (the rows broadcast from shared memory; four comparisons, ``may_overlap`` on
  ``quick_box``-es), then takes the decisive IoU test for its marked rows alone
  (``iou_above``: float products decide all but near-threshold pairs, which take the
  exact division and double compare), and a transpose by ballots gives lane k row k's
  word, skipped when the tile suppresses nothing. No barrier in the loops, each column
  box loaded once per 32 rows. Testing inside the marking loop made the whole warp walk
  the exact test whenever one lane had a pair that may overlap (3 rows in 4 at N = 32768,
  clustered); marking first took the mask there from 921 to 626 µs on the H200, 1.6x
  (clustered) to 2.1x (uniform) faster than the seed's warp-per-row ballot mask (PERFLOG).
- **Large N is the resolve**: one block with a ``__syncthreads()`` per kept box. Here a
  warp decides each 32-box word in registers, in waves: a box no undecided box would
  remove is kept, and the rows of the newly kept remove theirs (two warp ORs per wave,
  one ``redux`` instruction each from sm_80 on; waves = the longest chain, not the number
  kept); a word with few boxes alive (at most 8: clustered boxes are mostly removed
  already) is decided box by box instead, one shuffle per kept box. That warp's chain of
  dependent instructions is the resolve's time, so it is kept short. For N <= 1024 the
  whole block first copies the mask rows into shared memory (a warp reading them from
  global memory paid one memory latency per word: 33 us at N = 1024), then one warp
  resolves from there. For N > 1024 the block resolve decides ``ROUND_WORDS`` = 8 words
  (256 boxes) per round with one barrier: while warp 0 decides round r from shared
  memory, 12 other warps (none on its scheduler) copy round r + 1's mask rows into shared
  memory and OR round r - 1's kept rows into the bitmap past round r, so the deciding
  warp never waits for global memory; round r - 1's effect on round r it ORs itself from
  the staged rows. Rows of suppressed boxes are never read. (H200, the design before
  against this one in one process, right after the mask kernel: 124 -> 87 us at 8192
  clustered, 616 -> 491 us at 32768; .ci/ab_kernels.py, results/PERFLOG.md.)
- **The mask and the resolve overlap** from 1025 to ``STREAMED_MAX_N`` = 8192 boxes
  (``streamed_resolve_kernel``, one launch after the rank): block 0 runs the block
  resolve while every other SM makes mask tiles, row word after row word, counting the
  finished ones per row word; the resolving warps wait (acquire loads) until a round's
  row words are whole before they stage it. The producers never wait, so the launch
  makes progress whichever blocks are resident. H200 ``graph``, clustered: 67.9 -> 58.6
  us at 4096, 147.5 -> 128.8 at 8192. Above 8192 the mask is longer than the resolve and
  runs at one block an SM there (the resolving block's registers), so the tile mask
  kernel and the block resolve stay separate.
- **The host path**: each call shape (N, dtype, labels, padded, device) has a ``_Plan``
  made once: its path, its launches (``CompiledLaunch``: the argument struct compiled
  once) and the layout of its one allocation.
- Ranking: ``rank_by_score`` (``rank.cu``): one counting launch at small N, sorted chunks
  merged by binary searches (three launches) from 8193 boxes. torch.sort took ~200 us of host
  time per call at N = 32768 (its memsets, copies and launches), with the GPU idle behind
  it. The mask is never zero-filled (every word the resolve reads is written by the mask
  kernel).

``padded=True`` (``graph_safe``) returns keep padded to N with -1 and the count on the
device with no host synchronization, so the op can be captured in a CUDA graph.

The CPU backend (numba) is an exact greedy NMS that checks boxes against the kept ones
in blocks of rank order: for each block, both threads test the block's boxes against
every box kept before it (vectorized, no branches), then the block is resolved among
itself sequentially. Work is O(N x kept) like torchvision's loop, but SIMD and parallel.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from numba import njit, prange

from nmsbench.boxes import NMSResult, PaddedNMSResult
from nmsbench.registry import register

from ._cpu import JIT, sorted_inputs
from ._cuda import (CUDA_DTYPES, MAX_SHARED_BYTES, CompiledLaunch, CudaModule, _current_stream, _ranked_offsets, blocks,
                    cached_plan, device_index, grid_barrier_address, host_count, kept_count, opted_in_shared_limit,
                    rank_launches, rank_scratch_words, stream_counters)

SUMMARY_CPU = "numba: blocks of rank order tested against all kept boxes in parallel (SIMD), then resolved in-block"
SUMMARY_CUDA = ("CUDA: one launch for N <= 160 (one block) and for eager calls to 1024 (cooperative); else rank, "
                "a mask of 32 x 32 tiles, and a resolve from shared memory (N <= 1024) "
                "or in rounds of 256 boxes, one warp deciding while the block stages the next round and ORs the last; "
                "padded graph-safe output")

# ------------------------------------------------------------------ CPU (numba)

CPU_BLOCK = 256  # boxes per block of rank order


@njit(inline="always", **JIT)
def _overlap(ax1, ay1, ax2, ay2, a_area, bx1, by1, bx2, by2, b_area, threshold):
    """torchvision's CPU arithmetic (w, h clamped at 0; a NaN from 0/0 never exceeds)."""
    w = min(ax2, bx2) - max(ax1, bx1)
    h = min(ay2, by2) - max(ay1, by1)
    w = max(w, w - w)
    h = max(h, h - h)
    inter = w * h
    return np.float64(inter / (a_area + b_area - inter)) > threshold


@njit(parallel=True, **JIT)
def _suppressed_by_kept(x1, y1, x2, y2, area, label, start, stop, kept, kept_label, n_kept, threshold, out):
    """out[j - start] = how many of the first n_kept kept boxes suppress row j."""
    kx1, ky1, kx2, ky2, karea = kept[0], kept[1], kept[2], kept[3], kept[4]
    for j in prange(start, stop):
        hits = 0
        for t in range(n_kept):  # contiguous and branch-free: vectorized
            hits += _overlap(kx1[t], ky1[t], kx2[t], ky2[t], karea[t],
                             x1[j], y1[j], x2[j], y2[j], area[j], threshold) & (kept_label[t] == label[j])
        out[j - start] = hits


@njit(**JIT)
def _greedy_blocks(b, label, threshold, block):
    """Kept rank positions, ascending. ``kept`` holds the kept boxes' x1, y1, x2, y2 and
    area as five contiguous rows (so the test against them vectorizes), ``kept_label``
    their labels."""
    n = b.shape[0]
    x1, y1, x2, y2 = b[:, 0].copy(), b[:, 1].copy(), b[:, 2].copy(), b[:, 3].copy()
    area = (x2 - x1) * (y2 - y1)
    kept = np.empty((5, n), dtype=b.dtype)
    kept_label = np.empty(n, dtype=np.int64)
    positions = np.empty(n, dtype=np.int64)
    n_kept = 0
    hits = np.zeros(block, dtype=np.int64)
    for start in range(0, n, block):
        stop = min(n, start + block)
        _suppressed_by_kept(x1, y1, x2, y2, area, label, start, stop, kept, kept_label, n_kept, threshold, hits)
        first_in_block = n_kept
        for j in range(start, stop):
            if hits[j - start] != 0:
                continue
            alive = True
            for t in range(first_in_block, n_kept):
                if kept_label[t] == label[j] and _overlap(kept[0, t], kept[1, t], kept[2, t], kept[3, t], kept[4, t],
                                                          x1[j], y1[j], x2[j], y2[j], area[j], threshold):
                    alive = False
                    break
            if alive:
                kept[0, n_kept], kept[1, n_kept], kept[2, n_kept], kept[3, n_kept] = x1[j], y1[j], x2[j], y2[j]
                kept[4, n_kept], kept_label[n_kept] = area[j], label[j]
                positions[n_kept] = j
                n_kept += 1
    return positions[:n_kept]


@register(name="hard_fused", family="hard", devices=("cpu",), exact=True, requires=("numba",), summary=SUMMARY_CPU)
def hard_fused_cpu(boxes, scores, *, iou_threshold, labels=None):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    positions = _greedy_blocks(sorted_boxes, sorted_labels, np.float64(iou_threshold), CPU_BLOCK)
    return NMSResult(order[torch.from_numpy(positions)])


# ------------------------------------------------------------------ CUDA

CUDA_MODULE = CudaModule("hard_fused.cu", templates=("small_nms_kernel", "tile_mask_kernel", "mid_nms_kernel",
                                                     "streamed_resolve_kernel"),
                         plain=("staged_resolve_kernel", "block_resolve_kernel"))
SMALL_MAX, SMALL_THREADS, TILE_WARPS = 256, 1024, 8  # as #defined in hard_fused.cu
RESOLVE_THREADS, STAGED_THREADS, MID_THREADS, ROUND_WORDS = 512, 1024, 1024, 8  # as #defined in hard_fused.cu
# The one-block path up to here (the kernel takes up to SMALL_MAX): from 192 boxes the
# cooperative launch (eager) and the three kernels (padded) were faster on the H200
# (.ci/small_path_probe.py, clustered / uniform: eager 49.5 / 45.5 against 45.5 / 44.9 µs
# at 192, graph 18.5 / 15.2 against 13.2 / 11.0 µs; level at 160).
SMALL_PATH_MAX = 160
MID_MAX = 1024  # the one-launch cooperative path: SMALL_PATH_MAX < N <= MID_MAX (eager calls only)
MAX_WORDS = MAX_SHARED_BYTES // 4  # the block resolve's bitmap (N / 8 bytes, beside 40 KiB of staging) in shared memory


@functools.lru_cache(maxsize=256)  # on every call's path
def block_resolve_shared_bytes(words: int) -> int:
    """block_resolve_kernel's dynamic shared memory (laid out in hard_fused.cu): two
    rounds' input indices (8 bytes), staged rows (2 x ROUND_WORDS words at an odd stride)
    and kept rows (4 bytes) of 32 x ROUND_WORDS boxes each, then the bitmap (4 bytes a word)."""
    round_boxes = 32 * ROUND_WORDS
    return 2 * round_boxes * (8 + 4 * (2 * ROUND_WORDS + 1) + 4) + 4 * words


@functools.lru_cache(maxsize=256)  # on every call's path
def staged_shared_bytes(n: int) -> int:
    """staged_resolve_kernel's dynamic shared memory: the mask rows at an odd stride, then
    the input indices (8-byte aligned), as laid out in hard_fused.cu."""
    stride = ((n + 31) // 32) | 1
    return ((n * stride + 1) & ~1) * 4 + 8 * n


def staged_resolve_fits(n: int, device: torch.device) -> bool:
    """Whether the staged resolve's shared memory fits one block on ``device`` (140 KiB at
    N = 1024: above the default 48 KiB, so the kernel is opted in; a GPU with less takes
    the block resolve instead)."""
    kernel = CUDA_MODULE.get("staged_resolve_kernel", None, device)
    return staged_shared_bytes(n) <= opted_in_shared_limit(kernel, device)


@functools.lru_cache(maxsize=256)  # on every call's path
def mid_shared_bytes(n: int, dtype: torch.dtype) -> int:
    """mid_nms_kernel's dynamic shared memory: block 0's staged resolve, or the first
    phases' n score keys, ranked boxes and labels if more (as laid out in hard_fused.cu)."""
    box_bytes = 32 if dtype == torch.float64 else 16
    return max(staged_shared_bytes(n), n * (box_bytes + 16))


_mid_blocks: dict[tuple[torch.dtype, int], int] = {}  # (dtype, device index) -> blocks resident at once


def mid_grid(n: int, dtype: torch.dtype, device: torch.device) -> int:
    """Blocks for mid_nms_kernel at ``n`` (a warp per box: n / 32 blocks of 32 warps), or 0
    when the device cannot hold them all at once with MID_MAX's shared memory, which a
    cooperative launch needs (then the three-kernel path runs)."""
    index = device_index(device)
    resident = _mid_blocks.get((dtype, index))
    if resident is None:
        from cupy_backends.cuda.api import driver

        kernel = CUDA_MODULE.get("mid_nms_kernel", dtype, device)
        shared = mid_shared_bytes(MID_MAX, dtype)
        resident = 0
        if shared <= opted_in_shared_limit(kernel, device):
            per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, MID_THREADS, shared)
            resident = per_sm * torch.cuda.get_device_properties(index).multi_processor_count
        _mid_blocks[dtype, index] = resident
    needed = blocks(n, MID_THREADS // 32)
    return needed if needed <= resident else 0


# The kernels' arguments (struct codes): pointers "Q", ints "i", the IoU threshold "d".
SMALL_CODES = "QQQidQQQ"  # boxes scores labels | n threshold | keep count host_count
MID_CODES = "QQQid" + "Q" * 8  # ... | order sorted_boxes sorted_labels mask barrier | keep count host_count
MASK_CODES = "QQiidQ"  # sorted_boxes sorted_labels | n words threshold | mask
RESOLVE_CODES = "QQiiQQQ"  # mask order | n words | keep count host_count
STREAMED_CODES = "QQiidQQQQQQ"  # sorted_boxes sorted_labels | n words threshold | mask row_done order | outputs
# Above 1024 boxes (the block resolve's sizes) the mask and the resolve run in one launch
# (streamed_resolve_kernel) up to here; above, the tile mask kernel and the block resolve.
# Its mask tasks run at 16 warps an SM (the resolving block's registers allow one block an
# SM), so where the mask is long against the resolve it is slower (.ci/streamed_probe.py,
# H200, graph, clustered / uniform, streamed against not: 4096 59.9 / 103.7 against 67.8 /
# 100.2 µs, 8192 130.8 / 216.0 against 147.3 / 226.1, 32768 1,290 / 1,044 against 1,145 /
# 1,419).
STREAMED_MAX_N = 8192


class _Plan:
    """Everything a call at one (n, dtype, labels or not, padded or not, device) needs,
    prepared once (``_plan``): the path ("small", "mid" or "three": the rank, then the
    tile mask and a resolve, or from 1025 boxes the streamed resolve, which makes the mask
    too), its ``CompiledLaunch``-es and the layout of its one allocation: keep (n
    words), the count, then (not small) the n x words int32 mask, then the ranking's
    scratch (the mid kernel's order, labels and boxes, or ``rank_by_score``'s)."""

    __slots__ = ("path", "n", "words", "memory_words", "mask_at", "scratch_at", "rank", "ranked_boxes_at",
                 "ranked_labels_at", "chunk_keys_at", "group_keys_at", "launches", "streamed")

    def __init__(self, n: int, dtype: torch.dtype, labels: bool, padded: bool, device: torch.device):
        words = (n + 31) // 32
        if words > MAX_WORDS:
            raise ValueError(f"hard_fused on cuda resolves in one block with N/8 bytes of shared memory (and its "
                             f"N x N/8-byte mask in GPU memory); N = {n} is above its limit of {MAX_WORDS * 32}")
        index = device_index(device)
        small = n <= min(SMALL_PATH_MAX, SMALL_MAX)
        grid = mid_grid(n, dtype, device) if not small and not padded and n <= MID_MAX else 0
        self.path = "small" if small else "mid" if grid > 0 else "three"
        self.n, self.words = n, words
        mask_words = 0 if small else (n * words + 1) // 2
        self.mask_at, self.scratch_at = 8 * (n + 1), 8 * (n + 1 + mask_words)
        self.rank, self.streamed = None, False
        if self.path == "small":
            scratch_words = 0
            self.launches = (CompiledLaunch(CUDA_MODULE.get("small_nms_kernel", dtype, device), (1,), (SMALL_THREADS,),
                                            SMALL_CODES, index),)
        elif self.path == "mid":
            scratch_words = 2 * n + (4 * n if dtype == torch.float64 else 2 * n)  # order, labels, boxes
            self.launches = (CompiledLaunch(CUDA_MODULE.get("mid_nms_kernel", dtype, device), (grid,), (MID_THREADS,),
                                            MID_CODES, index, mid_shared_bytes(n, dtype), cooperative=True),)
        else:
            scratch_words = rank_scratch_words(n, dtype, labels)
            self.rank = rank_launches(n, dtype, None, device)
            # from base, as rank_by_score(..., into=base + scratch_at) lays them out (labels: -1 without)
            boxes_at, labels_at, chunk_at, group_at = (self.scratch_at + at for at in _ranked_offsets(n, dtype, labels))
            self.ranked_boxes_at, self.ranked_labels_at, self.chunk_keys_at, self.group_keys_at = \
                boxes_at, labels_at, chunk_at, group_at
            self.streamed = words > 32 and n <= STREAMED_MAX_N
            self.launches = self._mask_and_resolve(n, words, dtype, device, index)
        self.memory_words = n + 1 + mask_words + scratch_words

    def _mask_and_resolve(self, n: int, words: int, dtype: torch.dtype, device: torch.device, index: int) -> tuple:
        """The launches after the rank: the streamed resolve (mask and resolve in one), or
        the tile mask and the staged resolve (words <= 32) or the block resolve."""
        if words <= 32 and staged_resolve_fits(n, device):
            resolve = CompiledLaunch(CUDA_MODULE.get("staged_resolve_kernel", None, device), (1,), (STAGED_THREADS,),
                                     RESOLVE_CODES, index, staged_shared_bytes(n))
        else:
            kernel = (CUDA_MODULE.get("streamed_resolve_kernel", dtype, device) if self.streamed
                      else CUDA_MODULE.get("block_resolve_kernel", None, device))
            shared, limit = block_resolve_shared_bytes(words), opted_in_shared_limit(kernel, device)
            if shared > limit:
                raise ValueError(f"hard_fused: N = {n} needs {shared} bytes of shared memory in one block for its "
                                 f"resolve; this GPU gives {limit}")
            if self.streamed:  # a resolving block and a mask producer on every other SM (one block an SM fits)
                grid = max(2, torch.cuda.get_device_properties(index).multi_processor_count)
                return (CompiledLaunch(kernel, (grid,), (RESOLVE_THREADS,), STREAMED_CODES, index, shared),)
            resolve = CompiledLaunch(kernel, (1,), (RESOLVE_THREADS,), RESOLVE_CODES, index, shared)
        return (CompiledLaunch(CUDA_MODULE.get("tile_mask_kernel", dtype, device), (blocks(words, TILE_WARPS), words),
                               (32 * TILE_WARPS,), MASK_CODES, index), resolve)


_plans: dict[tuple, _Plan] = {}  # (n, dtype, labels, padded, device) -> plan


def _plan(n: int, dtype: torch.dtype, labels: bool, padded: bool, device: torch.device) -> _Plan:
    return cached_plan(_plans, (n, dtype, labels, padded, device), _Plan, n, dtype, labels, padded, device)


@register(
    name="hard_fused", family="hard", devices=("cuda",), exact=True, requires=("cupy",), dtypes=CUDA_DTYPES,
    host_sync=True, graph_safe=True, summary=SUMMARY_CUDA,
)
def hard_fused_cuda(boxes, scores, *, iou_threshold, labels=None, padded=False):
    n, device = boxes.shape[0], boxes.device
    if n == 0:
        out = torch.zeros(1, dtype=torch.int64, device=device)
        return PaddedNMSResult(out[:0], out[0]) if padded else NMSResult(out[:0])
    plan = _plan(n, boxes.dtype, labels is not None, padded, device)
    memory = torch.empty(plan.memory_words, dtype=torch.int64, device=device)
    base = memory.data_ptr()
    labels_at = 0
    if labels is not None:
        labels = labels.to(torch.int64).contiguous()
        labels_at = labels.data_ptr()
    boxes, scores = boxes.contiguous(), scores.contiguous()
    index, stream = _current_stream(device)
    if plan.path == "three":  # the rank launched first: the host prepares the rest while the GPU ranks
        ranked_labels = base + plan.ranked_labels_at if labels is not None else 0
        plan.rank(stream, boxes.data_ptr(), scores.data_ptr(), labels_at, base + plan.scratch_at,
                  base + plan.ranked_boxes_at, 0, ranked_labels, base + plan.chunk_keys_at, base + plan.group_keys_at)
    host = None if padded else host_count(device)
    keep, count, host_at = base, base + 8 * n, 0 if host is None else host.address
    threshold = float(iou_threshold)
    if plan.path == "small":
        plan.launches[0](stream, boxes.data_ptr(), scores.data_ptr(), labels_at, n, threshold, keep, count, host_at)
    elif plan.path == "mid":
        order = base + plan.scratch_at  # then the ranked labels, then the ranked boxes (the kernel's scratch)
        plan.launches[0](stream, boxes.data_ptr(), scores.data_ptr(), labels_at, n, threshold, order,
                         order + 16 * n, order + 8 * n, base + plan.mask_at, grid_barrier_address(index, stream),
                         keep, count, host_at)
    elif plan.streamed:
        plan.launches[0](stream, base + plan.ranked_boxes_at, ranked_labels, n, plan.words, threshold,
                         base + plan.mask_at, stream_counters(index, stream, MAX_WORDS), base + plan.scratch_at, keep,
                         count, host_at)
    else:
        mask, resolve = plan.launches
        mask(stream, base + plan.ranked_boxes_at, ranked_labels, n, plan.words, threshold, base + plan.mask_at)
        resolve(stream, base + plan.mask_at, base + plan.scratch_at, n, plan.words, keep, count, host_at)
    if padded:
        return PaddedNMSResult(memory[:n], memory[n])
    kept_keep = memory[:n]  # made while the GPU works; the wait's count only shortens it
    return NMSResult(kept_keep.resize_(kept_count(host, device, n, "hard_fused")))


def launch_tile_mask(launch, dtype, device, sorted_boxes, sorted_labels, n, threshold, mask):
    """tile_mask_kernel: the n x words suppression mask (int32 words, row-major, at address
    ``mask``) of the ranked boxes, tiles on or right of the diagonal only (probes)."""
    words = (n + 31) // 32
    launch(CUDA_MODULE.get("tile_mask_kernel", dtype, device), (blocks(words, TILE_WARPS), words),
           (32 * TILE_WARPS,), (sorted_boxes, sorted_labels, n, words, threshold, mask))
