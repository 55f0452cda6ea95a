"""The classic 64-bit-mask NMS (seeds/classic-64bit-bitmask-nms.zh.txt; torchvision's
original CUDA design).

Boxes are cut into blocks of 64. A 2-D grid of (row block, column block) pairs, upper
triangle only, writes one 64-bit word per (box, column block): bit c says box i
suppresses box col_block*64 + c (on the diagonal block only boxes after i). The greedy
resolve then runs on the host over the copied mask with a ``remv`` word per column block.
On the GPU (bitmask_classic.cu) the grid is real and the mask comes back to the host for
the resolve (that copy is part of its cost); on the CPU the grid is numba ``prange``
over row blocks.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from nmsbench.boxes import NMSResult
from nmsbench.cuda import CUDA_DTYPES, CudaModule, blocks, input_verdict, on_torch_stream, rank_by_score
from nmsbench.inputs import raise_if_bad_input
from nmsbench.memory_guard import check_fits
from nmsbench.registry import register

from ._cpu import JIT, balanced_row, box_iou, keep_from_sorted, resolve_greedy, sorted_inputs

BLOCK = 64
MASK = "N²/8 bytes: its N x N-bit suppression mask"


@njit(parallel=True, **JIT)
def block_masks_64(b, labels, iou_threshold):
    n = b.shape[0]
    blocks = (n + 63) // 64
    mask = np.zeros((n, blocks), dtype=np.uint64)
    for k in prange(blocks):
        row_block = balanced_row(k, blocks)
        for col_block in range(row_block, blocks):
            col_size = min(64, n - col_block * 64)
            for r in range(min(64, n - row_block * 64)):
                i = row_block * 64 + r
                start = r + 1 if col_block == row_block else 0
                bits = np.uint64(0)
                for c in range(start, col_size):
                    j = col_block * 64 + c
                    if labels[i] == labels[j] and box_iou(b, i, j) > iou_threshold:
                        bits |= np.uint64(1) << np.uint64(c)
                mask[i, col_block] = bits
    return mask


@register(
    name="bitmask_classic", family="hard", devices=("cpu",), exact=True, requires=("numba",),
    summary="numba: 64-bit block masks over a 2-D block grid, greedy resolve on the host",
    style=("#56B4E9", "cross"),
)
def bitmask_classic_cpu(boxes, scores, *, iou_threshold, labels=None):
    n = boxes.shape[0]
    check_fits("bitmask_classic", 8 * n * ((n + BLOCK - 1) // BLOCK), "cpu", n=n, formula=MASK)
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    mask = block_masks_64(sorted_boxes, sorted_labels, iou_threshold)
    return keep_from_sorted(order, resolve_greedy(mask, BLOCK))


CUDA_MODULE = CudaModule("bitmask_classic.cu", templates={"block_mask_kernel": "QQidQ"})  # boxes labels | n | threshold | mask


@register(
    name="bitmask_classic", family="hard", devices=("cuda",), exact=True, requires=("cupy",), dtypes=CUDA_DTYPES,
    host_sync=True, checks_values=True,
    summary="CUDA: 64-thread blocks on a 2-D grid write 64-bit masks; copy + greedy resolve on the host",
)
def bitmask_classic_cuda(boxes, scores, *, iou_threshold, labels=None, check_values=False):
    """``check_values``: run_nms's value rules, checked in the rank's launch."""
    n = boxes.shape[0]
    if n == 0:
        return NMSResult(torch.empty(0, dtype=torch.int64, device=boxes.device))
    column_blocks = blocks(n, BLOCK)
    for where in (boxes.device, "cpu"):  # the mask, and its copy for the host's resolve
        check_fits("bitmask_classic", 8 * n * column_blocks, where, n=n, formula=MASK)
    mask = torch.empty((n, column_blocks), dtype=torch.int64, device=boxes.device)  # every word is written
    verdict = input_verdict(boxes.device) if check_values else None
    with on_torch_stream(boxes.device) as launch:
        order, ranked = rank_by_score(launch, boxes, scores, labels, verdict=verdict)
        launch(
            CUDA_MODULE.get("block_mask_kernel", boxes.dtype, boxes.device),
            (column_blocks, column_blocks), (BLOCK,),
            (ranked.sorted_boxes, ranked.sorted_labels, n, np.float64(iou_threshold), mask),
        )
    host_mask = mask.cpu()  # the host sync
    raise_if_bad_input(verdict, boxes, scores, "bitmask_classic")
    kept = resolve_greedy(host_mask.numpy().view(np.uint64), BLOCK)
    return NMSResult(order[torch.from_numpy(kept).to(boxes.device)])
