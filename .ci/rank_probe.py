"""The two device ranks against each other and against torch.sort, then hard_fused with
the default choice, eager against its graph replay and torchvision (same process).
Run on the device: python3 .ci/rank_probe.py [sizes...]
Rank: GPU time per call from a CUDA graph of 20 calls (events around replays), and the
eager wall of one call with its synchronization (median of a blocked_autorange)."""
import sys

import torch
import torchvision

from nmsbench import datasets
from nmsbench.variants import _cuda
from nmsbench.variants import hard_fused as hf
from probe_timers import graph_us, loop_us, wall_us

SIZES = [int(v) for v in sys.argv[1:]] or [1024, 2048, 4096, 8192, 16384, 32768, 131072]


def main():
    print(f"MERGE_RANK_MIN={_cuda.MERGE_RANK_MIN}", flush=True)
    for n in SIZES:
        data = datasets.generate("clustered", n, seed=0).to("cuda")
        b, s = data.boxes, data.scores
        row = [f"n={n:6d}"]
        for method in ("counting", "merge"):
            if method == "counting" and n > 40000:
                continue
            words = _cuda.rank_scratch_words(n, b.dtype, False, method=method)
            memory = torch.empty(words, dtype=torch.int64, device="cuda")

            def rank(method=method, memory=memory):
                with _cuda.on_torch_stream(b.device) as launch:
                    _cuda.rank_by_score(launch, b, s, None, into=memory.data_ptr(), method=method)
            rank()
            expected = torch.sort(s, descending=True, stable=True).indices
            assert torch.equal(memory[:n], expected), method
            row.append(f"{method} graph {graph_us(rank):7.1f} wall {wall_us(rank):7.1f}")

        def torch_sort():
            order = torch.sort(s + 0.0, descending=True, stable=True).indices
            return b.index_select(0, order)
        row.append(f"torch.sort+gather graph {graph_us(torch_sort):7.1f} wall {wall_us(torch_sort):7.1f}")
        print("  ".join(row), flush=True)
    for scenario in ("clustered", "uniform"):
        for n in [n for n in SIZES if 2048 <= n <= 32768]:
            data = datasets.generate(scenario, n, seed=0).to("cuda")
            b, s = data.boxes, data.scores

            def eager():
                return hf.hard_fused_cuda(b, s, iou_threshold=0.5)

            def padded():
                return hf.hard_fused_cuda(b, s, iou_threshold=0.5, padded=True)

            def tv():
                return torchvision.ops.nms(b, s, 0.5)
            assert torch.equal(eager().keep, tv())
            ours, theirs = wall_us(eager), wall_us(tv)
            print(f"hard_fused {scenario:9s} n={n:6d} wall {ours:8.1f} loop {loop_us(eager):8.1f} "
                  f"graph {graph_us(padded, calls=5, replays=10):8.1f}  torchvision wall {theirs:8.1f}  "
                  f"ratio {theirs / ours:5.2f}", flush=True)


if __name__ == "__main__":
    main()
