"""The large-N CPU reference, checked: ``hard_graph`` (greedy NMS on the suppression graph,
O(N + E)) against torchvision's CPU NMS on the same boxes, index for index, on the
constant-density canvas (the workload of the large-N targets), with both times and the
kept count. Runs on the CPU; no GPU needed.

    python benchmarks/graph_reference.py --n 32768,131072 --scenario uniform,clustered

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import time

import torch

import nmsbench
from nmsbench import datasets

from _common import parse_sizes


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="32768,131072")
    parser.add_argument("--scenario", default="uniform,clustered")
    parser.add_argument("--canvas", default="density")
    parser.add_argument("--iou", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    nmsbench.run_nms("hard_graph", torch.tensor([[0.0, 0, 1, 1]]), torch.ones(1), iou_threshold=args.iou)  # compile
    for scenario in args.scenario.split(","):
        for n in parse_sizes(args.n):
            case = datasets.generate(scenario, n, seed=0, canvas=args.canvas)
            graph, graph_s = timed(lambda: nmsbench.run_nms("hard_graph", case.boxes, case.scores,
                                                            iou_threshold=args.iou, validate=False))
            reference, reference_s = timed(lambda: nmsbench.run_nms("torchvision", case.boxes, case.scores,
                                                                    iou_threshold=args.iou, validate=False))
            same = torch.equal(graph.keep, reference.keep)
            print(f"{scenario:10s} n={n:8d} canvas={args.canvas} identical={same} kept={len(reference.keep)} "
                  f"hard_graph {graph_s * 1e3:.1f} ms  torchvision {reference_s * 1e3:.1f} ms",
                  flush=True)
            if not same:
                raise SystemExit(f"hard_graph differs from torchvision at {scenario} n={n}")


if __name__ == "__main__":
    main()
