"""The GPU overlap graph beside the dense path: for each (scenario, canvas, N) greedy NMS on
the graph (``nmsbench.variants.overlap_graph.greedy_on_graph``) and ``hard_fused``
(whatever path its chooser takes), interleaved, ``wall`` and ``events``, with the graph's
pairs and rounds, each one's peak GPU memory, and whether the two keep the same indices:
where a dispatcher between them should switch, and the large-N targets' figures.

    python benchmarks/graph.py --n 4096,32768,131072 --canvas density,fixed
    python benchmarks/graph.py --n 1048576 --canvas density --skip-dense   # hard_fused would need 128 GB

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from nmsbench import datasets
from nmsbench.timing import event_blocks, wall_blocks
from nmsbench.variants import overlap_graph

from _common import op_call, parse_sizes


def peak_bytes(fn) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="4096,32768,131072")
    parser.add_argument("--scenario", default="uniform,clustered")
    parser.add_argument("--canvas", default="density,fixed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-run-time", type=float, default=0.1)
    parser.add_argument("--skip-dense", action="store_true", help="time the graph only (N where the dense mask cannot fit)")
    args = parser.parse_args()
    for canvas in args.canvas.split(","):
        for scenario in args.scenario.split(","):
            for n in parse_sizes(args.n):
                boxes = datasets.generate(scenario, n, seed=0, canvas=canvas).to("cuda")

                def graph():
                    return overlap_graph.greedy_on_graph(boxes.boxes, boxes.scores, 0.5, boxes.labels)

                result, pairs, rounds = graph()
                ops = {"graph": lambda: graph()[0]}
                if not args.skip_dense:
                    ops["hard_fused"] = op_call("hard_fused", boxes)[0]
                keeps = {name: op().keep for name, op in ops.items()}
                same = all(torch.equal(keep, result.keep) for keep in keeps.values())
                times = {name: ([], []) for name in ops}
                for k in range(args.rounds):  # interleaved, the order turned each round
                    for name in (list(ops) if k % 2 == 0 else list(ops)[::-1]):
                        times[name][0].append(statistics.median(
                            wall_blocks(ops[name], min_run_time=args.min_run_time, threads=16).times_us))
                        times[name][1].append(statistics.median(
                            event_blocks(ops[name], min_run_time=args.min_run_time).times_us))
                cells = [f"{name} {statistics.median(w):.1f}/{statistics.median(e):.1f} us "
                         f"{peak_bytes(op) / 2**20:.0f} MiB" for (name, (w, e)), op in zip(times.items(), ops.values())]
                print(f"{scenario:9s} {canvas:7s} n={n:8d} pairs={pairs} rounds={rounds} kept={len(result.keep)} "
                      f"same={same} | wall/events: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
