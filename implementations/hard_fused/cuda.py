"""hard_fused's CUDA backend (host side): one path chooser, one table of paths, their plans.

Exact greedy NMS in hard_fused.cu, by one of five paths (``PATHS``), named for what runs:

- "one_block": one launch of one block ranks, masks and resolves in shared memory;
- "cooperative": one cooperative launch over N / 32 blocks, grid barriers between phases
  (eager calls only: a padded call may be captured in a graph);
- "mask_then_staged_resolve": the rank, the tile mask, then one block resolves from the
  mask rows staged in shared memory (N <= 1024);
- "streamed": the rank, then one launch in which block 0 resolves while the other blocks
  make the mask it waits for, row word by row word (N > 1024);
- "mask_then_block_resolve": the rank, the tile mask, then the block resolve in rounds.

``choose_path`` picks one from N, padded or not and the device; ``path=`` forces one (a
ValueError names the paths that take the input). Each call shape has a ``_Plan`` made once
(its launches with their argument layouts compiled, and its one allocation's layout).
The kernels' constants are ``DEFINES``, passed to NVRTC. Why the paths and their limits
are what they are: implementations/DESIGN.md; their measurements: results/PERFLOG.md.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from nmsbench.boxes import NMSResult, PaddedNMSResult
from nmsbench.cuda import (CUDA_DTYPES, MAX_SHARED_BYTES, CompiledLaunch, CudaModule, HostCount, KernelPath, PathTable,
                           _current_stream, _ranked_offsets, blocks, cached_plan, device_index, grid_barrier_address,
                           host_count, input_verdict, kept_count, opted_in_shared_limit, rank_launches,
                           rank_scratch_words, stream_counters)
from nmsbench.inputs import raise_if_bad_input
from nmsbench.memory_guard import CHECK_FROM_BYTES, check_fits
from nmsbench.registry import register

SUMMARY_CUDA = ("CUDA: one launch for N <= 160 (one block) and for eager calls to 1024 (cooperative); else rank, "
                "a mask of 32 x 32 tiles, and a resolve from shared memory (N <= 1024) "
                "or in rounds of 256 boxes, one warp deciding while the block stages the next round and ORs the last; "
                "padded graph-safe output")

# The kernels' compile-time constants (NVRTC -D): the one-block kernel's capacity and
# threads, warps per tile mask block, the block resolve's and staged resolve's threads,
# the cooperative kernel's threads, and the words the block resolve decides per round.
DEFINES = {"SMALL_MAX": 256, "SMALL_THREADS": 1024, "TILE_WARPS": 8, "RESOLVE_THREADS": 512, "STAGED_THREADS": 1024,
           "MID_THREADS": 1024, "ROUND_WORDS": 8}
ONE_BLOCK_CAPACITY = DEFINES["SMALL_MAX"]
SMALL_THREADS, TILE_WARPS, RESOLVE_THREADS = DEFINES["SMALL_THREADS"], DEFINES["TILE_WARPS"], DEFINES["RESOLVE_THREADS"]
STAGED_THREADS, MID_THREADS, ROUND_WORDS = DEFINES["STAGED_THREADS"], DEFINES["MID_THREADS"], DEFINES["ROUND_WORDS"]

# Argument layouts (struct codes): pointers "Q", ints "i", the IoU threshold "d".
CUDA_MODULE = CudaModule(
    "hard_fused/hard_fused.cu",
    templates={
        "small_nms_kernel": "QQQidQQQQ",  # boxes scores labels | n threshold | keep count host_count verdict_host
        "tile_mask_kernel": "QQiidQ",  # sorted_boxes sorted_labels | n words threshold | mask
        "mid_nms_kernel": "QQQid" + "Q" * 9,  # ... | order sorted_boxes sorted_labels mask barrier | outputs, verdict
        # sorted_boxes sorted_labels | n words threshold | mask row_done order | outputs
        "streamed_resolve_kernel": "QQiidQQQQQQ",
    },
    plain={"staged_resolve_kernel": "QQiiQQQ", "block_resolve_kernel": "QQiiQQQ"},  # mask order | n words | outputs
    defines=DEFINES,
)

# The chooser's limits. Tuning (where the next path became faster; results/PERFLOG.md):
ONE_BLOCK_MAX_N = 160  # "one_block" up to here (the kernel takes up to ONE_BLOCK_CAPACITY)
# diou_nms's modules (DIOU_BETA defined): DIoU's test costs more per pair, and one block
# pays all of it on one SM, so the grid-wide paths overtake it at fewer boxes
DIOU_ONE_BLOCK_MAX_N = 64
STREAMED_MAX_N = 8192  # "streamed" from 1025 boxes to here; above, "mask_then_block_resolve"
# What the kernels take: a staged resolve (its own, and block 0's in "cooperative") holds
# rows of at most 32 mask words, one warp's lanes.
STAGED_MAX_N = 32 * 32
COOPERATIVE_MAX_N = STAGED_MAX_N  # "cooperative" (eager calls) up to here
MAX_WORDS = MAX_SHARED_BYTES // 4  # the resolves' bitmap of N / 32 words in shared memory: N <= 32 x MAX_WORDS


@functools.lru_cache(maxsize=256)  # on every call's path
def block_resolve_shared_bytes(words: int) -> int:
    """block_resolve_kernel's (and streamed_resolve_kernel's) dynamic shared memory, laid
    out in hard_fused.cu: two rounds' input indices (8 bytes), staged rows (2 x
    ROUND_WORDS words at an odd stride) and kept rows (4 bytes) of 32 x ROUND_WORDS boxes
    each, then the bitmap (4 bytes a word)."""
    round_boxes = 32 * ROUND_WORDS
    return 2 * round_boxes * (8 + 4 * (2 * ROUND_WORDS + 1) + 4) + 4 * words


@functools.lru_cache(maxsize=256)  # on every call's path
def staged_shared_bytes(n: int) -> int:
    """staged_resolve_kernel's dynamic shared memory: the mask rows at an odd stride, then
    the input indices (8-byte aligned), as laid out in hard_fused.cu."""
    stride = ((n + 31) // 32) | 1
    return ((n * stride + 1) & ~1) * 4 + 8 * n


def staged_resolve_fits(n: int, device: torch.device) -> bool:
    """Whether the staged resolve's shared memory fits one block on ``device`` (above the
    default 48 KiB at N = 1024, so the kernel is opted in)."""
    kernel = CUDA_MODULE.get("staged_resolve_kernel", None, device)
    return staged_shared_bytes(n) <= opted_in_shared_limit(kernel, device)


@functools.lru_cache(maxsize=256)  # on every call's path
def mid_shared_bytes(n: int, dtype: torch.dtype) -> int:
    """mid_nms_kernel's dynamic shared memory: block 0's staged resolve, or the first
    phases' n score keys, ranked boxes and labels if more (as laid out in hard_fused.cu)."""
    box_bytes = 32 if dtype == torch.float64 else 16
    return max(staged_shared_bytes(n), n * (box_bytes + 16))


_mid_blocks: dict[tuple[str, torch.dtype, int], int] = {}  # (DIOU_BETA or "", dtype, device index) -> blocks resident


def mid_grid(n: int, dtype: torch.dtype, device: torch.device, module: CudaModule | None = None) -> int:
    """Blocks for mid_nms_kernel at ``n`` (a warp per box: n / 32 blocks of 32 warps), or 0
    when the device cannot hold them all at once with COOPERATIVE_MAX_N's shared memory, which a
    cooperative launch needs. ``module``: this file compiled with another suppression test
    (diou_nms's), CUDA_MODULE when None."""
    module = module or CUDA_MODULE
    index = device_index(device)
    key = (module.defines.get("DIOU_BETA", ""), dtype, index)
    resident = _mid_blocks.get(key)
    if resident is None:
        from cupy_backends.cuda.api import driver

        kernel = module.get("mid_nms_kernel", dtype, device)
        shared = mid_shared_bytes(COOPERATIVE_MAX_N, dtype)
        resident = 0
        if shared <= opted_in_shared_limit(kernel, device):
            per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, MID_THREADS, shared)
            resident = per_sm * torch.cuda.get_device_properties(index).multi_processor_count
        _mid_blocks[key] = resident
    needed = blocks(n, MID_THREADS // 32)
    return needed if needed <= resident else 0


# ------------------------------------------------------------------ the paths

# The table's questions take (n, dtype, padded, device, labels, module=): ``module`` is
# hard_fused.cu compiled with a suppression test (CUDA_MODULE's, or diou_nms's).

def _refuses_one_block(n, dtype, padded, device, labels, module=None):
    return None if n <= ONE_BLOCK_CAPACITY else f"it takes at most {ONE_BLOCK_CAPACITY} boxes"


def _passes_over_one_block(n, dtype, padded, device, labels, module=None):
    limit = DIOU_ONE_BLOCK_MAX_N if module is not None and "DIOU_BETA" in module.defines else ONE_BLOCK_MAX_N
    return None if n <= limit else f"above {limit} boxes the grid-wide paths are faster"


def _refuses_cooperative(n, dtype, padded, device, labels, module=None):
    if padded:
        return "it runs eager calls only (padded calls may be captured in a CUDA graph)"
    if n > COOPERATIVE_MAX_N:
        return f"it takes at most {COOPERATIVE_MAX_N} boxes"
    if device is not None and mid_grid(n, dtype, device, module) == 0:
        return "this GPU cannot hold its grid at once"
    return None


def _passes_over_without_device(n, dtype, padded, device, labels, module=None):
    return "without a device the chooser does not ask whether the GPU holds its grid" if device is None else None


def _refuses_staged(n, dtype, padded, device, labels, module=None):
    if n > STAGED_MAX_N:
        return f"it takes at most {STAGED_MAX_N} boxes"
    if device is not None and not staged_resolve_fits(n, device):
        return "its shared memory does not fit one block on this GPU"
    return None


def _refuses_streamed(n, dtype, padded, device, labels, module=None):
    # past the staged resolve's sizes only (where it was built and tested for)
    return None if n > STAGED_MAX_N else f"it takes more than {STAGED_MAX_N} boxes"


def _passes_over_streamed(n, dtype, padded, device, labels, module=None):
    return None if n <= STREAMED_MAX_N else f"above {STREAMED_MAX_N} boxes the block resolve is faster"


def choose_path(n: int, dtype: torch.dtype = torch.float32, padded: bool = False,
                device: torch.device | None = None, labels: bool = False) -> str:
    """The path a call with ``n`` boxes takes (``PATHS.choose``; see the module docstring).
    Without a ``device`` nothing is asked of a GPU: "cooperative" is not considered and the
    staged resolve's shared memory is taken to fit. ``labels`` changes nothing here."""
    return PATHS.choose(n, dtype, padded, device, labels)


def check_path(path: str, n: int, dtype: torch.dtype, padded: bool, device: torch.device | None,
               labels: bool = False) -> None:
    """A ValueError where ``path`` is no path or cannot take this input, naming those that can."""
    PATHS.check(path, n, dtype, padded, device, labels)


def _tile_mask(n, words, dtype, device, index, module) -> CompiledLaunch:
    return CompiledLaunch(module.get("tile_mask_kernel", dtype, device), (blocks(words, TILE_WARPS), words),
                          (32 * TILE_WARPS,), module.codes["tile_mask_kernel"], index)


def _checked_shared(kernel, n: int, words: int, device: torch.device) -> int:
    shared, limit = block_resolve_shared_bytes(words), opted_in_shared_limit(kernel, device)
    if shared > limit:
        raise ValueError(f"hard_fused: N = {n} needs {shared} bytes of shared memory in one block for its "
                         f"resolve; this GPU gives {limit}")
    return shared


def _prepare_one_block(n, words, dtype, device, index, module):
    return (CompiledLaunch(module.get("small_nms_kernel", dtype, device), (1,), (SMALL_THREADS,),
                           module.codes["small_nms_kernel"], index),)


def _prepare_cooperative(n, words, dtype, device, index, module):
    return (CompiledLaunch(module.get("mid_nms_kernel", dtype, device), (mid_grid(n, dtype, device, module),),
                           (MID_THREADS,), module.codes["mid_nms_kernel"], index, mid_shared_bytes(n, dtype),
                           cooperative=True),)


def _prepare_staged(n, words, dtype, device, index, module):
    resolve = CompiledLaunch(CUDA_MODULE.get("staged_resolve_kernel", None, device), (1,), (STAGED_THREADS,),
                             CUDA_MODULE.codes["staged_resolve_kernel"], index, staged_shared_bytes(n))
    return _tile_mask(n, words, dtype, device, index, module), resolve


def _prepare_streamed(n, words, dtype, device, index, module):
    kernel = module.get("streamed_resolve_kernel", dtype, device)
    shared = _checked_shared(kernel, n, words, device)
    # a resolving block and a mask producer on every other SM (one block an SM fits)
    grid = max(2, torch.cuda.get_device_properties(index).multi_processor_count)
    return (CompiledLaunch(kernel, (grid,), (RESOLVE_THREADS,), module.codes["streamed_resolve_kernel"], index,
                           shared),)


def _prepare_block_resolve(n, words, dtype, device, index, module):
    kernel = CUDA_MODULE.get("block_resolve_kernel", None, device)
    shared = _checked_shared(kernel, n, words, device)
    resolve = CompiledLaunch(kernel, (1,), (RESOLVE_THREADS,), CUDA_MODULE.codes["block_resolve_kernel"], index, shared)
    return _tile_mask(n, words, dtype, device, index, module), resolve


def _run_one_block(plan, stream, index, boxes, scores, labels_at, ranked_labels, threshold, base, keep, count, host_at,
                   verdict_at):
    plan.launches[0](stream, boxes, scores, labels_at, plan.n, threshold, keep, count, host_at, verdict_at)


def _run_cooperative(plan, stream, index, boxes, scores, labels_at, ranked_labels, threshold, base, keep, count,
                     host_at, verdict_at):
    n = plan.n
    order = base + plan.scratch_at  # then the ranked labels, then the ranked boxes (the kernel's scratch)
    plan.launches[0](stream, boxes, scores, labels_at, n, threshold, order, order + 16 * n, order + 8 * n,
                     base + plan.mask_at, grid_barrier_address(index, stream), keep, count, host_at, verdict_at)


def _run_streamed(plan, stream, index, boxes, scores, labels_at, ranked_labels, threshold, base, keep, count, host_at,
                  verdict_at):
    plan.launches[0](stream, base + plan.ranked_boxes_at, ranked_labels, plan.n, plan.words, threshold,
                     base + plan.mask_at, stream_counters(index, stream, MAX_WORDS), base + plan.scratch_at, keep,
                     count, host_at)


def _run_mask_then_resolve(plan, stream, index, boxes, scores, labels_at, ranked_labels, threshold, base, keep, count,
                           host_at, verdict_at):
    mask, resolve = plan.launches
    mask(stream, base + plan.ranked_boxes_at, ranked_labels, plan.n, plan.words, threshold, base + plan.mask_at)
    resolve(stream, base + plan.mask_at, base + plan.scratch_at, plan.n, plan.words, keep, count, host_at)


PATHS = PathTable("hard_fused", (  # in the chooser's order
    KernelPath("one_block", _refuses_one_block, _passes_over_one_block, _prepare_one_block, _run_one_block,
               one_launch=True),
    KernelPath("cooperative", _refuses_cooperative, _passes_over_without_device, _prepare_cooperative,
               _run_cooperative, one_launch=True),
    KernelPath("mask_then_staged_resolve", _refuses_staged, prepare=_prepare_staged, run=_run_mask_then_resolve),
    KernelPath("streamed", _refuses_streamed, _passes_over_streamed, _prepare_streamed, _run_streamed),
    KernelPath("mask_then_block_resolve", prepare=_prepare_block_resolve, run=_run_mask_then_resolve),
), module=CUDA_MODULE)


class _Plan:
    """Everything a call at one (n, dtype, labels or not, padded or not, device, path)
    needs, prepared once: its path, its ``CompiledLaunch``-es (``rank``: rank_by_score's,
    for the paths that rank first) and the layout of its one allocation: keep (n words),
    the count, then (not one_block) the n x words int32 mask, then the ranking's scratch
    (the cooperative kernel's order, labels and boxes, or ``rank_by_score``'s)."""

    __slots__ = ("path", "n", "words", "memory_words", "mask_at", "scratch_at", "rank", "ranked_boxes_at",
                 "ranked_labels_at", "chunk_keys_at", "group_keys_at", "launches", "run")

    def __init__(self, n: int, dtype: torch.dtype, labels: bool, padded: bool, device: torch.device,
                 path: str | None, module: CudaModule, op: str):
        words = (n + 31) // 32
        if words > MAX_WORDS:
            raise ValueError(f"{op} on cuda resolves in one block with N/8 bytes of shared memory (and its "
                             f"N x N/8-byte mask in GPU memory); N = {n} is above its limit of {MAX_WORDS * 32}")
        if path is None:
            path = PATHS.choose(n, dtype, padded, device, labels, module=module)
        else:
            PATHS.check(path, n, dtype, padded, device, labels, op=op, module=module)
        index = device_index(device)
        self.path, self.n, self.words, self.run = path, n, words, PATHS[path].run
        mask_words = 0 if path == "one_block" else (n * words + 1) // 2
        self.mask_at, self.scratch_at = 8 * (n + 1), 8 * (n + 1 + mask_words)
        self.rank = None
        if path == "one_block":
            scratch_words = 0
        elif path == "cooperative":
            scratch_words = 2 * n + (4 * n if dtype == torch.float64 else 2 * n)  # order, labels, boxes
        else:
            scratch_words = rank_scratch_words(n, dtype, labels)
            self.rank = rank_launches(n, dtype, None, device)
            # from base, as rank_by_score(..., into=base + scratch_at) lays them out (labels: -1 without)
            boxes_at, labels_at, chunk_at, group_at = (self.scratch_at + at for at in _ranked_offsets(n, dtype, labels))
            self.ranked_boxes_at, self.ranked_labels_at, self.chunk_keys_at, self.group_keys_at = \
                boxes_at, labels_at, chunk_at, group_at
        self.launches = PATHS[path].prepare(n, words, dtype, device, index, module)
        self.memory_words = n + 1 + mask_words + scratch_words


_plans: dict[tuple, _Plan] = {}  # (n, dtype, labels, padded, device, path or None, module's file and defines) -> plan


def plan_for(n: int, dtype: torch.dtype, labels: bool, padded: bool, device: torch.device,
             path: str | None = None, module: CudaModule | None = None, op: str = "hard_fused") -> _Plan:
    """The prepared ``_Plan`` of a call shape (``path`` None: the one ``choose_path`` picks;
    ``module`` None: CUDA_MODULE, hard NMS's test)."""
    module = module or CUDA_MODULE
    key = (n, dtype, labels, padded, device, path, id(module))
    return cached_plan(_plans, key, _Plan, n, dtype, labels, padded, device, path, module, op)



@register(
    name="hard_fused", family="hard", devices=("cuda",), exact=True, requires=("cupy",), dtypes=CUDA_DTYPES,
    host_sync=True, graph_safe=True, checks_values=True, summary=SUMMARY_CUDA,
)
def hard_fused_cuda(boxes, scores, *, iou_threshold, labels=None, padded=False, path=None, check_values=False):
    """Greedy NMS on CUDA; ``path`` (a name in ``PATHS``) forces a path, else ``choose_path``'s.
    ``check_values`` (eager calls): run_nms's value rules, in the op's first launch (the
    one_block or cooperative kernel, else the rank), read in the same synchronization as
    the kept count."""
    return run_paths(boxes, scores, iou_threshold, labels, padded, path, check_values, CUDA_MODULE, "hard_fused")


def run_paths(boxes, scores, iou_threshold, labels, padded, path, check_values, module: CudaModule, op: str):
    """hard_fused's paths with ``module``'s kernels (hard_fused.cu compiled with a suppression
    test: CUDA_MODULE's, or diou_nms's); ``op`` names the caller in errors."""
    _refuse_checks_when_padded(check_values, padded, op)
    n, device = boxes.shape[0], boxes.device
    if n == 0:
        if path is not None and path not in PATHS:
            PATHS.check(path, n, boxes.dtype, padded, None, op=op, module=module)
        out = torch.zeros(1, dtype=torch.int64, device=device)
        return PaddedNMSResult(out[:0], out[0]) if padded else NMSResult(out[:0])
    launched = launch_paths(boxes, scores, iou_threshold, labels, padded, path, check_values, module, op)
    if padded:
        return PaddedNMSResult(launched.memory[:n], launched.memory[n])
    return wait_for_keep(launched, op)


def _refuse_checks_when_padded(check_values: bool, padded: bool, op: str) -> None:
    if check_values and padded:
        raise ValueError(f"{op}: check_values is for eager calls; a padded call reports bad input through "
                         "run_nms's input_check")


class Launched(NamedTuple):
    """A call's launches, queued on ``stream`` and not waited for: its allocation
    (``memory``: keep, n words, then the count), the inputs as the kernels read them
    (contiguous; ``labels`` int64 or None) and what the wait reads (``host``: the kept
    count, None for padded calls; ``verdict``: check_values' word or None)."""

    memory: torch.Tensor
    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor | None
    given_boxes: torch.Tensor
    given_scores: torch.Tensor
    host: HostCount | None
    verdict: HostCount | None
    stream: int
    index: int

    @property
    def keep_at(self) -> int:
        return self.memory.data_ptr()

    @property
    def count_at(self) -> int:
        return self.memory.data_ptr() + 8 * self.boxes.shape[0]


def launch_paths(boxes, scores, iou_threshold, labels, padded, path, check_values, module: CudaModule,
                 op: str) -> Launched:
    """run_paths' launches for N >= 1, not waited for: an op that queues more work after
    the keep (weighted_nms's merge) reads the count on the device and waits once, with
    ``wait_for_keep``."""
    _refuse_checks_when_padded(check_values, padded, op)
    n, device = boxes.shape[0], boxes.device
    plan = plan_for(n, boxes.dtype, labels is not None, padded, device, path, module, op)
    if 8 * plan.memory_words >= CHECK_FROM_BYTES:  # the N x N/8-byte mask (the check reads free memory)
        check_fits(op, 8 * plan.memory_words, device, n=n, formula="N²/8 bytes: its N x N-bit suppression mask")
    memory = torch.empty(plan.memory_words, dtype=torch.int64, device=device)
    base = memory.data_ptr()
    labels_at = 0
    if labels is not None:
        labels = labels.to(torch.int64).contiguous()
        labels_at = labels.data_ptr()
    given_boxes, given_scores = boxes, scores
    boxes, scores = boxes.contiguous(), scores.contiguous()
    verdict = input_verdict(device) if check_values else None
    verdict_at = 0 if verdict is None else verdict.address
    index, stream = _current_stream(device)
    ranked_labels = 0
    if plan.rank is not None:  # the rank launched first: the host prepares the rest while the GPU ranks
        ranked_labels = base + plan.ranked_labels_at if labels is not None else 0
        plan.rank(stream, boxes.data_ptr(), scores.data_ptr(), labels_at, base + plan.scratch_at,
                  base + plan.ranked_boxes_at, 0, ranked_labels, base + plan.chunk_keys_at, base + plan.group_keys_at,
                  verdict_at)
        verdict_at = 0  # checked there
    host = None if padded else host_count(device)
    keep, count, host_at = base, base + 8 * n, 0 if host is None else host.address
    plan.run(plan, stream, index, boxes.data_ptr(), scores.data_ptr(), labels_at, ranked_labels, float(iou_threshold),
             base, keep, count, host_at, verdict_at)
    return Launched(memory, boxes, scores, labels, given_boxes, given_scores, host, verdict, stream, index)


def wait_for_keep(launched: Launched, op: str) -> NMSResult:
    """An eager call's one wait (for everything queued on its stream): the kept boxes, or
    check_values' ValueError."""
    n, device = launched.boxes.shape[0], launched.boxes.device
    kept_keep = launched.memory[:n]  # made while the GPU works; the wait's count only shortens it
    kept = kept_count(launched.host, device, n, op)
    raise_if_bad_input(launched.verdict, launched.given_boxes, launched.given_scores, op)  # written before the wait
    return NMSResult(kept_keep.resize_(kept))
