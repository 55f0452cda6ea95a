"""soft_rounds beside soft_nms: for each (scenario, N, kernel) the decay graph's pairs and
the rounds the picks took, each path of the CUDA backend (forced with its public
``path=``; * marks ``choose_path``'s) and the numba CPU backend on this host's threads,
interleaved case by case, so their ratio is the one the Soft-NMS target asks for. Each
path's result is compared with the CPU backend's (same picks in the same order, scores to
float32 rounding), so a kernel variant that changes the answer says so beside its time.

    python benchmarks/soft.py --n 1024,2048,4096 --scenario clustered,uniform
    NMSBENCH_CUDA_TUNABLES=NAME=1 python benchmarks/soft.py --n 1024   # a declared kernel variant

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

import nmsbench
from nmsbench.timing import wall_blocks
from nmsbench.variants import soft_rounds

from _common import boxes_of, parse_sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="1024,2048,4096")
    parser.add_argument("--scenario", default="clustered,uniform")
    parser.add_argument("--kernel", default="gaussian,linear")
    parser.add_argument("--threads", type=int, default=16, help="CPU threads for soft_nms")
    parser.add_argument("--min-run-time", type=float, default=0.2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"kernel variants (NMSBENCH_CUDA_TUNABLES): {os.environ.get('NMSBENCH_CUDA_TUNABLES') or 'none'} "
          f"(soft_rounds declares {', '.join(soft_rounds.CUDA_MODULE.tunables) or 'none'})")
    cpu_backend = nmsbench.implementations()["soft_nms"].backend("cpu")
    for scenario in args.scenario.split(","):
        for n in parse_sizes(args.n):
            on_gpu = boxes_of(scenario, n)
            on_cpu = on_gpu.to("cpu")
            for kernel in args.kernel.split(","):
                params = dict(iou_threshold=0.5, kernel=kernel, sigma=0.5, score_threshold=0.001)
                _, _, rounds, pairs = soft_rounds.soft_rounds_state(on_gpu.boxes, on_gpu.scores, on_gpu.labels,
                                                                    **params)
                chosen = soft_rounds.choose_path(n, on_gpu.boxes.dtype, device=on_gpu.boxes.device, kernel=kernel)
                cells = []
                expected = cpu_backend.fn(on_cpu.boxes, on_cpu.scores, labels=on_cpu.labels, **params)
                cpu_us = statistics.median(wall_blocks(
                    lambda: cpu_backend.fn(on_cpu.boxes, on_cpu.scores, labels=on_cpu.labels, **params),
                    min_run_time=args.min_run_time, threads=args.threads).times_us)
                for path in soft_rounds.PATHS:
                    try:
                        soft_rounds.check_path(path, n, on_gpu.boxes.dtype, device=on_gpu.boxes.device)
                    except ValueError:
                        continue
                    result = soft_rounds.soft_rounds(on_gpu.boxes, on_gpu.scores, labels=on_gpu.labels, path=path,
                                                     **params)
                    agrees = torch.equal(result.keep.cpu(), expected.keep) and torch.allclose(
                        result.scores.cpu().double(), expected.scores.double(), rtol=1e-6, atol=0.0)
                    us = statistics.median(wall_blocks(
                        lambda: soft_rounds.soft_rounds(on_gpu.boxes, on_gpu.scores, labels=on_gpu.labels, path=path,
                                                        **params),
                        min_run_time=args.min_run_time, threads=args.threads).times_us)
                    cells.append(f"{'*' if path == chosen else ' '}{path} {us:.1f} us ({cpu_us / us:.1f}x)"
                                 + ("" if agrees else " DIFFERS from soft_nms"))
                print(f"{scenario:10s} n={n:6d} {kernel:8s} pairs={pairs} rounds={int(rounds)} "
                      f"soft_nms {cpu_us:.1f} us | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
