"""ONNX Runtime's ``NonMaxSuppression`` operator (family ``hard``), as a deployed model
calls it: a one-node model built once per process, run on the CPU execution provider.

The operator works in float32 and compares its IoU with the threshold as a float32 input,
so it is greedy NMS to float32 rounding (not index-exact against torchvision, which
compares in float64). Labels: the operator's per-class NMS runs on each label's boxes
(its classes axis holds one class a run). Its kept boxes are ordered here by descending
score, ties by lower input index, as every entry's output is.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from nmsbench.registry import register

from nmsbench.onnx_model import nms_session

from ._cpu import kept_per_label, result_by_score

@functools.lru_cache(maxsize=1)
def session():
    """The one-node model: boxes [1, N, 4], scores [1, 1, N], max boxes, IoU threshold -> selected [K, 3]."""
    return nms_session("nms", [1, None, 4], [1, 1, None])


def _selected(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Indices into ``boxes`` the operator keeps."""
    if boxes.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    out = session().run(None, {"boxes": boxes[None], "scores": scores[None, None],
                               "max_output_boxes_per_class": np.array([boxes.shape[0]], dtype=np.int64),
                               "iou_threshold": np.array([iou_threshold], dtype=np.float32)})[0]
    return out[:, 2]


@register(
    name="onnxruntime", family="hard", devices=("cpu",), requires=("onnxruntime", "onnx"), dtypes=(torch.float32,),
    summary="ONNX Runtime's NonMaxSuppression operator (CPU provider), float32, per label",
    style=("#8465FF", "octagon"),
)
def onnxruntime_nms(boxes, scores, *, iou_threshold, labels=None):
    b = boxes.detach().contiguous().numpy()
    s = scores.detach().contiguous().numpy()
    return result_by_score(kept_per_label(lambda where: _selected(b[where], s[where], iou_threshold), labels), scores)
