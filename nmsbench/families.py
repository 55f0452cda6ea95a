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

The gaussian ``sigma`` here is the CUDA seed's convention, exp(-x^2/sigma): the seed's
sigma = 0.5 is mmdet's ``mask_matrix_nms`` sigma = 2.0 in its exp(-sigma * x^2) form.
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


def _sigma(value):
    if not _number(value):
        raise ValueError(f"sigma must be a positive number, got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"sigma must be a positive number, got {value!r}")
    return v


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
