"""Batched, class-aware, exact NMS: a batch of images in one call, padded outputs, no host
synchronization on CUDA (so a call can be captured in a CUDA graph), from boxes and
scores (:func:`batched_nms`) or from a detector's raw head (:func:`batched_nms_from_head`).

    >>> det = nmsbench.batched_nms(boxes, scores, iou_threshold=0.5, score_threshold=0.25)
    >>> det.boxes[b, : det.num_detections[b]]     # image b's detections, best first

What a call computes, per image (CPU and CUDA alike, bit for bit):

1. **Candidates**: a (box, class) pair whose score is *strictly above* ``score_threshold``
   (``score > t``, as ultralytics, ONNX Runtime and TensorRT's EfficientNMS compare; a
   score equal to the threshold is no candidate). The threshold is rounded to the scores'
   arithmetic type first, as torch's ``scores > t`` does (float16 and float32: float32;
   float64: float64). With ``scores`` [B, N, C] a box is one candidate, its best class
   (the first of equal best scores), or with ``multi_label`` one candidate per class above
   the threshold; with ``scores`` [B, N] its class is ``labels`` (none: class 0). A NaN
   score is never above the threshold and never the best class; +inf is a score like any.
   Each candidate has an index: its box i, or ``i * C + c`` with ``multi_label``.
2. **Rank**: descending score, ties by the lower candidate index (``torch.sort(stable=True)``'s
   order); with ``pre_nms_top_k`` only the first that many candidates stay. That is the one
   setting that may change the answer (a candidate past it may have been a detection).
3. **NMS**: per class (``class_agnostic``: one class for all), greedy NMS exactly as
   ``torchvision.ops.nms`` over that class's candidates (IoU in the boxes' arithmetic
   type, float32 for float16, compared in float64: ``IoU > iou_threshold`` suppresses). A
   box whose coordinates hold a NaN overlaps nothing.
4. **Output**: the kept candidates by rank, at most ``max_output_boxes_per_class`` per class
   (the first by rank), the first ``max_output_boxes`` of them: padded :class:`BatchedDetections`.

Candidates go into a buffer of ``max_candidates`` per image (default: every box, which
cannot overflow; with ``multi_label`` ``max(4 N, 32768)``). An image with more
candidates than that gets **no** detections and ``overflow`` True (``num_candidates``
says how many passed): never a partial answer nobody was told about.

Boxes are ``xyxy`` (x1, y1, x2, y2) or ``cxcywh`` (converted as torchvision's
``box_convert``: ``cx - 0.5 * w``, ...); the output boxes are always xyxy. float16, float32
and float64 inputs; float16 is computed in float32 and its outputs rounded to float16.

Eager calls on plain tensors go straight to the backend; under ``torch.compile``,
``torch.export``, tensor subclasses or dispatch modes the call is the registered op
``torch.ops.nmsbench.batched_nms`` (its fake implementation gives the padded shapes), so a
module ending in it compiles with ``fullgraph=True`` and exports. The op is not
differentiable: no gradient reaches the inputs.
"""

from __future__ import annotations

import importlib.util
import math
import numbers
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from .registry import BackendUnavailable, batched_backend

BOX_FORMATS = ("xyxy", "cxcywh")
HEAD_LAYOUTS = ("yolov5", "yolov8")
DTYPES = (torch.float16, torch.float32, torch.float64)
INT32_MAX = 2**31 - 1
MULTI_LABEL_ROWS = 4  # the default buffer with multi_label: max(this x N, MULTI_LABEL_MIN) candidates an image
MULTI_LABEL_MIN = 32768


class BatchedDetections(NamedTuple):
    """Padded detections of a batch of B images, K = ``max_output_boxes`` slots each, best
    first. Slots past ``num_detections[b]`` are padding: boxes and scores 0, classes and
    indices -1. On CUDA an eager call's fields are views of allocations shared with other
    calls' results (up to 1 MiB a field: ``torch.save`` of a view writes it whole;
    ``.clone()`` one to keep it alone), which a later call of the same shape on the same
    stream writes again once nothing of this result is held (no reference to it or a
    field, no view or array on that memory): hold what you keep. A
    ``torch.UntypedStorage`` alone does not count as holding it."""

    num_detections: Tensor  # [B] int64
    boxes: Tensor  # [B, K, 4] the input dtype, x1, y1, x2, y2
    scores: Tensor  # [B, K] the input dtype
    classes: Tensor  # [B, K] int64
    indices: Tensor  # [B, K] int64: the input box (row, anchor) each detection came from
    overflow: Tensor  # [B] bool: more candidates than max_candidates; the image then has no detections
    num_candidates: Tensor  # [B] int64: candidates above the score threshold (before pre_nms_top_k)


def batched_nms(boxes: Tensor, scores: Tensor, labels: Optional[Tensor] = None, *, iou_threshold: float,
                score_threshold: float = 0.0, max_output_boxes: int = 300,
                max_output_boxes_per_class: Optional[int] = None, class_agnostic: bool = False,
                multi_label: bool = False, pre_nms_top_k: Optional[int] = None, max_candidates: Optional[int] = None,
                box_format: str = "xyxy") -> BatchedDetections:
    """Batched NMS of ``boxes`` [B, N, 4] with ``scores`` [B, N, C] (or [B, N] with
    ``labels`` [B, N] or none), as the module docstring defines it. Raises ValueError for
    bad input (shapes, dtypes, devices, parameters) and BackendUnavailable where the
    device's backend cannot run."""
    return _call(boxes, scores, labels, "scores", box_format, iou_threshold, score_threshold, max_output_boxes,
                 max_output_boxes_per_class, class_agnostic, multi_label, pre_nms_top_k, max_candidates)


def batched_nms_from_head(raw: Tensor, layout: str = "yolov5", *, iou_threshold: float = 0.45,
                          score_threshold: float = 0.25, max_output_boxes: int = 300,
                          max_output_boxes_per_class: Optional[int] = None, class_agnostic: bool = False,
                          multi_label: bool = False, pre_nms_top_k: Optional[int] = None,
                          max_candidates: Optional[int] = None) -> BatchedDetections:
    """Batched NMS straight from a detector head's raw output, decoded in the same launches:

    - ``"yolov5"``: [B, R, 5 + C] rows of cx, cy, w, h, objectness, C class scores
      (sigmoid applied); a row is read only where its objectness is above the threshold,
      and class c scores objectness x class score (in the arithmetic type), as YOLOv5's
      ``non_max_suppression`` does;
    - ``"yolov8"``: [B, 4 + C, A], channels first (YOLOv8 / YOLO11): cx, cy, w, h, then C
      class scores, no objectness.

    Boxes are decoded from cxcywh; ``indices`` are rows (anchors). Defaults are YOLOv5's
    (IoU 0.45, conf 0.25, 300 detections)."""
    if not isinstance(layout, str) or layout not in HEAD_LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(HEAD_LAYOUTS)}, got {layout!r}")
    return _call(raw, None, None, layout, "cxcywh", iou_threshold, score_threshold, max_output_boxes,
                 max_output_boxes_per_class, class_agnostic, multi_label, pre_nms_top_k, max_candidates)


# ------------------------------------------------------------------ validation

def _check_number(name: str, value, *, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if minimum is not None and not value >= minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return float(value)


def _check_count(name: str, value, *, minimum: int, optional: bool = False) -> Optional[int]:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not minimum <= value <= INT32_MAX:
        what = f"an integer in [{minimum}, {INT32_MAX}]" + (" or None" if optional else "")
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return int(value)


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def _check_tensor(name: str, tensor, device=None) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout != torch.strided:
        raise ValueError(f"{name} must be a dense tensor, got layout {tensor.layout}")
    if not (tensor.is_cuda or tensor.is_cpu):  # the flags: a device object per call costs more
        raise ValueError(f"{name} is on {tensor.device}; batched NMS takes cpu and cuda tensors")
    if device is not None and tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device} but the boxes are on {device}")


_PLAIN_VALUES = frozenset((int, float, str, bool, type(None)))
_checked: dict = {}  # the parameters as given (values and their types) -> the checked dict; a call site repeats them
CHECKED_KEPT = 256


def _check_params(*given) -> dict:
    """The call's parameters checked (ValueError naming a bad one), as a dict for the op."""
    types = tuple(map(type, given))
    key = (given, types) if _PLAIN_VALUES.issuperset(types) else None
    checked = _checked.get(key) if key is not None else None
    if checked is None:
        checked = _checked_params(*given)
        if key is not None and len(_checked) < CHECKED_KEPT:
            _checked[key] = checked
    return dict(checked)


def _checked_params(layout, box_format, iou_threshold, score_threshold, max_output_boxes, max_output_boxes_per_class,
                    class_agnostic, multi_label, pre_nms_top_k, max_candidates) -> dict:
    if not isinstance(box_format, str) or box_format not in BOX_FORMATS:
        raise ValueError(f"box_format must be one of {', '.join(BOX_FORMATS)}, got {box_format!r}")
    return dict(
        layout=layout, box_format=box_format,
        iou_threshold=_check_number("iou_threshold", iou_threshold, minimum=0.0),
        score_threshold=_check_number("score_threshold", score_threshold),
        max_output_boxes=_check_count("max_output_boxes", max_output_boxes, minimum=0),
        max_output_boxes_per_class=_check_count("max_output_boxes_per_class", max_output_boxes_per_class, minimum=1,
                                                optional=True),
        class_agnostic=_check_flag("class_agnostic", class_agnostic),
        multi_label=_check_flag("multi_label", multi_label),
        pre_nms_top_k=_check_count("pre_nms_top_k", pre_nms_top_k, minimum=1, optional=True),
        max_candidates=_check_count("max_candidates", max_candidates, minimum=1, optional=True),
    )


def _check_inputs(data, scores, labels, layout: str, multi_label: bool) -> tuple[int, int]:
    """(N rows an image, C classes) of valid inputs; ValueError naming the first problem."""
    name = "boxes" if layout == "scores" else "raw"
    _check_tensor(name, data)
    if data.dtype not in DTYPES:
        raise ValueError(f"{name} must be float16, float32 or float64, got {data.dtype}")
    if layout == "scores":
        if data.dim() != 3 or data.shape[2] != 4:
            raise ValueError(f"boxes must have shape [B, N, 4], got {list(data.shape)}")
        _check_tensor("scores", scores, data.device)
        if scores.dtype != data.dtype:
            raise ValueError(f"scores must have the boxes' dtype {data.dtype}, got {scores.dtype}")
        if scores.dim() not in (2, 3) or tuple(scores.shape[:2]) != tuple(data.shape[:2]) or (
                scores.dim() == 3 and scores.shape[2] < 1):
            raise ValueError(f"scores must have shape [B, N] or [B, N, C] with C >= 1 for boxes of shape "
                             f"{list(data.shape)}, got {list(scores.shape)}")
        n, classes = data.shape[1], scores.shape[2] if scores.dim() == 3 else 1
        if labels is not None:
            _check_tensor("labels", labels, data.device)
            if scores.dim() != 2:
                raise ValueError("labels go with scores [B, N]; scores [B, N, C] carry their classes")
            if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
                raise ValueError(f"labels must be integers, got {labels.dtype}")
            if tuple(labels.shape) != tuple(scores.shape):
                raise ValueError(f"labels must have the scores' shape {list(scores.shape)}, got {list(labels.shape)}")
        if multi_label and scores.dim() != 3:
            raise ValueError("multi_label needs scores [B, N, C]")
    else:
        fields = 5 if layout == "yolov5" else 4
        shape = "[B, R, 5 + C] (YOLOv5 at 640: [B, 25200, 85])" if layout == "yolov5" else \
            "[B, 4 + C, A] (YOLOv8 at 640: [B, 84, 8400])"
        axis = 2 if layout == "yolov5" else 1
        if data.dim() != 3 or data.shape[axis] < fields + 1:
            raise ValueError(f"raw {layout} output must have shape {shape}, got {list(data.shape)}")
        n, classes = data.shape[3 - axis], data.shape[axis] - fields
    if data.shape[0] > INT32_MAX or n * classes > INT32_MAX:
        raise ValueError(f"at most {INT32_MAX} images and (boxes x classes) an image, got {data.shape[0]} and "
                         f"{n * classes}")
    return n, classes


# ------------------------------------------------------------------ running

_NEEDS = {"cuda": "cupy", "cpu": "numba"}  # the package each device's backend needs
_backends: dict = {}  # device type -> its backend module, imported on its first call


def _backend(device: str):
    """The device's backend, imported once (BackendUnavailable where its package is missing)."""
    if importlib.util.find_spec(_NEEDS[device]) is None:
        raise BackendUnavailable(f"batched NMS on {device} is unavailable: {_NEEDS[device]} not installed")
    backend = _backends[device] = batched_backend(device)
    return backend


def _run(data, scores, labels, p: dict, **backend_options) -> tuple[Tensor, ...]:
    """Validate the tensors and run the device's backend (``backend_options``: its own
    arguments for tests and probes, e.g. the CUDA backend's ``sort_capacity``)."""
    backend, arguments = _backend_arguments(data, scores, labels, p)
    return backend.run(
        data.contiguous(), None if scores is None else scores.contiguous(),
        None if labels is None else labels.to(torch.int64).contiguous(), **arguments, **backend_options)


def _backend_arguments(data, scores, labels, p: dict) -> tuple[object, dict]:
    """The device's backend and its keyword arguments for these tensors (validated here)."""
    n, classes = _check_inputs(data, scores, labels, p["layout"], p["multi_label"])
    capacity = candidate_capacity(n, classes, p["multi_label"], p["max_candidates"])
    max_output = p["max_output_boxes"]
    per_class = p["max_output_boxes_per_class"]
    top_k = p["pre_nms_top_k"]
    device = "cuda" if data.is_cuda else "cpu"  # _check_inputs allows no other
    backend = _backends.get(device) or _backend(device)
    return backend, dict(
        layout=p["layout"], cxcywh=p["box_format"] == "cxcywh", n=n, classes=classes, multi_label=p["multi_label"],
        class_agnostic=p["class_agnostic"], iou_threshold=p["iou_threshold"], score_threshold=p["score_threshold"],
        max_output=max_output, max_per_class=max_output if per_class is None else min(per_class, max_output),
        top_k=INT32_MAX if top_k is None else top_k, capacity=capacity)


def release_batched_memory() -> None:
    """Let go of the GPU memory the CUDA backend keeps between eager calls for the next ones
    (each call shape's scratch and its last few results' outputs, for reuse once they are
    no longer held: a few MiB for usual heads, bounded in all). It goes back to torch's
    caching allocator, so ``torch.cuda.empty_cache()`` can then return it to the driver;
    the next call allocates again. Results already returned are not touched."""
    backend = _backends.get("cuda")
    if backend is not None:
        backend.release()


def candidate_capacity(n: int, classes: int, multi_label: bool, max_candidates: Optional[int]) -> int:
    """Candidates an image's buffer holds: ``max_candidates``, by default every box (single
    label: it cannot overflow) or, with multi-label, ``max(4 N, 32768)``; never more than
    an image can have."""
    possible = n * classes if multi_label else n
    if max_candidates is None:
        max_candidates = max(MULTI_LABEL_ROWS * n, MULTI_LABEL_MIN) if multi_label else possible
    return min(max_candidates, possible)


def _plain(*tensors) -> bool:
    """Whether a call may go straight to the backend: not traced, plain tensors, no dispatch mode."""
    if torch.compiler.is_compiling():
        return False
    for t in tensors:
        if t is not None and type(t) is not torch.Tensor:
            return False
    return torch._C._len_torch_dispatch_stack() == 0


# A head call's backend and arguments, by its parameters as given (plain values and their
# types) and the raw tensor's dtype, shape, strides and device type: a detector calls with
# the same ones every time, and its later calls skip the checks, which take a batch of one's
# eager call a good part of its host time. Only a contiguous raw tensor that passed the
# checks is kept; anything else (scores, a subclass, tracing, a dispatch mode) goes the
# checked way.
_heads: dict = {}
HEADS_KEPT = 256


def _call(data, scores, labels, layout, box_format, iou_threshold, score_threshold, max_output_boxes,
          max_output_boxes_per_class, class_agnostic, multi_label, pre_nms_top_k, max_candidates) -> BatchedDetections:
    given = (layout, box_format, iou_threshold, score_threshold, max_output_boxes, max_output_boxes_per_class,
             class_agnostic, multi_label, pre_nms_top_k, max_candidates)
    key = None
    if scores is None and labels is None and _plain(data):
        types = tuple(map(type, given))
        if _PLAIN_VALUES.issuperset(types):
            key = (given, types, data.dtype, data.shape, data.stride(), data.is_cuda)
            known = _heads.get(key)
            if known is not None:
                backend, arguments = known
                return BatchedDetections(*backend.run(data, None, None, **arguments))
    p = _check_params(*given)
    if key is not None:  # a plain head call
        backend, arguments = _backend_arguments(data, None, None, p)
        if data.is_contiguous():
            if len(_heads) >= HEADS_KEPT:
                _heads.clear()
            _heads[key] = backend, arguments
        return BatchedDetections(*backend.run(data.contiguous(), None, None, **arguments))
    if _plain(data, scores, labels):
        return BatchedDetections(*_run(data, scores, labels, p))
    _check_inputs(data, scores, labels, layout, p["multi_label"])  # a ValueError before any tracing of the op
    return BatchedDetections(*torch.ops.nmsbench.batched_nms(data, scores, labels, **p))


# ------------------------------------------------------------------ the registered op

@torch.library.custom_op("nmsbench::batched_nms", mutates_args=())
def _batched_nms_op(data: Tensor, scores: Optional[Tensor], labels: Optional[Tensor], layout: str, box_format: str,
                    iou_threshold: float, score_threshold: float, max_output_boxes: int,
                    max_output_boxes_per_class: Optional[int], class_agnostic: bool, multi_label: bool,
                    pre_nms_top_k: Optional[int], max_candidates: Optional[int]
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The op behind batched_nms and batched_nms_from_head (layout "scores", "yolov5" or
    "yolov8"); outputs as BatchedDetections' fields."""
    p = _check_params(layout, box_format, iou_threshold, score_threshold, max_output_boxes, max_output_boxes_per_class,
                      class_agnostic, multi_label, pre_nms_top_k, max_candidates)
    return _run(data, scores, labels, p)


@_batched_nms_op.register_fake
def _batched_nms_fake(data, scores, labels, layout, box_format, iou_threshold, score_threshold, max_output_boxes,
                      max_output_boxes_per_class, class_agnostic, multi_label, pre_nms_top_k, max_candidates):
    _check_params(layout, box_format, iou_threshold, score_threshold, max_output_boxes, max_output_boxes_per_class,
                  class_agnostic, multi_label, pre_nms_top_k, max_candidates)
    _check_inputs(data, scores, labels, layout, multi_label)
    batch, k = data.shape[0], max_output_boxes
    ints = dict(dtype=torch.int64)
    return (data.new_empty(batch, **ints), data.new_empty(batch, k, 4), data.new_empty(batch, k),
            data.new_empty(batch, k, **ints), data.new_empty(batch, k, **ints), data.new_empty(batch, dtype=torch.bool),
            data.new_empty(batch, **ints))
