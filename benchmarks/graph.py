"""The GPU overlap graph beside the dense path: for each (scenario, canvas, N) greedy NMS on
the graph (``hard_graph`` with ``path="graph"``), ``hard_graph`` as its dispatcher chooses
and ``hard_fused``, interleaved, ``wall`` and ``events``, with the pairs the graph's windows
test (the dispatcher's sampled estimate and the exact count), those above the threshold and
the rounds, each one's peak GPU memory, and whether they keep the same indices: where the
dispatcher should switch (tests per n^2), and the large-N targets' figures.

    python benchmarks/graph.py --n 4096,32768,131072 --canvas density,fixed
    python benchmarks/graph.py --n 1048576 --canvas density --skip-dense   # hard_fused would need 128 GB

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import nmsbench
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

                answer = overlap_graph.greedy_on_graph(boxes.boxes, boxes.scores, 0.5, boxes.labels, max_tests=1 << 62)
                result, tests, pairs, rounds = answer.result, answer.tests, answer.pairs, answer.rounds
                exact = overlap_graph.window_tests(boxes.boxes, overlap_graph.device_grid(boxes.boxes))
                dispatcher = nmsbench.implementations()["hard_graph"].backend("cuda").fn

                def hard_graph(path=None):
                    return dispatcher(boxes.boxes, boxes.scores, iou_threshold=0.5, labels=boxes.labels, path=path)

                ops = {"graph": lambda: hard_graph("graph")}
                if not args.skip_dense:
                    ops["hard_graph"] = hard_graph
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
                print(f"{scenario:9s} {canvas:7s} n={n:8d} tests/n^2=1/{n * n / max(tests, 1):.0f} "
                      f"(exact 1/{n * n / max(exact, 1):.0f}) pairs={pairs} "
                      f"rounds={rounds}{' two-pass' if answer.two_pass else ''} kept={len(result.keep)} "
                      f"same={same} | wall/events: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
