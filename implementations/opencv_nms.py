"""OpenCV's ``cv2.dnn.NMSBoxes``, family ``hard``; with labels, once per label's boxes.
Only the scores' order matters to it; it is given their ranks (below).

OpenCV takes boxes as (x, y, width, height) rectangles in double precision and measures
overlap as 1 - its Jaccard distance; the corners it recomputes (x + width) and that
subtraction round differently from torchvision's x1, y1, x2, y2 arithmetic, so it is
greedy NMS to rounding, not index-exact. Labels are not passed to ``NMSBoxesBatched``: it
takes int32 class ids (labels 0 and 2**32 would be one class) and separates classes by
shifting each box by ``class_id * (max coordinate + 1)``, which lets boxes of different
classes overlap where coordinates are negative and rounds large ones. Per label (as the
ONNX Runtime entry and torchvision's own large-input ``batched_nms`` path do), every label
keeps its full int64 identity and only same-label boxes ever meet.
"""

from __future__ import annotations

import numpy as np
import torch

from nmsbench.boxes import NMSResult
from nmsbench.registry import register

from ._cpu import kept_per_label, result_by_score


@register(
    name="opencv", family="hard", devices=("cpu",), requires=("cv2",),
    summary="OpenCV's cv2.dnn.NMSBoxes (per label with labels), rectangles in double",
    style=("#FF004C", "triangle-ne"),
)
def opencv_nms(boxes, scores, *, iou_threshold, labels=None):
    import cv2

    if boxes.shape[0] == 0:
        return NMSResult(torch.empty(0, dtype=torch.int64))
    b = boxes.detach().to(torch.float64).numpy()
    rects = np.stack([b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], axis=1)
    # OpenCV takes float32 scores above a threshold >= 0: it is given each score's dense rank
    # from the bottom (1, 2, ...), which keeps the order and the ties of any scores exactly
    ranks = (torch.unique(scores.detach(), return_inverse=True)[1] + 1).to(torch.float32).numpy()
    kept = kept_per_label(lambda where: cv2.dnn.NMSBoxes(rects[where], ranks[where], 0.0, float(iou_threshold)), labels)
    return result_by_score(kept, scores)
