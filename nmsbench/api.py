"""The Python API for notebooks and tests: run any registered NMS by name."""

from __future__ import annotations

import torch

from .boxes import NMSResult, PaddedNMSResult
from .inputs import (check_input_structure, check_input_values, finish_value_check, start_value_check,
                     validate_iou_threshold)
from .registry import ROUTES, available_backend


def run_nms(name: str, boxes, scores, iou_threshold: float = 0.5, labels=None, *, padded: bool = False,
            validate: bool = True, **params) -> NMSResult | PaddedNMSResult:
    """Run implementation ``name`` with the backend for the tensors' device.

    ``boxes`` (N, 4) float x1, y1, x2, y2; ``scores`` (N,); ``labels`` (N,) int for
    class-aware NMS (only same-label boxes interact). Extra keyword arguments are the
    implementation's parameters (Matrix NMS: ``kernel``, ``sigma``, ``score_threshold``).
    Bad input raises ``ValueError`` naming the problem, before any backend runs (tensors
    that are sparse, nested, on the ``meta`` device or on different devices included); an
    implementation with no backend for the tensors' device, or one that cannot run here,
    raises :class:`BackendUnavailable` with the reason. The value checks run on the data's
    device in one pass and add no host synchronization (:mod:`nmsbench.inputs`); a
    backend marked ``checks_values`` makes them in its own pass over the data instead.

    ``padded=True`` asks a ``graph_safe`` backend for its fixed-size output
    (:class:`PaddedNMSResult`: keep padded to N with -1 and the count on the device),
    computed without any host synchronization, so the call can be captured in a CUDA graph;
    bad values are then reported through the result (``input_check``; ``.check()`` and
    ``.trimmed()`` raise the ``ValueError``). ``validate=False`` skips the value checks
    (the structure checks stay): for inputs the caller has validated once.
    """
    check_input_structure(boxes, scores, labels)
    device = "cuda" if boxes.is_cuda else "cpu" if boxes.is_cpu else boxes.device.type  # no device object
    impl, backend = ROUTES.get((name, device)) or available_backend(name, device)
    threshold = validate_iou_threshold(iou_threshold)
    resolved = impl.resolve_params(params)
    if boxes.dtype not in backend.dtypes:
        supported = ", ".join(str(d).removeprefix("torch.") for d in backend.dtypes)
        raise ValueError(f"{name} on {device} supports {supported}; got {str(boxes.dtype).removeprefix('torch.')}")
    if padded and not backend.graph_safe:
        raise ValueError(f"{name} on {device} has no padded (graph-safe) output; "
                         f"implementations that have one are marked graph_safe in `nmsbench list`")
    in_op = validate and backend.checks_values and not padded  # the backend's own pass checks the values
    pending = start_value_check(boxes, scores, padded=padded) if validate and not in_op else None
    try:
        if padded:
            result = backend.fn(boxes, scores, iou_threshold=threshold, labels=labels, padded=True, **resolved)
        elif in_op:
            result = backend.fn(boxes, scores, iou_threshold=threshold, labels=labels, check_values=True, **resolved)
        else:
            result = backend.fn(boxes, scores, iou_threshold=threshold, labels=labels, **resolved)
    except Exception:
        # bad input is the error to report, also where the op failed on it
        if in_op:
            check_input_values(boxes, scores)
        else:
            finish_value_check(pending, boxes, scores)
        raise
    if padded:
        check_padded_result(name, result, boxes)
        return result._replace(input_check=pending) if pending is not None else result
    if pending is not None:
        finish_value_check(pending, boxes, scores)
    check_result(name, result, boxes)
    return result


def check_result(name: str, result: NMSResult, boxes: torch.Tensor) -> None:
    """Guard the output contract so a broken backend fails loudly, not silently."""
    keep = getattr(result, "keep", None)
    if (type(result) is NMSResult and keep.dtype is torch.int64 and keep.dim() == 1  # kept: in a few reads (every call)
            and keep.get_device() == boxes.get_device() and (result.scores is None or result.scores.shape == keep.shape)
            and result.boxes is None):
        return
    moved = result.boxes if isinstance(result, NMSResult) else None
    if moved is not None and isinstance(keep, torch.Tensor) and (
            moved.shape != (keep.shape[0], 4) or moved.dtype != boxes.dtype or moved.device != boxes.device):
        raise RuntimeError(f"{name} returned moved boxes of shape {tuple(moved.shape)}, {moved.dtype} on {moved.device} "
                           f"for {keep.shape[0]} kept boxes of {boxes.dtype} on {boxes.device}")
    if not isinstance(result, NMSResult) or not isinstance(keep, torch.Tensor) or keep.dtype != torch.int64 \
            or keep.dim() != 1:
        raise RuntimeError(f"{name} broke the output contract: keep must be a 1-D int64 tensor in an NMSResult")
    if keep.get_device() != boxes.get_device():
        raise RuntimeError(f"{name} returned keep on {keep.device}, inputs were on {boxes.device}")
    if result.scores is not None and result.scores.shape != keep.shape:
        raise RuntimeError(f"{name} returned {result.scores.shape[0]} scores for {keep.shape[0]} kept boxes")


def check_padded_result(name: str, result: PaddedNMSResult, boxes: torch.Tensor) -> None:
    """The padded output contract: keep (N,) int64, count 0-d int64, both on the input's device."""
    n = boxes.shape[0]
    if not isinstance(result, PaddedNMSResult) or result.keep.dtype != torch.int64 or result.keep.shape != (n,):
        raise RuntimeError(f"{name} broke the padded output contract: keep must be an ({n},) int64 tensor in a "
                           f"PaddedNMSResult")
    if result.count.dim() != 0 or result.count.dtype != torch.int64:
        raise RuntimeError(f"{name} broke the padded output contract: count must be a 0-d int64 tensor")
    for what, t in (("keep", result.keep), ("count", result.count), ("scores", result.scores)):
        if t is not None and t.device != boxes.device:
            raise RuntimeError(f"{name} returned {what} on {t.device}, inputs were on {boxes.device}")
    if result.scores is not None and result.scores.shape != (n,):
        raise RuntimeError(f"{name} returned {tuple(result.scores.shape)} padded scores for {n} boxes")
