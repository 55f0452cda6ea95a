"""A test-only copy of an implementation made slower by a known fraction, for checking
that ``nmsbench compare`` calls a real slow-down ``slower``.

``with slowed("bitmask_two_phase", 0.10): ...`` swaps the implementation's backends for
wrappers under the same name (so its rows pair with a run of the original), and puts the
originals back on exit. A wrapper runs the original, then burns ``fraction`` of the
original's own time on the same device:

- on the CPU, a busy loop of ``fraction`` x the call's time;
- on CUDA, a ``torch.cuda._sleep`` kernel of ``fraction`` x the call's CUDA-event time
  (what the device timer and the GPU see), then a host busy loop of ``fraction`` x the
  call's host time (what a wall timer of a host-bound call sees); the sleep kernel is
  queued first, so where the GPU is the bound the host loop overlaps it.

The times are measured on the first call with each input (the runner's warm-up, which
is not timed): the median of a few calls of the original.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
import weakref

CALIBRATION_CALLS = 5


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@dataclasses.dataclass
class _Burn:
    host_s: float
    sleep_cycles: int = 0


_CYCLES_PER_S: dict[int, float] = {}


def _cycles_per_second(device) -> float:
    """``torch.cuda._sleep``'s cycles per second on ``device`` (measured once)."""
    import torch

    index = torch.device(device).index or 0
    if index not in _CYCLES_PER_S:
        cycles = 2_000_000
        torch.cuda._sleep(cycles)  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _CYCLES_PER_S[index] = cycles / (start.elapsed_time(end) / 1e3)
    return _CYCLES_PER_S[index]


def _calibrate(fn, fraction: float, args, kwargs) -> _Burn:
    import torch

    boxes = args[0]
    on_cuda = getattr(boxes, "is_cuda", False)
    host, gpu = [], []
    for _ in range(CALIBRATION_CALLS):
        if on_cuda:
            torch.cuda.synchronize(boxes.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        host.append(time.perf_counter() - t0)
        if on_cuda:
            end.record()
            end.synchronize()
            gpu.append(start.elapsed_time(end) / 1e3)
    burn = _Burn(fraction * statistics.median(host))
    if on_cuda:
        burn.sleep_cycles = int(fraction * statistics.median(gpu) * _cycles_per_second(boxes.device))
    return burn


def slowed_fn(fn, fraction: float):
    """``fn`` followed by ``fraction`` of its own time, burnt on its device."""
    burns: dict[tuple, tuple] = {}  # the call's input -> (weak reference to its boxes, burn)

    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        boxes = args[0]
        key = (id(boxes), kwargs.get("iou_threshold"), tuple(sorted(kwargs)))
        entry = burns.get(key)
        if entry is None or entry[0]() is not boxes:  # a new input (or a new one where a freed one was)
            burns[key] = (weakref.ref(boxes), _calibrate(fn, fraction, args, kwargs))
            return result
        burn = entry[1]
        if burn.sleep_cycles:
            import torch

            torch.cuda._sleep(burn.sleep_cycles)
        _busy(burn.host_s)
        return result

    wrapper.__wrapped__ = fn
    return wrapper


@contextlib.contextmanager
def slowed(name: str, fraction: float = 0.10):
    """Within the block, ``name``'s backends run ``fraction`` slower (see the module)."""
    from nmsbench import registry

    if not 0 < fraction <= 10:
        raise ValueError(f"fraction must be in (0, 10], not {fraction!r}")
    impl = registry.get(name)
    originals = dict(impl.backends)
    impl.backends.update({d: dataclasses.replace(b, fn=slowed_fn(b.fn, fraction)) for d, b in originals.items()})
    registry.ROUTES.clear()
    try:
        yield impl
    finally:
        impl.backends.clear()
        impl.backends.update(originals)
        registry.ROUTES.clear()
