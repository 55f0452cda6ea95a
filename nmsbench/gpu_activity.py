"""What the GPU did in each call of an op: CUPTI's activity records, read through
``torch.profiler``.

:func:`profile_calls` runs an op a number of times, each call followed by
``torch.cuda.synchronize()``, while ``torch.profiler`` records CUDA activity only (kernels,
memory copies and sets, and the CUDA API calls the host made; no CPU ops, so its records
stay few). The host's ``cudaDeviceSynchronize`` calls mark where one call ends and the
next begins. CUPTI gives every CUDA API call and the GPU work it starts one correlation
id, increasing in the order the host made the calls, so a call's records are those whose
id lies between two marks: no host clock is compared with a GPU clock.

Per call (:class:`CallActivity`):

- ``gpu_us``: the summed durations of its kernels, copies and sets, what the GPU worked;
- ``span_us``: from the first one's start to the last one's end: how long the GPU was
  taken by the call, idle gaps included (the host launching, or waiting for a result).
  The profiler's callbacks make each CUDA call of the host slower, so these gaps are
  longer than in an unprofiled call: compare spans with spans, not with wall times;
- ``launches``: kernels; ``copies``: memory copies and sets; ``syncs``: the CUDA calls
  in it that make the host wait for the GPU (:data:`SYNC_CALLS`: stream, event and device
  synchronizations, and the copies that are synchronous by definition).

A call with no GPU activity at all is an error the timer reports (:class:`NoGpuActivity`):
a backend that works on the host, or a profiler that cannot see the GPU (CUPTI missing).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

import numpy as np
import torch

MARK = "cudaDeviceSynchronize"  # torch.cuda.synchronize(): issued between calls, it separates them
SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaMemcpy2D",
    "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol", "cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyHtoD", "cuMemcpyHtoD_v2",
})
COPY_PREFIXES = ("Memcpy", "Memset")  # CUPTI's names of copy and set records ("Memcpy DtoH (Device -> Pinned)")
# GPU-side records that are not work: synchronization records, where a profiler emits them
NOT_WORK_PREFIXES = ("Stream Sync", "Context Sync", "Event Sync", "Stream Wait Event", "Device Sync")


class Record(NamedTuple):
    """One activity record: its name, whether the GPU did it (else a host API call), its
    correlation id, and its start and end (µs; GPU records only)."""

    name: str
    on_gpu: bool
    correlation: int
    start_us: float
    end_us: float


@dataclass(frozen=True)
class CallActivity:
    """What the GPU did in one call (see the module docstring)."""

    gpu_us: float
    span_us: float
    launches: int
    copies: int
    syncs: int


class NoGpuActivity(RuntimeError):
    """A profiled call showed no GPU activity: nothing to time on the GPU."""


class ProfileError(RuntimeError):
    """The profile cannot be split into calls (its marks are missing or too many)."""


def split_calls(records: Iterable[Record], calls: int) -> list[CallActivity]:
    """Each call's activity from the records of a profile in which ``calls`` calls ran
    between ``calls + 1`` marks (:data:`MARK`). The profiler may add marks of its own
    around them (``torch.profiler`` synchronizes the device as it stops): marks with no GPU
    work between them ahead of the first call are one mark, and marks after the last call
    are left out. Raises :class:`ProfileError` when the marks cannot be those (too few, or
    GPU work after the last call's: an op that synchronizes the whole device itself cannot
    be told apart from the marks), :class:`NoGpuActivity` when a call has no GPU work."""
    records = sorted(records, key=lambda r: r.correlation)
    marks = [i for i, r in enumerate(records) if not r.on_gpu and r.name == MARK]
    if not marks:
        raise ProfileError("the profiler recorded no CUDA API calls (is CUPTI, which torch.profiler reads, available?)")

    def work(first: int, last: int) -> list[Record]:
        return [r for r in records[first + 1:last] if r.on_gpu and not r.name.startswith(NOT_WORK_PREFIXES)]

    if not work(-1, len(records)):
        raise NoGpuActivity("the profiler saw no GPU work in the calls (a backend that runs on the host, "
                            "or CUPTI cannot see this GPU)")

    while len(marks) > 1 and not work(marks[0], marks[1]):  # the profiler's own marks ahead of ours
        marks.pop(0)
    own_marks = len(marks)
    marks, after = marks[:calls + 1], work(marks[calls] if len(marks) > calls else 0, len(records))
    if own_marks < calls + 1 or after:
        raise ProfileError(f"expected {calls + 1} {MARK} calls around {calls} calls, the profile has {own_marks} and "
                           f"{'GPU work after them' if after else 'no more'}: the op calls {MARK} itself, so its calls "
                           "cannot be told apart")
    out = []
    for first, last in zip(marks, marks[1:]):
        inside = records[first + 1:last]
        done = work(first, last)
        if not done:
            raise NoGpuActivity("the profiler saw no GPU work in a call (a backend that runs on the host, "
                                "or CUPTI cannot see this GPU)")
        copies = sum(r.name.startswith(COPY_PREFIXES) for r in done)
        out.append(CallActivity(
            gpu_us=float(sum(r.end_us - r.start_us for r in done)),
            span_us=float(max(r.end_us for r in done) - min(r.start_us for r in done)),
            launches=len(done) - copies, copies=copies,
            syncs=sum(1 for r in inside if not r.on_gpu and r.name in SYNC_CALLS)))
    return out


def records_of(events) -> list[Record]:
    """The :class:`Record` of each event of ``torch.profiler.profile.events()``."""
    cuda = torch.autograd.DeviceType.CUDA
    return [Record(e.name, e.device_type == cuda, int(e.id), float(e.time_range.start), float(e.time_range.end))
            for e in events]


def records_of_profile(prof) -> list[Record]:
    """The same records as ``records_of(prof.events())``, read straight from the profiler's
    result: ``events()`` builds a ``FunctionEvent`` of some forty fields per record in Python
    (most of a device measurement's cost for an op of many launches: results/PERFLOG.md),
    where five are needed. Names stay as CUPTI gives them (kernel names undemangled; the
    names read here, API calls and copy, set and sync records, have none to demangle); the
    records ``events()`` leaves out (the profiler's own bookkeeping: memory records,
    hidden events) are left out. ``events()`` also merges a CPU op into a child of the same
    name; a profile of CUDA activity alone has none (its host records are CUDA API calls).
    Falls back to ``events()`` where the result is not there."""
    result = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if result is None:
        return records_of(prof.events())
    cuda, start = torch.autograd.DeviceType.CUDA, result.trace_start_ns()
    return [Record(e.name(), e.device_type() == cuda, int(e.correlation_id()), (e.start_ns() - start) / 1000,
                   (e.end_ns() - start) / 1000)
            for e in result.events() if not (e.is_hidden_event() or e.name() in _BOOKKEEPING)]


# what torch.autograd.profiler leaves out of events() by name (its _filter_name)
_BOOKKEEPING = frozenset({"[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
                          "profiler::_record_function_enter_new", "profiler::_record_function_exit", "aten::is_leaf",
                          "aten::output_nr", "aten::_version"})


def profile_calls(fn: Callable[[], object], *, min_run_time: float, min_calls: int, max_calls: int) -> list[CallActivity]:
    """Profile calls of ``fn()`` for about ``min_run_time`` seconds (at least
    ``min_calls``, at most ``max_calls``: the profile's records are read in Python, so
    their number is bounded), each followed by a device synchronization; their activity.
    Two calls at least: with two, an op that synchronizes the device itself is found out
    (:func:`split_calls`)."""
    from torch.profiler import ProfilerActivity, profile

    min_calls, max_calls = max(min_calls, 2), max(max_calls, 2)
    fn()  # warm: first-call work (allocator growth, lazy loading) stays out of the profile
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Pp]rofiler.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.cuda.synchronize()  # the first mark
            deadline = time.perf_counter() + min_run_time
            calls = 0
            while calls < max_calls and (calls < min_calls or time.perf_counter() < deadline):
                fn()
                torch.cuda.synchronize()
                calls += 1
    return split_calls(records_of_profile(prof), calls)


def activity_arrays(activity: list[CallActivity]) -> dict[str, np.ndarray]:
    """The per-call columns of a profile: ``gpu_us``, ``span_us``, ``launches``, ``copies``, ``syncs``."""
    return {name: np.array([getattr(a, name) for a in activity], dtype=float)
            for name in ("gpu_us", "span_us", "launches", "copies", "syncs")}
