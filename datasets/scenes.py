"""Synthetic scenes with ground truth: images of objects and the candidates a detector
would emit for them, for scoring NMS with COCO AP (``nmsbench accuracy``).

    >>> from nmsbench.datasets.scenes import generate_scenes
    >>> scenes = generate_scenes("scenes-crowd", images=200, seed=0)

Every image is square (``NoiseModel.image_size`` px). Objects are placed by the kind's
layout; each detected object gets ``1 + Poisson(candidates)`` candidates jittered around
it (centre by ``jitter`` x its size, sides by a factor exp(``jitter`` x N(0, 1)), plus an
error of the same kind, ``shared_jitter``, common to all of them: no average of the
candidates finds the object exactly), scored
``confidence x exp(-score_falloff x (1 - IoU with the object)) x exp(score_noise x N(0, 1))``
so that the better a candidate fits, the higher it tends to score; a ``confusion``
fraction of candidates carries another class; a ``miss_rate`` fraction of objects has no
candidate; each image has ``Poisson(false_positives)`` background boxes with low scores.
Kinds:

- ``scenes-sparse``: a few objects placed uniformly, rarely touching;
- ``scenes-clustered``: objects of mixed classes in a few groups, overlapping moderately;
- ``scenes-crowd``: rows of tall objects of one class (pedestrians), each neighbour
  overlapping the next by IoU 0.3 to 0.6: greedy NMS at IoU 0.5 suppresses true objects
  whose best candidate overlaps a neighbour's, where score-decaying NMS keeps them.

Everything is drawn with ``numpy.random.default_rng(seed)`` in whole-array operations;
the same (kind, images, seed) gives the same scenes on every machine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

LAYOUTS = ("uniform", "groups", "rows")


@dataclass(frozen=True)
class NoiseModel:
    """The scenes' parameters: what the objects are and how the imitated detector errs."""

    layout: str  # uniform: anywhere; groups: around a few centres; rows: side by side in rows (crowds)
    objects: tuple[int, int]  # objects per image, uniform in [min, max]
    object_size: tuple[float, float]  # object width in px, log-uniform in [min, max]
    aspect: tuple[float, float]  # height / width, uniform in [min, max]
    groups: tuple[int, int] = (1, 1)  # groups (or rows) per image
    spread: tuple[float, float] = (1.0, 1.0)  # groups: objects' offset from the centre in object sizes (std);
    # rows: the step from one object to the next in object widths (uniform in [min, max])
    classes: int = 10  # category ids 1..classes
    group_classes: bool = False  # rows: every object of a row has the row's class
    image_size: float = 640.0
    candidates: float = 6.0  # extra candidates per detected object (Poisson mean)
    jitter: float = 0.08  # each candidate's own centre offset (x object size) and log side change, std
    shared_jitter: float = 0.05  # the same, shared by all candidates of an object (the detector's error on it)
    score_falloff: float = 4.0  # score factor exp(-falloff x (1 - IoU to the object))
    score_noise: float = 0.15  # std of the score's log-normal noise
    confidence: tuple[float, float] = (0.3, 1.0)  # per-object confidence, uniform
    miss_rate: float = 0.05  # objects with no candidate
    confusion: float = 0.08  # candidates labelled with another class
    false_positives: float = 3.0  # background boxes per image (Poisson mean)
    false_positive_score: float = 0.4  # their score: this x U(0, 1)^2

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        for name in ("objects", "object_size", "aspect", "groups", "spread", "confidence"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi:
                raise ValueError(f"{name} must be a range (min, max) with 0 <= min <= max, got {(lo, hi)}")
        if self.groups[0] < 1 or self.object_size[0] <= 0 or self.aspect[0] <= 0:
            raise ValueError("groups, object_size and aspect must be positive")
        if self.classes < 1 or not 0 <= self.miss_rate <= 1 or not 0 <= self.confusion <= 1:
            raise ValueError("classes must be >= 1, miss_rate and confusion in [0, 1]")

    def to_json(self) -> str:
        """The parameters as the ``source_params`` column records them."""
        return json.dumps(asdict(self), sort_keys=True)


KINDS: dict[str, NoiseModel] = {
    "scenes-sparse": NoiseModel(layout="uniform", objects=(1, 8), object_size=(24, 200), aspect=(0.5, 2.0)),
    "scenes-clustered": NoiseModel(layout="groups", objects=(4, 16), object_size=(30, 140), aspect=(0.5, 2.0),
                                   groups=(1, 3), spread=(0.6, 1.2)),
    "scenes-crowd": NoiseModel(layout="rows", objects=(8, 24), object_size=(36, 70), aspect=(2.0, 3.0),
                               groups=(1, 2), spread=(0.25, 0.55), classes=3, group_classes=True),
}


@dataclass
class Scenes:
    """Images with ground truth and candidates, each sorted by image (``*_image``: the image
    index 0..images-1 of each row). Boxes are float32 x1, y1, x2, y2 inside the image;
    labels are category ids 1..classes."""

    kind: str
    model: NoiseModel
    seed: int
    images: int
    gt_boxes: np.ndarray
    gt_labels: np.ndarray
    gt_image: np.ndarray
    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    image: np.ndarray


def _xyxy(cx, cy, w, h) -> np.ndarray:
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def _pair_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of a[i] with b[i] (x1, y1, x2, y2 rows)."""
    w = np.clip(np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0]), 0, None)
    h = np.clip(np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1]), 0, None)
    inter = w * h
    union = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]) + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _objects(rng, m: NoiseModel, images: int):
    """Ground truth: (boxes x1y1x2y2, labels, image index), before clipping."""
    lo, hi = m.objects
    counts = rng.integers(lo, hi + 1, size=images)
    image = np.repeat(np.arange(images), counts)
    total = image.size
    size = m.image_size
    log_lo, log_hi = np.log(m.object_size[0]), np.log(m.object_size[1])
    aspect = rng.uniform(*m.aspect, size=total)
    labels = rng.integers(1, m.classes + 1, size=total)
    if m.layout == "uniform":
        w = np.exp(rng.uniform(log_lo, log_hi, size=total))
        h = w * aspect
        cx = rng.uniform(0, 1, size=total) * (size - w) + w / 2
        cy = rng.uniform(0, 1, size=total) * np.clip(size - h, 0, None) + np.minimum(h, size) / 2
        return _xyxy(cx, cy, w, h), labels, image
    # each image has groups; every object joins one of its image's groups
    n_groups = rng.integers(m.groups[0], m.groups[1] + 1, size=images)
    first_group = np.concatenate([[0], np.cumsum(n_groups)[:-1]])
    group = first_group[image] + (rng.uniform(size=total) * n_groups[image]).astype(np.int64)
    groups = n_groups.sum()
    group_w = np.exp(rng.uniform(log_lo, log_hi, size=groups))  # objects of a group are of a similar size
    w = group_w[group] * np.exp(0.1 * rng.standard_normal(total))
    h = w * aspect
    if m.layout == "groups":
        centre = rng.uniform(0.15, 0.85, size=(groups, 2)) * size
        offset = rng.standard_normal((total, 2)) * rng.uniform(*m.spread, size=(total, 1)) * w[:, None]
        cx, cy = centre[group, 0] + offset[:, 0], centre[group, 1] + offset[:, 1]
    else:  # rows: each object stands one step to the right of the one before it in its row
        order = np.lexsort((rng.uniform(size=total), group))  # objects row by row, in a random order
        row = group[order]
        step = rng.uniform(*m.spread, size=total) * group_w[row]
        before = np.cumsum(step) - step  # the steps before each object, all rows in one sum
        first = np.searchsorted(row, np.arange(groups))  # each row's first position
        x = np.empty(total)
        x[order] = before - before[np.minimum(first, total - 1)][row]
        row_len = np.bincount(row, weights=step, minlength=groups)
        start_x = rng.uniform(0, 1, size=groups) * np.clip(size - row_len - group_w, 0, None) + group_w / 2
        cx = start_x[group] + x
        cy = rng.uniform(0.3, 0.7, size=groups)[group] * size + 0.08 * h * rng.standard_normal(total)
        if m.group_classes:
            labels = rng.integers(1, m.classes + 1, size=groups)[group]
    return _xyxy(cx, cy, w, h), labels, image


def generate_scenes(kind: str, images: int = 200, seed: int = 0, model: NoiseModel | None = None) -> Scenes:
    """``images`` scenes of ``kind`` (a key of ``KINDS``; ``model`` replaces its parameters),
    deterministic from ``seed``."""
    if kind not in KINDS:
        raise ValueError(f"unknown scene kind {kind!r}; known: {', '.join(KINDS)}")
    if isinstance(images, bool) or not isinstance(images, (int, np.integer)) or images < 1:
        raise ValueError(f"images must be a positive whole number, got {images!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    m = model or KINDS[kind]
    rng = np.random.default_rng(seed)
    size = m.image_size
    gt, gt_labels, gt_image = _objects(rng, m, int(images))
    gt = np.clip(gt, 0, size)
    # objects cut down to a sliver by the image border are not objects
    visible = (gt[:, 2] - gt[:, 0] >= 4) & (gt[:, 3] - gt[:, 1] >= 4)
    gt, gt_labels, gt_image = gt[visible], gt_labels[visible], gt_image[visible]

    # candidates of the detected objects
    detected = rng.uniform(size=len(gt)) >= m.miss_rate
    per_object = np.where(detected, 1 + rng.poisson(m.candidates, size=len(gt)), 0)
    owner = np.repeat(np.arange(len(gt)), per_object)
    k = owner.size
    ow, oh = gt[owner, 2] - gt[owner, 0], gt[owner, 3] - gt[owner, 1]
    z = rng.standard_normal((k, 4)) * m.jitter + (rng.standard_normal((len(gt), 4)) * m.shared_jitter)[owner]
    boxes = _xyxy((gt[owner, 0] + gt[owner, 2]) / 2 + z[:, 0] * ow, (gt[owner, 1] + gt[owner, 3]) / 2 + z[:, 1] * oh,
                  ow * np.exp(z[:, 2]), oh * np.exp(z[:, 3]))
    boxes = np.clip(boxes, 0, size)
    confidence = rng.uniform(*m.confidence, size=len(gt))
    fit = _pair_iou(boxes, gt[owner])
    scores = confidence[owner] * np.exp(-m.score_falloff * (1 - fit)) * np.exp(m.score_noise * rng.standard_normal(k))
    labels = gt_labels[owner].copy()
    confused = rng.uniform(size=k) < m.confusion
    if m.classes > 1:  # another class: shift by 1..classes-1
        shift = rng.integers(1, m.classes, size=k)
        labels = np.where(confused, (labels - 1 + shift) % m.classes + 1, labels)
    image = gt_image[owner]

    # false positives: background boxes anywhere, low scores
    fp_counts = rng.poisson(m.false_positives, size=int(images))
    fp_image = np.repeat(np.arange(int(images)), fp_counts)
    f = fp_image.size
    fw = np.exp(rng.uniform(np.log(m.object_size[0]), np.log(m.object_size[1]), size=f))
    fh = fw * rng.uniform(*m.aspect, size=f)
    fp = np.clip(_xyxy(rng.uniform(0, size, size=f), rng.uniform(0, size, size=f), fw, fh), 0, size)
    fp_scores = m.false_positive_score * rng.uniform(size=f) ** 2
    fp_labels = rng.integers(1, m.classes + 1, size=f)

    boxes = np.concatenate([boxes, fp])
    scores = np.clip(np.concatenate([scores, fp_scores]), 1e-6, 1.0)
    labels = np.concatenate([labels, fp_labels])
    image = np.concatenate([image, fp_image])
    # by image; within an image in a random order (an object's candidates are not adjacent)
    order = np.lexsort((rng.uniform(size=image.size), image))
    return Scenes(kind=kind, model=m, seed=int(seed), images=int(images),
                  gt_boxes=gt.astype(np.float32), gt_labels=gt_labels.astype(np.int64), gt_image=gt_image.astype(np.int64),
                  boxes=boxes[order].astype(np.float32), scores=scores[order].astype(np.float32),
                  labels=labels[order].astype(np.int64), image=image[order].astype(np.int64))


__all__ = ["KINDS", "NoiseModel", "Scenes", "generate_scenes"]
