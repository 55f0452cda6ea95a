"""Timers the device probes share (imported from .ci/, where a probe runs):
- captured_graph: a CUDA graph of `calls` calls, warmed up on a side stream;
- graph_us: GPU time of one call, from a CUDA graph of `calls` calls (events around
  `replays` replays);
- wall_us: one eager call with its synchronization, as the sweep's `wall` timer takes it
  (torch.utils.benchmark, 16 threads, median of a blocked_autorange);
- loop_us: a plain loop of eager calls, synchronized once at the end;
- launches_us: GPU time of one launch, from CUDA events around `reps` launches back to
  back (no host wait between them), the best of `rounds`."""
import time

import torch
import torch.utils.benchmark as benchmark


def captured_graph(fn, calls=1):
    """A CUDA graph of `calls` calls of fn, after one warm-up call on a side stream (as
    torch.cuda.graphs recommends)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def graph_us(fn, calls=20, replays=20):
    graph = captured_graph(fn, calls)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return 1e3 * start.elapsed_time(end) / (calls * replays)


def wall_us(fn, min_run_time=0.1):
    def call():
        fn()
        torch.cuda.synchronize()
    timer = benchmark.Timer(stmt="fn()", globals={"fn": call}, num_threads=16)
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e6


def loop_us(fn, reps=50):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - start) / reps


def launches_us(launch_once, reps=20, rounds=5):
    launch_once()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(rounds):
        start.record()
        for _ in range(reps):
            launch_once()
        stop.record()
        stop.synchronize()
        best = min(best, 1000 * start.elapsed_time(stop) / reps)
    return best
