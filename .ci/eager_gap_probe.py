"""Why an eager hard_fused call takes longer than its graph replay at large N: wall time
as the sweep takes it (torch.utils.benchmark) and as a plain loop, the graph replay, the
kernels' summed GPU time per call (torch.profiler) and where the host spends it
(cProfile). Run on the device: python3 .ci/eager_gap_probe.py [IMPL [N ...]]
(IMPL hard_fused (default) or matrix_recompute; default sizes 8192 32768)."""
import cProfile
import pstats
import sys

import torch
import torch.utils.benchmark as benchmark
from torch.profiler import ProfilerActivity, profile

from nmsbench import datasets
from nmsbench.variants import hard_fused as hf
from nmsbench.variants import matrix_recompute as mr
from probe_timers import captured_graph, loop_us

IMPL = sys.argv[1] if len(sys.argv) > 1 else "hard_fused"
SIZES = [int(v) for v in sys.argv[2:]] or [8192, 32768]
MATRIX = {"iou_threshold": 0.5, "kernel": "gaussian", "sigma": 0.5, "score_threshold": 0.05}


def op(b, s, padded=False):
    if IMPL == "matrix_recompute":
        return mr.matrix_recompute_cuda(b, s, padded=padded, **MATRIX)
    return hf.hard_fused_cuda(b, s, iou_threshold=0.5, padded=padded)


def main():
    for n in SIZES:
        data = datasets.generate("clustered", n, seed=0).to("cuda")
        b, s = data.boxes, data.scores

        def eager():
            return op(b, s)

        timer = benchmark.Timer(stmt="fn()", globals={"fn": eager}, num_threads=16).blocked_autorange(min_run_time=0.05)
        graph = captured_graph(lambda: op(b, s, padded=True))
        print(f"n={n} timer_wall={timer.median * 1e6:.1f} loop_wall={loop_us(eager, 30):.1f} "
              f"graph={loop_us(graph.replay, 30):.1f}", flush=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                eager()
            torch.cuda.synchronize()
        events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        kernels = {}
        for e in events:
            kernels.setdefault(e.name, []).append(e.time_range.elapsed_us())
        print("  GPU per call (profiler):", " ".join(f"{k[:40]}={sum(v) / 10:.1f}" for k, v in
                                                     sorted(kernels.items(), key=lambda kv: -sum(kv[1]))[:8]), flush=True)
        starts = sorted((e.time_range.start, e.time_range.end) for e in events)
        if starts:
            span = (starts[-1][1] - starts[0][0]) / 10
            busy = sum(end - start for start, end in starts) / 10
            print(f"  GPU span per call {span:.1f} us, kernels busy {busy:.1f} us", flush=True)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(50):
            eager()
        torch.cuda.synchronize()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
