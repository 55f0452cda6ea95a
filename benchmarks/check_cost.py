"""Where the separate input check's time goes, on a backend built from torch ops: the
backend alone, ``run_nms(..., validate=False)`` and ``run_nms`` (its check kernel queued
ahead of the op), each called many times under ``torch.profiler``. It prints, per variant,
each host-side call's time per op call (launches, copies, synchronizations: is it the
host or the wait that grows?) and each kernel's GPU time, and writes a Chrome trace of
each. Run on a GPU machine:

    python benchmarks/check_cost.py --impl torchvision --n 1024 --out traces

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import nmsbench

from _common import boxes_of


def profiled(call, calls: int, trace: Path):
    """The profiler's events of ``calls`` calls (after a warm-up), and its Chrome trace."""
    for _ in range(10):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(trace))
    return prof.key_averages()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", default="torchvision")
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--scenario", default="clustered")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--out", default="check-cost-traces", help="folder for the Chrome traces")
    args = parser.parse_args()
    impl = nmsbench.implementations()[args.impl]
    backend = impl.backend("cuda")
    params = impl.resolve_params({})  # the family's defaults
    case = boxes_of(args.scenario, args.n)
    b, s = case.boxes, case.scores
    variants = {
        "backend": lambda: backend.fn(b, s, iou_threshold=0.5, labels=None, **params),
        "no_validate": lambda: nmsbench.run_nms(args.impl, b, s, 0.5, validate=False, **params),
        "api": lambda: nmsbench.run_nms(args.impl, b, s, 0.5, **params),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, call in variants.items():
        events = profiled(call, args.calls, out / f"{args.impl}-{args.n}-{name}.json")
        print(f"== {args.impl} n={args.n} {name}: per call, host µs (self) and GPU µs")
        rows = sorted(events, key=lambda e: -(e.self_cpu_time_total + e.self_device_time_total))
        for event in rows[:18]:
            print(f"  {event.key[:60]:60s} x{event.count / args.calls:5.2f}  host {event.self_cpu_time_total / args.calls:8.2f}"
                  f"  gpu {event.self_device_time_total / args.calls:8.2f}")


if __name__ == "__main__":
    main()
