"""matrix_recompute's CUDA backend (host side): one path chooser, one table of paths.

Matrix NMS in matrix_recompute.cu with every IoU recomputed, never stored (O(N) memory),
by one of four paths (``PATHS``), named for what runs:

- "one_block": one launch of one block (a thread per box) ranks by counting, computes
  cmax, the decays and final scores, and selects and orders the kept boxes;
- "cooperative": one cooperative launch, the same four phases over the whole GPU, a warp
  per box, grid barriers between them (where the device holds the grid at once);
- "counting_passes": rank by counting, pass 1 (cmax), pass 2 (decay), select by
  counting: four launches;
- "merge_sort_passes": rank_by_score's merge rank and a gather, the same passes, then
  torch.sort of the final scores and a finalize launch.

``choose_path`` picks one from N, padded or not, labels and the device; ``path=`` forces
one (a ValueError names the paths that take the input). The kernels' constants are
``DEFINES``, passed to NVRTC. ``padded=True`` (graph safe): no host synchronization at
all, the count stays on the device. Why the paths and their limits are what they are:
implementations/DESIGN.md; their measurements: results/PERFLOG.md.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from nmsbench.boxes import NMSResult, PaddedNMSResult
from nmsbench.cuda import (COUNT_BOXES, CUDA_DTYPES, MAX_SHARED_BYTES, RANK_WARPS, Address, CompiledLaunch, CudaModule,
                           KernelPath, PathTable, Scratch, _current_stream, blocks, cached_plan, device_index, grid_barrier_address,
                           host_count, input_verdict, kept_count, on_torch_stream, opted_in_shared_limit,
                           rank_by_score)
from nmsbench.families import MATRIX_PARAMS
from nmsbench.inputs import raise_if_bad_input
from nmsbench.registry import register

# The kernels' compile-time constants (NVRTC -D): children per block of the pass kernels
# (one a thread), parents per shared-memory tile, warps of select_kernel, and the most
# threads of the one-block and the cooperative kernels.
DEFINES = {"CHILDREN": 128, "PTILE": 64, "SEL_WARPS": 8, "SB_MAX_THREADS": 1024, "MID_MAX_THREADS": 1024}
CHILDREN, PTILE, SEL_WARPS = DEFINES["CHILDREN"], DEFINES["PTILE"], DEFINES["SEL_WARPS"]
SB_MAX_THREADS, MID_MAX_THREADS = DEFINES["SB_MAX_THREADS"], DEFINES["MID_MAX_THREADS"]

# Argument layouts (struct codes): pointers "Q", ints "i", doubles "d".
# rank_kernel's and gather_kernel's: boxes scores labels | wide n | order sbox sarea slabel
# sscore cmax acc done | chunks | count
_RANKED = "QQQii" + "Q" * 8 + "iQ"
CUDA_MODULE = CudaModule(
    "matrix_recompute/matrix_recompute.cu",
    templates={
        "single_block_kernel": "QQQiiiddQQQQQ",  # boxes scores labels | wide n linear | sigma threshold | outputs host verdict
        "rank_kernel": _RANKED + "Q",  # ... | verdict
        "gather_kernel": _RANKED,
        "cmax_kernel": "QQQiiQ",  # sbox sarea slabel | n segment | cmax
        "decay_kernel": "Q" * 6 + "iiidd" + "Q" * 4,  # sbox sarea slabel cmax sscore order | n segment linear | sigma
        "select_kernel": "QiQQQQ",  # final | n | keep scores count host
        "finalize_kernel": "QQiQQQQ",  # sorted_final sorted_index | n | count keep scores host
        # ... | order sbox sarea slabel sscore acc cmax barrier | outputs host | mark_slots | verdict
        "cooperative_kernel": "QQQiiidd" + "Q" * 12 + "iQ",
    },
    defines=DEFINES,
)
TARGET_SEGMENTS = 32  # parent segments per child chunk (the pass kernels' grid x)
# The default choice's limits (tuning; measured in results/PERFLOG.md): "one_block" up to
# ONE_BLOCK_MAX_N boxes for eager calls and PADDED_ONE_BLOCK_MAX_N for padded ones (and
# at most one_block_capacity(dtype)); "cooperative" for eager calls to COOPERATIVE_MAX_N;
# "counting_passes" to COUNTING_MAX_N; above, "merge_sort_passes".
ONE_BLOCK_MAX_N = 96
PADDED_ONE_BLOCK_MAX_N = 32
COOPERATIVE_MAX_N = 8192
COUNTING_MAX_N = 8192


def arith_dtype(dtype: torch.dtype) -> torch.dtype:
    """The type the kernels compute and keep final scores in (float16 -> float32)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def one_block_shared_bytes(n: int, dtype: torch.dtype) -> int:
    """single_block_kernel's dynamic shared memory for n boxes (layout in the .cu file)."""
    return n * (6 * arith_dtype(dtype).itemsize + 20)


@functools.lru_cache(maxsize=None)
def one_block_capacity(dtype: torch.dtype) -> int:
    """The most boxes one block takes: one thread each, within 48 KiB of shared memory."""
    fits = MAX_SHARED_BYTES // one_block_shared_bytes(1, dtype)
    return min(SB_MAX_THREADS, fits // 32 * 32)


def cooperative_shared_bytes(n: int, dtype: torch.dtype, labels: bool) -> int:
    """cooperative_kernel's dynamic shared memory: every block holds all n ranked boxes
    (where the 8-byte keys and the final scores of the first and last phases go), labels
    (if any), areas, the parents' cmax and float constants: 28 n bytes for float32 without
    labels, so COOPERATIVE_MAX_N boxes fit a block's opt-in shared memory on sm_90. Phase
    2's marks come after, where they fit (``cooperative_marks``)."""
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
    holds the grid at once, else no
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


class _OneLaunch:
    """A one-launch path ("one_block" or "cooperative") at one (n, dtype, labels or not,
    device), prepared once: the kernel's ``CompiledLaunch``, the size of the allocation
    (``_Outputs``' layout: keep, scores, the count, then the cooperative kernel's scratch)
    and the scratch's offsets. ``run`` is a whole call."""

    __slots__ = ("path", "n", "dtype", "words", "count_word", "scores_start", "scratch_offsets", "mark_slots", "launch")

    def __init__(self, path: str, n: int, dtype: torch.dtype, labels: bool, device: torch.device, grid: int = 0):
        index = device_index(device)
        self.path, self.n, self.dtype = path, n, dtype
        self.count_word, self.scores_start = _output_layout(n, dtype)
        self.mark_slots = 0
        if path == "one_block":
            scratch_words, self.scratch_offsets = 0, ()
            self.launch = CompiledLaunch(CUDA_MODULE.get("single_block_kernel", dtype, device), (1,),
                                         (blocks(n, 32) * 32,), CUDA_MODULE.codes["single_block_kernel"], index,
                                         one_block_shared_bytes(n, dtype))
        else:
            scratch_words, offsets, threads = _cooperative_plan(n, dtype, labels)
            self.mark_slots, shared = cooperative_marks(n, dtype, device, labels, grid)
            self.scratch_offsets = tuple(8 * (self.count_word + 1) + offset for offset in offsets)
            self.launch = CompiledLaunch(CUDA_MODULE.get("cooperative_kernel", dtype, device), (grid,), (threads,),
                                         CUDA_MODULE.codes["cooperative_kernel"], index, shared, cooperative=True)
        self.words = self.count_word + 1 + scratch_words

    def run(self, boxes, scores, labels, linear: bool, sigma: float, score_threshold: float, padded: bool,
            verdict=None):
        """The op on this path: keep, scores and the count, as ``matrix_recompute_cuda`` returns them
        (``verdict``: an ``input_verdict`` its launch sets where a row is bad)."""
        n, device = self.n, boxes.device
        memory = torch.empty(self.words, dtype=torch.int64, device=device)
        base = memory.data_ptr()
        keep, out_scores, count = base, base + 8 * n, base + 8 * self.count_word
        boxes, scores = boxes.contiguous(), scores.contiguous()  # kernels take pointers: grad or not
        labels, wide = labels_for_kernels(labels)
        labels_at = 0 if labels is None else labels.data_ptr()
        host = None if padded else host_count(device)
        host_at = 0 if host is None else host.address
        verdict_at = 0 if verdict is None else verdict.address
        index, stream = _current_stream(device)
        if self.path == "one_block":
            self.launch(stream, boxes.data_ptr(), scores.data_ptr(), labels_at, wide, n, linear, sigma, score_threshold,
                        keep, out_scores, count, host_at, verdict_at)
        else:
            at = self.scratch_offsets  # from base: order, sbox, sarea, slabel, sscore, acc, cmax
            self.launch(stream, boxes.data_ptr(), scores.data_ptr(), labels_at, wide, n, linear, sigma, score_threshold,
                        base + at[0], base + at[1], base + at[2], base + at[3] if labels is not None else 0,
                        base + at[4], base + at[5], base + at[6], grid_barrier_address(index, stream), keep, out_scores,
                        count, host_at, self.mark_slots, verdict_at)
        return _result(memory, n, self.dtype, self.count_word, self.scores_start, host, device, padded)


def _run_passes(path: str, boxes, scores, labels, linear: bool, sigma: float, score_threshold: float, padded: bool,
                verdict=None):
    """The multi-launch paths ("counting_passes", "merge_sort_passes"): rank, the two
    passes, select; n > 0. ``verdict``: an ``input_verdict`` the rank sets where a row is bad."""
    n, device, dtype = boxes.shape[0], boxes.device, boxes.dtype
    counting = path == "counting_passes"
    outputs = _Outputs(n, dtype, device)
    keep, out_scores, count = outputs.keep, outputs.scores, outputs.count
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
            device, order=(n if counting else 0, torch.int64), sbox=(4 * n, arith), sarea=(n, arith),
            slabel=(0 if labels is None else n, torch.int64), sscore=(n, arith), cmax=(n, arith),
            acc=(n, torch.int64), done=(chunks, torch.int32), final=(n, arith),
        )
        slabel = None if labels is None else scratch.slabel
        if counting:
            order = scratch.order
            launch(
                CUDA_MODULE.get("rank_kernel", dtype, device), (blocks(n, COUNT_BOXES),), (32 * RANK_WARPS,),
                (boxes, scores, labels, wide, n, order, scratch.sbox, scratch.sarea, slabel, scratch.sscore,
                 scratch.cmax, scratch.acc, scratch.done, chunks, None, None if verdict is None else verdict.address),
            )
        else:
            order, _ = rank_by_score(launch, boxes, scores, None, verdict=verdict)  # merging from 8193 boxes
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
             threshold, scratch.acc, scratch.done, scratch.final, None if counting else count),
        )
        if counting:
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


# ------------------------------------------------------------------ the paths

# The table's questions take (n, dtype, padded, device, labels).

def _refuses_one_block(n, dtype, padded, device, labels):
    capacity = one_block_capacity(dtype)
    return None if n <= capacity else f"it takes at most {capacity} boxes of {dtype}"


def _passes_over_one_block(n, dtype, padded, device, labels):
    limit = PADDED_ONE_BLOCK_MAX_N if padded else ONE_BLOCK_MAX_N
    return None if n <= limit else f"above {limit} boxes (padded={padded}) the other paths are faster"


def _refuses_cooperative(n, dtype, padded, device, labels):
    if device is None:
        return "it needs a device to size its grid"
    return None if cooperative_grid(n, dtype, device, labels) > 0 else "this GPU cannot hold its grid at once"


def _passes_over_cooperative(n, dtype, padded, device, labels):
    if padded:
        return "the chooser keeps it for eager calls"
    return None if n <= COOPERATIVE_MAX_N else f"above {COOPERATIVE_MAX_N} boxes the passes are faster"


def _passes_over_counting(n, dtype, padded, device, labels):
    return None if n <= COUNTING_MAX_N else f"above {COUNTING_MAX_N} boxes the merge rank is faster"


# one_launch: prepared once per call shape as a ``_OneLaunch``; the others run ``_run_passes``
PATHS = PathTable("matrix_recompute", (  # in the chooser's order
    KernelPath("one_block", _refuses_one_block, _passes_over_one_block, one_launch=True),
    KernelPath("cooperative", _refuses_cooperative, _passes_over_cooperative, one_launch=True),
    KernelPath("counting_passes", passes_over=_passes_over_counting),
    KernelPath("merge_sort_passes"),
))


def choose_path(n: int, dtype: torch.dtype = torch.float32, padded: bool = False,
                device: torch.device | None = None, labels: bool = False) -> str:
    """The path a call with ``n`` boxes takes (``PATHS.choose``; see the module docstring).
    Without a ``device`` nothing is asked of a GPU and "cooperative" is not considered."""
    return PATHS.choose(n, dtype, padded, device, labels)


def check_path(path: str, n: int, dtype: torch.dtype, padded: bool, device: torch.device | None,
               labels: bool = False) -> None:
    """A ValueError where ``path`` is no path or cannot take this input, naming those that can."""
    PATHS.check(path, n, dtype, padded, device, labels)


# (n, dtype, labels, padded, device, path or None) -> (path, its _OneLaunch or None for the multi-launch paths)
_plans: dict[tuple, tuple[str, _OneLaunch | None]] = {}


def plan_for(n: int, dtype: torch.dtype, labels: bool, padded: bool, device: torch.device,
             path: str | None = None) -> tuple[str, _OneLaunch | None]:
    """(the path, its cached ``_OneLaunch`` or None for a multi-launch path) of a call
    shape (``path`` None: the one ``choose_path`` picks)."""
    return cached_plan(_plans, (n, dtype, labels, padded, device, path), _make_plan, n, dtype, labels, padded, device,
                       path)


def _make_plan(n: int, dtype: torch.dtype, labels: bool, padded: bool, device: torch.device,
               path: str | None) -> tuple[str, _OneLaunch | None]:
    if path is None:
        path = choose_path(n, dtype, padded, device, labels)
    else:
        check_path(path, n, dtype, padded, device, labels)
    if not PATHS[path].one_launch:
        return path, None
    grid = cooperative_grid(n, dtype, device, labels) if path == "cooperative" else 0
    return path, _OneLaunch(path, n, dtype, labels, device, grid)


@register(
    name="matrix_recompute", family="matrix", devices=("cuda",), requires=("cupy",), params=MATRIX_PARAMS,
    dtypes=CUDA_DTYPES, host_sync=True, graph_safe=True, checks_values=True,
    summary="CUDA: IoUs recomputed in both passes, O(N) memory; one launch for small N (one block) and for eager "
            "calls to 8192 (cooperative, the whole GPU)",
)
def matrix_recompute_cuda(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold, padded=False,
                          path=None, check_values=False):
    """Matrix NMS on CUDA; ``path`` (a name in ``PATHS``) forces a path, else ``choose_path``'s.
    ``check_values`` (eager calls): run_nms's value rules, in the op's first launch, read
    after the wait for the kept count."""
    if check_values and padded:
        raise ValueError("matrix_recompute: check_values is for eager calls; a padded call reports bad input through "
                         "run_nms's input_check")
    n, device, dtype = boxes.shape[0], boxes.device, boxes.dtype
    linear = kernel == "linear"
    if n == 0:
        if path is not None and path not in PATHS:
            check_path(path, n, dtype, padded, None)
        outputs = _Outputs(n, dtype, device)
        if padded:
            outputs.memory.zero_()
        return outputs.result(None, device, padded)
    path, plan = plan_for(n, dtype, labels is not None, padded, device, path)
    verdict = input_verdict(device) if check_values else None
    if plan is not None:
        result = plan.run(boxes, scores, labels, linear, float(sigma), float(score_threshold), padded, verdict)
    else:
        result = _run_passes(path, boxes, scores, labels, linear, sigma, score_threshold, padded, verdict)
    raise_if_bad_input(verdict, boxes, scores, "matrix_recompute")  # written before the result's wait returned
    return result
