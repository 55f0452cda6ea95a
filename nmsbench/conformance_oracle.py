"""The conformance report's oracle: each family's exact definition (nmsbench.families), in
numpy, with switchable semantics so that a named rule can be checked by re-running it.

Arithmetic follows the definitions: IoUs in the input dtype (float16 inputs in float32,
as nmsbench's kernels compute them), torchvision's formula, 0 where the union is 0, the
threshold compared in float64; rank by descending score, ties by lower input index.
Elementwise numpy operations in a dtype round as the scalar operations of the reference
definitions do, so the oracle is index-exact for inputs small enough for its O(N^2) matrices.

:class:`Semantics` holds the switches; :data:`DEFINITION` is the family's own semantics.
:func:`expected` gives every output the semantics allow: one for the definition, several
where a switch leaves a choice open (any order of tied scores; IoUs within rounding of the
threshold), so that a rule can say "some resolution of it reproduces what was returned".
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

MAX_CHOICES = 512     # outputs enumerated at most for one case under an open semantics
FINAL_RTOL = {"float16": 1e-3, "float32": 1e-5, "float64": 1e-5}  # final scores / moved boxes agree within this


# --- the case -----------------------------------------------------------------------------

@dataclass(eq=False)
class Case:
    """One input: boxes (N, 4) and scores (N,) in one float dtype, optional int64 labels,
    the thresholds and settings, and the format the boxes are given in."""

    boxes: np.ndarray
    scores: np.ndarray
    labels: Optional[np.ndarray] = None
    iou_threshold: float = 0.5
    score_threshold: Optional[float] = None   # boxes below it take no part (the definition: score >= it)
    max_per_class: Optional[int] = None       # each label keeps at most this many (ONNX's max_output_boxes_per_class)
    fmt: str = "xyxy"                         # or "cxcywh": centre x, centre y, width, height
    params: dict = field(default_factory=dict)  # family parameters (kernel, sigma, ...)
    note: str = ""

    @property
    def n(self) -> int:
        return int(self.boxes.shape[0])

    @property
    def dtype(self) -> str:
        return str(self.boxes.dtype)

    def corners(self) -> np.ndarray:
        """x1, y1, x2, y2 in the case's dtype (centre format: cx -/+ w/2, as torchvision's box_convert)."""
        if self.fmt == "xyxy":
            return self.boxes
        b, half = self.boxes, self.boxes.dtype.type(0.5)
        with np.errstate(all="ignore"):
            return np.stack([b[:, 0] - half * b[:, 2], b[:, 1] - half * b[:, 3],
                             b[:, 0] + half * b[:, 2], b[:, 1] + half * b[:, 3]], axis=1)

    def subset(self, index) -> "Case":
        index = np.asarray(index, dtype=np.int64)
        return replace(self, boxes=self.boxes[index], scores=self.scores[index],
                       labels=None if self.labels is None else self.labels[index], params=dict(self.params))

    def cast(self, dtype: str) -> "Case":
        if dtype == self.dtype:
            return self
        with np.errstate(over="ignore"):
            return replace(self, boxes=self.boxes.astype(dtype), scores=self.scores.astype(dtype), params=dict(self.params))

    def to_json(self) -> dict:
        return {"boxes": self.boxes.astype(float).tolist(), "scores": self.scores.astype(float).tolist(),
                "labels": None if self.labels is None else [int(v) for v in self.labels], "dtype": self.dtype,
                "iou_threshold": self.iou_threshold, "score_threshold": self.score_threshold,
                "max_per_class": self.max_per_class, "fmt": self.fmt, "params": dict(self.params), "note": self.note}

    @classmethod
    def from_json(cls, data: dict) -> "Case":
        dtype = data.get("dtype", "float32")
        labels = data.get("labels")
        return cls(np.asarray(data["boxes"], dtype=float).reshape(-1, 4).astype(dtype),
                   np.asarray(data["scores"], dtype=float).astype(dtype),
                   None if labels is None else np.asarray(labels, dtype=np.int64), float(data["iou_threshold"]),
                   data.get("score_threshold"), data.get("max_per_class"), data.get("fmt", "xyxy"),
                   dict(data.get("params") or {}), data.get("note", ""))


@dataclass(frozen=True)
class Output:
    """What an NMS returned: kept indices in its order, and final scores / moved boxes where
    the family returns them."""

    keep: tuple
    scores: Optional[tuple] = None
    boxes: Optional[tuple] = None

    def resorted(self, case: Case) -> "Output":
        """The same boxes ordered by descending input score, ties by lower index (the order
        most wrappers re-sort to); final scores and moved boxes follow their box."""
        order = sorted(range(len(self.keep)), key=lambda r: (-float(case.scores[self.keep[r]]), self.keep[r]))
        pick = lambda seq: None if seq is None else tuple(seq[r] for r in order)  # noqa: E731
        return Output(tuple(self.keep[r] for r in order), pick(self.scores), pick(self.boxes))


@dataclass(frozen=True)
class Refusal:
    """An error instead of an output (the definition's for invalid input, or what a backend raised)."""

    message: str


def same_output(observed: Output, wanted: Output, dtype: str) -> bool:
    """Equal kept indices in the same order; final scores and moved boxes within FINAL_RTOL."""
    if observed.keep != wanted.keep:
        return False
    rtol = FINAL_RTOL.get(dtype, 1e-5)
    for mine, theirs in ((observed.scores, wanted.scores), (observed.boxes, wanted.boxes)):
        if mine is not None and theirs is not None:
            a, b = np.asarray(mine, dtype=float), np.asarray(theirs, dtype=float)
            if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=rtol * 1e-3, equal_nan=True):
                return False
    return True


# --- the semantics ------------------------------------------------------------------------

@dataclass(frozen=True)
class Semantics:
    """The switches of the oracle; the defaults are the families' definitions."""

    compare: str = ">"              # IoU vs threshold: ">" (the definition) or ">="
    ties: str = "lower"             # equal scores ranked by "lower" index, "higher" index, or "any" order
    threshold_float32: bool = False  # IoU rounded to float32 and compared with float32(threshold)
    overlap: str = "input"          # "input": torchvision's IoU in the input dtype; "float64"; "opencv": float64
    #                                 rectangles, overlap = 1 - float32(1 - IoU), compared in float32
    near_ulps: int = 0              # IoUs within this many ulps (of the arithmetic dtype) of the threshold go either way
    normalise: bool = False         # coordinates shifted and scaled into [0, 1] first, in float64 (ensemble-boxes)
    drop_zero_area: bool = False    # boxes of zero area never kept
    tiny_full_overlap: bool = False  # two boxes whose areas sum to <= float64 epsilon overlap fully (OpenCV)
    labels_int32: bool = False      # labels cast to int32 (wrapping) before comparing them
    class_offsets: str = ""         # labels folded into the boxes as offsets label * (max + 1): "input" dtype
    #                                 (torchvision's batched_nms) or "float64" (OpenCV's NMSBoxesBatched)
    score_side: str = ">="          # a box takes part iff score >= score_threshold (">": strictly above)
    cap: str = "after"              # max_per_class counts kept boxes ("after") or candidates by rank ("before")
    cap_global: bool = False        # the cap counts every label together
    scores_float32: bool = False    # scores (and score_threshold) rounded to float32 first
    soft_linear: str = ">="         # Soft-NMS linear decay where IoU >= threshold (">": strictly above)

    def with_changes(self, changes: dict) -> "Semantics":
        return replace(self, **changes)


DEFINITION = Semantics()


def arithmetic_dtype(dtype: str) -> str:
    """The dtype IoUs are computed in: the input's, float32 for float16 inputs."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def invalid_input(case: Case) -> Optional[str]:
    """The ValueError message nmsbench's input check gives for the case, or None (checked once per case)."""
    known = case.__dict__.get("_invalid", False)
    if known is not False:
        return known
    import torch

    from .inputs import validate_nms_inputs

    problem = None
    try:
        validate_nms_inputs(torch.from_numpy(np.ascontiguousarray(case.corners())),
                            torch.from_numpy(np.ascontiguousarray(case.scores)),
                            None if case.labels is None else torch.from_numpy(case.labels))
    except ValueError as e:
        problem = str(e)
    case.__dict__["_invalid"] = problem
    return problem


# --- IoUs ----------------------------------------------------------------------------------

def iou_matrix(b: np.ndarray, dtype: str) -> np.ndarray:
    """IoU of every pair (symmetric), torchvision's arithmetic in ``dtype``, 0 where the union is 0."""
    b = b.astype(dtype, copy=False)
    x1, y1, x2, y2 = (b[:, k] for k in range(4))
    with np.errstate(all="ignore"):
        area = (x2 - x1) * (y2 - y1)
        zero = b.dtype.type(0)
        w = np.maximum(zero, np.minimum(x2[:, None], x2[None, :]) - np.maximum(x1[:, None], x1[None, :]))
        h = np.maximum(zero, np.minimum(y2[:, None], y2[None, :]) - np.maximum(y1[:, None], y1[None, :]))
        inter = w * h
        union = area[:, None] + area[None, :] - inter
        iou = inter / union
    iou[union == 0] = 0
    return iou


def _opencv_overlap(x: np.ndarray, y: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """OpenCV's rect2dOverlap of (x, y, width, height) float64 rectangles: 1 - float32(Jaccard distance)."""
    with np.errstate(all="ignore"):
        area = w * h
        ix1 = np.maximum(x[:, None], x[None, :])
        iy1 = np.maximum(y[:, None], y[None, :])
        iw = np.minimum((x + w)[:, None], (x + w)[None, :]) - ix1
        ih = np.minimum((y + h)[:, None], (y + h)[None, :]) - iy1
        inter = np.where((iw > 0) & (ih > 0), iw * ih, 0.0)
        union = area[:, None] + area[None, :] - inter
        distance = 1.0 - inter / union
    distance[union == 0] = 1.0
    return (np.float32(1) - distance.astype(np.float32)).astype(np.float32)


def _normalised(b: np.ndarray) -> np.ndarray:
    """ensemble-boxes' input: shifted by the smallest coordinate, divided by the span (float64)."""
    b = b.astype(np.float64)
    if b.size == 0:
        return b.reshape(0, 4)
    low, half_span = b.min(), b.max() / 2 - b.min() / 2
    with np.errstate(all="ignore"):
        return (b / 2 - low / 2) / (half_span if half_span > 0 else 0.5)


def class_offsets(b: np.ndarray, labels: np.ndarray, where: str) -> np.ndarray:
    """Per box, label * (max coordinate + 1): in the boxes' dtype over their largest
    coordinate (torchvision's batched_nms), or in float64 over 0 and every coordinate (OpenCV)."""
    with np.errstate(all="ignore"):
        if where == "float64":
            top = max(0.0, float(b.astype(np.float64).max())) if b.size else 0.0
            return labels.astype(np.float64) * (top + 1.0)
        top = b.max() if b.size else b.dtype.type(0)
        return labels.astype(b.dtype) * (top + b.dtype.type(1))


@dataclass
class Prepared:
    """A case under a semantics: who takes part, ranks, labels and the suppression test."""

    n: int
    scores: np.ndarray            # float64 (or their float32 values)
    labels: np.ndarray
    candidates: np.ndarray        # bool: takes part
    iou: np.ndarray               # float64 IoU matrix as the semantics computes it
    suppress: np.ndarray          # bool (N, N): i would suppress j (same label, test passed)
    near: list                    # (i, j), i < j: pairs whose test may go either way
    orders: list                  # rank orders to try (input indices)
    boxes: np.ndarray             # the corners the IoUs came from (for weighted / diou)


def _rank_orders(scores: np.ndarray, ties: str) -> list[list[int]]:
    n = len(scores)
    lower = sorted(range(n), key=lambda k: (-scores[k], k))
    if ties == "lower":
        return [lower]
    higher = sorted(range(n), key=lambda k: (-scores[k], -k))
    if ties == "higher":
        return [higher]
    groups = [list(g) for _, g in itertools.groupby(lower, key=lambda k: scores[k])]
    count = math.prod(math.factorial(len(g)) for g in groups)
    if count > MAX_CHOICES:
        return [lower, higher]
    return [list(itertools.chain.from_iterable(p)) for p in itertools.product(*(itertools.permutations(g) for g in groups))]


def prepare(case: Case, sem: Semantics, family: str = "hard") -> Prepared:
    """The case under ``sem``: candidates, labels, IoUs and the suppression test per pair."""
    corners = case.corners()
    n = case.n
    scores = case.scores.astype(np.float32 if sem.scores_float32 else np.float64).astype(np.float64)
    labels = np.zeros(n, dtype=np.int64) if case.labels is None else case.labels.astype(np.int64)
    if sem.labels_int32:
        labels = labels.astype(np.int32).astype(np.int64)
    candidates = np.ones(n, dtype=bool)
    if case.score_threshold is not None and family not in ("matrix", "soft"):  # theirs is the family's parameter
        st = float(np.float32(case.score_threshold)) if sem.scores_float32 else float(case.score_threshold)
        candidates &= scores > st if sem.score_side == ">" else scores >= st
    orders = _rank_orders(scores, sem.ties)
    if case.max_per_class is not None and sem.cap == "before":
        counts: dict = {}
        for k in orders[0]:
            if candidates[k]:
                key = 0 if sem.cap_global else labels[k]
                counts[key] = counts.get(key, 0) + 1
                candidates[k] = counts[key] <= case.max_per_class
    arith = arithmetic_dtype(case.dtype)
    b = _normalised(corners) if sem.normalise else corners
    if sem.drop_zero_area:
        with np.errstate(all="ignore"):
            d = b.astype(np.float64)
            candidates &= (d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1]) > 0
    same = labels[:, None] == labels[None, :]
    offset = None
    if sem.class_offsets and case.labels is not None:
        offset = class_offsets(b, labels, sem.class_offsets)
        same = np.ones((n, n), dtype=bool)
    if sem.overlap == "opencv":  # rectangles x, y, w, h in float64; the offset moves x and y
        d = b.astype(np.float64)
        shift = np.zeros(n) if offset is None else offset.astype(np.float64)
        with np.errstate(all="ignore"):
            iou = _opencv_overlap(d[:, 0] + shift, d[:, 1] + shift, d[:, 2] - d[:, 0], d[:, 3] - d[:, 1])
        iou = iou.astype(np.float64)
        threshold = float(np.float32(case.iou_threshold))
    else:
        if offset is not None:
            with np.errstate(all="ignore"):
                b = b.astype(offset.dtype) + offset[:, None]
        dtype = "float64" if sem.overlap == "float64" or b.dtype == np.float64 else arith
        iou = iou_matrix(b, dtype)
        threshold = case.iou_threshold
        if sem.threshold_float32:
            iou = iou.astype(np.float32)
            threshold = float(np.float32(case.iou_threshold))
        iou = iou.astype(np.float64)
    if sem.tiny_full_overlap:
        d = b.astype(np.float64)
        with np.errstate(all="ignore"):
            area = (d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1])
        iou = np.where(area[:, None] + area[None, :] <= np.finfo(np.float64).eps, 1.0, iou)
    if family == "diou":
        test = iou - diou_penalty_matrix(b.astype(np.float64), float(case.params.get("beta", 1.0)))
        passed = (iou > 0) & ((test >= threshold) if sem.compare == ">=" else (test > threshold))
        value = test
    else:
        passed = iou >= threshold if sem.compare == ">=" else iou > threshold
        value = iou
    suppress = passed & same
    np.fill_diagonal(suppress, False)
    near = []
    if sem.near_ulps:
        step = float(np.spacing(np.array(abs(threshold) or 1.0, dtype=case.dtype))) * sem.near_ulps  # the input's ulps
        close = np.triu(same & (np.abs(value - threshold) <= step), 1) & candidates[:, None] & candidates[None, :]
        near = [tuple(p) for p in np.argwhere(close)]
    return Prepared(n, scores, labels, candidates, iou, suppress, near, orders, corners)


def diou_penalty_matrix(b: np.ndarray, beta: float) -> np.ndarray:
    """(rho^2 / c^2)^beta of every pair, as nmsbench.families' diou definition computes it."""
    x1, y1, x2, y2 = (b[:, k] for k in range(4))
    with np.errstate(all="ignore"):
        cw = np.maximum(x2[:, None], x2[None, :]) - np.minimum(x1[:, None], x1[None, :])
        ch = np.maximum(y2[:, None], y2[None, :]) - np.minimum(y1[:, None], y1[None, :])
        s = np.maximum(cw, ch)
        cx, cy = x1 / 2.0 + x2 / 2.0, y1 / 2.0 + y2 / 2.0
        dx = (cx[:, None] - cx[None, :]) / s
        dy = (cy[:, None] - cy[None, :]) / s
        cw, ch = cw / s, ch / s
        penalty = ((dx * dx + dy * dy) / (cw * cw + ch * ch)) ** beta
    return np.where(s == 0, 0.0, penalty)


# --- the families ---------------------------------------------------------------------------

def _greedy(p: Prepared, order, suppress, everyone: bool) -> list[int]:
    """Kept boxes in rank order: hard (a kept box suppresses) or allpairs (any earlier box does)."""
    removed = np.zeros(p.n, dtype=bool)
    kept = []
    for j in order:
        if not p.candidates[j]:
            continue
        if not removed[j]:
            kept.append(j)
        if everyone or not removed[j]:
            removed |= suppress[j]
    return kept


def _capped(p: Prepared, kept: list[int], case: Case, sem: Semantics) -> list[int]:
    if case.max_per_class is None or sem.cap == "before":
        return kept
    counts: dict = {}
    out = []
    for k in kept:
        key = 0 if sem.cap_global else p.labels[k]
        counts[key] = counts.get(key, 0) + 1
        if counts[key] <= case.max_per_class:
            out.append(k)
    return out


def _suppress_choices(p: Prepared):
    """The suppression matrices to try: the one computed, and each resolution of the near pairs."""
    if not p.near:
        yield p.suppress
        return
    near = p.near[:9]  # 2^9 resolutions at most
    for bits in itertools.product((False, True), repeat=len(near)):
        s = p.suppress.copy()
        for (i, j), on in zip(near, bits):
            s[i, j] = s[j, i] = on
        yield s


def _moved(p: Prepared, case: Case, kept: list[int], suppress) -> tuple:
    """weighted: each kept box as the score-weighted mean of itself and the boxes it suppresses."""
    b = p.boxes.astype(np.float64)
    w = np.maximum(case.scores.astype(np.float64), 0.0)
    out = []
    for m in kept:
        members = [j for j in range(p.n) if j == m or (p.labels[j] == p.labels[m] and suppress[m, j])]
        total = 0.0
        acc = [0.0] * 4
        for j in members:
            total += w[j]
            for c in range(4):
                acc[c] += w[j] * b[j, c]
        out.append(tuple(a / total for a in acc) if total > 0 else tuple(float(v) for v in b[m]))
    return tuple(out)


def _matrix(p: Prepared, case: Case, order, sem: Semantics) -> Output:
    kernel = case.params.get("kernel", "gaussian")
    sigma = float(case.params.get("sigma", 0.5))
    st = case.params.get("score_threshold", 0.05) if case.score_threshold is None else case.score_threshold
    rank = np.empty(p.n, dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(p.n)
    parent = (rank[:, None] < rank[None, :]) & (p.labels[:, None] == p.labels[None, :])
    iou = p.iou
    cmax = np.where(parent, iou, 0.0).max(axis=0) if p.n else np.zeros(0)
    with np.errstate(all="ignore"):
        if kernel == "gaussian":  # libm's exp (math.exp), as the definition, where the matrix is small
            exp = np.frompyfunc(math.exp, 1, 1) if p.n <= 512 else np.exp
            ratio = exp((cmax[:, None] ** 2 - iou ** 2) / sigma).astype(np.float64)
            usable = parent
        else:
            ratio = (1.0 - iou) / (1.0 - cmax[:, None])
            usable = parent & ((1.0 - cmax)[:, None] != 0.0)
    decay = np.where(usable, ratio, np.inf).min(axis=0) if p.n else np.zeros(0)
    decay = np.where(np.isinf(decay), 1.0, decay)
    final = p.scores * decay
    side = final > st if sem.score_side == ">" else final >= st
    keep = [j for j in range(p.n) if side[j] and p.candidates[j]]
    keep.sort(key=lambda j: (-final[j], -j if sem.ties == "higher" else j))
    return Output(tuple(keep), tuple(float(final[j]) for j in keep))


def _soft(p: Prepared, case: Case, sem: Semantics) -> list[Output]:
    """Soft-NMS (Bodla et al.); ties among current scores as ``sem.ties`` (any: each branch)."""
    kernel = case.params.get("kernel", "gaussian")
    sigma = float(case.params.get("sigma", 0.5))
    st = case.params.get("score_threshold", 0.001) if case.score_threshold is None else case.score_threshold
    t = case.iou_threshold
    above = (lambda v: v > st) if sem.score_side == ">" else (lambda v: v >= st)
    outputs = []

    def run(current: dict, keep: list, final: list):
        if len(outputs) >= MAX_CHOICES:
            return
        if not current:
            outputs.append(Output(tuple(keep), tuple(final)))
            return
        top = max(current.values())
        tied = sorted(k for k, v in current.items() if v == top)
        picks = tied[:1] if sem.ties == "lower" else tied[-1:] if sem.ties == "higher" else tied
        for m in picks:
            rest = dict(current)
            value = rest.pop(m)
            for j in list(rest):
                if p.labels[j] != p.labels[m]:
                    continue
                v = float(p.iou[m, j])
                if kernel == "linear":
                    hit = v > t if sem.soft_linear == ">" else v >= t
                    f = 1.0 - v if hit else 1.0
                else:
                    f = math.exp(-(v * v) / sigma)
                rest[j] *= f
                if not above(rest[j]):
                    del rest[j]
            run(rest, keep + [m], final + [value])

    start = {k: float(p.scores[k]) for k in range(p.n) if p.candidates[k] and above(float(p.scores[k]))}
    run(start, [], [])
    return outputs


def expected(family: str, case: Case, sem: Semantics = DEFINITION) -> "list[Output] | Refusal":
    """Every output the family's definition under ``sem`` allows for ``case`` (one for the
    definition), or the Refusal of invalid input."""
    problem = invalid_input(case)
    if problem:
        return Refusal(problem)
    p = prepare(case, sem, family)
    found: dict = {}
    if family == "soft":
        for out in _soft(p, case, sem):
            found.setdefault(out, None)
        return list(found)
    for order in p.orders:
        if family == "matrix":
            found.setdefault(_matrix(p, case, order, sem), None)
            continue
        for suppress in _suppress_choices(p):
            kept = _capped(p, _greedy(p, order, suppress, everyone=family == "allpairs"), case, sem)
            moved = _moved(p, case, kept, suppress) if family == "weighted" else None
            found.setdefault(Output(tuple(kept), None, moved), None)
            if len(found) >= MAX_CHOICES:
                return list(found)
    return list(found)


def definition(family: str, case: Case) -> "Output | Refusal":
    """The family definition's one output for ``case`` (or the Refusal of invalid input)."""
    out = expected(family, case)
    return out if isinstance(out, Refusal) else out[0]
