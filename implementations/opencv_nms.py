"""OpenCV's ``cv2.dnn.NMSBoxes`` (and ``NMSBoxesBatched`` with labels), family ``hard``.
Only the scores' order matters to it; it is given their ranks (below).

OpenCV takes boxes as (x, y, width, height) rectangles in double precision and measures
overlap as 1 - its Jaccard distance; the corners it recomputes (x + width) and that
subtraction round differently from torchvision's x1, y1, x2, y2 arithmetic, so it is
greedy NMS to rounding, not index-exact. ``NMSBoxesBatched`` separates labels by
offsetting each label's boxes, as torchvision's ``batched_nms`` does, which rounds again.
"""

from __future__ import annotations

import numpy as np
import torch

from nmsbench.boxes import NMSResult, score_order
from nmsbench.registry import register


@register(
    name="opencv", family="hard", devices=("cpu",), requires=("cv2",),
    summary="OpenCV's cv2.dnn.NMSBoxes (NMSBoxesBatched with labels), rectangles in double",
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
    if labels is None:
        kept = cv2.dnn.NMSBoxes(rects, ranks, 0.0, float(iou_threshold))
    else:
        kept = cv2.dnn.NMSBoxesBatched(rects, ranks, labels.detach().to(torch.int32).numpy(), 0.0, float(iou_threshold))
    kept = torch.from_numpy(np.asarray(kept, dtype=np.int64).reshape(-1))
    return NMSResult(kept[score_order(scores[kept])]) if kept.numel() else NMSResult(kept)
