"""``ultralytics_loop``: post-processing as ultralytics' ``non_max_suppression`` does it,
image by image in Python.

Per image: the rows whose best score is above the threshold (yolov5: objectness first,
then objectness x class), boxes cx, cy, w, h -> x1, y1, x2, y2, the best class; then the
class offsets trick (``boxes + label * max_wh``, max_wh = 7680) so that one
``torchvision.ops.nms`` call keeps classes apart, at most ``max_nms`` = 30000 candidates
(the best by score) into it, and the first ``max_det`` it keeps. Ultralytics' time limit
(``time_limit``, which stops the loop early and returns fewer images' detections) is left
out: every image is processed, so the output is complete and comparable.

The offsets round: a box moved by 7680 x label loses float32 precision, so an IoU near the
threshold may be decided otherwise than on the plain boxes; the benchmark counts any such
difference against the reference (on boxes of a coarse grid the offsets are exact).
"""

from __future__ import annotations

import numpy as np
import torch

from nmsbench.pipeline import LAYOUT_FIELDS, Detections, Pipeline, PipelineConfig, Prepared, register_pipeline

MAX_WH = 7680  # ultralytics' class offset (pixels)
MAX_NMS = 30000  # ultralytics' cap on the boxes into one nms call


def _xywh2xyxy(x: torch.Tensor) -> torch.Tensor:
    half = x[:, 2:4] / 2
    return torch.cat([x[:, :2] - half, x[:, :2] + half], dim=1)


def _build(raw: np.ndarray, config: PipelineConfig, device: str) -> Prepared:
    import torchvision

    tensor = torch.from_numpy(np.ascontiguousarray(raw, dtype=np.float32)).to(device)
    v8 = config.layout == "yolov8"
    threshold = float(np.float32(config.conf_threshold))
    fields = LAYOUT_FIELDS[config.layout]

    def decode() -> list[Detections]:
        out = []
        for prediction in tensor:
            if v8:  # as ultralytics: the candidate test on the channels-first head, then rows
                rows = (prediction[fields:].amax(0) > threshold).nonzero()[:, 0]
                x = prediction.T[rows]
                scores = x[:, fields:]
            else:
                rows = (prediction[:, 4] > threshold).nonzero()[:, 0]
                x = prediction[rows]
                scores = x[:, fields:] * x[:, 4:5]
            conf, label = scores.max(1)
            passed = conf > threshold
            rows, box, conf, label = rows[passed], _xywh2xyxy(x[passed, :4]), conf[passed], label[passed]
            if conf.shape[0] > MAX_NMS:
                best = conf.argsort(descending=True, stable=True)[:MAX_NMS]
                rows, box, conf, label = rows[best], box[best], conf[best], label[best]
            out.append(Detections(rows, box, conf, label))
        return out

    def nms(candidates: list[Detections]) -> list[Detections]:
        out = []
        for c in candidates:
            offsets = c.labels[:, None].to(c.boxes.dtype) * MAX_WH
            keep = torchvision.ops.nms(c.boxes + offsets, c.scores, config.iou_threshold)[:config.max_det]
            out.append(Detections(c.rows[keep], c.boxes[keep], c.scores[keep], c.labels[keep]))
        return out

    return Prepared(decode, nms)


register_pipeline(Pipeline(
    name="ultralytics_loop", devices=("cpu", "cuda"), nms_family="hard", build=_build, requires=("torchvision",),
    summary="ultralytics' non_max_suppression: per image in Python, filter, class offsets, torchvision nms, "
            "max_det (no time limit)",
))
