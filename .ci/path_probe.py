"""Which CUDA path an eager call should take near the size limits, timed as the sweep's
`wall` timer does (torch.utils.benchmark, 16 threads), each path three times interleaved
(A B A B A B) and the median of the three reported, with torchvision / matrix_naive in the
same process for the ratio.
- matrix_recompute: every path that takes n boxes (single block, cooperative, counting).
- hard_fused: the one-launch cooperative mid path against the three-kernel path (rank,
  tile mask, staged resolve) for 256 < n <= 1024.
Run on the device: python3 .ci/path_probe.py"""
import statistics

import torch
import torch.utils.benchmark as benchmark
import torchvision

import nmsbench
from nmsbench import datasets
from nmsbench.variants import hard_fused as hf
from nmsbench.variants import matrix_recompute as mr

DEV = torch.device("cuda")


def wall_us(fn):
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=16).blocked_autorange(min_run_time=0.1).median * 1e6


def interleaved(calls: dict, rounds=3):
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            times[name].append(wall_us(fn))
    return {name: statistics.median(v) for name, v in times.items()}


def main():
    for scenario in ("clustered", "uniform"):
        for n in (32, 48, 64, 96, 128, 256, 1024):
            bs = datasets.generate(scenario, n, seed=0).to(DEV)
            calls = {}
            for path in ("single", "cooperative", "counting"):
                if path == "single" and n > mr.single_block_capacity(torch.float32):
                    continue
                calls[path] = (lambda path=path: mr.matrix_recompute_cuda_path(
                    bs.boxes, bs.scores, None, "gaussian", 0.5, 0.05, False, path=path))
            calls["matrix_naive"] = lambda: nmsbench.run_nms("matrix_naive", bs.boxes, bs.scores, 0.5)
            calls["matrix_fused"] = lambda: nmsbench.run_nms("matrix_fused", bs.boxes, bs.scores, 0.5)
            t = interleaved(calls)
            print(f"matrix {scenario:9s} n={n:5d} chosen={mr.choose_path(n, torch.float32, False, DEV, False):11s} "
                  + " ".join(f"{k}={v:.1f}" for k, v in t.items()), flush=True)
    mid_max = hf.MID_MAX
    for scenario in ("clustered", "uniform"):
        for n in (300, 512, 768, 1024):
            bs = datasets.generate(scenario, n, seed=0).to(DEV)

            def three_kernels():
                hf.MID_MAX = 0
                try:
                    return hf.hard_fused_cuda(bs.boxes, bs.scores, iou_threshold=0.5)
                finally:
                    hf.MID_MAX = mid_max

            calls = {"mid": lambda: hf.hard_fused_cuda(bs.boxes, bs.scores, iou_threshold=0.5),
                     "three_kernels": three_kernels,
                     "torchvision": lambda: torchvision.ops.nms(bs.boxes, bs.scores, 0.5)}
            assert torch.equal(calls["mid"]().keep, calls["three_kernels"]().keep)
            t = interleaved(calls)
            print(f"hard   {scenario:9s} n={n:5d} " + " ".join(f"{k}={v:.1f}" for k, v in t.items())
                  + f"  tv/mid={t['torchvision'] / t['mid']:.2f} tv/three={t['torchvision'] / t['three_kernels']:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
