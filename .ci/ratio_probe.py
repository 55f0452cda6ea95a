"""The issue's ratios nearest their targets, re-measured: each op's `wall` (the sweep's
timer, backend functions called as the sweep calls them) in five interleaved rounds, the
median per op, then the ratios. Shows how much a single run's ratio moves.
Run on the device, from the repository root: python3 .ci/ratio_probe.py"""
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_timers import wall_us  # noqa: E402

import nmsbench  # noqa: E402
from nmsbench import datasets  # noqa: E402

DEV = torch.device("cuda")
CASES = [("clustered", 1024, ("hard_fused", "torchvision")), ("clustered", 256, ("hard_fused", "torchvision")),
         ("clustered", 4096, ("hard_fused", "torchvision")),
         ("clustered", 2048, ("matrix_recompute", "matrix_fused", "matrix_naive")),
         ("clustered", 4096, ("matrix_recompute", "matrix_fused", "matrix_naive")),
         ("uniform", 4096, ("matrix_recompute", "matrix_naive"))]


def op(name, bs):
    impl = nmsbench.implementations()[name]
    backend = impl.backend("cuda")
    params = impl.resolve_params({})
    return lambda: backend.fn(bs.boxes, bs.scores, iou_threshold=0.5, labels=None, **params)


def main():
    for scenario, n, names in CASES:
        bs = datasets.generate(scenario, n, seed=0).to(DEV)
        calls = {name: op(name, bs) for name in names}
        times = {name: [] for name in names}
        for _ in range(5):
            for name, fn in calls.items():
                times[name].append(wall_us(fn, min_run_time=0.05))
        med = {name: statistics.median(v) for name, v in times.items()}
        ours = names[0]
        print(f"{scenario:9s} n={n:5d} " + " ".join(f"{k}={v:.1f} ({min(times[k]):.1f}-{max(times[k]):.1f})"
                                                   for k, v in med.items())
              + " | " + " ".join(f"{k}/{ours}={med[k] / med[ours]:.2f}" for k in names[1:]), flush=True)


if __name__ == "__main__":
    main()
