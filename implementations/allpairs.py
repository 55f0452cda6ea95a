"""All-pairs parallel NMS (the YOLOv5 GPU post-processing seed's rule).

Each box decides alone: it is suppressed iff *any* higher-ranked box with the same label
overlaps it above the threshold, kept or not. No sequential resolve, so it parallelizes
perfectly, and overlap chains over-suppress compared with greedy NMS. On the GPU
(allpairs.cu) blocks stream tiles of higher-ranked boxes through shared memory.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from nmsbench.boxes import NMSResult
from nmsbench.cuda import CUDA_DTYPES, CudaModule, blocks, input_verdict, on_torch_stream, rank_by_score
from nmsbench.inputs import raise_if_bad_input
from nmsbench.registry import register

from ._cpu import JIT, balanced_row, box_iou, keep_from_sorted, sorted_inputs


@njit(parallel=True, **JIT)
def suppressed_by_any_parent(b, labels, iou_threshold):
    n = b.shape[0]
    suppressed = np.zeros(n, dtype=np.bool_)
    for k in prange(n):
        j = balanced_row(k, n)
        for i in range(j):
            if labels[i] == labels[j] and box_iou(b, i, j) > iou_threshold:
                suppressed[j] = True
                break
    return suppressed


@register(
    name="allpairs", family="allpairs", devices=("cpu",), exact=True, requires=("numba",),
    summary="numba prange: each box scans its higher-ranked boxes, class-aware",
    style=("#009E73", "triangle-up"),
)
def allpairs_cpu(boxes, scores, *, iou_threshold, labels=None):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    suppressed = suppressed_by_any_parent(sorted_boxes, sorted_labels, iou_threshold)
    return keep_from_sorted(order, np.flatnonzero(~suppressed))


# Candidates per block (one a thread) and parents per chunk of a block's grid row (NVRTC -D).
DEFINES = {"CANDIDATES": 128, "CHUNK": 1024}
CANDIDATES, CHUNK = DEFINES["CANDIDATES"], DEFINES["CHUNK"]
# sorted_boxes sorted_labels | n | threshold | suppressed
CUDA_MODULE = CudaModule("allpairs.cu", templates={"allpairs_kernel": "QQidQ"}, defines=DEFINES)


@register(
    name="allpairs", family="allpairs", devices=("cuda",), exact=True, requires=("cupy",), dtypes=CUDA_DTYPES,
    host_sync=True, checks_values=True,
    summary="CUDA: candidate tiles x chunks of parents through shared memory, flags, compaction",
)
def allpairs_cuda(boxes, scores, *, iou_threshold, labels=None, check_values=False):
    """``check_values``: run_nms's value rules, checked in the rank's launch."""
    n = boxes.shape[0]
    if n == 0:
        return NMSResult(torch.empty(0, dtype=torch.int64, device=boxes.device))
    suppressed = torch.zeros(n, dtype=torch.bool, device=boxes.device)
    verdict = input_verdict(boxes.device) if check_values else None
    with on_torch_stream(boxes.device) as launch:
        order, ranked = rank_by_score(launch, boxes, scores, labels, verdict=verdict)
        launch(
            CUDA_MODULE.get("allpairs_kernel", boxes.dtype, boxes.device),
            (blocks(n, CANDIDATES), blocks(n, CHUNK)), (CANDIDATES,),
            (ranked.sorted_boxes, ranked.sorted_labels, n, np.float64(iou_threshold), suppressed),
        )
    keep = order[~suppressed]  # the one host sync
    raise_if_bad_input(verdict, boxes, scores, "allpairs")
    return NMSResult(keep)
