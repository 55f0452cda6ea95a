"""ensemble-boxes' ``nms`` and ``soft_nms`` (families ``hard`` and ``soft``), through the
index functions its public ``nms_method`` runs on each label's boxes
(``nms_float_fast``, ``cpu_soft_nms_float``), so the kept boxes come back as indices.

As its public functions do, it gets coordinates normalised to [0, 1] (here: shifted by
the smallest coordinate and divided by the span of all of them) and never sees a box of
zero area (the public functions drop them, with a warning). Normalising rounds the IoUs;
its greedy NMS orders tied scores by an unstable sort; its Soft-NMS decays linearly where
iou > the threshold (the family: >=) and applies its score threshold only after every
decay (the family: at once, so a dropped box never decays others). So both entries are
their family to rounding and these conventions, not exact; the agreement columns say how
far, and README says why.
"""

from __future__ import annotations

import numpy as np
import torch

from nmsbench.boxes import NMSResult, score_order
from nmsbench.families import SOFT_PARAMS
from nmsbench.registry import register


def _normalised(boxes: torch.Tensor) -> np.ndarray:
    b = boxes.detach().to(torch.float64).numpy()
    if b.size == 0:
        return b.reshape(0, 4)
    # halves first: the same quotients (scaling by 2 is exact), and no overflow for
    # coordinates near the float64 limit
    low, half_span = b.min(), b.max() / 2 - b.min() / 2
    return (b / 2 - low / 2) / (half_span if half_span > 0 else 0.5)


def _groups(boxes: torch.Tensor, labels):
    """(normalised boxes, indices of each label's boxes of positive area)."""
    b = _normalised(boxes)
    positive = np.flatnonzero((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) > 0)
    if labels is None:
        return b, [positive]
    lab = labels.detach().numpy()[positive]
    return b, [positive[lab == value] for value in np.unique(lab)]


def _ordered(kept: np.ndarray, scores: torch.Tensor, final=None) -> NMSResult:
    """The kept boxes by descending (final) score, ties by lower index, as every entry returns them
    (ascending index first: the stable sort then breaks ties by it, not by the labels' order)."""
    by_index = np.argsort(kept, kind="stable")
    keep = torch.from_numpy(np.ascontiguousarray(kept[by_index], dtype=np.int64))
    if final is None:
        return NMSResult(keep[score_order(scores[keep])] if keep.numel() else keep)
    final = torch.from_numpy(np.ascontiguousarray(final[by_index], dtype=np.float64))
    order = score_order(final) if keep.numel() else torch.empty(0, dtype=torch.int64)
    return NMSResult(keep[order], final[order].to(scores.dtype))


@register(
    name="ensemble_boxes", family="hard", devices=("cpu",), requires=("ensemble_boxes",),
    summary="ensemble-boxes' nms (nms_float_fast per label) on coordinates normalised to [0, 1]",
    style=("#6B522D", "diamond-wide"),
)
def ensemble_boxes_nms(boxes, scores, *, iou_threshold, labels=None):
    from ensemble_boxes.ensemble_boxes_nms import nms_float_fast

    b, groups = _groups(boxes, labels)
    s = scores.detach().to(torch.float64).numpy()
    kept = [where[np.asarray(nms_float_fast(b[where], s[where], float(iou_threshold)), dtype=np.int64)]
            for where in groups if where.size]
    return _ordered(np.concatenate(kept) if kept else np.empty(0, dtype=np.int64), scores)


@register(
    name="ensemble_boxes_soft", family="soft", devices=("cpu",), requires=("ensemble_boxes",), params=SOFT_PARAMS,
    summary="ensemble-boxes' soft_nms (cpu_soft_nms_float per label) on coordinates normalised to [0, 1]",
    style=("#FFAD99", "square-cross"),
)
def ensemble_boxes_soft(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold):
    from ensemble_boxes.ensemble_boxes_nms import cpu_soft_nms_float

    b, groups = _groups(boxes, labels)
    s = scores.detach().to(torch.float64).numpy()
    kept, final = [], []
    for where in groups:
        if not where.size:
            continue
        current = s[where].copy()  # decayed in place, in the function's pick order
        picks = cpu_soft_nms_float(b[where].copy(), current, Nt=float(iou_threshold), sigma=float(sigma),
                                   thresh=float(score_threshold), method=1 if kernel == "linear" else 2)
        kept.append(where[picks])
        final.append(current[current > score_threshold])
    if not kept:
        return NMSResult(torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=scores.dtype))
    return _ordered(np.concatenate(kept), scores, np.concatenate(final))
