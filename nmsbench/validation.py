"""The value checks of ``nmsbench.run_nms``, in one pass on the data's device.

The rules are :func:`nmsbench.boxes.check_input_values`'s (NaN/Inf, x2 < x1, y2 < y1, an
area that overflows), which words every error; this module only finds out, cheaply,
whether there is one:

- CPU: one numba pass over the rows before the op (float16 takes the torch checks).
- CUDA: one kernel queued ahead of the op on the same stream, whose verdict the device
  writes to pinned host memory. A backend that waits for the device (for its kept count)
  has thereby waited for the verdict too, so a call with good input synchronizes exactly
  as often as the backend alone. The op runs on the data before the verdict is read; the
  kernels are written to stay in bounds on any values, and bad input still raises the
  reference ``ValueError`` afterwards, also where the op itself failed on it.
- CUDA, ``padded=True``: the verdict stays on the device, in the result's
  ``input_check``, so the call stays free of host synchronization (capturable in a CUDA
  graph); ``PaddedNMSResult.check()`` and ``.trimmed()`` raise the error.
"""

from __future__ import annotations

import numpy as np
import torch

from .boxes import check_input_values

_first_bad_row = None  # the numba pass, compiled on first use (numba is imported lazily)


def _cpu_pass():
    global _first_bad_row
    if _first_bad_row is None:
        from numba import njit

        @njit(cache=True)
        def first_bad_row(b, s):
            """The first row breaking a value rule, or -1 (the arithmetic in b's dtype)."""
            for i in range(b.shape[0]):
                x1, y1, x2, y2 = b[i, 0], b[i, 1], b[i, 2], b[i, 3]
                if not (np.isfinite(x1) and np.isfinite(y1) and np.isfinite(x2) and np.isfinite(y2)
                        and np.isfinite(s[i]) and x2 >= x1 and y2 >= y1 and np.isfinite((x2 - x1) * (y2 - y1))):
                    return i
            return -1

        _first_bad_row = first_bad_row
    return _first_bad_row


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
    if boxes.shape[0] == 0:
        return None
    if boxes.dtype in (torch.float32, torch.float64):
        if boxes.requires_grad or scores.requires_grad:
            boxes, scores = boxes.detach(), scores.detach()
        if _cpu_pass()(boxes.numpy(), scores.numpy()) < 0:
            return None
    check_input_values(boxes, scores)  # words the error (float16: does the whole check)
    return None


def finish_value_check(pending, boxes: torch.Tensor, scores: torch.Tensor) -> None:
    """After the op: raise the reference ``ValueError`` where the queued check found bad input."""
    if pending is None or isinstance(pending, torch.Tensor):
        return
    if _validate.host_verdict(pending, boxes):
        check_input_values(boxes, scores)
        raise RuntimeError("the device input check found a bad row that the reference checks accept")
