"""GPU tests of the device timer (nmsbench.gpu_activity): a synthetic op of a known number
of kernels of known duration gives that count and that time, and the sweep's device rows
count the launches of real implementations.

Marked ``gpu`` and skipped without a CUDA device (CI has none); run them on a GPU
machine with ``pytest -m gpu``.
"""

from __future__ import annotations

import pytest
import torch

from nmsbench import datasets, runner
from nmsbench.gpu_activity import NoGpuActivity, ProfileError, profile_calls, records_of, records_of_profile
from nmsbench.timing import event_blocks, time_device

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SPIN_NS = 200_000  # each sleep kernel's duration
KERNELS = 3
SPIN = r"""
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""


@pytest.fixture(scope="module")
def sleep_op():
    """An op of KERNELS sleep kernels of SPIN_NS each on torch's stream, then one copy of a
    small tensor to the host (one memory copy, one host synchronization)."""
    cupy = pytest.importorskip("cupy")
    import numpy as np

    kernel = cupy.RawKernel(SPIN, "spin")
    small = torch.ones(4, device="cuda")

    def op():
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        for _ in range(KERNELS):
            kernel((1,), (1,), (np.uint64(SPIN_NS),), stream=stream)
        return small.cpu()

    op()
    torch.cuda.synchronize()
    return op


def test_the_fast_reader_gives_the_records_events_gives_on_cuda(sleep_op):
    """profile_calls reads the profiler's result directly: the same records as events()
    (kernel names aside: events() demangles them), and the same calls split from them."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        for _ in range(3):
            sleep_op()
            torch.cuda.synchronize()
    fast, slow = records_of_profile(prof), records_of(prof.events())

    def fields(records):
        return sorted((r.on_gpu, r.correlation, r.start_us, r.end_us, r.name if not r.on_gpu or
                       r.name.startswith(("Memcpy", "Memset")) else "kernel") for r in records)

    assert sum(r.on_gpu for r in fast) >= 3 * (KERNELS + 1) and fields(fast) == fields(slow)


def test_a_known_op_gives_its_kernel_count_and_duration(sleep_op):
    calls = profile_calls(sleep_op, min_run_time=0.05, min_calls=10, max_calls=16)
    assert len(calls) >= 10
    expected_us = KERNELS * SPIN_NS / 1e3
    for call in calls:
        assert (call.launches, call.copies, call.syncs) == (KERNELS, 1, 1)
        assert expected_us <= call.gpu_us <= 1.10 * expected_us  # within 10 %
        assert call.span_us >= call.gpu_us


def test_the_device_timer_and_the_events_timer_on_the_known_op(sleep_op):
    t = time_device(sleep_op, min_run_time=0.05)
    assert (t.launches, t.copies, t.syncs) == (KERNELS, 1, 1) and not t.noisy
    assert t.median_us == pytest.approx(KERNELS * SPIN_NS / 1e3, rel=0.10)
    events = event_blocks(sleep_op, min_run_time=0.05)
    assert events.times_us.min() >= 0.99 * t.median_us  # the events span the kernels, and the host's gaps


def test_an_op_that_synchronizes_the_device_or_does_no_gpu_work_is_refused(sleep_op):
    def syncing():
        sleep_op()
        torch.cuda.synchronize()

    with pytest.raises(ProfileError, match="calls cudaDeviceSynchronize itself"):
        profile_calls(syncing, min_run_time=0.01, min_calls=2, max_calls=4)
    with pytest.raises(NoGpuActivity):
        profile_calls(lambda: torch.ones(4).sum(), min_run_time=0.01, min_calls=2, max_calls=4)


def test_repeated_profiles_give_the_same_counts(sleep_op):
    counts = {(c.launches, c.copies, c.syncs) for _ in range(5)
              for c in profile_calls(sleep_op, min_run_time=0.01, min_calls=3, max_calls=4)}
    assert counts == {(KERNELS, 1, 1)}


def test_the_sweeps_device_rows_count_each_implementations_launches():
    grid = runner.Grid(impls=["hard_fused", "torchvision"], devices=["cuda"], dtypes=["float32"], scenarios=["uniform"],
                       ns=[1024], ious=[0.5], timers=["wall", "device"], min_run_time=0.05, threads=1)
    rows = []
    runner.run_sweep(grid, rows.append)
    device = {r["impl"]: r for r in rows if r["timer"] == "device"}
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    ours = device["hard_fused"]  # one launch, its count read back through mapped memory: no copy, one wait
    assert (ours["launches"], ours["copies"], ours["syncs"]) == (1, 0, 1)
    theirs = device["torchvision"]  # torch ops: sort, gather, the mask, its resolve, the compaction
    assert theirs["launches"] > 3 and theirs["syncs"] >= 1
    for row in device.values():
        assert 0 < row["median_us"] <= row["span_us"] + 1e-6
    box_set = datasets.generate("uniform", 1024, overlap=datasets.SCENARIOS["uniform"].default_overlap, seed=0)
    assert rows[0]["n"] == len(box_set)
