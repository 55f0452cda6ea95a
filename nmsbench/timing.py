"""Timers. Two kinds, labelled in every row and never mixed:

- ``wall``: ``torch.utils.benchmark.Timer.blocked_autorange`` with a fixed thread count;
  it synchronizes CUDA, so it is what a Python caller waits for, launches included.
- ``device`` (CUDA only): CUDA events around each call, one sync at the end: GPU time.
- ``graph`` (CUDA, ``graph_safe`` backends only): the op's padded, sync-free form is
  captured once in a CUDA graph and the replays are timed like ``wall`` (replay plus
  synchronize): what a post-processing step inside a captured graph costs.

Both report median, IQR, the number of runs and the relative spread (IQR / median);
a spread above ``NOISY_SPREAD`` flags the row as noisy. Nothing is trimmed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

# torch.utils.benchmark imports cpp_extension, which warns about CUDA_HOME on machines
# without a CUDA runtime; that is noise for a benchmark that never builds extensions.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
import torch.utils.benchmark as benchmark  # noqa: E402

TIMERS = ("wall", "device", "graph")
DEFAULT_TIMERS = ("wall", "device")
NOISY_SPREAD = 0.10


@dataclass(frozen=True)
class Timing:
    median_us: float
    iqr_us: float
    runs: int

    @property
    def rel_spread(self) -> float:
        return self.iqr_us / self.median_us if self.median_us > 0 else 0.0

    @property
    def noisy(self) -> bool:
        return self.rel_spread > NOISY_SPREAD


def time_wall(fn: Callable[[], object], *, min_run_time: float, threads: int) -> Timing:
    """Median and IQR of ``fn()`` by ``blocked_autorange`` (per-call times, in µs)."""
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return Timing(m.median * 1e6, m.iqr * 1e6, len(m.times) * m.number_per_run)


def time_device(fn: Callable[[], object], *, min_run_time: float, min_runs: int = 10, max_runs: int = 10_000) -> Timing:
    """GPU time of ``fn()`` from CUDA events around each call, one sync at the end."""
    fn()
    torch.cuda.synchronize()
    deadline = time.perf_counter() + min_run_time
    events = []
    while len(events) < max_runs and (len(events) < min_runs or time.perf_counter() < deadline):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    times_us = np.array([s.elapsed_time(e) * 1e3 for s, e in events])
    q1, median, q3 = np.percentile(times_us, [25, 50, 75])
    return Timing(float(median), float(q3 - q1), len(times_us))


def capture_graph(fn: Callable[[], object]):
    """Capture ``fn()`` in a CUDA graph, after a warm-up on a side stream as PyTorch's
    graph documentation asks. Returns ``(graph, output)``: ``output`` is the captured
    call's result, whose tensors every ``graph.replay()`` rewrites."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = fn()
    return graph, output


def time_graph(graph, *, min_run_time: float, threads: int) -> Timing:
    """Median and IQR of ``graph.replay()`` plus the synchronization (wall clock)."""
    return time_wall(graph.replay, min_run_time=min_run_time, threads=threads)
