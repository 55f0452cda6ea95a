"""hard_fused above 1024 boxes: the streamed resolve (mask and resolve in one launch)
against the tile mask kernel and the block resolve, with torchvision in the same process.
Both give the same indices (asserted). Eager: the sweep's `wall` timer, three rounds
interleaved, the median; graph: GPU time per call from replays of the padded op.
Run on the device, from the repository root: python3 .ci/streamed_probe.py [N ...]"""
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
STREAMED_MAX_N = hf.STREAMED_MAX_N


def forced(streamed, boxes, scores, padded=False):
    """hard_fused with the streamed resolve on or off (plans are per setting)."""
    hf.STREAMED_MAX_N = STREAMED_MAX_N if streamed else 0
    plans = hf._plans
    hf._plans = {}
    try:
        return hf.hard_fused_cuda(boxes, scores, iou_threshold=0.5, padded=padded)
    finally:
        hf.STREAMED_MAX_N, hf._plans = STREAMED_MAX_N, plans


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [1025, 2048, 4096, 8192, 16384, 32768]
    for scenario in ("clustered", "uniform"):
        for n in sizes:
            bs = datasets.generate(scenario, n, seed=0).to(DEV)
            b, s = bs.boxes, bs.scores
            reference = torchvision.ops.nms(b, s, 0.5)
            for streamed in (True, False):
                for _ in range(3):
                    assert torch.equal(forced(streamed, b, s).keep, reference), (streamed, n)
                assert torch.equal(forced(streamed, b, s, padded=True).trimmed().keep, reference)
            calls = {"torchvision": lambda: torchvision.ops.nms(b, s, 0.5),
                     "streamed": lambda: forced(True, b, s), "three": lambda: forced(False, b, s)}
            times = {name: [] for name in calls}
            for _ in range(3):
                for name, fn in calls.items():
                    times[name].append(wall_us(fn))
            t = {name: statistics.median(v) for name, v in times.items()}
            g = {name: graph_us(lambda streamed=streamed: forced(streamed, b, s, padded=True), calls=5)
                 for name, streamed in (("streamed", True), ("three", False))}
            print(f"hard {scenario:9s} n={n:6d} wall " + " ".join(f"{k}={v:.1f}" for k, v in t.items())
                  + f" | tv/streamed={t['torchvision'] / t['streamed']:.2f} tv/three={t['torchvision'] / t['three']:.2f}"
                  + " | graph " + " ".join(f"{k}={v:.1f}" for k, v in g.items()), flush=True)


if __name__ == "__main__":
    main()
