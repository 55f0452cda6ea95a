"""The value checks of ``nmsbench.run_nms``, in one pass on the data's device.

The rules are :func:`nmsbench.boxes.check_input_values`'s (NaN/Inf, x2 < x1, y2 < y1, an
area that overflows), which words every error; this module only finds out, cheaply,
whether there is one:

- CPU: one numba pass over the rows before the op (:mod:`nmsbench.value_pass`; float16
  takes the torch checks).
- CUDA: one kernel queued ahead of the op on the same stream, whose verdict the device
  writes to pinned host memory (for a ``checks_values`` backend, as every CUDA backend
  of ours is, the op's own first launch does it instead: no kernel is added). A backend that waits for the device (for its kept count)
  has thereby waited for the verdict too, so a call with good input synchronizes exactly
  as often as the backend alone. The op runs on the data before the verdict is read; the
  kernels are written to stay in bounds on any values, and bad input still raises the
  reference ``ValueError`` afterwards, also where the op itself failed on it.
- CUDA, ``padded=True``: the verdict stays on the device, in the result's
  ``input_check``, so the call stays free of host synchronization (capturable in a CUDA
  graph); ``PaddedNMSResult.check()`` and ``.trimmed()`` raise the error.
"""

from __future__ import annotations

import torch

from .boxes import check_input_values

_cpu = None  # nmsbench.value_pass (numba), imported on the first CPU call
_AT_ADDRESS: dict = {}  # torch dtype -> value_pass's pass on contiguous data's addresses
_BY_ADDRESS = {torch.float32: "float32", torch.float64: "float64"}  # the dtypes it takes


def _cpu_pass(dtype: torch.dtype):
    """value_pass's entry on data addresses for ``dtype``, or None (the module loaded either way)."""
    global _cpu
    if _cpu is None:
        from . import value_pass

        _cpu = value_pass
    if dtype in _BY_ADDRESS:
        _AT_ADDRESS[dtype] = _cpu.at_address(_BY_ADDRESS[dtype])
    return _AT_ADDRESS.get(dtype)


_validate = None  # the CUDA check's launcher, imported on the first CUDA call (it needs cupy)


def _device_check():
    global _validate
    if _validate is None:
        from nmsbench.variants import _validate as module

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
            if _cpu.first_bad_row(boxes.numpy(), scores.numpy()) < 0:
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
