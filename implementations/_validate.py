"""The input check of ``nmsbench.run_nms`` on a CUDA device: one kernel (``_validate.cu``).

It reads boxes and scores once, on torch's current stream ahead of the op, and writes the
verdict (0, or the first bad row and its reason) into pinned host memory that the device
writes directly. A backend that waits for the device anyway (for its kept count) has
thereby also waited for the verdict, so the check adds no host synchronization: the
caller reads the verdict after the op. With ``padded=True`` the verdict goes to a 0-d
device tensor instead, so the whole call stays free of host synchronization.
"""

from __future__ import annotations

import threading

import torch

from ._cuda import CompiledLaunch, CudaModule, HostCount, cached_plan, stream_counters

MODULE = CudaModule("_validate.cu", templates=("validate_kernel",))
THREADS = 256  # one row a thread
MAX_ROWS = (1 << 28) - 1  # the verdict's encoding: (n - row) * 8 + reason in 31 bits
_DTYPES = (torch.float32, torch.float64, torch.float16)
_CODES = "QQiQQQ"  # boxes, scores, n, scratch, verdict_host, verdict_device (validate_kernel's parameters)


def supported(boxes: torch.Tensor, scores: torch.Tensor) -> bool:
    """Whether the kernel can check these (validated-shape) inputs: contiguous, a kernel dtype, n < 2^28."""
    return (boxes.dtype in _DTYPES and boxes.shape[0] <= MAX_ROWS and boxes.is_contiguous()
            and scores.is_contiguous())


_plans: dict = {}  # (dtype, device index, n) -> the CompiledLaunch of the check
_verdicts = threading.local()


def _plan(dtype: torch.dtype, index: int, n: int) -> CompiledLaunch:
    kernel = MODULE.get("validate_kernel", dtype, torch.device("cuda", index))
    return CompiledLaunch(kernel, (-(-n // THREADS),), (THREADS,), _CODES, index)


def _host_verdict(index: int) -> HostCount:
    by_device = getattr(_verdicts, "by_device", None)
    if by_device is None:
        by_device = _verdicts.by_device = {}
    verdict = by_device.get(index)
    if verdict is None:
        verdict = by_device[index] = HostCount()
    return verdict


def launch_check(boxes: torch.Tensor, scores: torch.Tensor, *, padded: bool = False):
    """Queue the check of ``boxes`` and ``scores`` (on one CUDA device, N > 0, ``supported``)
    on torch's current stream.

    Returns a ``HostCount`` to read with :func:`host_verdict` after the op, or, with
    ``padded``, the 0-d int64 device tensor the verdict is written to (its scratch is the
    call's own, zeroed on the stream, so a CUDA graph may capture the call)."""
    n, index = boxes.shape[0], boxes.get_device()
    launch = cached_plan(_plans, (boxes.dtype, index, n), _plan, boxes.dtype, index, n)
    stream = torch._C._cuda_getCurrentRawStream(index)
    if padded:
        words = torch.zeros(4, dtype=torch.int32, device=boxes.device)  # scratch[2], then the int64 verdict
        address = words.data_ptr()
        launch(stream, boxes.data_ptr(), scores.data_ptr(), n, address, 0, address + 8)
        return words[2:].view(torch.int64)[0]
    host = _host_verdict(index)
    host.value[0] = -1
    scratch = stream_counters(index, stream, 2) if launch.grid[0] > 1 else 0
    launch(stream, boxes.data_ptr(), scores.data_ptr(), n, scratch, host.address, 0)
    return host


def host_verdict(host: HostCount, device: torch.device) -> int:
    """The verdict ``launch_check`` queued: read at once where the op already waited for
    the device (the usual case), else after waiting for the stream."""
    value = int(host.value[0])
    if value < 0:
        return host.wait(device)
    host.value[0] = -1
    return value
