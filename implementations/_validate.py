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

from ._cuda import Address, CudaModule, HostCount, on_torch_stream, stream_counters

MODULE = CudaModule("_validate.cu", templates=("validate_kernel",))
THREADS = 256
ROWS_PER_BLOCK = 4 * THREADS
MAX_ROWS = (1 << 28) - 1  # the verdict's encoding: (n - row) * 8 + reason in 31 bits


def supported(boxes: torch.Tensor, scores: torch.Tensor) -> bool:
    """Whether the kernel can check these (validated-shape) inputs: contiguous, a kernel dtype, n < 2^28."""
    return (boxes.dtype in _DTYPES and boxes.shape[0] <= MAX_ROWS and boxes.is_contiguous()
            and scores.is_contiguous())


_DTYPES = (torch.float32, torch.float64, torch.float16)
_verdicts = threading.local()


def _host_verdict(index: int) -> HostCount:
    by_device = getattr(_verdicts, "by_device", None)
    if by_device is None:
        by_device = _verdicts.by_device = {}
    verdict = by_device.get(index)
    if verdict is None:
        verdict = by_device[index] = HostCount()
    return verdict


def launch_check(boxes: torch.Tensor, scores: torch.Tensor, *, padded: bool = False):
    """Queue the check of ``boxes`` and ``scores`` (on one CUDA device, N > 0, ``supported``).

    Returns a ``HostCount`` to read with :func:`host_verdict` after the op, or, with
    ``padded``, the 0-d int64 device tensor the verdict is written to (one block then
    checks every row, so no scratch shared between launches is involved)."""
    n, device = boxes.shape[0], boxes.device
    with on_torch_stream(device) as launch:
        kernel = MODULE.get("validate_kernel", boxes.dtype, device)
        if padded:
            verdict = torch.empty((), dtype=torch.int64, device=device)
            launch(kernel, (1,), (1024,), (boxes, scores, n, n, None, None, verdict))
            return verdict
        index = device.index if device.index is not None else torch.cuda.current_device()
        host = _host_verdict(index)
        host.value[0] = -1
        grid = -(-n // ROWS_PER_BLOCK)
        scratch = Address(stream_counters(index, launch.stream, 2)) if grid > 1 else None
        launch(kernel, (grid,), (THREADS,), (boxes, scores, n, ROWS_PER_BLOCK, scratch, host.address, None))
        return host


def host_verdict(host: HostCount, device: torch.device) -> int:
    """The verdict ``launch_check`` queued: read at once where the op already waited for
    the device (the usual case), else after waiting for the stream."""
    value = int(host.value[0])
    if value < 0:
        return host.wait(device)
    host.value[0] = -1
    return value
