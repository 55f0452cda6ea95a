"""The input check of ``nmsbench.run_nms`` on a CUDA device: one kernel (``_validate.cu``),
and its verdict's encoding (``VERDICT_REASONS``, which the kernel is compiled with).

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

from .compile import HERE, CudaModule
from .launch import CompiledLaunch
from .memory import _zeroed_per_stream, host_count

# The verdict: 0 for valid input, else (1 + first bad row) * 8 + the reason's code (the
# kernel is compiled with these codes as VALIDATE_<NAME>).
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


_CODES = "QQiQQQ"  # boxes, scores, n, scratch, verdict_host, verdict_device
MODULE = CudaModule("_validate.cu", templates={"validate_kernel": _CODES},
                    defines={f"VALIDATE_{name}": code for name, (code, _) in VERDICT_REASONS.items()}, directory=HERE)
THREADS = 256  # one row a thread
MAX_ROWS = (1 << 28) - 1  # the verdict's encoding: (n - row) * 8 + reason in 31 bits
_DTYPES = frozenset((torch.float32, torch.float64, torch.float16))
PLANS_KEPT = 4096  # call shapes whose launch a thread keeps
_local = threading.local()  # a thread's _Check per call shape
# (device index, stream) -> the check's two scratch words, kept at 0 between launches: its
# own store, whose sets never grow, so a kept address stays valid (a set shared with an op
# that grows it would be freed under it).
_scratch: dict[tuple[int, int], torch.Tensor] = {}


class _Check:
    """One thread's check of one call shape (dtype, device, N): its launch (its own
    argument buffer: the plan is the thread's), the pinned memory its verdict goes to, and
    the scratch address of the last stream it ran on (with several blocks)."""

    __slots__ = ("launch", "index", "host", "multi_block", "stream", "scratch")

    def __init__(self, dtype: torch.dtype, device: torch.device, index: int, n: int):
        kernel = MODULE.get("validate_kernel", dtype, device)
        self.launch = CompiledLaunch(kernel, (-(-n // THREADS),), (THREADS,), _CODES, index, own_buffer=True)
        self.index = index
        self.host = host_count(device, "input verdict")
        self.multi_block = self.launch.grid[0] > 1
        self.stream, self.scratch = None, 0


def _plan(boxes: torch.Tensor, n: int):
    """The thread's ``_Check`` for this call shape, or None where the kernel does not take it."""
    try:
        plans = _local.plans
    except AttributeError:
        plans = _local.plans = {}
    key = (boxes.dtype, boxes.get_device(), n)
    check = plans.get(key)
    if check is None:
        if boxes.dtype not in _DTYPES or not 0 < n <= MAX_ROWS:
            return None
        if len(plans) >= PLANS_KEPT:
            plans.clear()
        check = plans[key] = _Check(boxes.dtype, boxes.device, key[1], n)
    return check


def launch_check(boxes: torch.Tensor, scores: torch.Tensor, *, padded: bool = False):
    """Queue the check of ``boxes`` and ``scores`` (validated shapes, on one CUDA device)
    on torch's current stream; ``None`` where the kernel cannot take them (no rows, not
    contiguous, another dtype, N >= 2^28), which leaves the check to the caller.

    Returns a ``HostCount`` to read with :func:`host_verdict` after the op, or, with
    ``padded``, the 0-d int64 device tensor the verdict is written to (its scratch is the
    call's own, zeroed on the stream, so a CUDA graph may capture the call)."""
    n = boxes.shape[0]
    check = _plan(boxes, n)
    if check is None or not (boxes.is_contiguous() and scores.is_contiguous()):
        return None
    stream = torch._C._cuda_getCurrentRawStream(check.index)
    if padded:
        words = torch.zeros(4, dtype=torch.int32, device=boxes.device)  # scratch[2], then the int64 verdict
        address = words.data_ptr()
        check.launch(stream, boxes.data_ptr(), scores.data_ptr(), n, address, 0, address + 8)
        return words[2:].view(torch.int64)[0]
    if check.multi_block and stream != check.stream:
        check.stream, check.scratch = stream, _zeroed_per_stream(_scratch, check.index, stream, 2).data_ptr()
    host = check.host
    host.value[0] = -1
    check.launch(stream, boxes.data_ptr(), scores.data_ptr(), n, check.scratch, host.address, 0)
    return host


def host_verdict(host, boxes: torch.Tensor) -> int:
    """The verdict ``launch_check`` queued for ``boxes``: read at once where the op already
    waited for the device (the usual case), else after waiting for the stream."""
    value = int(host.value[0])
    if value < 0:
        return host.wait(boxes.device)
    host.value[0] = -1
    return value
