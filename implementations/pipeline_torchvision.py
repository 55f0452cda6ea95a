"""``torchvision_batched_nms``: the whole batch in one ``torchvision.ops.batched_nms`` call.

decode: every image's candidates at once with torch ops (the pipelines' rule, see
``nmsbench.pipeline``), flat in (image, raw row) order; nms: one ``batched_nms`` whose
groups are ``image x C + label`` (images and classes kept apart), then per image the
``max_det`` best by score (ties: lower raw row). The split into images reads the
per-image counts on the host (one synchronization, at the end).

``batched_nms`` chooses its own method by size: per group ``nms`` calls past 4000 box
coordinates on the CPU (20000 on CUDA), below that the coordinate offset trick, whose
offsets round as ultralytics' do; any difference is counted against the reference.
"""

from __future__ import annotations

import numpy as np
import torch

from nmsbench.pipeline import LAYOUT_FIELDS, Detections, Pipeline, PipelineConfig, Prepared, register_pipeline


def decode_batch(raw: torch.Tensor, threshold: float, layout: str):
    """(image, row, boxes, scores, labels) of every candidate of the batch, image-major."""
    fields = LAYOUT_FIELDS[layout]
    if layout == "yolov8":  # reduced over the classes on the channels-first head
        best_score, best = raw[:, fields:].max(dim=1)
        image, row = (best_score > threshold).nonzero(as_tuple=True)
        q, label, score = raw.transpose(1, 2)[image, row], best[image, row], best_score[image, row]
    else:
        image, row = (raw[:, :, 4] > threshold).nonzero(as_tuple=True)
        q = raw[image, row]
        score, label = (q[:, fields:] * q[:, 4:5]).max(dim=1)
        passed = score > threshold
        image, row, q, label, score = image[passed], row[passed], q[passed], label[passed], score[passed]
    half = q[:, 2:4] * 0.5
    boxes = torch.cat([q[:, :2] - half, q[:, :2] + half], dim=1)
    return image, row, boxes, score, label


def _build(raw: np.ndarray, config: PipelineConfig, device: str) -> Prepared:
    import torchvision

    tensor = torch.from_numpy(np.ascontiguousarray(raw, dtype=np.float32)).to(device)
    batch = tensor.shape[0]
    classes = tensor.shape[1 if config.layout == "yolov8" else 2] - LAYOUT_FIELDS[config.layout]
    threshold = float(np.float32(config.conf_threshold))

    def decode():
        return decode_batch(tensor, threshold, config.layout)

    def nms(candidates) -> list[Detections]:
        image, row, boxes, scores, labels = candidates
        keep = torchvision.ops.batched_nms(boxes, scores, image * classes + labels, config.iou_threshold)
        keep = keep.sort().values  # candidate order: image, then raw row
        keep = keep[torch.sort(scores[keep], descending=True, stable=True).indices]
        keep = keep[torch.sort(image[keep], stable=True).indices]  # by image, each by score
        per_image = torch.bincount(image[keep], minlength=batch)
        start = per_image.cumsum(0) - per_image
        rank = torch.arange(keep.shape[0], device=keep.device) - start[image[keep]]
        keep = keep[rank < config.max_det]
        counts = torch.bincount(image[keep], minlength=batch).tolist()
        parts = [keep_b for keep_b in torch.split(keep, counts)]
        return [Detections(row[k], boxes[k], scores[k], labels[k]) for k in parts]

    return Prepared(decode, nms)


register_pipeline(Pipeline(
    name="torchvision_batched_nms", devices=("cpu", "cuda"), nms_family="hard", build=_build,
    requires=("torchvision",),
    summary="torch decode of the whole batch, one torchvision.ops.batched_nms call (groups: image x C + class), "
            "per-image max_det",
))
