"""hard_fused's tile mask: the working tree's kernel at several tiles per warp against a
baseline's (one tile per warp), same process, same ranked boxes. GPU time (CUDA events
over 20 back-to-back launches, best of 5), whether every written word equals the
baseline's, and whether any word left of the diagonal was written (the mask is filled
with a sentinel first).

Make the baseline here first (it travels with the tree, untracked), e.g.
    mkdir -p .ci/baseline && for f in _common.cuh hard_fused.cu; do
        git show 374a953:implementations/$f > .ci/baseline/$f; done
Run on the device: python3 .ci/mask_probe.py .ci/baseline"""
import sys
from pathlib import Path

import numpy as np
import torch

from nmsbench import datasets
from nmsbench.variants import hard_fused as hf
from nmsbench.variants._cuda import CudaModule, blocks, on_torch_stream, rank_by_score

BASELINE = Path(sys.argv[1] if len(sys.argv) > 1 else ".ci/baseline")
SENTINEL = -123456789


class BaselineModule(CudaModule):
    def source(self) -> str:
        return (BASELINE / "_common.cuh").read_text() + (BASELINE / self.cu_file).read_text()


def gpu_us(launch_once, reps=20):
    launch_once()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        for _ in range(reps):
            launch_once()
        stop.record()
        stop.synchronize()
        best = min(best, 1000 * start.elapsed_time(stop) / reps)
    return best


def main():
    dev = torch.device("cuda")
    old = BaselineModule("hard_fused.cu", templates=("tile_mask_kernel",))
    threshold = np.float64(0.5)
    for scenario in ("clustered", "uniform"):
        for n in (2048, 4096, 8192, 16384, 32768):
            data = datasets.generate(scenario, n, seed=0).to("cuda")
            b, s = data.boxes, data.scores
            words = (n + 31) // 32
            written = (torch.arange(words, device=dev)[None, :] >= (torch.arange(n, device=dev) // 32)[:, None])
            line = [f"{scenario:9s} n={n:6d}"]
            with on_torch_stream(dev) as launch:
                _, ranked = rank_by_score(launch, b, s, None)
                base = torch.full((n, words), SENTINEL, dtype=torch.int32, device=dev)

                def old_mask():
                    launch(old.get("tile_mask_kernel", b.dtype, dev), (blocks(words, hf.TILE_WARPS), words),
                           (32 * hf.TILE_WARPS,), (ranked.sorted_boxes, None, n, words, threshold, base))
                line.append(f"old {gpu_us(old_mask):7.1f}")
                for tiles in (1, 2, 4, 8, 16):
                    mask = torch.full((n, words), SENTINEL, dtype=torch.int32, device=dev)

                    def new_mask(tiles=tiles, mask=mask):
                        hf.launch_tile_mask(launch, b.dtype, dev, ranked.sorted_boxes, None, n, threshold, mask,
                                            tiles_per_warp=tiles)
                    new_mask()
                    torch.cuda.synchronize()
                    same = bool(torch.equal(mask[written], base[written]))
                    clean = bool((mask[~written] == SENTINEL).all())
                    line.append(f"x{tiles} {gpu_us(new_mask):7.1f}{'' if same and clean else ' DIFFERENT' if clean else ' WROTE-LEFT'}")
            print("  ".join(line), flush=True)


if __name__ == "__main__":
    main()
