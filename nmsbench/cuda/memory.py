"""Memory the kernels share with the host: scratch carved from one allocation, words kept
per stream (grid barriers, counters), and counts written into mapped pinned memory."""

from __future__ import annotations

import threading

import torch

from .compile import device_index
from .launch import Address, _current_stream

_barriers: dict[tuple[int, int], torch.Tensor] = {}


_counters: dict[tuple[int, int], torch.Tensor] = {}


def _zeroed_per_stream(store: dict, index: int, stream: int, count: int) -> torch.Tensor:
    """At least ``count`` int32 words for the kernels on raw ``stream`` of device
    ``index``: zeroed once, one set per device and stream in ``store``, shared by those
    launches one after another (each leaves them as the next needs them). A set grows (a
    new one, zeroed) when a launch needs more."""
    words = store.get((index, stream))
    if words is None or words.numel() < count:
        words = store[index, stream] = torch.zeros(count, dtype=torch.int32, device=torch.device("cuda", index))
    return words


def stream_counters(index: int, stream: int, count: int) -> int:
    """Address of ``count`` uint32 counters for a kernel on ``stream`` that leaves them at 0
    (hard_fused's streamed resolve); see ``_zeroed_per_stream``."""
    return _zeroed_per_stream(_counters, index, stream, count).data_ptr()


def grid_barrier_address(index: int, stream: int) -> int:
    """Address of the uint32 count of a cooperative kernel's grid barrier (``grid_barrier``
    in _common.cuh), one per device ``index`` and raw ``stream``: launches on one stream
    run one after another, and each leaves the count's low bits at 0, so they can share it
    (zeroed once)."""
    return _zeroed_per_stream(_barriers, index, stream, 1).data_ptr()


class Scratch:
    """Scratch buffers only kernels see, carved from one torch allocation (one allocator
    call instead of one per buffer). ``Scratch(device, name=(count, dtype), ...)``; each
    name becomes the buffer's device address (an ``Address``), a ``launch`` argument. The
    allocation lives as long as this object and, being torch's, is stream-ordered."""

    ALIGN = 256

    def __init__(self, device: torch.device, **buffers: tuple[int, torch.dtype]):
        self.layout, total = {}, 0
        for name, (count, dtype) in buffers.items():
            self.layout[name] = (total, count, dtype)
            size = count * dtype.itemsize
            total += -(-size // self.ALIGN) * self.ALIGN
        self.memory = torch.empty(max(total, 1), dtype=torch.uint8, device=device)
        base = self.memory.data_ptr()
        for name, (offset, _, _) in self.layout.items():
            setattr(self, name, Address(base + offset))

    def tensor(self, name: str) -> torch.Tensor:
        """Buffer ``name`` as a 1-D torch view (for tests and debugging)."""
        offset, count, dtype = self.layout[name]
        return self.memory[offset : offset + count * dtype.itemsize].view(dtype)



_runtime = None  # cupy_backends' runtime API, imported on the first wait


def _runtime_api():
    global _runtime
    if _runtime is None:
        from cupy_backends.cuda.api import runtime

        _runtime = runtime
    return _runtime



class HostCount:
    """A count that a kernel writes straight into pinned host memory, so the op learns it
    with one stream synchronization and no copy launch (``.item()`` costs a copy plus the
    synchronization). With unified addressing (every 64-bit CUDA platform) pinned host
    memory is mapped and its device address is its host address, so ``address`` is passed
    to the kernel as an ``long long*``."""

    # Reads of the count before the driver's wait (a bounded spin; see wait).
    SPIN_READS = 100_000

    def __init__(self):
        self.host = torch.full((1,), -1, dtype=torch.int64, pin_memory=True)
        self.address = Address(self.host.data_ptr())
        self.value = self.host.numpy()  # read through NumPy: indexing the tensor costs a tensor

    def wait(self, device: torch.device) -> int:
        """Wait for the work queued so far on ``device``'s current stream; the count.

        The thread first reads the count until the kernel has written it (it is -1 until
        then), then synchronizes the stream, which returns at once by then: the driver's
        wait alone, after long waits, left the thread's next host work slower
        (results/PERFLOG.md). The synchronization still decides: it waits for
        the kernels' completion and raises their errors, whatever the reads saw."""
        value = self.value
        for _ in range(self.SPIN_READS):
            if value[0] >= 0:
                break
        (_runtime or _runtime_api()).streamSynchronize(_current_stream(device)[1])
        count = int(value[0])
        value[0] = -1  # unset again for the next op
        return count


def kept_count(host: HostCount, device: torch.device, n: int, op: str) -> int:
    """``host.wait(device)``: the number of boxes an op of ``n`` boxes kept, which must lie
    in [0, n]. Anything else is an error rather than a result view that reaches past the
    kept entries."""
    kept = host.wait(device)
    if not 0 <= kept <= n:
        raise RuntimeError(f"{op}: the kernel reported {kept} kept boxes of {n}")
    return kept


_host_counts = threading.local()


def host_count(device: torch.device, slot: str = "kept") -> HostCount:
    """A ``HostCount`` for ``device``, one per thread, device and ``slot`` and reused: each
    op that uses it waits for the count before it returns, so no two calls share it at
    once. Values read in one call (an op's kept count, run_nms's input verdict) take
    different slots."""
    counts = getattr(_host_counts, "by_device", None)
    if counts is None:
        counts = _host_counts.by_device = {}
    key = (device_index(device), slot)
    count = counts.get(key)
    if count is None:
        count = counts[key] = HostCount()
    return count


def input_verdict(device: torch.device) -> HostCount:
    """run_nms's value verdict for an op whose own kernels check the rules
    (``checks_values`` backends; row_is_bad in _common.cuh): a pinned word set to 0 here,
    before the launch, that a kernel finding a bad row sets to 1. Read it with
    :func:`raise_if_bad_input` after the op has waited for the device."""
    verdict = host_count(device, "input verdict")
    verdict.value[0] = 0
    return verdict

