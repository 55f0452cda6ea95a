"""Synthetic box generators, one per scenario, on a square canvas.

Each generator takes ``(rng, n, t, classes, extent)`` (``t`` = the overlap knob, already
checked; ``extent`` = the canvas side the boxes are placed on) and returns float64
``boxes`` (n, 4), float64 ``scores`` (n,) and int64 ``labels`` (n,) or ``None``. Box sizes
are measured against ``CANVAS`` whatever the extent, so on the constant-density canvas
(:func:`canvas_extent`: the side grows as sqrt(N)) each box has as many neighbours at any
N. Labels are always drawn last, so the boxes for a seed do not depend on ``classes``.
Clipping, float32 conversion and the ``BoxSet`` happen in ``Scenario``.
"""

from __future__ import annotations

import math

import numpy as np

CANVAS = 1024.0
CANVASES = ("fixed", "density")  # the canvas side: CANVAS at every N, or growing as sqrt(N) (constant density)
DENSITY_N = 1024  # the box count at which the constant-density canvas is CANVAS wide


def canvas_extent(canvas: str, n: int) -> float:
    """The canvas side for ``n`` boxes: ``CANVAS`` (``"fixed"``), or CANVAS x sqrt(n /
    DENSITY_N) (``"density"``: as many boxes per unit of area at every n)."""
    if canvas == "fixed":
        return CANVAS
    if canvas == "density":
        return CANVAS * math.sqrt(max(n, 1) / DENSITY_N)
    raise ValueError(f"canvas must be one of {', '.join(CANVASES)}, got {canvas!r}")


def _from_centres(cx, cy, w, h) -> np.ndarray:
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def _labels(rng, classes: int, size: int, groups=None):
    """Per-box labels, or per-group labels shared through ``groups`` (group index per box)."""
    if classes == 1:
        return None
    if groups is None:
        return rng.integers(classes, size=size)
    return rng.integers(classes, size=size)[groups]


def _candidates(rng, objects: np.ndarray, obj: np.ndarray, sigma: float):
    """Candidates jittered around ``objects`` (m, 4 as cx, cy, w, h); ``obj`` maps candidate -> object.

    Scores are an object confidence times a factor that falls with the candidate's
    standardized jitter, so the best-aligned candidate of an object scores highest.
    """
    z = rng.standard_normal((obj.size, 4))
    cx, cy, w, h = (objects[obj, k] for k in range(4))
    boxes = _from_centres(cx + sigma * z[:, 0] * w, cy + sigma * z[:, 1] * h,
                          w * np.exp(sigma * z[:, 2]), h * np.exp(sigma * z[:, 3]))
    confidence = rng.uniform(0.3, 1.0, size=objects.shape[0])
    scores = confidence[obj] * np.exp(-0.125 * (z * z).sum(axis=1))
    return boxes, scores


def uniform(rng, n: int, t: float, classes: int, extent: float = CANVAS):
    """Boxes uniform on the canvas, sides ``t * CANVAS`` times U(0.5, 1.5) per axis."""
    side = t * CANVAS
    w, h = side * rng.uniform(0.5, 1.5, size=(2, n))
    cx, cy = rng.uniform(0.0, extent, size=(2, n))
    scores = rng.uniform(0.0, 1.0, size=n)
    return _from_centres(cx, cy, w, h), scores, _labels(rng, classes, n)


def clustered(rng, n: int, t: float, classes: int, extent: float = CANVAS):
    """About n/16 objects, each with ~16 candidates whose jitter shrinks as ``t`` grows."""
    m = max(1, round(n / 16))
    size = np.exp(rng.uniform(math.log(32.0), math.log(256.0), size=m))
    aspect = np.exp(rng.normal(0.0, 0.25, size=m))
    w, h = size * aspect, size / aspect
    # objects lie inside the canvas, so clipping rarely flattens a candidate
    # (an object wider than a small constant-density canvas is centred on it)
    objects = np.stack([rng.uniform(np.minimum(w / 2, extent / 2), np.maximum(extent - w / 2, extent / 2)),
                        rng.uniform(np.minimum(h / 2, extent / 2), np.maximum(extent - h / 2, extent / 2)), w, h], axis=1)
    obj = rng.permutation(np.arange(n) % m)
    # jitter std as a fraction of the object size: 0.30 at t = 0, 0.01 (near-duplicates) at t = 1
    sigma = 0.01 + 0.29 * (1.0 - t)
    boxes, scores = _candidates(rng, objects, obj, sigma)
    return boxes, scores, _labels(rng, classes, m, obj)


def crowd(rng, n: int, t: float, classes: int, extent: float = CANVAS):
    """Objects on a jittered grid whose pitch shrinks from 1.25 to 0.25 object sides; 4 candidates each."""
    per_object = 4
    m = max(1, -(-n // per_object))
    cols = math.ceil(math.sqrt(m))
    rows = math.ceil(m / cols)
    side = extent / (1.25 * cols)  # the widest grid (t = 0) just fits the canvas
    pitch = side * (1.25 - t)
    col, row = np.arange(m) % cols, np.arange(m) // cols
    cx = (extent - pitch * cols) / 2 + pitch * (col + 0.5) + rng.normal(0.0, 0.1 * pitch, size=m)
    cy = (extent - pitch * rows) / 2 + pitch * (row + 0.5) + rng.normal(0.0, 0.1 * pitch, size=m)
    aspect = np.exp(rng.normal(0.0, 0.1, size=m))
    objects = np.stack([cx, cy, side * aspect, side / aspect], axis=1)
    obj = rng.permutation(np.arange(n) // per_object)
    boxes, scores = _candidates(rng, objects, obj, 0.08)
    return boxes, scores, _labels(rng, classes, m, obj)


CHAIN_LENGTH = 6


def chain(rng, n: int, t: float, classes: int, extent: float = CANVAS):
    """Rows of ``CHAIN_LENGTH`` equal boxes, neighbours at IoU ``t``, scores falling along each row.

    Each chain sits inside its own grid slot (with a margin), so chains never touch.
    """
    m = -(-n // CHAIN_LENGTH)
    if m == 0:
        return np.zeros((0, 4)), np.zeros(0), _labels(rng, classes, 0)
    cols = math.ceil(math.sqrt(m))
    rows = math.ceil(m / cols)
    slot_w, slot_h = extent / cols, extent / rows
    shift_per_width = (1.0 - t) / (1.0 + t)  # IoU = (w - s) / (w + s) = t
    extent_per_width = 1.0 + (CHAIN_LENGTH - 1) * shift_per_width
    # a chain spans at most 0.8 of its slot; a random offset keeps it inside [0.05, 0.95]
    w = 0.8 * slot_w / extent_per_width * rng.uniform(0.6, 1.0, size=m)
    h = slot_h * rng.uniform(0.3, 0.8, size=m)
    free_w, free_h = 0.9 * slot_w - w * extent_per_width, 0.9 * slot_h - h
    x0 = (np.arange(m) % cols + 0.05) * slot_w + rng.uniform(0, 1, size=m) * free_w
    y0 = (np.arange(m) // cols + 0.05) * slot_h + rng.uniform(0, 1, size=m) * free_h
    top = rng.uniform(0.5, 1.0, size=m)

    c, k = np.arange(n) // CHAIN_LENGTH, np.arange(n) % CHAIN_LENGTH
    x1 = x0[c] + k * w[c] * shift_per_width
    boxes = np.stack([x1, y0[c], x1 + w[c], y0[c] + h[c]], axis=1)
    scores = top[c] * 0.9 ** k  # strictly decreasing along a chain, also after float32 rounding
    order = rng.permutation(n)
    labels = _labels(rng, classes, m, c)
    return boxes[order], scores[order], None if labels is None else labels[order]


SCORE_LEVELS = 4


def degenerate(rng, n: int, t: float, classes: int, extent: float = CANVAS):
    """Sparse boxes with tied scores; a fraction ``t`` turned into duplicate, zero-area or tiny boxes."""
    # base sides shrink with n so the non-degenerate boxes overlap sparsely at any n
    base = min(0.1 * CANVAS, 0.5 * extent / math.sqrt(max(n, 1)))
    boxes = _from_centres(*rng.uniform(0.0, extent, size=(2, n)), *(base * rng.uniform(0.5, 1.5, size=(2, n))))
    scores = np.ceil(rng.uniform(0.0, 1.0, size=n) * SCORE_LEVELS) / SCORE_LEVELS
    scores = np.maximum(scores, 1.0 / SCORE_LEVELS)
    if n >= 2:
        scores[-1] = scores[0]  # a tie even when n is below the number of levels

    # kinds cycle duplicate, zero-area, duplicate, tiny: half the degenerate boxes are
    # duplicates, copies of boxes that are neither duplicates nor zero-area (if any exist)
    chosen = rng.permutation(n)[: round(t * n)]
    dup, zero, tiny = chosen[0::2], chosen[1::4], chosen[3::4]
    boxes[zero[0::2], 2] = boxes[zero[0::2], 0]  # x1 == x2
    boxes[zero[1::2], 3] = boxes[zero[1::2], 1]  # y1 == y2
    tiny_side = rng.uniform(0.01, 1.0, size=(2, tiny.size))
    boxes[tiny] = _from_centres(*rng.uniform(0.0, extent, size=(2, tiny.size)), *tiny_side)
    sources = np.setdiff1d(np.arange(n), np.concatenate([dup, zero]))
    if dup.size and sources.size:
        src = sources[rng.integers(sources.size, size=dup.size)]
        boxes[dup] = boxes[src]
        scores[dup[0::2]] = scores[src[0::2]]  # every other duplicate also ties its source's score
    return boxes, scores, _labels(rng, classes, n)
