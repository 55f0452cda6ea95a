"""The Python API for notebooks and tests: run any registered NMS by name."""

from __future__ import annotations

import torch

from .boxes import NMSResult, validate_iou_threshold, validate_nms_inputs
from .registry import BackendUnavailable, get


def run_nms(name: str, boxes, scores, iou_threshold: float = 0.5, labels=None, **params) -> NMSResult:
    """Run implementation ``name`` with the backend for the tensors' device.

    ``boxes`` (N, 4) float x1, y1, x2, y2; ``scores`` (N,); ``labels`` (N,) int for
    class-aware NMS (only same-label boxes interact). Extra keyword arguments are the
    implementation's parameters (Matrix NMS: ``kernel``, ``sigma``, ``score_threshold``).
    Bad input raises ``ValueError`` naming the problem; a backend that cannot run here
    raises :class:`BackendUnavailable` with the reason.
    """
    impl = get(name)
    validate_nms_inputs(boxes, scores, labels)
    threshold = validate_iou_threshold(iou_threshold)
    resolved = impl.resolve_params(params)
    backend = impl.backend(boxes.device.type)
    available, reason = backend.availability()
    if not available:
        raise BackendUnavailable(f"{name} on {boxes.device.type} is unavailable: {reason}")
    if boxes.dtype not in backend.dtypes:
        supported = ", ".join(str(d).removeprefix("torch.") for d in backend.dtypes)
        raise ValueError(f"{name} on {boxes.device.type} supports {supported}; got {str(boxes.dtype).removeprefix('torch.')}")
    result = backend.fn(boxes, scores, iou_threshold=threshold, labels=labels, **resolved)
    check_result(name, result, boxes)
    return result


def check_result(name: str, result: NMSResult, boxes: torch.Tensor) -> None:
    """Guard the output contract so a broken backend fails loudly, not silently."""
    keep = result.keep
    if not isinstance(result, NMSResult) or keep.dtype != torch.int64 or keep.dim() != 1:
        raise RuntimeError(f"{name} broke the output contract: keep must be a 1-D int64 tensor in an NMSResult")
    if keep.device != boxes.device:
        raise RuntimeError(f"{name} returned keep on {keep.device}, inputs were on {boxes.device}")
    if result.scores is not None and result.scores.shape != keep.shape:
        raise RuntimeError(f"{name} returned {result.scores.shape[0]} scores for {keep.shape[0]} kept boxes")
