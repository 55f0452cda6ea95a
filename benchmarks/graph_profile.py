"""Where the GPU overlap graph's greedy NMS spends a call: torch.profiler's table of host
ops and GPU kernels for one call (after a warm-up), and a staged timing (a synchronize
after each stage: layout and estimate, rank, cells, rows, rounds) per (scenario, N).

    python benchmarks/graph_profile.py --n 1024,1048576 --scenario uniform,clustered
"""

from __future__ import annotations

import argparse
import time

import torch

from nmsbench import datasets
from nmsbench.boxes import score_order
from nmsbench.variants import overlap_graph

from _common import parse_sizes


def staged(boxes, repeats: int = 5) -> dict[str, float]:
    """Median µs of each stage of greedy_on_graph, a synchronize between stages."""
    stages: dict[str, list[float]] = {}

    def mark(name, t0):
        torch.cuda.synchronize()
        stages.setdefault(name, []).append((time.perf_counter() - t0) * 1e6)
        return time.perf_counter()

    n = boxes.boxes.shape[0]
    labels = None if boxes.labels is None else boxes.labels.to(torch.int64)
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        layout, _ = overlap_graph.grid_layout(boxes.boxes, overlap_graph.sample_count(n))
        t = mark("layout and estimate (one host read)", t)
        order = score_order(boxes.scores)
        t = mark("rank", t)
        grid = overlap_graph.device_grid(boxes.boxes, order, labels, layout)
        t = mark("cells, sort, cell order", t)
        with overlap_graph.on_torch_stream(boxes.boxes.device) as launch:
            counts, indices, overflow = overlap_graph.slot_rows(launch, grid, n, 0.5)
            t = mark("rows (one pass)", t)
            overlap_graph.greedy_rounds(launch, n, None, counts, overlap_graph.ROW_SLOTS, indices)
            t = mark("rounds", t)
        overlap_graph.greedy_on_graph(boxes.boxes, boxes.scores, 0.5, boxes.labels, max_tests=1 << 62)
        mark("whole call (estimate included)", t)
    return {k: round(sorted(v)[len(v) // 2], 1) for k, v in stages.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="1024,1048576")
    parser.add_argument("--scenario", default="uniform,clustered")
    parser.add_argument("--canvas", default="density")
    parser.add_argument("--rows", type=int, default=25, help="rows of the profiler's table")
    args = parser.parse_args()
    for scenario in args.scenario.split(","):
        for n in parse_sizes(args.n):
            boxes = datasets.generate(scenario, n, seed=0, canvas=args.canvas).to("cuda")
            overlap_graph.greedy_on_graph(boxes.boxes, boxes.scores, 0.5, boxes.labels, max_tests=1 << 62)
            print(f"== {scenario} {args.canvas} n={n}: staged µs", staged(boxes), flush=True)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                    torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    overlap_graph.greedy_on_graph(boxes.boxes, boxes.scores, 0.5, boxes.labels, max_tests=1 << 62)
                torch.cuda.synchronize()
            averages = prof.key_averages()
            print(averages.table(sort_by="self_cpu_time_total", row_limit=args.rows), flush=True)
            print(averages.table(sort_by="self_device_time_total", row_limit=12), flush=True)


if __name__ == "__main__":
    main()
