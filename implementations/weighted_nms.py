"""Weighted (merge) NMS (family ``weighted``, nmsbench.families), as YOLOv5's
``non_max_suppression(..., merge=True)``: greedy NMS keeps its boxes, then each kept box
moves to the score-weighted mean of the same-label boxes overlapping it above the
threshold, itself included.

``weighted_nms`` (numba, CPU): the greedy keep in rank order (each kept box removes the
later boxes it overlaps), then one pass over every box per kept box, the kept boxes
split over the threads.
``weighted_nms`` (CUDA): hard_fused's greedy keep, then weighted_nms.cu's merge: a warp per
kept box tests 32 boxes at a time and adds those that count in input order, in double,
so the moved boxes equal the CPU backend's bit for bit. The merge is queued right behind
the keep and reads the kept count on the device, so the call waits once, as hard_fused's.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import prange

from nmsbench.boxes import NMSResult
from nmsbench.cuda import CUDA_DTYPES, CompiledLaunch, CudaModule, blocks, cached_plan, device_index
from nmsbench.registry import register

from ._cpu import box_iou, greedy_kept, serial_and_parallel, sorted_inputs
from .hard_fused import cuda as hard_fused_cuda


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
    style=("#800000", "square-x"),
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
# boxes scores labels | n threshold | kept kept_count | out
CUDA_MODULE = CudaModule("weighted_nms.cu", templates={"merge_kernel": "QQQidQQQ"}, defines=DEFINES)
_merges: dict[tuple, CompiledLaunch] = {}  # (n, dtype, device) -> the merge's launch


def merge_launch(n: int, dtype: torch.dtype, device: torch.device) -> CompiledLaunch:
    """merge_kernel's launch for ``n`` boxes: a warp for each box that the keep may keep."""
    return cached_plan(_merges, (n, dtype, device), lambda: CompiledLaunch(
        CUDA_MODULE.get("merge_kernel", dtype, device), (blocks(n, MERGE_WARPS),), (32 * MERGE_WARPS,),
        CUDA_MODULE.codes["merge_kernel"], device_index(device)))


@register(
    name="weighted_nms", family="weighted", devices=("cuda",), exact=True, requires=("cupy",), dtypes=CUDA_DTYPES,
    host_sync=True, checks_values=True,
    summary="CUDA: hard_fused's keep, then a warp per kept box merges 32 boxes a step (sums in input order, double); "
            "one wait",
)
def weighted_nms_cuda(boxes, scores, *, iou_threshold, labels=None, check_values=False):
    """``check_values``: run_nms's value rules, checked by the keep's first launch. The merge
    is queued behind the keep and reads its count on the device: the host waits once."""
    n, device = boxes.shape[0], boxes.device
    if n == 0:
        return NMSResult(torch.zeros(0, dtype=torch.int64, device=device),
                         boxes=torch.zeros((0, 4), dtype=boxes.dtype, device=device))
    keep = hard_fused_cuda.launch_paths(boxes, scores, iou_threshold, labels, False, None, check_values,
                                        hard_fused_cuda.CUDA_MODULE, "weighted_nms")
    moved = torch.empty((n, 4), dtype=boxes.dtype, device=device)
    labels_at = 0 if keep.labels is None else keep.labels.data_ptr()
    merge_launch(n, boxes.dtype, device)(keep.stream, keep.boxes.data_ptr(), keep.scores.data_ptr(), labels_at, n,
                                         float(iou_threshold), keep.keep_at, keep.count_at, moved.data_ptr())
    kept = hard_fused_cuda.wait_for_keep(keep, "weighted_nms").keep
    return NMSResult(kept, boxes=moved[:kept.shape[0]])
