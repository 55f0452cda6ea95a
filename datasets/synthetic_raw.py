"""Synthetic raw detector output shaped like YOLOv5's: [B, 25200, 85] at 640 x 640.

Three heads (strides 8, 16, 32; grids 80, 40, 20) with YOLOv5's three anchors each; rows
ordered head, anchor, y, x as YOLOv5's export orders them. Every row is decoded the
YOLOv5 way from random head outputs: cx = (2 sigmoid - 0.5 + grid x) x stride, w =
(2 sigmoid)^2 x anchor, objectness and 80 class probabilities are sigmoids. Background
rows get low objectness (logit ~ N(-7, 1.5)) and low class scores (logit ~ N(-5.5, 1.2)).

Each image holds 4..40 objects (a third of them class 0, "person", the rest uniform over
the 80 classes; sides log-uniform in 12..400 px). For every head and anchor that
YOLOv5's matching rule (side ratios within 4x) assigns to an object, the rows of the
cells within 2 cells of its centre predict it: a jittered copy of its box (more jitter
further out), objectness falling with the distance, the object's class probability high
and sometimes a confused second class. Candidates thus cluster around objects as a real
detector's do. Deterministic from ``seed``; image b of a batch is the same whatever B is.

``layout="yolov8"`` gives the same detections in YOLOv8's layout (:func:`to_yolov8`):
channels first, [B, 84, 25200], no objectness, class score = objectness x class.
"""

from __future__ import annotations

import numpy as np

INPUT_SIZE = 640
NUM_CLASSES = 80
STRIDES = (8, 16, 32)
ANCHORS = (((10, 13), (16, 30), (33, 23)), ((30, 61), (62, 45), (59, 119)), ((116, 90), (156, 198), (373, 326)))
ROWS = sum(3 * (INPUT_SIZE // s) ** 2 for s in STRIDES)  # 25,200


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def synthetic_raw(batch: int, seed: int = 0, layout: str = "yolov5") -> np.ndarray:
    """float32 [batch, 25200, 85] (``yolov5``) or [batch, 84, 25200] (``yolov8``); image b is
    drawn from ``(seed, b)``, so batches share their prefix."""
    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch}")
    if layout not in ("yolov5", "yolov8"):
        raise ValueError(f"layout must be yolov5 or yolov8, got {layout!r}")
    out = np.empty((batch, ROWS, 5 + NUM_CLASSES), dtype=np.float32)
    for b in range(batch):
        out[b] = _image(np.random.default_rng([seed, b]))
    return to_yolov8(out) if layout == "yolov8" else out


def to_yolov8(raw: np.ndarray) -> np.ndarray:
    """YOLOv5 rows [B, R, 5 + C] as a YOLOv8 head [B, 4 + C, R]: cx, cy, w, h, then class
    score = objectness x class probability (float32), channels first (contiguous)."""
    raw = np.asarray(raw, dtype=np.float32)
    rows = np.concatenate([raw[:, :, :4], raw[:, :, 5:] * raw[:, :, 4:5]], axis=2)
    return np.ascontiguousarray(rows.transpose(0, 2, 1))


def _image(rng: np.random.Generator) -> np.ndarray:
    heads = []
    for stride, anchors in zip(STRIDES, ANCHORS):
        g = INPUT_SIZE // stride
        gy, gx = np.meshgrid(np.arange(g, dtype=np.float32), np.arange(g, dtype=np.float32), indexing="ij")
        t = rng.standard_normal((3, g, g, 4), dtype=np.float32)
        head = np.empty((3, g, g, 5 + NUM_CLASSES), dtype=np.float32)
        s = _sigmoid(t)
        head[..., 0] = (2 * s[..., 0] - 0.5 + gx) * stride
        head[..., 1] = (2 * s[..., 1] - 0.5 + gy) * stride
        anchor = np.asarray(anchors, dtype=np.float32)
        head[..., 2] = (2 * s[..., 2]) ** 2 * anchor[:, 0, None, None]
        head[..., 3] = (2 * s[..., 3]) ** 2 * anchor[:, 1, None, None]
        head[..., 4] = _sigmoid(rng.normal(-7.0, 1.5, size=(3, g, g)).astype(np.float32))
        head[..., 5:] = _sigmoid(rng.normal(-5.5, 1.2, size=(3, g, g, NUM_CLASSES)).astype(np.float32))
        heads.append(head)

    n_objects = int(rng.integers(4, 41))
    labels = np.where(rng.random(n_objects) < 1 / 3, 0, rng.integers(0, NUM_CLASSES, n_objects))
    sides = np.exp(rng.uniform(np.log(12), np.log(400), size=(n_objects, 2)))
    centres = rng.uniform(0, INPUT_SIZE, size=(n_objects, 2))
    strength = rng.uniform(0.5, 1.0, n_objects)  # how clearly the detector sees the object
    for k in range(n_objects):
        w, h = sides[k]
        cx, cy = centres[k]
        for head, stride, anchors in zip(heads, STRIDES, ANCHORS):
            g = INPUT_SIZE // stride
            for a, (aw, ah) in enumerate(anchors):
                if max(w / aw, aw / w, h / ah, ah / h) >= 4.0:  # YOLOv5's anchor_t
                    continue
                gx0, gy0 = int(cx // stride), int(cy // stride)
                ys = np.arange(max(gy0 - 2, 0), min(gy0 + 3, g))
                xs = np.arange(max(gx0 - 2, 0), min(gx0 + 3, g))
                yy, xx = np.meshgrid(ys, xs, indexing="ij")
                d = np.hypot(xx + 0.5 - cx / stride, yy + 0.5 - cy / stride)  # distance in cells
                quality = strength[k] * np.exp(-0.5 * d**2) * rng.uniform(0.6, 1.0, d.shape)
                better = quality > head[a, yy, xx, 4]  # a row predicts the object it sees best
                yy, xx, d, quality = yy[better], xx[better], d[better], quality[better]
                m = len(quality)
                if not m:
                    continue
                jitter = 0.04 * (1 + d)
                rows = head[a, yy, xx]
                rows[:, 0] = cx + rng.normal(0, 1, m) * jitter * w
                rows[:, 1] = cy + rng.normal(0, 1, m) * jitter * h
                rows[:, 2] = w * np.exp(rng.normal(0, 1, m) * jitter)
                rows[:, 3] = h * np.exp(rng.normal(0, 1, m) * jitter)
                rows[:, 4] = quality
                rows[:, 5:] = np.minimum(rows[:, 5:], 0.05)  # forget an object the row saw less well
                rows[:, 5 + labels[k]] = rng.uniform(0.6, 0.97, m)
                confused = rng.random(m) < 0.2
                rows[confused, 5 + rng.integers(0, NUM_CLASSES, int(confused.sum()))] = rng.uniform(0.1, 0.5, int(confused.sum()))
                head[a, yy, xx] = rows
    return np.concatenate([head.reshape(-1, 5 + NUM_CLASSES) for head in heads])
