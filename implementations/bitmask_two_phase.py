"""Two-phase bitmask NMS (the LeetCUDA fix in seeds/two-phase-bitmask-nms.zh.txt).

Phase 1 builds a suppression bitmask with the seed's 32-bit layout: row i, word w, bit k
is 1 iff box i suppresses box w*32 + k. Each row starts at the word holding box i + 1,
aligned down to 32, and bits for boxes at or before i stay 0, so every row uses the same
global bit numbering. Phase 2 resolves greedily in rank order, OR-ing each kept box's row
into a running "removed" bitmap. On the GPU phase 1 is a warp ballot per 32 boxes and
phase 2 a single block that decides a word of 32 boxes per step in one warp's registers
(bitmask_two_phase.cu); on the CPU phase 1 is numba ``prange`` and phase 2 a plain loop.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from nmsbench.boxes import NMSResult
from nmsbench.cuda import (BALLOT_WARPS, CUDA_DTYPES, MAX_SHARED_BYTES, CudaModule, blocks, input_verdict,
                           on_torch_stream, rank_by_score)
from nmsbench.inputs import raise_if_bad_input
from nmsbench.memory_guard import check_fits
from nmsbench.registry import register

from ._cpu import JIT, balanced_row, box_iou, keep_from_sorted, resolve_greedy, sorted_inputs

WORD_BITS = 32
MASK = "N²/8 bytes: its N x N-bit suppression mask"


@njit(parallel=True, **JIT)
def suppression_mask_32(b, labels, iou_threshold):
    n = b.shape[0]
    words = (n + 31) // 32
    mask = np.zeros((n, words), dtype=np.uint32)
    for k in prange(n):
        i = balanced_row(k, n)
        for w in range((i + 1) // 32, words):
            bits = np.uint32(0)
            for lane in range(32):
                j = w * 32 + lane
                if j > i and j < n and labels[i] == labels[j] and box_iou(b, i, j) > iou_threshold:
                    bits |= np.uint32(1) << np.uint32(lane)
            mask[i, w] = bits
    return mask


@register(
    name="bitmask_two_phase", family="hard", devices=("cpu",), exact=True, requires=("numba",),
    summary="numba: 32-bit suppression bitmask (seed layout), then the sequential greedy resolve",
    style=("#CC79A7", "x"),
)
def bitmask_two_phase_cpu(boxes, scores, *, iou_threshold, labels=None):
    n = boxes.shape[0]
    check_fits("bitmask_two_phase", 4 * n * ((n + WORD_BITS - 1) // WORD_BITS), "cpu", n=n, formula=MASK)
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    mask = suppression_mask_32(sorted_boxes, sorted_labels, iou_threshold)
    return keep_from_sorted(order, resolve_greedy(mask, WORD_BITS))


CUDA_MODULE = CudaModule("bitmask_two_phase.cu", templates={"ballot_mask_kernel": "QQiidQ"},  # boxes labels | n words | t | mask
                         plain={"greedy_resolve_kernel": "QQiiQ"})  # mask order | n words | keep
MAX_RESOLVE_WORDS = MAX_SHARED_BYTES // 4  # the resolve's "removed" bitmap, in shared memory


@register(
    name="bitmask_two_phase", family="hard", devices=("cuda",), exact=True, requires=("cupy",),
    dtypes=CUDA_DTYPES, host_sync=True, checks_values=True,
    summary="CUDA: warp-per-box __ballot_sync 32-bit mask, then a single-block shared-memory resolve",
)
def bitmask_two_phase_cuda(boxes, scores, *, iou_threshold, labels=None, check_values=False):
    """``check_values``: run_nms's value rules, checked in the rank's launch."""
    n, device = boxes.shape[0], boxes.device
    keep = torch.empty(n + 1, dtype=torch.int64, device=device)  # keep[n]: how many
    if n == 0:
        return NMSResult(keep[:0])
    words = (n + WORD_BITS - 1) // WORD_BITS
    if words > MAX_RESOLVE_WORDS:
        raise ValueError(
            f"bitmask_two_phase on cuda resolves in one block with N/8 bytes of shared memory; "
            f"N = {n} is above its limit of {MAX_RESOLVE_WORDS * WORD_BITS}"
        )
    check_fits("bitmask_two_phase", 4 * n * words, device, n=n, formula=MASK)
    mask = torch.zeros((n, words), dtype=torch.int32, device=device)
    threads = min(1024, -(-words // 32) * 32)
    verdict = input_verdict(device) if check_values else None
    with on_torch_stream(device) as launch:
        order, ranked = rank_by_score(launch, boxes, scores, labels, verdict=verdict)
        launch(
            CUDA_MODULE.get("ballot_mask_kernel", boxes.dtype, device), (blocks(n, BALLOT_WARPS),),
            (32 * BALLOT_WARPS,), (ranked.sorted_boxes, ranked.sorted_labels, n, words, np.float64(iou_threshold), mask),
        )
        launch(
            CUDA_MODULE.get("greedy_resolve_kernel", None, device), (1,), (threads,),
            (mask, order, n, words, keep), shared_mem=words * 4,
        )
    count = int(keep[n])  # the one host sync
    raise_if_bad_input(verdict, boxes, scores, "bitmask_two_phase")
    return NMSResult(keep[:count])
