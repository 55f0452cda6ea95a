"""What the conformance report judges: every registered implementation on every device it
can run on here, and the ops people deploy that the registry does not hold as such:
torchvision's ``batched_nms`` (float32 and float16), nmsbench's own batched op
(:func:`nmsbench.batched.batched_nms`, where it exists), OpenCV's ``NMSBoxesBatched`` called as
users call it (float32 scores, int32 class ids, its score threshold and ``top_k``) and ONNX
Runtime's ``NonMaxSuppression`` operator with its options (``center_point_box``,
``score_threshold``, ``max_output_boxes_per_class``).

A subject turns a :class:`~nmsbench.conformance_oracle.Case` into an
:class:`~nmsbench.conformance_oracle.Output`, or raises (reported as a refusal).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .conformance_oracle import Case, Output

FLOAT32_LOWEST = float(np.finfo(np.float32).min)


@dataclass
class Subject:
    """One implementation on one device, as the report judges it."""

    name: str
    device: str
    family: str
    call: Callable[[Case], Output]
    takes: frozenset = frozenset()      # settings it takes: "score_threshold", "cap", "cxcywh" (native centre format)
    dtype: Optional[str] = None         # the dtype its input is cast to (None: the case's own)
    exact: bool = False
    summary: str = ""
    max_n: Optional[int] = None         # the largest N the large-N ladder gives it (None: the ladder's end)
    extra: bool = False                 # not a registered implementation

    @property
    def label(self) -> str:
        return f"{self.name} @ {self.device}"

    def run(self, case: Case) -> Output:
        if self.dtype:
            case = case.cast(self.dtype)
        return self.call(case)


def _tensors(case: Case, device: str, native: bool = False):
    import torch

    boxes = case.boxes if native else case.corners()
    b = torch.from_numpy(np.ascontiguousarray(boxes)).to(device)
    s = torch.from_numpy(np.ascontiguousarray(case.scores)).to(device)
    labels = None if case.labels is None else torch.from_numpy(np.ascontiguousarray(case.labels)).to(device)
    return b, s, labels


def _output(result) -> Output:
    keep = tuple(int(k) for k in result.keep.cpu().tolist())
    scores = None if result.scores is None else tuple(float(v) for v in result.scores.double().cpu().tolist())
    boxes = None if result.boxes is None else tuple(tuple(float(v) for v in row)
                                                      for row in result.boxes.double().cpu().tolist())
    return Output(keep, scores, boxes)


def registry_subject(name: str, device: str) -> Subject:
    """A registered implementation, called through nmsbench.run_nms (input checks included)."""
    from .api import run_nms
    from .registry import get

    impl = get(name)
    backend = impl.backends[device]
    takes_threshold = any(p.name == "score_threshold" for p in impl.params)

    def call(case: Case) -> Output:
        b, s, labels = _tensors(case, device)
        params = impl.accepted_params(case.params)
        if case.score_threshold is not None:
            params["score_threshold"] = case.score_threshold
        return _output(run_nms(name, b, s, case.iou_threshold, labels, **params))

    return Subject(name, device, impl.family, call, frozenset({"score_threshold"} if takes_threshold else ()),
                   exact=impl.exact, summary=backend.summary or impl.summary, max_n=backend.sweep_max_n)


# --- the deployed ops beside the registry ----------------------------------------------------

def batched_nms_subject(device: str, dtype: str) -> Subject:
    """torchvision.ops.batched_nms in ``dtype`` (class ids 0 where the case has no labels)."""

    def call(case: Case) -> Output:
        import torch
        import torchvision

        b, s, labels = _tensors(case, device)
        if labels is None:
            labels = torch.zeros(case.n, dtype=torch.int64, device=device)
        keep = torchvision.ops.batched_nms(b, s, labels, case.iou_threshold)
        return Output(tuple(int(k) for k in keep.cpu().tolist()))

    return Subject(f"batched_nms[{dtype}]", device, "hard", call, dtype=dtype, extra=True,
                   summary=f"torchvision.ops.batched_nms on {dtype} input (its coordinate trick for class ids)")


def opencv_batched_subject() -> Subject:
    """cv2.dnn.NMSBoxesBatched as users call it: (x, y, w, h) rectangles, float32 scores, int32
    class ids, its score threshold (none: the lowest float32) and top_k as the cap."""

    def call(case: Case) -> Output:
        import cv2

        if case.n == 0:
            return Output(())
        b = case.corners().astype(np.float64)
        rects = np.stack([b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], axis=1)
        ids = np.zeros(case.n, dtype=np.int32) if case.labels is None else case.labels.astype(np.int32)
        threshold = FLOAT32_LOWEST if case.score_threshold is None else float(case.score_threshold)
        kept = cv2.dnn.NMSBoxesBatched(rects, case.scores.astype(np.float32), ids, threshold, float(case.iou_threshold),
                                       top_k=int(case.max_per_class or 0))
        return Output(tuple(int(k) for k in np.asarray(kept, dtype=np.int64).reshape(-1)))

    return Subject("cv2.NMSBoxesBatched", "cpu", "hard", call, frozenset({"score_threshold", "cap"}), extra=True,
                   summary="cv2.dnn.NMSBoxesBatched: float32 scores, int32 class ids, score threshold, top_k")


@functools.lru_cache(maxsize=2)
def _onnx_session(center_point_box: int):
    """NonMaxSuppression with every input: boxes [1, N, 4], scores [1, C, N], max boxes per
    class, IoU threshold, score threshold -> selected [K, 3]."""
    from .onnx_model import nms_session

    return nms_session("nms", [1, None, 4], [1, None, None], score_threshold=True, center_point_box=center_point_box)


def onnx_operator_subject() -> Subject:
    """ONNX Runtime's NonMaxSuppression with its options: the labels become the classes axis
    (a box scores -inf in the other classes), centre format natively (center_point_box = 1)."""

    def call(case: Case) -> Output:
        if case.dtype != "float32":
            raise ValueError(f"NonMaxSuppression takes float32 boxes and scores, got {case.dtype}")
        if case.n == 0:
            return Output(())
        labels = np.zeros(case.n, dtype=np.int64) if case.labels is None else case.labels
        classes, column = np.unique(labels, return_inverse=True)
        scores = np.full((1, len(classes), case.n), -np.inf, dtype=np.float32)
        scores[0, column, np.arange(case.n)] = case.scores
        threshold = FLOAT32_LOWEST if case.score_threshold is None else case.score_threshold
        out = _onnx_session(int(case.fmt == "cxcywh")).run(None, {
            "boxes": np.ascontiguousarray(case.boxes)[None], "scores": scores,
            "max_output_boxes_per_class": np.array([case.max_per_class or case.n], dtype=np.int64),
            "iou_threshold": np.array([case.iou_threshold], dtype=np.float32),
            "score_threshold": np.array([threshold], dtype=np.float32)})[0]
        kept = sorted(int(k) for k in out[:, 2])  # by input index, then by score: ties by lower index
        kept.sort(key=lambda k: -float(case.scores[k]))
        return Output(tuple(kept))

    return Subject("onnx.NonMaxSuppression", "cpu", "hard", call, frozenset({"score_threshold", "cap", "cxcywh"}),
                   extra=True, summary="ONNX Runtime's NonMaxSuppression operator with score threshold, per-class cap, "
                                       "center_point_box")


def batched_op_subject(device: str) -> Subject:
    """nmsbench.batched_nms (the batched, padded op) on a batch of one image: labels as its
    classes, the case's score threshold (none: -inf), per-class cap and box format natively."""

    def call(case: Case) -> Output:
        from .batched import batched_nms

        b, s, labels = _tensors(case, device, native=True)
        det = batched_nms(b[None], s[None], None if labels is None else labels[None], iou_threshold=case.iou_threshold,
                          score_threshold=-math.inf if case.score_threshold is None else case.score_threshold,
                          max_output_boxes=max(case.n, 1), max_output_boxes_per_class=case.max_per_class,
                          box_format=case.fmt)
        count = int(det.num_detections[0])
        return Output(tuple(int(k) for k in det.indices[0, :count].cpu().tolist()))

    return Subject("nmsbench.batched_nms", device, "hard", call, frozenset({"score_threshold", "cap", "cxcywh"}),
                   extra=True, summary="nmsbench.batched_nms on a batch of one (score threshold, per-class cap, "
                                       "box format)")


def _installed(module: str) -> bool:
    from .registry import _installed as installed

    return installed(module)


def subjects(devices, names=None) -> tuple[list[Subject], dict[str, str]]:
    """(the subjects that run here on ``devices``, name @ device -> why one cannot run).

    ``names`` limits them (registered names and the extras' names); default: all."""
    from .registry import implementations

    wanted = None if names is None else set(names)
    out, skipped = [], {}
    for name, impl in sorted(implementations().items()):
        for device in devices:
            if wanted is not None and name not in wanted:
                continue
            if device not in impl.backends:
                if wanted is not None:
                    skipped[f"{name} @ {device}"] = f"no {device} backend (has: {', '.join(impl.devices)})"
                continue
            available, reason = impl.backends[device].availability()
            if available:
                out.append(registry_subject(name, device))
            else:
                skipped[f"{name} @ {device}"] = reason
    extras: list[tuple[str, str, Callable[[], Subject], tuple]] = []
    for device in devices:
        for dtype in ("float32", "float16"):
            extras.append((f"batched_nms[{dtype}]", device, functools.partial(batched_nms_subject, device, dtype),
                           ("torchvision",)))
        extras.append(("nmsbench.batched_nms", device, functools.partial(batched_op_subject, device), ("nmsbench.batched",)))
    if "cpu" in devices:
        extras.append(("cv2.NMSBoxesBatched", "cpu", opencv_batched_subject, ("cv2",)))
        extras.append(("onnx.NonMaxSuppression", "cpu", onnx_operator_subject, ("onnxruntime", "onnx")))
    for name, device, make, modules in extras:
        if wanted is not None and name not in wanted:
            continue
        missing = [m for m in modules if not _installed(m)]
        if missing:
            skipped[f"{name} @ {device}"] = f"{', '.join(missing)} not installed"
        else:
            out.append(make())
    return out, skipped


EXTRA_NAMES = ("batched_nms[float32]", "batched_nms[float16]", "nmsbench.batched_nms", "cv2.NMSBoxesBatched",
               "onnx.NonMaxSuppression")


def describe_refusal(exc: BaseException) -> str:
    """One line for what a subject raised."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(exc).__name__}: {text}"

