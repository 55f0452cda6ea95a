"""torchvision's hard NMS, the reference every exact variant is held to.

With labels it runs ``torchvision.ops.nms`` once per class and merges by rank. That is
the per-class path ``batched_nms`` itself takes for large inputs; its small-input path
offsets boxes by ``label * (max_coordinate + 1)``, which rounds coordinates and so can
change IoUs near the threshold. Per class keeps the result exact.
"""

from __future__ import annotations

import torch
import torchvision

from nmsbench.boxes import NMSResult, score_order
from nmsbench.memory_guard import check_fits
from nmsbench.registry import register

SUMMARY = "torchvision.ops.nms; per-class nms merged by rank when labels are given"


@register(name="torchvision", family="hard", devices=("cpu",), exact=True, requires=("torchvision",), summary=SUMMARY,
          style=("#000000", "circle"))
@register(
    name="torchvision", family="hard", devices=("cuda",), exact=True, requires=("torchvision",), summary=SUMMARY,
    dtypes=(torch.float32, torch.float64, torch.float16), host_sync=True,
)
def torchvision_nms(boxes, scores, *, iou_threshold, labels=None):
    if labels is None or boxes.shape[0] == 0:
        _check_cuda_mask(boxes)
        return NMSResult(torchvision.ops.nms(boxes, scores, iou_threshold))
    parts = []
    for label in torch.unique(labels):
        members = (labels == label).nonzero().squeeze(1)
        _check_cuda_mask(members)
        parts.append(members[torchvision.ops.nms(boxes[members], scores[members], iou_threshold)])
    keep = torch.cat(parts).sort().values  # ascending input index, so the stable sort breaks ties by it
    return NMSResult(keep[score_order(scores[keep])])


def _check_cuda_mask(rows: torch.Tensor) -> None:
    """torchvision's CUDA kernel writes an N x N-bit mask (64-bit words) and copies it to
    the host for the resolve: both must fit (its CPU kernel needs O(N))."""
    if rows.device.type == "cuda":
        n = rows.shape[0]
        for where in (rows.device, "cpu"):
            check_fits("torchvision", 8 * n * -(-n // 64), where, n=n, formula="N²/8 bytes: its N x N-bit mask")
