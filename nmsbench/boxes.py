"""Box tensors: the NMS result type, input validation and the IoU convention.

IoU follows torchvision exactly, so exact variants can agree with it bit for bit:
``area = (x2 - x1) * (y2 - y1)``, ``inter = max(0, min(x2) - max(x1)) * max(0, min(y2) - max(y1))``,
``iou = inter / (area_a + area_b - inter)``; where the union is 0 (two zero-area boxes) the
IoU is 0, which is what torchvision's NaN comparison does.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import torch


class NMSResult(NamedTuple):
    """What every NMS variant returns.

    keep:   int64 indices into the *input* order, sorted by descending final score
            (ties by lower input index), on the input's device.
    scores: final (decayed) scores of the kept boxes, aligned with ``keep``, for
            variants that change scores (Matrix NMS, Soft-NMS); ``None`` otherwise.
    boxes:  the kept boxes as the variant moved them, (len(keep), 4) in the input's
            dtype, for variants that move boxes (weighted NMS); ``None`` otherwise.
    """

    keep: torch.Tensor
    scores: Optional[torch.Tensor] = None
    boxes: Optional[torch.Tensor] = None


class PaddedNMSResult(NamedTuple):
    """The fixed-size output of a ``graph_safe`` backend called with ``padded=True``.

    No host synchronization happens inside such a call, so it can be captured in a CUDA
    graph. keep: (N,) int64 on the input's device; its first ``count`` entries are what
    :class:`NMSResult` would hold, the rest are -1. count: 0-d int64 tensor on the same
    device. scores: (N,) final scores aligned with ``keep`` (padding 0), or ``None``.
    input_check: through ``nmsbench.run_nms``, the verdict of the input check that ran on
    the device with the op (0-d int64: 0 where the input is valid); ``None`` from a
    backend called directly or with ``validate=False``. Bad input does not raise inside
    the call (that would synchronize): :meth:`check` and :meth:`trimmed` raise it.
    """

    keep: torch.Tensor
    count: torch.Tensor
    scores: Optional[torch.Tensor] = None
    input_check: Optional[torch.Tensor] = None

    def check(self) -> "PaddedNMSResult":
        """Raise the ``ValueError`` of bad input, if the input check found any (waits for
        the device); returns the result itself otherwise."""
        if self.input_check is not None:
            verdict = int(self.input_check)
            if verdict:
                row, reason = describe_verdict(verdict)
                raise ValueError(f"invalid input row {row}: {reason} (the padded call's input check; "
                                 f"nmsbench.validate_nms_inputs on the same tensors gives the values)")
        return self

    def trimmed(self) -> NMSResult:
        """The :class:`NMSResult` this padded output stands for (waits for the count);
        a ``ValueError`` where the input check found bad input."""
        self.check()
        n = int(self.count)
        return NMSResult(self.keep[:n], None if self.scores is None else self.scores[:n])


# The device input check's verdict: 0 for valid input, else (1 + first bad row) * 8 + the
# reason's code (the kernel is compiled with these codes as VALIDATE_<NAME>).
VERDICT_REASONS = {
    "BOX_NOT_FINITE": (1, "a box coordinate is NaN or Inf"),
    "SCORE_NOT_FINITE": (2, "its score is NaN or Inf"),
    "X_REVERSED": (3, "x2 < x1"),
    "Y_REVERSED": (4, "y2 < y1"),
    "AREA_OVERFLOW": (5, "its area (x2 - x1) * (y2 - y1) overflows the dtype"),
}
_REASON_TEXT = {code: text for code, text in VERDICT_REASONS.values()}


def describe_verdict(verdict: int) -> tuple[int, str]:
    """(first bad row, what is wrong with it) of a nonzero input-check verdict."""
    return verdict // 8 - 1, _REASON_TEXT.get(verdict % 8, "it breaks the input contract")


@dataclass
class BoxSet:
    """One generated or loaded set of candidate boxes (always built on the CPU)."""

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: Optional[torch.Tensor] = None
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    def to(self, device: str | torch.device, dtype: torch.dtype | None = None) -> "BoxSet":
        """The same boxes on ``device`` (and in ``dtype`` for boxes and scores)."""
        return BoxSet(
            boxes=self.boxes.to(device=device, dtype=dtype or self.boxes.dtype),
            scores=self.scores.to(device=device, dtype=dtype or self.scores.dtype),
            labels=None if self.labels is None else self.labels.to(device),
            meta=dict(self.meta),
        )


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ("," if t.dim() == 1 else "") + ")"


def validate_nms_inputs(boxes, scores, labels=None) -> None:
    """Raise ``ValueError`` naming the first problem with an NMS call's inputs.

    Checks types, shapes, dtypes, devices (:func:`check_input_structure`), then NaN/Inf,
    x2 >= x1, y2 >= y1, and that each box's area is finite in the arithmetic's dtype
    (:func:`check_input_values`). N = 0 and zero-area boxes are valid. This reference
    form synchronizes with the device; ``nmsbench.run_nms`` checks the values in one
    fused pass instead (:mod:`nmsbench.validation`) and calls this only to word an error.
    """
    check_input_structure(boxes, scores, labels)
    check_input_values(boxes, scores)


# what each input may be: box and score dtypes (a backend lists the ones it takes), and
# label dtypes (every backend compares labels as int64, so any of these keeps its identity)
BOX_DTYPES = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))
LABEL_DTYPES = frozenset((torch.int8, torch.int16, torch.int32, torch.int64,
                          torch.uint8, torch.uint16, torch.uint32, torch.uint64))
_STRIDED = torch.strided


def _torch_name(value) -> str:
    return str(value).removeprefix("torch.")


def check_input_structure(boxes, scores, labels=None) -> None:
    """The checks that read no tensor data: types, shapes, dtypes, layouts and devices.

    Every tensor must be dense (strided), hold data (not on the ``meta`` device) and sit on
    the boxes' device, which is the CPU or a CUDA device on the fast path (``get_device()``
    alone is -1 for the CPU and ``meta`` alike) and compared as ``torch.device`` objects
    otherwise."""
    try:
        if (type(boxes) is torch.Tensor and type(scores) is torch.Tensor and boxes.dim() == 2 and boxes.shape[1] == 4
                and scores.dim() == 1 and scores.shape[0] == boxes.shape[0] and scores.dtype is boxes.dtype
                and boxes.dtype in BOX_DTYPES and boxes.layout is _STRIDED and scores.layout is _STRIDED
                and ((cpu := boxes.is_cpu) and scores.is_cpu
                     or boxes.is_cuda and scores.is_cuda and scores.get_device() == boxes.get_device())
                and (labels is None or (type(labels) is torch.Tensor and labels.dim() == 1
                                        and labels.shape[0] == boxes.shape[0] and labels.dtype in LABEL_DTYPES
                                        and labels.layout is _STRIDED
                                        and (labels.is_cpu if cpu else labels.is_cuda
                                             and labels.get_device() == boxes.get_device())))):
            return  # valid: the common case, on every call's path, in a few attribute reads
    except RuntimeError:  # e.g. a nested tensor has no shape: worded below
        pass
    for name, t in (("boxes", boxes), ("scores", scores)):
        _check_tensor(name, t)
    if boxes.dim() != 2 or boxes.shape[1] != 4:
        raise ValueError(f"boxes must have shape (N, 4) as x1, y1, x2, y2; got {_shape(boxes)}")
    n = boxes.shape[0]
    if scores.dim() != 1 or scores.shape[0] != n:
        raise ValueError(
            f"scores must have shape ({n},) to match {n} boxes; got {_shape(scores)}"
        )
    for name, t in (("boxes", boxes), ("scores", scores)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
        if t.dtype not in BOX_DTYPES:
            raise ValueError(f"{name} must be float16, bfloat16, float32 or float64; got {_torch_name(t.dtype)}")
    if scores.dtype != boxes.dtype:
        raise ValueError(f"scores dtype {scores.dtype} differs from boxes dtype {boxes.dtype}")
    if scores.device != boxes.device:
        raise ValueError(f"scores are on {scores.device} but boxes are on {boxes.device}")
    if labels is not None:
        if not isinstance(labels, torch.Tensor):
            raise ValueError(f"labels must be a torch.Tensor or None, got {type(labels).__name__}")
        _check_tensor("labels", labels)
        if labels.dim() != 1 or labels.shape[0] != n:
            raise ValueError(f"labels must have shape ({n},) to match {n} boxes; got {_shape(labels)}")
        if labels.dtype not in LABEL_DTYPES:
            raise ValueError(f"labels must be an integer tensor, got {labels.dtype}")
        if labels.device != boxes.device:
            raise ValueError(f"labels are on {labels.device} but boxes are on {boxes.device}")


def _check_tensor(name: str, t) -> None:
    """One input's type, layout and device (its data readable where it lives)."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_nested:
        raise ValueError(f"{name} must be a dense tensor, got a nested tensor")
    if t.layout is not _STRIDED:
        raise ValueError(f"{name} must be a dense (strided) tensor, got layout {_torch_name(t.layout)}; "
                         f"call .to_dense() first")
    if t.is_meta:
        raise ValueError(f"{name} are on the meta device, which holds no data")
    if type(t) is not torch.Tensor and not _holds_data(t):  # e.g. torch.compile's FakeTensor: "cpu", data on meta
        raise ValueError(f"{name} hold no data of their own (a {type(t).__name__} on {t.device}); pass a plain tensor")


def _holds_data(t: torch.Tensor) -> bool:
    """Whether a tensor subclass's storage holds data (a wrapper's may have none, or a meta one)."""
    try:
        return t.untyped_storage().device.type != "meta"
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def check_input_values(boxes: torch.Tensor, scores: torch.Tensor) -> None:
    """The value checks, with torch ops on the data's device (each synchronizes); the
    message names the first bad row of the first rule broken."""
    if boxes.shape[0] == 0:
        return
    finite = torch.isfinite(boxes).all(dim=1)
    if not bool(finite.all()):
        row = int((~finite).nonzero()[0, 0])
        raise ValueError(f"boxes contain NaN or Inf (first at row {row}: {boxes[row].tolist()})")
    finite = torch.isfinite(scores)
    if not bool(finite.all()):
        row = int((~finite).nonzero()[0, 0])
        raise ValueError(f"scores contain NaN or Inf (first at index {row}: {scores[row].item()})")
    for lo, hi, axis in ((0, 2, "x"), (1, 3, "y")):
        bad = boxes[:, hi] < boxes[:, lo]
        if bool(bad.any()):
            row = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"boxes must be x1, y1, x2, y2 with {axis}2 >= {axis}1; row {row} has "
                f"{axis}2 < {axis}1 ({boxes[row, hi].item()} < {boxes[row, lo].item()})"
            )
    # IoU is undefined (inf / inf) where an area overflows; half precision is computed in float32
    wide = boxes.float() if boxes.dtype in (torch.float16, torch.bfloat16) else boxes
    area = (wide[:, 2] - wide[:, 0]) * (wide[:, 3] - wide[:, 1])
    finite = torch.isfinite(area)
    if not bool(finite.all()):
        row = int((~finite).nonzero()[0, 0])
        raise ValueError(
            f"boxes too large: row {row}'s area (x2 - x1) * (y2 - y1) overflows {str(wide.dtype).removeprefix('torch.')} "
            f"({boxes[row].tolist()}), so its IoU is undefined"
        )


def validate_iou_threshold(iou_threshold) -> float:
    """The threshold as a float in [0, 1], or a ``ValueError``."""
    if type(iou_threshold) is float and 0.0 <= iou_threshold <= 1.0:  # the common case, on every call's path
        return iou_threshold
    if isinstance(iou_threshold, torch.Tensor) and iou_threshold.numel() == 1:
        iou_threshold = iou_threshold.item()
    if isinstance(iou_threshold, bool) or not isinstance(iou_threshold, numbers.Real):
        raise ValueError(f"iou_threshold must be a number, got {iou_threshold!r}")
    value = float(iou_threshold)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"iou_threshold must be in [0, 1], got {iou_threshold!r}")
    return value


def score_order(scores: torch.Tensor) -> torch.Tensor:
    """Input indices by descending score, ties by lower input index (torchvision's order)."""
    return torch.sort(scores, descending=True, stable=True).indices


def pairwise_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU matrix between boxes ``a`` (M, 4) and ``b`` (N, 4), in their dtype.

    Same arithmetic as torchvision's NMS kernels, with 0 where the union is 0.
    """
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    w = (torch.minimum(a[:, None, 2], b[None, :, 2]) - torch.maximum(a[:, None, 0], b[None, :, 0])).clamp_(min=0)
    h = (torch.minimum(a[:, None, 3], b[None, :, 3]) - torch.maximum(a[:, None, 1], b[None, :, 1])).clamp_(min=0)
    inter = w * h
    iou = inter / (area_a[:, None] + area_b[None, :] - inter)
    return torch.nan_to_num_(iou, nan=0.0)


def result_by_final_score(indices: torch.Tensor, final_scores: torch.Tensor) -> NMSResult:
    """Kept input ``indices`` with their final scores, ordered by descending final score,
    ties by lower input index (the family rule for score-changing variants)."""
    by_index = indices.sort().indices
    indices, final_scores = indices[by_index], final_scores[by_index]
    rank = torch.sort(final_scores, descending=True, stable=True).indices
    return NMSResult(indices[rank], final_scores[rank])
