"""hard_fused below 257 boxes: the one-block small kernel against the cooperative mid
kernel (eager) and against the three-kernel path (rank, tile mask, staged resolve; eager
and in a CUDA graph), with torchvision in the same process. Eager: the sweep's `wall`
timer, three rounds interleaved, the median; graph: GPU time per call from replays.
Run on the device, from the repository root: python3 .ci/small_path_probe.py"""
import statistics
import sys
from pathlib import Path

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_timers import graph_us, wall_us  # noqa: E402

from nmsbench import datasets  # noqa: E402
from nmsbench.variants import hard_fused as hf  # noqa: E402

DEV = torch.device("cuda")
SMALL_MAX, MID_MAX = hf.SMALL_MAX, hf.MID_MAX


def forced(path, boxes, scores, padded=False):
    """hard_fused on ``path`` ("small", "mid" or "three")."""
    hf.SMALL_MAX = SMALL_MAX if path == "small" else 0
    hf.MID_MAX = MID_MAX if path == "mid" else 0
    try:
        return hf.hard_fused_cuda(boxes, scores, iou_threshold=0.5, padded=padded)
    finally:
        hf.SMALL_MAX, hf.MID_MAX = SMALL_MAX, MID_MAX


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [32, 64, 96, 128, 160, 192, 224, 256, 320]
    for scenario in ("clustered", "uniform"):
        for n in sizes:
            bs = datasets.generate(scenario, n, seed=0).to(DEV)
            b, s = bs.boxes, bs.scores
            reference = torchvision.ops.nms(b, s, 0.5)
            calls = {"torchvision": lambda: torchvision.ops.nms(b, s, 0.5)}
            for path in ("small", "mid", "three"):
                if path == "small" and n > SMALL_MAX:
                    continue
                assert torch.equal(forced(path, b, s).keep, reference), (path, n)
                calls[path] = lambda path=path: forced(path, b, s)
            times = {name: [] for name in calls}
            for _ in range(3):
                for name, fn in calls.items():
                    times[name].append(wall_us(fn))
            t = {name: statistics.median(v) for name, v in times.items()}
            g = {path: graph_us(lambda path=path: forced(path, b, s, padded=True))
                 for path in ("small", "three") if path in calls}
            print(f"hard {scenario:9s} n={n:4d} wall " + " ".join(f"{k}={v:.1f}" for k, v in t.items())
                  + " | tv/" + " tv/".join(f"{k}={t['torchvision'] / v:.2f}" for k, v in t.items() if k != "torchvision")
                  + " | graph " + " ".join(f"{k}={v:.1f}" for k, v in g.items()), flush=True)


if __name__ == "__main__":
    main()
