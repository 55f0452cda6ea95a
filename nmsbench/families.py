"""NMS families and the parameters they take.

- ``hard``: greedy NMS. Sort by score descending, ties by lower input index; a box is
  kept iff no *kept* higher-ranked box (same label when labels are given) has
  IoU > iou_threshold with it.
- ``allpairs``: a box is suppressed iff *any* higher-ranked box (same label when labels
  are given) has IoU > iou_threshold, kept or not. Chains over-suppress.
- ``matrix``: SOLOv2 Matrix NMS. decay_j = min over higher-ranked same-label i of
  f(iou_ij) / f(cmax_i) (1 when there is none), cmax_i = max IoU of box i with its own
  higher-ranked same-label boxes; gaussian f(x) = exp(-x^2 / sigma), linear f(x) = 1 - x.
  A parent with f(cmax_i) = 0 (linear kernel, an exact duplicate above it) constrains
  nothing. Final score = score * decay; kept iff final score >= score_threshold, ordered
  by descending final score, ties by lower input index. ``iou_threshold`` is not used.

- ``soft``: Soft-NMS (Bodla et al., "Soft-NMS -- Improving Object Detection With One Line
  of Code", ICCV 2017, Algorithm 1). Repeatedly pick the box with the highest *current*
  score (ties by lower input index), emit it with that score, and multiply the current
  score of every remaining same-label box j by f(iou(picked, j)); ``kernel="linear"``:
  f = 1 - iou where iou >= iou_threshold, else 1 (the paper's >=; mmcv's ``soft_nms``
  uses >); ``kernel="gaussian"``: f = exp(-iou^2 / sigma) (the paper's form, sigma 0.5),
  iou_threshold unused. A box whose current score is below ``score_threshold`` (default
  0.001, as mmcv and ensemble-boxes) is dropped at once, and so never decays others
  (ensemble-boxes applies its threshold only after all decays; mmcv never drops a pick).
  Output: the picks in pick order, which is descending final score, with their final
  scores. Scores are held in float64 from the input value on; IoUs in the input dtype.
  ``score_threshold`` must be >= 0: a decay raises a negative score.
- ``diou``: DIoU-NMS (Zheng et al., "Distance-IoU Loss", AAAI 2020, section 5): greedy NMS
  whose suppression test is iou > 0 and iou - (rho^2 / c^2)^beta > iou_threshold, rho the
  distance between the two boxes' centres, c the diagonal of their smallest enclosing box
  (in float64, every length divided by the enclosing box's larger side first so that no
  square overflows; the penalty is 0 where that side is 0); ``beta`` default 1.
- ``weighted``: merge NMS as YOLOv5's ``non_max_suppression(..., merge=True)`` does it:
  greedy NMS (the hard rule) chooses the kept boxes; each kept box m is then replaced by
  the score-weighted mean of every same-label input box j with iou(m, j) > iou_threshold,
  m itself always included (YOLOv5's weights are its scores; here max(score, 0), summed
  in float64 in input order; a kept box whose weights sum to 0 stays where it was).
  Scores are unchanged; the result carries the moved boxes (``NMSResult.boxes``).

The gaussian ``sigma`` of ``matrix`` is the CUDA seed's convention, exp(-x^2/sigma): the
seed's sigma = 0.5 is mmdet's ``mask_matrix_nms`` sigma = 2.0 in its exp(-sigma * x^2)
form. Soft-NMS's is the paper's, exp(-x^2/sigma), the same form.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable

FAMILIES = {
    "hard": "greedy NMS: kept iff no kept higher-ranked box overlaps it above the threshold",
    "allpairs": "suppressed iff any higher-ranked box overlaps it above the threshold (kept or not)",
    "matrix": "SOLOv2 Matrix NMS: scores decayed by overlap with higher-ranked boxes, then thresholded",
    "soft": "Soft-NMS: pick the highest current score, decay the rest by their overlap with it, repeat",
    "diou": "DIoU-NMS: greedy NMS whose overlap test subtracts the centres' distance penalty",
    "weighted": "merge NMS: greedy NMS, each kept box moved to the score-weighted mean of its overlaps",
}


@dataclass(frozen=True)
class ParamSpec:
    """A named parameter with its default and a checker that returns the clean value."""

    name: str
    default: Any
    check: Callable[[Any], Any]
    help: str = ""


def _kernel(value):
    if value not in ("gaussian", "linear"):
        raise ValueError(f"kernel must be 'gaussian' or 'linear', got {value!r}")
    return value


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _positive(name: str, value) -> float:
    """``value`` as a float, or a ValueError unless it is a finite number > 0."""
    if not _number(value) or not (math.isfinite(float(value)) and float(value) > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _sigma(value):
    return _positive("sigma", value)


def _score_threshold(value):
    if not _number(value):
        raise ValueError(f"score_threshold must be a finite number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"score_threshold must be a finite number, got {value!r}")
    return v


MATRIX_PARAMS = (
    ParamSpec("kernel", "gaussian", _kernel, "decay function: gaussian exp(-x^2/sigma) or linear 1 - x"),
    ParamSpec("sigma", 0.5, _sigma, "gaussian width in exp(-x^2/sigma) (seed convention; mmdet sigma = 1/this)"),
    ParamSpec("score_threshold", 0.05, _score_threshold, "keep boxes whose decayed score is >= this"),
)


def _soft_score_threshold(value):
    v = _score_threshold(value)
    if v < 0:
        raise ValueError(f"score_threshold must be >= 0 for Soft-NMS (a decay raises a negative score), got {value!r}")
    return v


def _beta(value):
    return _positive("beta", value)


SOFT_PARAMS = (
    ParamSpec("kernel", "gaussian", _kernel, "decay: gaussian exp(-iou^2/sigma), or linear 1 - iou where iou >= iou_threshold"),
    ParamSpec("sigma", 0.5, _sigma, "gaussian width in exp(-iou^2/sigma) (Bodla et al.)"),
    ParamSpec("score_threshold", 0.001, _soft_score_threshold, "drop a box once its current score is below this (>= 0)"),
)
DIOU_PARAMS = (
    ParamSpec("beta", 1.0, _beta, "exponent of the distance penalty (rho^2/c^2)^beta (Zheng et al.)"),
)
