"""Matrix NMS in O(N) memory: recompute the IoUs instead of storing them.

Matrix NMS needs every pairwise IoU twice: once for each box's max IoU with its parents
(cmax) and once for the decays f(iou_ij) / f(cmax_i), which need cmax of the *parent*.
``matrix_naive`` materializes the N x N IoU matrix (and several more); ``matrix_fused``
stores half of it. Storing is the slow choice on a GPU: at N = 8192 the float32 matrix is
268 MB, written once and read back once, ~110 us of HBM traffic on an H200, while all
N^2 / 2 pairwise IoUs cost ~0.7 GFLOP, ~10 us of its FP32 throughput. So both passes
recompute the IoUs from the boxes, which stay in shared memory, and nothing N x N exists:
memory is O(N) and N = 131072 runs (the naive matrix would need 68 GB).

CPU (numba, ``prange``): ``matrix_fused``'s two passes, which are exactly this design.

CUDA (matrix_recompute.cu), four paths by N:

- N <= ``SINGLE_BLOCK_MAX_N`` (``PADDED_SINGLE_BLOCK_MAX_N`` for padded calls), and what
  fits in 48 KiB of shared memory (1024 boxes, 704 for float64): ONE launch of ONE block
  (one thread per box) ranks by counting,
  computes cmax, decays, final scores, and selects and orders the kept boxes by counting;
  it writes keep / scores padded to N and the count (into pinned host memory too, so the
  host waits once: ``HostCount``). One allocation, one launch, one synchronization. The
  block is one SM, and its threads' loops are long chains: on the H200 the launches over
  the whole GPU are faster from ~100 boxes (eager) and from 64 (in a graph).
- N <= ``COOPERATIVE_MAX_N``, eager calls, where the device holds the grid with its
  shared memory: ONE cooperative launch (every block resident at once), the same four
  phases as the single block but over the whole GPU, a warp per box in each (rank, cmax,
  decay, select; lanes split the other boxes), grid barriers between them. Every block
  copies all ranked boxes, areas and labels into its shared memory after the first
  barrier (its loops read there, not L2: 1024 boxes 91 -> 69 us `wall` on the H200), and
  each parent's cmax before the decays, so it takes 28 bytes per box for float32 without
  labels (8192 boxes) and 36 with labels (up to ~6400); float64 to ~4400. Children t and
  n - 1 - t make a pair (n - 1 parents in all), and each pair's parents are split into two
  tasks, one warp each, combined by atomic max / min: n tasks of ~n / 2 parents, dealt
  block after block, and the grid is sized so every warp has as many as the others.
  Phase 2's marks (which parents may overlap, a word a lane per 1024 parents) stay in
  the warp's slots of shared memory where they fit (``cooperative_marks``: to 6838
  float32 boxes on the H200), and phase 3 reads them back instead of testing every pair
  again (kernel at 4096 clustered: 48.0 -> 43.6 us). The grid barriers are one release
  add a block and acquire polls (50.8 -> 48.0). The rank and select phases compare one
  64-bit key (score key, then index) for float scores. At these sizes the four launches,
  their allocations and the host work around them were most of the op on the H200 host.
- In every path the passes skip the pairs that cannot overlap by four comparisons (the
  ranked boxes are stored as ``quick_box``-es, compared with bitwise ``&``: NVRTC branched
  after each ``&&``). The multi-block passes mark those pairs first and visit only the
  marked: a lane's overlapping parent visited in the marking loop made its whole warp
  walk the exact step (80 % of the steps at 8192, clustered). Float shortcuts
  (``MaxIou``, ``MinDecay``) skip the division or the double step where it provably
  changes nothing (bit-exact). See results/PERFLOG.md.
- N <= ``COUNTING_MAX_N``: rank by counting (rank_kernel), pass 1 (cmax_kernel), pass 2
  (decay_kernel), select by counting (select_kernel): four launches, no host sync but the
  final count. Pass kernels: grid (parent segment, child chunk of 128); a thread owns one
  child, parents stream through shared memory 64 at a time; only segments below a chunk's
  last child run (the triangle), with ~32 segments per chunk so every block has about the
  same work and there are enough blocks; partial maxima / minima combine by atomics on
  order-preserving bit patterns (exact, hence deterministic), and the last block of each
  chunk writes the final scores.
- larger N: ``rank_by_score``'s merge (sorted chunks merged, three launches, O(N log N);
  the same order as the counting rank) and a gather instead of the O(N^2) counting rank;
  the same passes; torch.sort of the final scores (not kept: -inf) and finalize_kernel
  instead of the counting select.

``padded=True`` (graph safe): the same launches with no host synchronization at all; the
count stays on the device (``PaddedNMSResult``).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from nmsbench.boxes import NMSResult, PaddedNMSResult, result_by_final_score
from nmsbench.families import MATRIX_PARAMS
from nmsbench.registry import register

from ._cpu import sorted_inputs
from ._cuda import (COUNT_BOXES, CUDA_DTYPES, MAX_SHARED_BYTES, RANK_WARPS, Address, CompiledLaunch, CudaModule, Scratch,
                    _current_stream, blocks, cached_plan, device_index, grid_barrier_address, host_count, kept_count,
                    on_torch_stream, opted_in_shared_limit, rank_by_score)
from .matrix_fused import decay_factors, max_iou_with_parents


def _padded(keep: torch.Tensor, scores: torch.Tensor, n: int) -> PaddedNMSResult:
    count = keep.shape[0]
    padded_keep = torch.full((n,), -1, dtype=torch.int64, device=keep.device)
    padded_scores = torch.zeros(n, dtype=scores.dtype, device=scores.device)
    padded_keep[:count], padded_scores[:count] = keep, scores
    return PaddedNMSResult(padded_keep, torch.tensor(count, dtype=torch.int64, device=keep.device), padded_scores)


@register(
    name="matrix_recompute", family="matrix", devices=("cpu",), requires=("numba",), params=MATRIX_PARAMS,
    summary="numba prange: pass 1 max IoU with parents, pass 2 recomputes IoUs for the min decay; O(N) memory",
)
def matrix_recompute_cpu(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold, padded=False):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    cmax = max_iou_with_parents(sorted_boxes, sorted_labels)
    decay = decay_factors(sorted_boxes, sorted_labels, cmax, kernel == "linear", sigma)
    final = scores.detach()[order] * torch.from_numpy(decay).to(scores.dtype)
    kept = (final >= score_threshold).nonzero().squeeze(1)
    result = result_by_final_score(order[kept], final[kept])
    return _padded(result.keep, result.scores, boxes.shape[0]) if padded else result


CUDA_MODULE = CudaModule(
    "matrix_recompute.cu",
    templates=("single_block_kernel", "rank_kernel", "gather_kernel", "cmax_kernel", "decay_kernel", "select_kernel",
               "finalize_kernel", "cooperative_kernel"),
)
CHILDREN, PTILE, SEL_WARPS, SB_MAX_THREADS, MID_MAX_THREADS = 128, 64, 8, 1024, 1024  # as #defined in matrix_recompute.cu
TARGET_SEGMENTS = 32  # parent segments per child chunk (the pass kernels' grid x)
# The single-block path up to here (a tuning choice: one SM's throughput against more
# launches; measured on the H200, results/PERFLOG.md). At most single_block_capacity(dtype).
# Eager calls: up to 96 boxes, then the cooperative launch (six same-day probes, wall,
# clustered: the single block 53-82 vs 55-84 us at 64, 70-95 vs 58-84 at 128);
# padded (graph) calls: up to 32, then the multi-block launches, which a graph replays
# without host costs (GPU time, clustered / uniform: 20.7 / 11.3 vs 16.2 / 11.5 us at 64,
# 34.5 / 22.2 vs 18.3 / 13.6 at 128, once their rank counts over 32 warps).
SINGLE_BLOCK_MAX_N = 96
PADDED_SINGLE_BLOCK_MAX_N = 32
COUNTING_MAX_N = 8192  # rank and select by counting up to here; above, the merge rank and a torch.sort select
# Eager calls above the single-block path and up to here: one cooperative launch, where
# the device holds its grid at once with its shared memory (cooperative_shared_bytes).
COOPERATIVE_MAX_N = 8192


def arith_dtype(dtype: torch.dtype) -> torch.dtype:
    """The type the kernels compute and keep final scores in (float16 -> float32)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def single_block_shared_bytes(n: int, dtype: torch.dtype) -> int:
    """single_block_kernel's dynamic shared memory for n boxes (layout in the .cu file)."""
    return n * (6 * arith_dtype(dtype).itemsize + 20)


@functools.lru_cache(maxsize=None)
def single_block_capacity(dtype: torch.dtype) -> int:
    """The most boxes one block takes: one thread each, within 48 KiB of shared memory."""
    fits = MAX_SHARED_BYTES // single_block_shared_bytes(1, dtype)
    return min(SB_MAX_THREADS, fits // 32 * 32)


def cooperative_shared_bytes(n: int, dtype: torch.dtype, labels: bool) -> int:
    """cooperative_kernel's dynamic shared memory: every block holds all n ranked boxes
    (where the 8-byte keys and the final scores of the first and last phases go), labels
    (if any), areas, the parents' cmax and float constants: 28 n bytes for float32 without
    labels (N = 8192 fits the H200's 227 KiB). Phase 2's marks come after, where they fit
    (``cooperative_marks``)."""
    a = arith_dtype(dtype).itemsize
    return n * (6 * a + 4 + (8 if labels else 0))


def cooperative_threads(n: int, dtype: torch.dtype = torch.float32) -> int:
    """cooperative_kernel's block size at n (a warp per box; one block per SM from ~4096);
    float64 blocks take at most 512 threads (its __launch_bounds__: more registers)."""
    threads = 256 if n <= 1024 else 512 if n <= 2048 else 1024
    return min(threads, MID_MAX_THREADS // 2) if dtype == torch.float64 else threads


MARK_PARENTS = 1024  # parents per mark slot: a 32-bit word a lane (matrix_recompute.cu, visit_parents)


def cooperative_mark_slots(n: int, grid: int, threads: int) -> int:
    """Mark slots a warp needs at ``n`` on ``grid`` blocks so that phase 3 never tests a
    pair again: its tasks (dealt block after block, as evenly as the grid allows) times the
    slots of one task (about n / 2 parents of up to two children, each child's share
    starting a slot of its own)."""
    tasks, warps = 2 * ((n + 1) // 2), grid * (threads // 32)
    half = -(-(n - 1) // 2)  # a task's parents, at most
    return -(-tasks // warps) * (-(-half // MARK_PARENTS) + 1)


def choose_path(n: int, dtype: torch.dtype, padded: bool = True, device: torch.device | None = None,
                labels: bool = False) -> str:
    """The CUDA path for ``n`` boxes: "single" (one block), "cooperative" (one launch over
    the GPU; eager calls on ``device`` only, where it holds the grid at once), "counting"
    or "sort" (four or more launches)."""
    return _path_and_grid(n, dtype, padded, device, labels)[0]


def _path_and_grid(n: int, dtype: torch.dtype, padded: bool, device: torch.device | None,
                   labels: bool) -> tuple[str, int]:
    """``choose_path``'s path and, for "cooperative", its grid (0 otherwise): asked once
    per call."""
    if n <= min(PADDED_SINGLE_BLOCK_MAX_N if padded else SINGLE_BLOCK_MAX_N, single_block_capacity(dtype)):
        return "single", 0
    if not padded and n <= COOPERATIVE_MAX_N and device is not None:
        grid = cooperative_grid(n, dtype, device, labels)
        if grid > 0:
            return "cooperative", grid
    return ("counting" if n <= COUNTING_MAX_N else "sort"), 0


_resident: dict[tuple[torch.dtype, int, int, int], int] = {}  # (dtype, device, threads, shared step) -> blocks at once
SHARED_STEP = 8192  # occupancy is asked once per step of shared memory (rounded up: never more blocks than fit)


def cooperative_grid(n: int, dtype: torch.dtype, device: torch.device, labels: bool = False) -> int:
    """Blocks of ``cooperative_threads(n, dtype)`` for cooperative_kernel at ``n``: a warp per box;
    where the device cannot hold that many at once with their shared memory, the fewest
    blocks that need as many rounds as the resident ones (the warps then take equally many
    boxes each: 128 blocks, 2 boxes a warp, at 8192 on 132 SMs); 0 where not even one
    fits. On every eager call's path: the device is asked once per (block size, shared
    step)."""
    threads = cooperative_threads(n, dtype)
    resident = _resident_blocks(dtype, device, threads, cooperative_shared_bytes(n, dtype, labels))
    return balanced_grid(blocks(n, threads // 32), resident)


def cooperative_marks(n: int, dtype: torch.dtype, device: torch.device, labels: bool, grid: int) -> tuple[int, int]:
    """(mark slots a warp, dynamic shared memory) of cooperative_kernel on ``grid`` blocks:
    phase 2's marks kept in shared memory for phase 3 where they fit and the device still
    holds the grid at once (float32 without labels on the H200: to 6838 boxes), else no
    slots (phase 3 tests every pair again) and ``cooperative_shared_bytes``."""
    threads, shared = cooperative_threads(n, dtype), cooperative_shared_bytes(n, dtype, labels)
    slots = cooperative_mark_slots(n, grid, threads)
    with_marks = shared + 4 * 32 * slots * (threads // 32)
    if _resident_blocks(dtype, device, threads, with_marks) >= grid:
        return slots, with_marks
    return 0, shared


def _resident_blocks(dtype: torch.dtype, device: torch.device, threads: int, shared: int) -> int:
    """How many blocks of ``threads`` with ``shared`` bytes of dynamic shared memory the
    device holds at once (0: not even one), asked once per (dtype, device, threads, shared
    memory rounded up to SHARED_STEP)."""
    index = device_index(device)
    step = -(-shared // SHARED_STEP) * SHARED_STEP
    resident = _resident.get((dtype, index, threads, step))
    if resident is None:
        from cupy_backends.cuda.api import driver

        kernel = CUDA_MODULE.get("cooperative_kernel", dtype, device)
        limit = opted_in_shared_limit(kernel, device)
        per_sm = 0
        if shared <= limit:
            per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, threads, min(step, limit))
        resident = _resident[dtype, index, threads, step] = per_sm * torch.cuda.get_device_properties(index).multi_processor_count
    return resident


def balanced_grid(needed: int, resident: int) -> int:
    """Blocks for a cooperative launch that wants ``needed`` but may have at most
    ``resident`` (0: none fits, so 0). Above that the warps stride over the boxes: as few
    blocks as take the same number of rounds as ``resident`` would, so every warp gets as
    many boxes (and pairs of children) as the others, give or take the last round."""
    if needed <= resident or resident == 0:
        return needed if resident > 0 else 0
    rounds = -(-needed // resident)
    return -(-needed // rounds)


def segment_length(n: int) -> int:
    """Parents per block of the pass kernels: a multiple of PTILE, ~TARGET_SEGMENTS per chunk."""
    return PTILE * max(1, -(-n // (PTILE * TARGET_SEGMENTS)))


def _output_layout(n: int, dtype: torch.dtype) -> tuple[int, int]:
    """(count_word, scores_start) of an op's one allocation (int64 words): keep (n words),
    the n scores (``dtype``, from byte 8 n: scores_start in ``dtype`` elements), then the
    count at word count_word (then the cooperative kernel's scratch)."""
    return n + -(-n * dtype.itemsize // 8), 8 * n // dtype.itemsize


def _result(memory: torch.Tensor, n: int, dtype: torch.dtype, count_word: int, scores_start: int, host,
            device: torch.device, padded: bool) -> NMSResult | PaddedNMSResult:
    """An op's result from its one allocation (``_output_layout``): keep and scores padded
    to n and the count's word (padded), or their first entries, as many as ``host`` (a
    ``HostCount``; None: none kept, for n = 0) reports once the GPU is done. The views
    are made before the wait, while the GPU works; the count only shortens them."""
    keep, scores = memory[:n], memory.view(dtype)[scores_start : scores_start + n]
    if padded:
        return PaddedNMSResult(keep, memory[count_word], scores)
    kept = 0 if host is None else kept_count(host, device, n, "matrix_recompute")
    return NMSResult(keep.resize_(kept), scores.resize_(kept))


class _Outputs:
    """The multi-launch paths' outputs: keep (n,) int64, scores (n,) dtype and the count
    (int64), one allocation (``_OneLaunch`` lays its own out the same way, with the
    cooperative kernel's scratch after the count). The kernels get addresses."""

    __slots__ = ("memory", "n", "dtype", "count_word", "scores_start", "keep", "scores", "count")

    def __init__(self, n: int, dtype: torch.dtype, device: torch.device):
        self.count_word, self.scores_start = _output_layout(n, dtype)
        self.memory = torch.empty(self.count_word + 1, dtype=torch.int64, device=device)
        self.n, self.dtype = n, dtype
        base = self.memory.data_ptr()
        self.keep, self.scores = Address(base), Address(base + 8 * n)
        self.count = Address(base + 8 * self.count_word)

    def result(self, host, device: torch.device, padded: bool) -> NMSResult | PaddedNMSResult:
        """``_result`` of this allocation."""
        return _result(self.memory, self.n, self.dtype, self.count_word, self.scores_start, host, device, padded)


@functools.lru_cache(maxsize=256)
def cooperative_scratch(n: int, dtype: torch.dtype, labels: bool) -> dict[str, tuple[int, int]]:
    """cooperative_kernel's scratch as {name: (byte offset, bytes)}, 8-byte aligned: order,
    the decay accumulators (64-bit ordered keys), ranked labels (if any), ranked boxes,
    areas and scores, and each rank's cmax (the kernels' arithmetic type)."""
    a = arith_dtype(dtype).itemsize
    sizes = dict(order=8 * n, acc=8 * n, slabel=8 * n if labels else 0, sbox=4 * a * n, sarea=a * n,
                 sscore=a * n, cmax=a * n)
    layout, offset = {}, 0
    for name, size in sizes.items():
        layout[name] = (offset, size)
        offset += -(-size // 8) * 8
    return layout


@functools.lru_cache(maxsize=256)
def _cooperative_plan(n: int, dtype: torch.dtype, labels: bool) -> tuple[int, tuple[int, ...], int]:
    """What every eager cooperative call at (n, dtype, labels) needs, computed once: its
    scratch's 8-byte words, the byte offsets of the kernel's seven scratch arguments in
    their order (order, sbox, sarea, slabel, sscore, acc, cmax) and its block size."""
    layout = cooperative_scratch(n, dtype, labels)
    words = sum(-(-size // 8) for _, size in layout.values())
    offsets = tuple(layout[name][0] for name in ("order", "sbox", "sarea", "slabel", "sscore", "acc", "cmax"))
    return words, offsets, cooperative_threads(n, dtype)


def labels_for_kernels(labels: torch.Tensor | None) -> tuple[torch.Tensor | None, int]:
    """(labels as the kernels read them, wide): int32 labels as they are (wide 0), any
    other integer type as int64 (wide 1); contiguous."""
    if labels is None:
        return None, 1
    if labels.dtype == torch.int32:
        return labels.contiguous(), 0
    return labels.to(torch.int64).contiguous(), 1


# The one-launch kernels' arguments (struct codes): pointers "Q", ints "i", doubles "d".
SINGLE_BLOCK_CODES = "QQQiiiddQQQQ"  # boxes scores labels | wide n linear | sigma threshold | keep scores count host
# ... | order sbox sarea slabel sscore acc cmax barrier | outputs | mark_slots
COOPERATIVE_CODES = "QQQiiidd" + "Q" * 12 + "i"


class _OneLaunch:
    """A one-launch path ("single" or "cooperative") at one (n, dtype, labels or not,
    device), prepared once: the kernel's ``CompiledLaunch``, the size of the allocation
    (``_Outputs``' layout: keep, scores, the count, then the cooperative kernel's scratch)
    and the scratch's offsets. ``run`` is a whole call; on the H200 host an eager call's
    Python before its launch was ~20 µs, most of it re-deriving all this."""

    __slots__ = ("path", "n", "dtype", "words", "count_word", "scores_start", "scratch_offsets", "mark_slots", "launch")

    def __init__(self, path: str, n: int, dtype: torch.dtype, labels: bool, device: torch.device, grid: int = 0):
        index = device_index(device)
        self.path, self.n, self.dtype = path, n, dtype
        self.count_word, self.scores_start = _output_layout(n, dtype)
        self.mark_slots = 0
        if path == "single":
            if n > single_block_capacity(dtype):
                raise ValueError(f"the single-block path takes at most {single_block_capacity(dtype)} boxes, got {n}")
            scratch_words, self.scratch_offsets = 0, ()
            self.launch = CompiledLaunch(CUDA_MODULE.get("single_block_kernel", dtype, device), (1,),
                                         (blocks(n, 32) * 32,), SINGLE_BLOCK_CODES, index,
                                         single_block_shared_bytes(n, dtype))
        elif path == "cooperative":
            if grid == 0:
                raise ValueError(f"this GPU cannot hold cooperative_kernel's grid for {n} boxes at once")
            scratch_words, offsets, threads = _cooperative_plan(n, dtype, labels)
            self.mark_slots, shared = cooperative_marks(n, dtype, device, labels, grid)
            self.scratch_offsets = tuple(8 * (self.count_word + 1) + offset for offset in offsets)
            self.launch = CompiledLaunch(CUDA_MODULE.get("cooperative_kernel", dtype, device), (grid,), (threads,),
                                         COOPERATIVE_CODES, index, shared, cooperative=True)
        else:
            raise ValueError(f"not a one-launch path: {path!r}")
        self.words = self.count_word + 1 + scratch_words

    def run(self, boxes, scores, labels, linear: bool, sigma: float, score_threshold: float, padded: bool):
        """The op on this path: keep, scores and the count, as ``matrix_recompute_cuda_path``
        returns them."""
        n, device = self.n, boxes.device
        memory = torch.empty(self.words, dtype=torch.int64, device=device)
        base = memory.data_ptr()
        keep, out_scores, count = base, base + 8 * n, base + 8 * self.count_word
        boxes, scores = boxes.contiguous(), scores.contiguous()  # kernels take pointers: grad or not
        labels, wide = labels_for_kernels(labels)
        labels_at = 0 if labels is None else labels.data_ptr()
        host = None if padded else host_count(device)
        host_at = 0 if host is None else host.address
        index, stream = _current_stream(device)
        if self.path == "single":
            self.launch(stream, boxes.data_ptr(), scores.data_ptr(), labels_at, wide, n, linear, sigma, score_threshold,
                        keep, out_scores, count, host_at)
        else:
            at = self.scratch_offsets  # from base: order, sbox, sarea, slabel, sscore, acc, cmax
            self.launch(stream, boxes.data_ptr(), scores.data_ptr(), labels_at, wide, n, linear, sigma, score_threshold,
                        base + at[0], base + at[1], base + at[2], base + at[3] if labels is not None else 0,
                        base + at[4], base + at[5], base + at[6], grid_barrier_address(index, stream), keep, out_scores,
                        count, host_at, self.mark_slots)
        return _result(memory, n, self.dtype, self.count_word, self.scores_start, host, device, padded)


# (n, dtype, labels, padded, device) -> (path, its _OneLaunch or None for the multi-launch paths)
_one_launch_plans: dict[tuple, tuple[str, _OneLaunch | None]] = {}


def _one_launch_plan(n: int, dtype: torch.dtype, labels: bool, padded: bool,
                     device: torch.device) -> tuple[str, _OneLaunch | None]:
    """``choose_path``'s path for a call with no forced path, and its cached ``_OneLaunch``
    (None where the path is a multi-launch one)."""
    return cached_plan(_one_launch_plans, (n, dtype, labels, padded, device), _path_and_plan, n, dtype, labels, padded,
                       device)


def _path_and_plan(n: int, dtype: torch.dtype, labels: bool, padded: bool,
                   device: torch.device) -> tuple[str, _OneLaunch | None]:
    path, grid = _path_and_grid(n, dtype, padded, device, labels)
    return path, (_OneLaunch(path, n, dtype, labels, device, grid) if path in ("single", "cooperative") else None)


def matrix_recompute_cuda_path(boxes, scores, labels, kernel, sigma, score_threshold, padded, path=None):
    """The CUDA backend with the path chosen by ``choose_path`` or forced (tests)."""
    n, device, dtype = boxes.shape[0], boxes.device, boxes.dtype
    linear = kernel == "linear"
    if n > 0:
        if path is None:
            path, plan = _one_launch_plan(n, dtype, labels is not None, padded, device)
        elif path in ("single", "cooperative"):  # forced (tests)
            grid = cooperative_grid(n, dtype, device, labels is not None) if path == "cooperative" else 0
            plan = _OneLaunch(path, n, dtype, labels is not None, device, grid)
        else:
            plan = None
        if plan is not None:
            return plan.run(boxes, scores, labels, linear, float(sigma), float(score_threshold), padded)
    outputs = _Outputs(n, dtype, device)
    keep, out_scores, count = outputs.keep, outputs.scores, outputs.count
    if n == 0:
        if padded:
            outputs.memory.zero_()
        return outputs.result(None, device, padded)
    boxes, scores = boxes.contiguous(), scores.contiguous()  # kernels take pointers: grad or not
    labels, wide = labels_for_kernels(labels)
    host = None if padded else host_count(device)
    host_address = None if host is None else host.address
    sigma, threshold = np.float64(sigma), np.float64(score_threshold)
    with on_torch_stream(device) as launch:
        arith = arith_dtype(dtype)
        chunks, segment = blocks(n, CHILDREN), segment_length(n)
        segments = max(1, -(-(n - 1) // segment))
        scratch = Scratch(
            device, order=(n if path == "counting" else 0, torch.int64), sbox=(4 * n, arith), sarea=(n, arith),
            slabel=(0 if labels is None else n, torch.int64), sscore=(n, arith), cmax=(n, arith),
            acc=(n, torch.int64), done=(chunks, torch.int32), final=(n, arith),
        )
        slabel = None if labels is None else scratch.slabel
        if path == "counting":
            order = scratch.order
            launch(
                CUDA_MODULE.get("rank_kernel", dtype, device), (blocks(n, COUNT_BOXES),), (32 * RANK_WARPS,),
                (boxes, scores, labels, wide, n, order, scratch.sbox, scratch.sarea, slabel, scratch.sscore,
                 scratch.cmax, scratch.acc, scratch.done, chunks, None),
            )
        else:
            order, _ = rank_by_score(launch, boxes, scores, None)  # merging from 8193 boxes: no torch.sort
            launch(
                CUDA_MODULE.get("gather_kernel", dtype, device), (blocks(n, 256),), (256,),
                (boxes, scores, labels, wide, n, order, scratch.sbox, scratch.sarea, slabel, scratch.sscore,
                 scratch.cmax, scratch.acc, scratch.done, chunks, count),
            )
        grid = (segments, chunks)
        launch(
            CUDA_MODULE.get("cmax_kernel", dtype, device), grid, (CHILDREN,),
            (scratch.sbox, scratch.sarea, slabel, n, segment, scratch.cmax),
        )
        launch(
            CUDA_MODULE.get("decay_kernel", dtype, device), grid, (CHILDREN,),
            (scratch.sbox, scratch.sarea, slabel, scratch.cmax, scratch.sscore, order, n, segment, linear, sigma,
             threshold, scratch.acc, scratch.done, scratch.final, None if path == "counting" else count),
        )
        if path == "counting":
            launch(
                CUDA_MODULE.get("select_kernel", dtype, device), (blocks(n, 32),), (32 * SEL_WARPS,),
                (scratch.final, n, keep, out_scores, count, host_address),
            )
        else:
            final_sorted, index_sorted = torch.sort(scratch.tensor("final"), descending=True, stable=True)
            launch(
                CUDA_MODULE.get("finalize_kernel", dtype, device), (blocks(n, 256),), (256,),
                (final_sorted, index_sorted, n, count, keep, out_scores, host_address),
            )
    return outputs.result(host, device, padded)


@register(
    name="matrix_recompute", family="matrix", devices=("cuda",), requires=("cupy",), params=MATRIX_PARAMS,
    dtypes=CUDA_DTYPES, host_sync=True, graph_safe=True,
    summary="CUDA: IoUs recomputed in both passes, O(N) memory; one launch for small N (one block) and for eager "
            "calls to 8192 (cooperative, the whole GPU)",
)
def matrix_recompute_cuda(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold, padded=False):
    return matrix_recompute_cuda_path(boxes, scores, labels, kernel, sigma, score_threshold, padded)
