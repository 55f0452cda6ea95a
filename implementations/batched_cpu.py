"""Batched NMS on the CPU: numba, images in parallel (``prange``), each image as the
CUDA kernels define it (batched_nms.cu), so both backends give the same detections bit
for bit. ``nmsbench.batched`` validates the inputs and calls :func:`run` for CPU tensors.

Per image: the candidates (score above the threshold: the best class, the first of equal
best, or with multi-label every class), in candidate-index order (box i, then class c:
index i * C + c with multi-label, i otherwise), gathered in one pass over the rows that
can have any (YOLOv5: objectness above the threshold; YOLOv8: a class above it, found by
a scan along the anchors); none at all where more than ``capacity`` passed (the overflow
the CUDA buffer reports); a stable sort by descending score; the
first ``top_k``; then greedy NMS in that order against the detections so far, which is
greedy NMS per class (a kept candidate of a class that already has ``max_per_class``
detections is no detection, and could only suppress candidates of its class, which are
none either), until ``max_output`` detections.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from ._cpu import JIT, box_iou, serial_and_parallel

LAYOUT_SCORES, LAYOUT_YOLOV5, LAYOUT_YOLOV8 = 0, 1, 2  # batched_nms.cu's LAYOUT_*


@njit(inline="always", **JIT)
def _class_score(layout, data, scores, b, i, c, objectness):
    if layout == LAYOUT_SCORES:
        return scores[b, i, c]
    if layout == LAYOUT_YOLOV5:
        return objectness * data[b, i, 5 + c]
    return data[b, 4 + c, i]


@njit(inline="always", **JIT)
def _row_value(layout, data, b, i, k):
    if layout == LAYOUT_YOLOV8:
        return data[b, k, i]
    return data[b, i, k]


@njit(**JIT)
def _channels_first_scan(data, b, n, classes, threshold, multi_label):
    """YOLOv8's channels-first image read a class at a time, along its contiguous anchors
    (an anchor's class scores are a whole row apart): per anchor, with multi-label how many
    classes are above the threshold, else the best class above it (the first of equal best,
    as an anchor's own loop finds it; -1 where none)."""
    if multi_label:
        above = np.zeros(n, dtype=np.int64)
        for c in range(classes):
            for i in range(n):
                above[i] += data[b, 4 + c, i] > threshold
        return above
    best_score = np.full(n, threshold, dtype=data.dtype)
    best = np.full(n, -1, dtype=np.int64)
    for c in range(classes):
        for i in range(n):
            s = data[b, 4 + c, i]
            if s > best_score[i]:
                best_score[i] = s
                best[i] = c
    return best


@njit(**JIT)
def _grown(values, size):
    """``values`` (1-D or rows of 2-D) copied into the first rows of a new array of ``size`` rows."""
    out = np.empty((size,) + values.shape[1:], dtype=values.dtype)
    out[:values.shape[0]] = values
    return out


@njit(**JIT)
def _rows_above(data, b, n, threshold):
    """YOLOv5: the rows of image b whose objectness is above ``threshold``, in order."""
    rows = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        if data[b, i, 4] > threshold:
            rows[k] = i
            k += 1
    return rows[:k]


FIRST_CANDIDATES = 4096  # the candidate arrays' first size (they double as they fill)


@njit(**JIT)
def _image(b, layout, data, scores, labels, has_labels, cxcywh, n, classes, multi_label, threshold, half, iou_threshold,
           max_output, max_per_class, class_agnostic, top_k, capacity, out_boxes, out_scores, out_classes, out_indices,
           num_detections, overflow, num_candidates):
    """One image (``threshold`` and ``half`` are scalars of the arithmetic type)."""
    # YOLOv8: which anchors have candidates, from a scan along the anchors (an anchor's own
    # loop over its classes would stride across the whole image)
    scanned = layout == LAYOUT_YOLOV8
    best = _channels_first_scan(data, b, n, classes, threshold, multi_label) if scanned else np.empty(0, np.int64)
    # the candidates in candidate-index order, in one pass over the rows: up to `capacity`
    # kept (the arrays grow as they fill), all counted; none where more than `capacity` passed
    limit = min(capacity, n * classes if multi_label else n)
    size = max(1, min(limit, FIRST_CANDIDATES))
    cand_score = np.empty(size, dtype=out_scores.dtype)
    cand_box = np.empty((size, 4), dtype=out_boxes.dtype)
    cand_class = np.empty(size, dtype=np.int64)
    cand_index = np.empty(size, dtype=np.int64)
    # YOLOv5: the rows whose objectness is above the threshold, found by a loop of their own
    # (the rows' loop below, with the candidates' work in it, ran it several times slower)
    objectness_first = layout == LAYOUT_YOLOV5
    rows = _rows_above(data, b, n, threshold) if objectness_first else np.empty(0, np.int64)
    count = 0
    for r in range(rows.shape[0] if objectness_first else n):
        i = rows[r] if objectness_first else r
        if scanned and best[i] <= (0 if multi_label else -1):
            continue
        objectness = data[b, i, 4] if objectness_first else half  # read by the YOLOv5 layout only
        first, stop, top, top_score = 0, classes, -1, threshold
        if scanned:
            if not multi_label:
                first, stop = best[i], best[i] + 1
        else:
            # the best class; with multi-label, whether any is above the threshold (this tight
            # loop is several times faster than the candidates' loop below, which then takes
            # only the rows with a candidate)
            for c in range(classes):
                s = _class_score(layout, data, scores, b, i, c, objectness)
                if s > top_score:
                    top_score = s
                    top = c
            if top < 0:
                continue
            if not multi_label:
                first, stop = top, top + 1
        x0 = _row_value(layout, data, b, i, 0)
        y0 = _row_value(layout, data, b, i, 1)
        x1 = _row_value(layout, data, b, i, 2)
        y1 = _row_value(layout, data, b, i, 3)
        if cxcywh:  # torchvision's box_convert: cx - 0.5 * w, ...
            half_w, half_h = half * x1, half * y1
            x0, y0, x1, y1 = x0 - half_w, y0 - half_h, x0 + half_w, y0 + half_h
        # room for the row's candidates (at most stop - first) before their loop, so that the
        # loop never replaces an array (numba's loop is slower where it may)
        wanted = min(limit, count + stop - first)
        if wanted > size:
            while size < wanted:
                size = min(limit, 2 * size)
            cand_score, cand_box = _grown(cand_score, size), _grown(cand_box, size)
            cand_class, cand_index = _grown(cand_class, size), _grown(cand_index, size)
        for c in range(first, stop):
            s = _class_score(layout, data, scores, b, i, c, objectness)
            if not s > threshold:
                continue
            if count < limit:
                cand_score[count] = s
                cand_box[count, 0] = x0
                cand_box[count, 1] = y0
                cand_box[count, 2] = x1
                cand_box[count, 3] = y1
                cand_class[count] = labels[b, i] if has_labels else c
                cand_index[count] = i * classes + c if multi_label else i
            count += 1
    num_candidates[b] = count
    overflow[b] = count > capacity
    if count > capacity:
        return
    # rank order: descending score, ties by the lower candidate index (the fill order);
    # -0.0 and 0.0 are equal, as in the kernels' keys
    order = np.argsort(-cand_score[:count], kind="mergesort")
    ranked = min(count, top_k)
    kept = np.empty(max(1, min(ranked, max_output)), dtype=np.int64)
    out = 0
    for p in range(ranked):
        if out >= max_output:
            break
        j = order[p]
        if max_per_class < max_output:
            same = 0
            for o in range(out):
                same += class_agnostic or cand_class[kept[o]] == cand_class[j]
            if same >= max_per_class:
                continue
        suppressed = False
        for o in range(out):
            q = kept[o]
            if (class_agnostic or cand_class[q] == cand_class[j]) and box_iou(cand_box, q, j) > iou_threshold:
                suppressed = True
                break
        if suppressed:
            continue
        kept[out] = j
        out_boxes[b, out, :] = cand_box[j, :]
        out_scores[b, out] = cand_score[j]
        out_classes[b, out] = cand_class[j]
        out_indices[b, out] = cand_index[j] // classes if multi_label else cand_index[j]
        out += 1
    num_detections[b] = out


def _images(layout, data, scores, labels, has_labels, cxcywh, n, classes, multi_label, threshold, half, iou_threshold,
            max_output, max_per_class, class_agnostic, top_k, capacity, out_boxes, out_scores, out_classes, out_indices,
            num_detections, overflow, num_candidates):
    for b in prange(num_detections.shape[0]):
        _image(b, layout, data, scores, labels, has_labels, cxcywh, n, classes, multi_label, threshold, half,
               iou_threshold, max_output, max_per_class, class_agnostic, top_k, capacity, out_boxes, out_scores,
               out_classes, out_indices, num_detections, overflow, num_candidates)


_images_serial, _images_parallel = serial_and_parallel(_images)


def run(data: torch.Tensor, scores: torch.Tensor | None, labels: torch.Tensor | None, *, layout: str, cxcywh: bool,
        n: int, classes: int, multi_label: bool, class_agnostic: bool, iou_threshold: float, score_threshold: float,
        max_output: int, max_per_class: int, top_k: int, capacity: int) -> tuple[torch.Tensor, ...]:
    """The padded outputs, as ``batched_nms.run`` (the CUDA side) documents them, for
    validated CPU inputs. float16 is computed in float32, as on the GPU, and its boxes and
    scores rounded to float16 at the end."""
    from .batched_nms import LAYOUTS

    dtype, batch = data.dtype, data.shape[0]
    arith = np.float64 if dtype == torch.float64 else np.float32
    host = data.detach().contiguous().numpy() if dtype != torch.float16 else data.detach().float().contiguous().numpy()
    if scores is None:
        score_array = np.zeros((1, 1, 1), dtype=arith)
    else:
        score_array = (scores.detach().float() if dtype == torch.float16 else scores.detach()).contiguous().numpy()
        score_array = score_array.reshape(batch, n, classes)
    label_array = np.zeros((1, 1), dtype=np.int64) if labels is None else labels.detach().contiguous().numpy()
    out_boxes = np.zeros((batch, max_output, 4), dtype=arith)
    out_scores = np.zeros((batch, max_output), dtype=arith)
    out_classes = np.full((batch, max_output), -1, dtype=np.int64)
    out_indices = np.full((batch, max_output), -1, dtype=np.int64)
    num_detections = np.zeros(batch, dtype=np.int64)
    overflow = np.zeros(batch, dtype=np.bool_)
    num_candidates = np.zeros(batch, dtype=np.int64)
    if batch:
        images = _images_parallel if batch > 1 else _images_serial
        images(LAYOUTS[layout], host, score_array, label_array, labels is not None, cxcywh, n, classes, multi_label,
               arith(score_threshold), arith(0.5), float(iou_threshold), max_output, max_per_class, class_agnostic,
               top_k, capacity, out_boxes, out_scores, out_classes, out_indices, num_detections, overflow,
               num_candidates)
    boxes, out = torch.from_numpy(out_boxes), torch.from_numpy(out_scores)
    if dtype == torch.float16:
        boxes, out = boxes.to(torch.float16), out.to(torch.float16)
    return (torch.from_numpy(num_detections), boxes, out, torch.from_numpy(out_classes), torch.from_numpy(out_indices),
            torch.from_numpy(overflow), torch.from_numpy(num_candidates))
