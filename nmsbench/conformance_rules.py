"""The named rules that explain where an implementation differs from its family's definition.

A rule is a change of the oracle's semantics (:class:`nmsbench.conformance_oracle.Semantics`):
it explains a difference when re-running the oracle under the changed semantics reproduces
what the implementation returned. Two rules are predicates of their own: "final scores
rounded" (a comparison within rounding instead of an exact one) and "no input check" (an
output where the definition refuses the input). :func:`explain` finds the smallest set of
rules, in table order, that explains every differing example of a cell; none: unexplained.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .conformance_oracle import DEFINITION, Case, Output, Refusal, expected, same_output

HARD_LIKE = ("hard", "allpairs", "diou", "weighted")
ALL_FAMILIES = ("hard", "allpairs", "diou", "weighted", "matrix", "soft")
SCORED = ("matrix", "soft")
ROUNDED_RTOL = {"float16": 2e-2}  # "final scores rounded": relative tolerance (others: ROUNDED_RTOL_DEFAULT)
ROUNDED_RTOL_DEFAULT = 1e-3
MAX_RULES = 3  # rules combined at most to explain one cell


def _always(case: Case) -> bool:
    return True


def _ties(case: Case) -> bool:
    return len(np.unique(case.scores)) < case.n


def _labels(case: Case) -> bool:
    return case.labels is not None and case.n > 0


def _several_labels(case: Case) -> bool:
    return _labels(case) and len(np.unique(case.labels)) > 1


def _wide_labels(case: Case) -> bool:
    return _labels(case) and bool(((case.labels < -2**31) | (case.labels >= 2**31)).any())


def _zero_area(case: Case) -> bool:
    b = case.corners().astype(np.float64)
    with np.errstate(all="ignore"):
        return bool(((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) <= np.finfo(np.float64).eps).any())


def _not_float64(case: Case) -> bool:
    return case.dtype != "float64"


def _float64(case: Case) -> bool:
    return case.dtype == "float64"


def _float16_labels(case: Case) -> bool:
    return _labels(case) and case.dtype == "float16"


def _other_labels(case: Case) -> bool:
    return _labels(case) and case.dtype != "float16"


def _score_threshold(case: Case) -> bool:
    return case.score_threshold is not None or "score_threshold" in case.params


def _cap(case: Case) -> bool:
    return case.max_per_class is not None


def _cap_labels(case: Case) -> bool:
    return _cap(case) and _several_labels(case)


def _linear(case: Case) -> bool:
    return case.params.get("kernel") == "linear"


@dataclass(frozen=True)
class Rule:
    """One named convention: the semantics it changes, the families and cases it can apply to."""

    key: str
    name: str
    who: str                                  # where it is found
    changes: dict = field(default_factory=dict)
    families: tuple = HARD_LIKE
    applies: Callable[[Case], bool] = _always
    rounded: bool = False                     # compare final scores / moved boxes within rounding
    accepts_invalid: bool = False             # an output where the definition refuses the input


RULES: tuple[Rule, ...] = (
    Rule("ge", "threshold compared with ≥", "a box is suppressed at IoU = threshold (Soft-NMS paper's ≥ used for greedy)",
         {"compare": ">="}),
    Rule("ties_higher", "ties broken by higher index", "argsort()[::-1] of ascending scores (ensemble-boxes' nms)",
         {"ties": "higher"}, ALL_FAMILIES, _ties),
    Rule("ties_any", "unstable sort on ties", "equal scores in an order the sort leaves open",
         {"ties": "any"}, ALL_FAMILIES, _ties),
    Rule("threshold_f32", "IoU and threshold compared in float32", "ONNX Runtime's NonMaxSuppression; torchvision's CUDA kernel",
         {"threshold_float32": True}, HARD_LIKE, _always),
    Rule("opencv_overlap", "OpenCV's overlap: float64 rectangles, 1 − float32(distance)",
         "cv2.dnn.NMSBoxes / NMSBoxesBatched (x, y, w, h; rect2dOverlap)", {"overlap": "opencv"}),
    Rule("normalise", "coordinates normalised to [0, 1]", "ensemble-boxes (shifted by the smallest coordinate, scaled by the span)",
         {"normalise": True}, ALL_FAMILIES),
    Rule("drop_zero_area", "zero-area boxes dropped", "ensemble-boxes (its public functions remove them)",
         {"drop_zero_area": True}, ALL_FAMILIES, _zero_area),
    Rule("tiny_full_overlap", "zero-area boxes overlap fully", "OpenCV: IoU 1 where the areas sum to ≤ float64 epsilon",
         {"tiny_full_overlap": True}, HARD_LIKE, _zero_area),
    Rule("int32_ids", "int32 class ids", "class ids cast to int32: ids 2^32 apart are one class (OpenCV)",
         {"labels_int32": True}, ALL_FAMILIES, _wide_labels),
    Rule("offsets_f16", "float16 class offsets", "batched_nms's coordinate trick: label × (max + 1) overflows float16",
         {"class_offsets": "input"}, HARD_LIKE, _float16_labels),
    Rule("offsets_f64", "class offsets in float64", "OpenCV's NMSBoxesBatched (label × (max + 1) added in double)",
         {"class_offsets": "float64"}, HARD_LIKE, _labels),
    Rule("offsets", "class offsets round coordinates", "batched_nms's coordinate trick in the input dtype",
         {"class_offsets": "input"}, HARD_LIKE, _other_labels),
    Rule("score_gt", "score threshold compared with >", "a box scoring exactly the threshold is dropped (OpenCV, ONNX Runtime)",
         {"score_side": ">"}, ALL_FAMILIES, _score_threshold),
    Rule("cap_before", "cap applied to candidates before NMS", "OpenCV's top_k: the k best scores enter NMS",
         {"cap": "before"}, HARD_LIKE, _cap),
    Rule("cap_global", "cap counts every class together", "one cap over all labels (OpenCV's top_k)",
         {"cap_global": True}, HARD_LIKE, _cap_labels),
    Rule("scores_f32", "scores rounded to float32", "float32 score arrays (OpenCV)", {"scores_float32": True},
         ALL_FAMILIES, _float64),
    Rule("soft_gt", "linear decay where IoU > threshold", "Soft-NMS with > (mmcv, ensemble-boxes; the paper: ≥)",
         {"soft_linear": ">"}, ("soft",), _linear),
    Rule("rounded", "final scores rounded differently", "float32 arithmetic (exp, products) in an approximate implementation",
         {}, ("matrix", "soft", "weighted"), rounded=True),
    Rule("iou_f64", "IoU computed in float64", "arithmetic wider than the input dtype", {"overlap": "float64"},
         ALL_FAMILIES, _not_float64),
    Rule("near", "IoU within rounding of the threshold", "fused multiply-add or another operation order (a few ulps)",
         {"near_ulps": 4}),
    Rule("no_check", "no input check: NaN/Inf accepted", "the definition refuses the input; this returns an answer",
         {}, ALL_FAMILIES, accepts_invalid=True),
)
BY_KEY = {rule.key: rule for rule in RULES}
NUMBERS = {rule.key: i + 1 for i, rule in enumerate(RULES)}  # R1, R2, ... in reports


def rule_label(keys) -> str:
    """"R3 + R7" for rule keys."""
    return " + ".join(f"R{NUMBERS[k]}" for k in keys)


def rule_names(keys) -> str:
    return " + ".join(BY_KEY[k].name for k in keys)


def _rounded_match(case: Case, observed: Output, wanted: Output, threshold: Optional[float]) -> bool:
    """observed is wanted up to rounding: final scores / moved boxes within a relative tolerance,
    boxes kept by one only where their final score is at the threshold, order swapped only
    between near-equal final scores."""
    rtol = ROUNDED_RTOL.get(case.dtype, ROUNDED_RTOL_DEFAULT)
    near = lambda a, b: abs(a - b) <= rtol * max(abs(a), abs(b), 1e-30)  # noqa: E731
    mine = dict(zip(observed.keep, observed.scores or [None] * len(observed.keep)))
    theirs = dict(zip(wanted.keep, wanted.scores or [None] * len(wanted.keep)))
    for k in set(mine) ^ set(theirs):
        value = mine.get(k) if k in mine else theirs.get(k)
        if threshold is None or value is None or not near(value, threshold):
            return False
    common = [k for k in observed.keep if k in theirs]
    for k in common:
        if mine[k] is not None and theirs[k] is not None and not near(mine[k], theirs[k]):
            return False
    position = {k: i for i, k in enumerate(k for k in wanted.keep if k in mine)}
    if len(common) <= 4096:
        for a, b in itertools.combinations(common, 2):
            if position[a] > position[b] and not (theirs[a] is not None and near(theirs[a], theirs[b])):
                return False
    if observed.boxes is not None and wanted.boxes is not None:
        if observed.keep != wanted.keep:
            return False
        a, b = np.asarray(observed.boxes, dtype=float), np.asarray(wanted.boxes, dtype=float)
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=0):
            return False
    return True


def _score_threshold_of(family: str, case: Case) -> Optional[float]:
    if case.score_threshold is not None:
        return float(case.score_threshold)
    if family == "matrix":
        return float(case.params.get("score_threshold", 0.05))
    if family == "soft":
        return float(case.params.get("score_threshold", 0.001))
    return None


def reproduces(rules: tuple, family: str, case: Case, observed) -> bool:
    """Whether the oracle under ``rules`` (keys) returns ``observed`` for ``case``."""
    chosen = [BY_KEY[k] for k in rules]
    changes: dict = {}
    for rule in chosen:
        for name, value in rule.changes.items():
            if changes.get(name, value) != value:
                return False  # contradictory rules
            changes[name] = value
    outputs = expected(family, case, DEFINITION.with_changes(changes))
    if isinstance(outputs, Refusal):
        return any(r.accepts_invalid for r in chosen) and not isinstance(observed, Refusal)
    if isinstance(observed, Refusal):
        return False
    rounded = any(r.rounded for r in chosen)
    threshold = _score_threshold_of(family, case)
    for out in outputs:
        for candidate in (out, out.resorted(case)):
            if same_output(observed, candidate, case.dtype):
                return True
            if rounded and _rounded_match(case, observed, candidate, threshold):
                return True
    return False


def _conflict(rules: tuple) -> bool:
    seen: dict = {}
    for key in rules:
        for name, value in BY_KEY[key].changes.items():
            if seen.get(name, value) != value:
                return True
            seen[name] = value
    return False


def explain(family: str, examples: list, consistent: list = ()) -> Optional[tuple]:
    """The smallest set of rule keys (fewest rules, then table order) that reproduces every
    ``(case, observed)`` example, and also the ``consistent`` ones (cases where the
    implementation agreed with the definition: a rule that would change them does not
    describe it); None where no set of up to MAX_RULES does."""
    if not examples:
        return ()
    candidates = [r.key for r in RULES if family in r.families and any(r.applies(case) for case, _ in examples)]
    memo: dict = {}
    everything = list(examples) + list(consistent)

    def covers(keys: tuple) -> bool:
        for index, (case, observed) in enumerate(everything):
            if (keys, index) not in memo:
                memo[keys, index] = reproduces(keys, family, case, observed)
            if not memo[keys, index]:
                return False
        return True

    for keys in itertools.combinations(candidates, 1):
        if covers(keys):
            return keys
    # a combination is tried where at least one of its rules changes an answer on its own
    definition_outputs = [expected(family, case) for case, _ in everything]
    effective = {k for k in candidates if BY_KEY[k].rounded or BY_KEY[k].accepts_invalid or any(
        expected(family, case, DEFINITION.with_changes(BY_KEY[k].changes)) != out
        for (case, _), out in zip(everything, definition_outputs))}
    for size in range(2, MAX_RULES + 1):
        for keys in itertools.combinations(candidates, size):
            if effective.intersection(keys) and not _conflict(keys) and covers(keys):
                return keys
    return None
