"""hard_fused from the working tree against a copy of another version (its .py and .cu as
implementations/_ab_hard_fused.py / .cu, registered as "hard_fused_ab"), with torchvision
in the same interleaved rounds: `wall` (the sweep's timer), median of five rounds, the
ratios, and whether both give torchvision's indices; then each version's `graph` time (the
padded op, 20 calls a captured graph), median of four, the two versions in alternating
order. `wall` moves by a few µs between rounds; `graph` repeats to ~0.1 µs (an A/A run:
results/gpu-check-20261130-h/aad7960-aa-hard.txt). Make the copy here first, e.g.
    git show main:implementations/hard_fused.cu > implementations/_ab_hard_fused.cu
    git show main:implementations/hard_fused.py | sed 's/name="hard_fused"/name="hard_fused_ab"/;
        s/CudaModule("hard_fused.cu"/CudaModule("_ab_hard_fused.cu"/' > implementations/_ab_hard_fused.py
Run on the device: python3 .ci/ab_hard.py"""
import statistics
import sys
from pathlib import Path

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_timers import graph_us, wall_us  # noqa: E402

from nmsbench import datasets  # noqa: E402
from nmsbench.variants import _ab_hard_fused as other  # noqa: E402
from nmsbench.variants import hard_fused as tree  # noqa: E402

CASES = [("clustered", n) for n in (1025, 2048, 4096, 8192)] + [("uniform", n) for n in (2048, 4096, 8192)]


def main():
    for scenario, n in CASES:
        bs = datasets.generate(scenario, n, seed=0).to("cuda")
        ops = {"tree": lambda: tree.hard_fused_cuda(bs.boxes, bs.scores, iou_threshold=0.5).keep,
               "other": lambda: other.hard_fused_cuda(bs.boxes, bs.scores, iou_threshold=0.5).keep,
               "torchvision": lambda: torchvision.ops.nms(bs.boxes, bs.scores, 0.5)}
        expected = ops["torchvision"]()
        same = {name: torch.equal(op(), expected) for name, op in ops.items()}
        walls = {name: [] for name in ops}
        for _ in range(5):
            for name, op in ops.items():
                walls[name].append(wall_us(op, 0.05))
        w = {name: statistics.median(v) for name, v in walls.items()}
        graph_times = {tree: [], other: []}
        for r in range(4):  # alternating which goes first
            for module in ((tree, other) if r % 2 == 0 else (other, tree)):
                graph_times[module].append(graph_us(lambda: module.hard_fused_cuda(bs.boxes, bs.scores,
                                                                                   iou_threshold=0.5, padded=True)))
        graphs = [statistics.median(graph_times[module]) for module in (tree, other)]
        print(f"{scenario:9s} n={n:5d} " + " ".join(f"{k}={v:7.1f}" for k, v in w.items())
              + f" | graph tree={graphs[0]:6.1f} other={graphs[1]:6.1f}"
              + f" | tv/tree={w['torchvision'] / w['tree']:.2f} tv/other={w['torchvision'] / w['other']:.2f}"
              + f" same={same['tree']}/{same['other']}", flush=True)


if __name__ == "__main__":
    main()
