"""Every check of an NMS call's inputs, in one module: the rules, their reference form and
the fast pass ``nmsbench.run_nms`` runs.

- structure (``check_input_structure``: types, shapes, dtypes, layouts, devices) and the
  threshold (``validate_iou_threshold``), which read no tensor data;
- values (``check_input_values``: NaN/Inf, x2 < x1, y2 < y1, an area that overflows), the
  reference form with torch ops, which words every error; ``validate_nms_inputs`` is both;
- the fast value pass of ``run_nms`` (``start_value_check`` / ``finish_value_check``),
  which only finds out, cheaply, whether there is an error:

  * CPU: one numba pass over the rows before the op (``row_ok``, ``first_bad_row``,
    ``at_address``: compiled on the first CPU call, so the dashboard and CUDA-only users
    never load numba for it; float16 takes the torch checks). Contiguous float32 and
    float64 go through a C entry point (``cfunc``) on their data pointers, which costs a
    fraction of a numba dispatch with array arguments.
  * CUDA: one kernel queued ahead of the op on the same stream (``nmsbench.cuda.validate``),
    whose verdict the device writes to pinned host memory (for a ``checks_values``
    backend, as every CUDA backend of ours is, the op's own first launch does it instead:
    no kernel is added; it reports through ``raise_if_bad_input``). A backend that waits
    for the device (for its kept count) has thereby waited for the verdict too, so a call
    with good input synchronizes exactly as often as the backend alone. The op runs on
    the data before the verdict is read; the kernels stay in bounds on any values, and
    bad input still raises the reference ``ValueError`` afterwards.
  * CUDA, ``padded=True``: the verdict stays on the device, in the result's
    ``input_check``, so the call stays free of host synchronization (capturable in a CUDA
    graph); ``PaddedNMSResult.check()`` and ``.trimmed()`` raise the error.
"""

from __future__ import annotations

import ctypes
import functools
import math
import numbers

import numpy as np
import torch


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ("," if t.dim() == 1 else "") + ")"


def validate_nms_inputs(boxes, scores, labels=None) -> None:
    """Raise ``ValueError`` naming the first problem with an NMS call's inputs.

    Checks types, shapes, dtypes, devices (:func:`check_input_structure`), then NaN/Inf,
    x2 >= x1, y2 >= y1, and that each box's area is finite in the arithmetic's dtype
    (:func:`check_input_values`). N = 0 and zero-area boxes are valid. This reference
    form synchronizes with the device; ``nmsbench.run_nms`` checks the values in one
    fused pass instead (:func:`start_value_check`) and calls this only to word an error.
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
            f"boxes too large: row {row}'s area (x2 - x1) * (y2 - y1) overflows {_torch_name(wide.dtype)} "
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


# ------------------------------------------------------------------ run_nms's value pass

_AT_ADDRESS: dict = {}  # torch dtype -> value_pass's pass on contiguous data's addresses
_BY_ADDRESS = {torch.float32: "float32", torch.float64: "float64"}  # the dtypes it takes


def _cpu_pass(dtype: torch.dtype):
    """The numba pass's entry on data addresses for ``dtype``, or None (compiled either way)."""
    _compile_pass()
    if dtype in _BY_ADDRESS:
        _AT_ADDRESS[dtype] = at_address(_BY_ADDRESS[dtype])
    return _AT_ADDRESS.get(dtype)


_validate = None  # the CUDA check's launcher, imported on the first CUDA call (it needs cupy)


def _device_check():
    global _validate
    if _validate is None:
        from nmsbench.cuda import validate as module

        _validate = module
    return _validate


def start_value_check(boxes: torch.Tensor, scores: torch.Tensor, *, padded: bool = False):
    """Check the values of structurally valid inputs: on the CPU at once (raising the
    reference ``ValueError``); on CUDA queued ahead of the op. Returns what
    :func:`finish_value_check` needs after the op (``None``: nothing left to do), or with
    ``padded`` the 0-d device tensor that will hold the verdict."""
    if boxes.is_cuda:
        pending = (_validate or _device_check()).launch_check(boxes, scores, padded=padded)
        if pending is None:  # no rows, or a layout or size the kernel does not take
            check_input_values(boxes, scores)
        return pending
    n = boxes.shape[0]
    if n == 0:
        return None
    if not boxes.is_cpu:  # another device's data (never reached through run_nms): not for a pass on host addresses
        check_input_values(boxes, scores)
        return None
    at_address = _AT_ADDRESS.get(boxes.dtype) or _cpu_pass(boxes.dtype)
    if at_address is not None:
        if boxes.is_contiguous() and scores.is_contiguous():
            if at_address(boxes.data_ptr(), scores.data_ptr(), n) < 0:
                return None
        else:
            if boxes.requires_grad or scores.requires_grad:
                boxes, scores = boxes.detach(), scores.detach()
            if first_bad_row(boxes.numpy(), scores.numpy()) < 0:  # noqa: F821 - made by _cpu_pass
                return None
    check_input_values(boxes, scores)  # words the error (float16: does the whole check)
    return None


def report_bad_values(boxes: torch.Tensor, scores: torch.Tensor, found_by: str = "the backend's value check"):
    """What a backend that checks the values itself (``checks_values``) calls when its pass
    found a bad row (and finish_value_check, for the device's): raises the reference
    ``ValueError``, naming the first bad row."""
    check_input_values(boxes, scores)
    raise RuntimeError(f"{found_by} found a bad row that the reference checks accept")


def finish_value_check(pending, boxes: torch.Tensor, scores: torch.Tensor) -> None:
    """After the op: raise the reference ``ValueError`` where the queued check found bad input."""
    if pending is None or isinstance(pending, torch.Tensor):
        return
    if _validate.host_verdict(pending, boxes):
        report_bad_values(boxes, scores, "the device input check")


def raise_if_bad_input(verdict, boxes: torch.Tensor, scores: torch.Tensor, op: str) -> None:
    """After the op's wait: the reference ``ValueError`` where ``verdict`` (an
    ``nmsbench.cuda.input_verdict``'s ``HostCount``; None: no check) says a row is bad."""
    if verdict is not None and verdict.value[0] != 0:
        report_bad_values(boxes, scores, f"{op}'s value check")


# ------------------------------------------------------------------ the numba pass (compiled on first use)

_NUMBA = dict(cache=True, error_model="numpy")
_COMPILED = False
_PASS_NAMES = ("row_ok", "first_bad_row")


def _row_ok(x1, y1, x2, y2, score):
    """Whether one row keeps every value rule (branch-free, so a loop of it vectorizes)."""
    return (np.isfinite(x1) & np.isfinite(y1) & np.isfinite(x2) & np.isfinite(y2) & np.isfinite(score)
            & (x2 >= x1) & (y2 >= y1) & np.isfinite((x2 - x1) * (y2 - y1)))


def _first_bad_of(b, s):
    n = b.shape[0]
    ok = True
    for i in range(n):  # no early exit: vectorized
        ok &= row_ok(b[i, 0], b[i, 1], b[i, 2], b[i, 3], s[i])  # noqa: F821 - the compiled rule (_compile_pass)
    if ok:
        return -1
    for i in range(n):
        if not row_ok(b[i, 0], b[i, 1], b[i, 2], b[i, 3], s[i]):  # noqa: F821
            return i
    return -1


def _first_bad_row(b, s):
    """The first row of ``b`` (N, 4) and ``s`` (N,) breaking a value rule, or -1."""
    return _first_bad(b, s)  # noqa: F821


def _first_bad_row_at(boxes, scores, n):
    return _first_bad(carray(boxes, (n, 4)), carray(scores, (n,)))  # noqa: F821


def _compile_pass() -> None:
    """Make ``row_ok`` and ``first_bad_row`` numba functions (lazily compiled), once: the
    rule for numba backends that check the values in their own pass, and the CPU pass."""
    global _COMPILED
    if not _COMPILED:
        from numba import carray, njit

        names = globals()
        names["carray"] = carray
        names["row_ok"] = njit(inline="always", **_NUMBA)(_row_ok)
        names["_first_bad"] = njit(inline="always", **_NUMBA)(_first_bad_of)
        names["first_bad_row"] = njit(**_NUMBA)(_first_bad_row)
        _COMPILED = True


@functools.cache
def at_address(dtype_name: str):
    """``first_bad_row_at(boxes address, scores address, n)`` for contiguous data of
    ``dtype_name`` ("float32" or "float64"), compiled on first use."""
    from numba import cfunc, types

    _compile_pass()
    dtype = {"float32": types.float32, "float64": types.float64}[dtype_name]
    signature = types.int64(types.CPointer(dtype), types.CPointer(dtype), types.int64)
    compiled = cfunc(signature, **_NUMBA)(_first_bad_row_at)
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(compiled.address)


def __getattr__(name: str):
    """``row_ok`` and ``first_bad_row``, the numba pass's functions, made on first access."""
    if name in _PASS_NAMES:
        _compile_pass()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
