"""Every path of a kernel backend at each size: where the path chooser's limits should
lie. For each (scenario, N) it times every path that takes the input (forced with the
backend's public ``path=``), ``wall`` and ``events``, eager and padded, and marks the one
``choose_path`` picks, so a limit such as hard_fused's ``ONE_BLOCK_MAX_N`` or
``STREAMED_MAX_N`` can be checked against the sizes where the fastest path changes.

    python benchmarks/paths.py hard_fused --n 128,160,192,1024,1025,8192,8193
    python benchmarks/paths.py matrix_recompute --n 64,96,128 --scenario clustered,uniform

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import nmsbench
from nmsbench.timing import event_blocks, wall_blocks

from _common import boxes_of, op_call, parse_sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("impl", help="an implementation whose CUDA backend has PATHS (hard_fused, matrix_recompute)")
    parser.add_argument("--n", default="128,1024,4096")
    parser.add_argument("--scenario", default="clustered")
    parser.add_argument("--min-run-time", type=float, default=0.1)
    args = parser.parse_args()
    module = sys.modules[nmsbench.implementations()[args.impl].backend("cuda").fn.__module__]
    for scenario in args.scenario.split(","):
        for n in parse_sizes(args.n):
            boxes = boxes_of(scenario, n)
            device, labels = boxes.boxes.device, boxes.labels is not None
            for padded in (False, True):
                chosen = module.choose_path(n, boxes.boxes.dtype, padded, device, labels)
                cells = []
                for path in module.PATHS:
                    try:
                        module.check_path(path, n, boxes.boxes.dtype, padded, device, labels)
                    except ValueError:
                        continue
                    fn, _ = op_call(f"{args.impl}:{path}", boxes, padded=padded)
                    wall = statistics.median(wall_blocks(fn, min_run_time=args.min_run_time, threads=16).times_us)
                    gpu = statistics.median(event_blocks(fn, min_run_time=args.min_run_time).times_us)
                    cells.append(f"{'*' if path == chosen else ' '}{path} {wall:.1f}/{gpu:.1f}")
                print(f"{scenario:10s} n={n:6d} {'padded' if padded else 'eager '}  wall/events us: "
                      + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
