"""Weighted (merge) NMS (family ``weighted``, nmsbench.families), as YOLOv5's
``non_max_suppression(..., merge=True)``: greedy NMS keeps its boxes, then each kept box
moves to the score-weighted mean of the same-label boxes overlapping it above the
threshold, itself included.

``weighted_nms`` (numba, CPU): the greedy keep in rank order (each kept box removes the
later boxes it overlaps), then one pass over every box per kept box, the kept boxes
split over the threads.
``weighted_nms`` (CUDA): hard_fused's greedy keep, then weighted_nms.cu's merge: a warp per
kept box tests 32 boxes at a time and adds those that count in input order, in double,
so the moved boxes equal the CPU backend's bit for bit.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import prange

from nmsbench.boxes import NMSResult
from nmsbench.registry import register

from ._cpu import box_iou, greedy_kept, serial_and_parallel, sorted_inputs
from ._cuda import CUDA_DTYPES, CudaModule, blocks, on_torch_stream
from .hard_fused import hard_fused_cuda


def merged_boxes(b, labels, scores, kept, iou_threshold):
    """Each kept row moved to the float64 weighted mean (weights max(score, 0), in input
    order) of its same-label rows over the threshold and itself; ``b``, ``labels`` and
    ``scores`` in input order, ``kept`` input indices."""
    n = b.shape[0]
    out = np.empty((kept.shape[0], 4), dtype=np.float64)
    for t in prange(kept.shape[0]):
        m = kept[t]
        a0 = a1 = a2 = a3 = total = 0.0
        for j in range(n):
            if labels[j] != labels[m] or not (j == m or box_iou(b, m, j) > iou_threshold):
                continue
            w = max(np.float64(scores[j]), 0.0)
            total += w
            a0 += w * np.float64(b[j, 0])
            a1 += w * np.float64(b[j, 1])
            a2 += w * np.float64(b[j, 2])
            a3 += w * np.float64(b[j, 3])
        if total > 0:
            out[t, 0], out[t, 1], out[t, 2], out[t, 3] = a0 / total, a1 / total, a2 / total, a3 / total
        else:
            for c in range(4):
                out[t, c] = b[m, c]
    return out


merged_boxes_serial, merged_boxes_parallel = serial_and_parallel(merged_boxes)
PARALLEL_MIN = 1 << 20  # kept boxes x boxes from which the merge is split over the threads


@register(
    name="weighted_nms", family="weighted", devices=("cpu",), exact=True, requires=("numba",),
    summary="numba: greedy keep in rank order, then each kept box's weighted mean over all boxes (threads over kept boxes)",
)
def weighted_nms_cpu(boxes, scores, *, iou_threshold, labels=None):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    keep = order[torch.from_numpy(greedy_kept(sorted_boxes, sorted_labels, float(iou_threshold)))]
    n = boxes.shape[0]
    b = boxes.detach().contiguous().numpy()
    lab = np.zeros(n, dtype=np.int64) if labels is None else labels.detach().to(torch.int64).contiguous().numpy()
    merge = merged_boxes_parallel if keep.shape[0] * n >= PARALLEL_MIN else merged_boxes_serial
    moved = merge(b, lab, scores.detach().contiguous().numpy(), keep.numpy(), float(iou_threshold))
    return NMSResult(keep, boxes=torch.from_numpy(moved).to(boxes.dtype))


# Kept boxes (a warp each) per block and input boxes staged in shared memory at a time (NVRTC -D).
DEFINES = {"MERGE_WARPS": 8, "MERGE_TILE": 256}
MERGE_WARPS = DEFINES["MERGE_WARPS"]
# boxes scores labels | n threshold | kept k | out
CUDA_MODULE = CudaModule("weighted_nms.cu", templates={"merge_kernel": "QQQidQiQ"}, defines=DEFINES)


@register(
    name="weighted_nms", family="weighted", devices=("cuda",), exact=True, requires=("cupy",), dtypes=CUDA_DTYPES,
    host_sync=True, checks_values=True,
    summary="CUDA: hard_fused's keep, then a warp per kept box merges 32 boxes a step (sums in input order, double)",
)
def weighted_nms_cuda(boxes, scores, *, iou_threshold, labels=None, check_values=False):
    """``check_values``: run_nms's value rules, checked by hard_fused's first launch."""
    keep = hard_fused_cuda(boxes, scores, iou_threshold=iou_threshold, labels=labels, check_values=check_values).keep
    k, n, device = keep.shape[0], boxes.shape[0], boxes.device
    moved = torch.empty((k, 4), dtype=torch.float64, device=device)
    if k:
        labels = None if labels is None else labels.to(torch.int64).contiguous()
        with on_torch_stream(device) as launch:
            launch(CUDA_MODULE.get("merge_kernel", boxes.dtype, device), (blocks(k, MERGE_WARPS),), (32 * MERGE_WARPS,),
                   (boxes.contiguous(), scores.contiguous(), labels, n, np.float64(iou_threshold), keep, k, moved))
    # float16 boxes are computed in float32: their means round to float32 first, as the
    # CPU backend's on the float32 copy do
    if boxes.dtype == torch.float16:
        moved = moved.to(torch.float32)
    return NMSResult(keep, boxes=moved.to(boxes.dtype))
