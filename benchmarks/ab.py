"""Interleaved A/B of two ops on the same inputs: ``wall`` (the sweep's timer: the call
and its synchronization) and ``events`` (CUDA events around each call) in alternating
rounds, A then B then B then A ..., so that a ratio does not depend on what the host did
while one of them ran; and whether both give the same output.

An op is a registered implementation, optionally with a path of its CUDA backend
(``hard_fused:streamed``; the backend's ``PATHS`` name them). Run on a GPU machine:

    python benchmarks/ab.py hard_fused:streamed hard_fused:mask_then_block_resolve \\
        --n 2048,4096,8192 --scenario clustered,uniform

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from nmsbench.timing import event_blocks, wall_blocks

from _common import boxes_of, op_call, parse_sizes, same_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--n", default="1024,4096")
    parser.add_argument("--scenario", default="clustered")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--min-run-time", type=float, default=0.05, help="seconds per round and op")
    parser.add_argument("--padded", action="store_true")
    args = parser.parse_args()
    for scenario in args.scenario.split(","):
        for n in parse_sizes(args.n):
            boxes = boxes_of(scenario, n)
            (a, path_a), (b, path_b) = (op_call(s, boxes, padded=args.padded) for s in (args.a, args.b))
            same = same_result(a(), b())
            wall, device = {"a": [], "b": []}, {"a": [], "b": []}
            for r in range(args.rounds):
                for key, fn in (("a", a), ("b", b)) if r % 2 == 0 else (("b", b), ("a", a)):
                    wall[key].append(statistics.median(wall_blocks(fn, min_run_time=args.min_run_time,
                                                                   threads=16).times_us))
                    device[key].append(statistics.median(event_blocks(fn, min_run_time=args.min_run_time).times_us))
            wa, wb = statistics.median(wall["a"]), statistics.median(wall["b"])
            da, db = statistics.median(device["a"]), statistics.median(device["b"])
            print(f"{scenario:10s} n={n:6d}  A {args.a} ({path_a}): wall {wa:8.1f} events {da:8.1f} us | "
                  f"B {args.b} ({path_b}): wall {wb:8.1f} events {db:8.1f} us | B/A wall {wb / wa:.3f} "
                  f"events {db / da:.3f} | same {same}", flush=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
