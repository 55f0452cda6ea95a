"""``onnxruntime_nms``: ONNX Runtime's ``NonMaxSuppression`` operator over the whole batch
(CPU execution provider), as an exported model ends.

decode: the numpy reference's decode (the pipelines' rule), written into padded arrays,
boxes [B, N, 4] and scores [B, C, N] (N: the most candidates of an image; a candidate
scores only its label, the rest of its column is 0 and padding is 0, never above a
threshold >= 0); nms: one run of a one-node model (built with the ``onnx`` helper API,
once per process) with ``score_threshold`` and ``max_output_boxes_per_class`` = N, then
per image the kept candidates by score (ties: lower raw row), the first ``max_det``.

The operator compares its float32 IoU with the threshold in float32 (torchvision: in
float64), so a pair whose IoU lies between float32(iou) and iou is decided otherwise;
the benchmark counts any difference against the reference.
"""

from __future__ import annotations

import functools

import numpy as np

from nmsbench.pipeline import RULE, Detections, Pipeline, PipelineConfig, Prepared, decode_numpy, register_pipeline


@functools.lru_cache(maxsize=1)
def session():
    """The model: boxes [B, N, 4], scores [B, C, N], max boxes a class, IoU and score thresholds
    -> selected [K, 3] (image, class, box)."""
    from nmsbench.onnx_model import nms_session

    return nms_session("batched_nms", [None, None, 4], [None, None, None], score_threshold=True)


def _build(raw: np.ndarray, config: PipelineConfig, device: str) -> Prepared:
    raw = np.ascontiguousarray(raw, dtype=np.float32)
    batch = raw.shape[0]
    classes = raw.shape[1 if config.layout == "yolov8" else 2] - (4 if config.layout == "yolov8" else 5)
    run = session().run
    constants = {"iou_threshold": np.array([config.iou_threshold], dtype=np.float32),
                 "score_threshold": np.array([config.conf_threshold], dtype=np.float32)}

    def decode():
        candidates = decode_numpy(raw, config.conf_threshold, config.input_size, config.layout, RULE)
        n = max((len(c.rows) for c in candidates), default=0)
        boxes = np.zeros((batch, n, 4), dtype=np.float32)
        scores = np.zeros((batch, classes, n), dtype=np.float32)
        for b, c in enumerate(candidates):
            k = len(c.rows)
            boxes[b, :k] = c.boxes
            scores[b, c.labels, np.arange(k)] = c.scores
        return candidates, boxes, scores

    def nms(decoded) -> list[Detections]:
        candidates, boxes, scores = decoded
        if boxes.shape[1] == 0:
            selected = np.zeros((0, 3), dtype=np.int64)
        else:
            selected = run(None, {"boxes": boxes, "scores": scores, **constants,
                                  "max_output_boxes_per_class": np.array([boxes.shape[1]], dtype=np.int64)})[0]
        out = []
        for b, c in enumerate(candidates):
            kept = selected[selected[:, 0] == b, 2]
            kept = kept[np.lexsort((c.rows[kept], -c.scores[kept]))][:config.max_det]
            out.append(Detections(c.rows[kept], c.boxes[kept], c.scores[kept], c.labels[kept]))
        return out

    return Prepared(decode, nms)


register_pipeline(Pipeline(
    name="onnxruntime_nms", devices=("cpu",), nms_family="hard", build=_build, requires=("onnxruntime", "onnx"),
    summary="numpy decode into padded [B, N, 4] boxes and [B, C, N] scores, ONNX Runtime's NonMaxSuppression "
            "(CPU) on the whole batch, per-image max_det",
))
