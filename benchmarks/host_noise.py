"""How the GPU host's speed moves while nothing changes: a few fixed workloads timed in
turn, block after block, for a while, with what might explain a slow stretch beside each
block (the GPU's SM clock, the VM's steal time, the CPU the process ran on, involuntary
context switches). The second half runs pinned to one CPU, to see whether pinning
steadies it. Run on a GPU machine:

    python benchmarks/host_noise.py --seconds 60 --out noise.csv

The workloads: torchvision and hard_fused at a small N (host-bound), hard_fused at a
large N (GPU-bound), and a pure-Python loop (the host CPU alone). Append what is worth
keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import time

import torch

import nmsbench
from nmsbench.timing import wall_blocks

from _common import boxes_of


def steal_jiffies() -> int:
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) if len(fields) > 8 else 0


def sm_clock():
    """(MHz reader) from NVML where it loads, else a reader of None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    except Exception:  # no NVML: the column stays empty
        return lambda: None


def current_cpu():
    try:
        import psutil

        process = psutil.Process()
        return process.cpu_num
    except Exception:
        return lambda: None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="total; the second half pinned to one CPU")
    parser.add_argument("--block", type=float, default=0.05, help="seconds of timing of one workload's turn")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    small, large = boxes_of("clustered", 256), boxes_of("clustered", 8192)
    registered = nmsbench.implementations()
    tv, hf = registered["torchvision"].backend("cuda").fn, registered["hard_fused"].backend("cuda").fn
    workloads = {
        "torchvision-256": lambda: tv(small.boxes, small.scores, iou_threshold=0.5, labels=None),
        "hard_fused-256": lambda: hf(small.boxes, small.scores, iou_threshold=0.5, labels=None),
        "hard_fused-8192": lambda: hf(large.boxes, large.scores, iou_threshold=0.5, labels=None),
        "python-loop": lambda: sum(range(2000)),
    }
    for call in workloads.values():
        call()
    torch.cuda.synchronize()
    clock, cpu = sm_clock(), current_cpu()
    start = time.perf_counter()
    with open(args.out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["t_s", "pinned", "workload", "median_us", "sm_mhz", "steal_jiffies", "cpu", "nivcsw"])
        pinned = False
        while (t := time.perf_counter() - start) < args.seconds:
            if not pinned and t >= args.seconds / 2:
                os.sched_setaffinity(0, {cpu() or min(os.sched_getaffinity(0))})
                pinned = True
            for name, call in workloads.items():
                steal, switches = steal_jiffies(), resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
                blocks = wall_blocks(call, min_run_time=args.block, threads=1)
                writer.writerow([f"{time.perf_counter() - start:.3f}", int(pinned), name,
                                 f"{statistics.median(blocks.times_us):.2f}", clock(), steal_jiffies() - steal, cpu(),
                                 resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw - switches])
            f.flush()
    print("wrote", args.out)


if __name__ == "__main__":
    main()
