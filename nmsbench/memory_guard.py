"""The check a backend makes before an allocation that grows as N^2.

``check_fits(name, needed, device, n=..., formula=...)`` raises :class:`InsufficientMemory`
(a ``MemoryError``) with both figures when ``needed`` bytes exceed what ``device`` has
free, before anything is allocated: at N = 2^20 an N x N/8-byte mask is 128 GiB, and
allocating it first ends in a bare ``MemoryError`` after seconds of page faults, or the
kernel's OOM killer. A sweep turns the exception into an error row like any other.

Below ``CHECK_FROM_BYTES`` nothing is read (the good path is a multiplication and a
comparison): free memory is read only where the allocation itself costs far more.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

CHECK_FROM_BYTES = 256 << 20  # smaller allocations are not checked


class InsufficientMemory(MemoryError):
    """An implementation would need more memory than its device has free; raised before
    it allocates. ``needed`` and ``available`` are in bytes."""

    def __init__(self, name: str, needed: int, available: int, device: str, n: int, formula: str):
        self.name, self.needed, self.available, self.device, self.n = name, needed, available, device, n
        super().__init__(f"{name} needs {gib(needed)} for {n} boxes ({formula}); the device ({device}) has "
                         f"{gib(available)} free")


def gib(size: float) -> str:
    """Bytes in binary units with one decimal (KiB to TiB)."""
    for unit, power in (("TiB", 40), ("GiB", 30), ("MiB", 20)):
        if size >= 2**power:
            return f"{size / 2**power:.1f} {unit}"
    return f"{size / 2**10:.1f} KiB"


def check_fits(name: str, needed: int, device, *, n: int, formula: str) -> None:
    """Raise :class:`InsufficientMemory` where ``needed`` bytes exceed the free memory of
    ``device`` (a torch device or its name); ``formula`` says how ``needed`` follows from
    N (e.g. ``"N²/8 bytes"``). Unknown free memory lets the call go on."""
    if needed < CHECK_FROM_BYTES:
        return
    device = torch.device(device)
    available = free_bytes(device)
    if available is not None and needed > available:
        raise InsufficientMemory(name, int(needed), int(available), str(device), n, formula)


def free_bytes(device: torch.device) -> int | None:
    """Bytes an allocation on ``device`` can take now, or None where unknown (and while
    a CUDA graph is captured: the eager call before it was checked)."""
    if device.type == "cpu":
        return host_free_bytes()
    if device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():
            return None
        free, _ = torch.cuda.mem_get_info(device)  # the driver's figure; no synchronization
        # blocks torch's caching allocator holds but does not use are free to torch too
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return None


def host_free_bytes() -> int | None:
    """Available host memory: MemAvailable of /proc/meminfo (or the free pages elsewhere),
    lowered to what a cgroup v2 memory limit leaves."""
    available = _meminfo_available()
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    limit = _cgroup_headroom()
    return available if limit is None else min(available, limit)


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_headroom(group: Path | None = None) -> int | None:
    """memory.max - memory.current + reclaimable file pages of ``group`` (default: this
    process's cgroup v2), or None without a limit."""
    try:
        if group is None:
            group = Path("/sys/fs/cgroup")
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                if line.startswith("0::"):
                    group = group / line[3:].strip().lstrip("/")
        limit = (group / "memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int((group / "memory.current").read_text())
        stat = dict(line.split() for line in (group / "memory.stat").read_text().splitlines() if line.count(" ") == 1)
        return max(int(limit) - used + int(stat.get("inactive_file", 0)), 0)
    except (OSError, ValueError):
        return None
