"""Side by side in one process: hard_fused's block resolve and the counting rank of the
working tree against a baseline's, on the same inputs; GPU time (CUDA events over 20
back-to-back launches, best of 5) and whether both give the same output. The resolve is
timed alone and right after the mask kernel (less the mask's own time), as in the op.

Make the baseline here first (it travels with the tree, untracked), e.g.
    mkdir -p .ci/baseline && for f in _common.cuh hard_fused.cu rank.cu; do
        git show main:implementations/$f > .ci/baseline/$f; done
Run on the device: python3 .ci/ab_kernels.py .ci/baseline"""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_timers import launches_us as gpu_us  # noqa: E402

from nmsbench import datasets  # noqa: E402
from nmsbench.variants import hard_fused as hf  # noqa: E402
from nmsbench.variants._cuda import (COUNT_BOXES, RANK_MODULE, RANK_WARPS, CudaModule, blocks, on_torch_stream,  # noqa: E402
                                     opted_in_shared_limit, rank_by_score)

BASELINE = Path(sys.argv[1] if len(sys.argv) > 1 else ".ci/baseline")


class BaselineModule(CudaModule):
    def source(self) -> str:
        return (BASELINE / "_common.cuh").read_text() + (BASELINE / self.cu_file).read_text()


def old_resolve_shared(words: int) -> int:
    """The baseline block resolve's dynamic shared memory: the bitmap alone before the
    pipelined rounds (33e90e5), their staging buffers too since (02059aa). Launching a
    kernel with less than its layout needs reads and writes out of bounds."""
    if "resolve_shared[]" in (BASELINE / "hard_fused.cu").read_text():
        return hf.block_resolve_shared_bytes(words)
    return 4 * words


def main():
    dev = torch.device("cuda")
    old_hard = BaselineModule("hard_fused.cu", plain=("block_resolve_kernel",))
    old_rank = BaselineModule("rank.cu", templates=("rank_by_score_kernel",))
    for scenario in ("clustered", "uniform"):
        for n in (2048, 4096, 8192, 32768):
            data = datasets.generate(scenario, n, seed=0).to("cuda")
            b, s = data.boxes, data.scores
            words = (n + 31) // 32
            line = {}
            with on_torch_stream(dev) as launch:
                order, ranked = rank_by_score(launch, b, s, None)
                if n <= 8192:
                    outputs = {}
                    for name, module in (("old", old_rank), ("new", RANK_MODULE)):
                        out = torch.empty(n, dtype=torch.int64, device=dev)
                        boxes_out = torch.empty((n, 4), dtype=b.dtype, device=dev)

                        def rank(module=module, out=out, boxes_out=boxes_out):
                            launch(module.get("rank_by_score_kernel", b.dtype, dev), (blocks(n, COUNT_BOXES),),
                                   (32 * RANK_WARPS,), (b, s, None, n, out, boxes_out, None, None))

                        line[f"rank_{name}"] = gpu_us(rank)
                        outputs[name] = out.clone()
                    line["rank_same"] = bool(torch.equal(outputs["old"], outputs["new"]))
                mask = torch.empty((n, words), dtype=torch.int32, device=dev)

                def mask_kernel():
                    hf.launch_tile_mask(launch, b.dtype, dev, ranked.sorted_boxes, None, n, np.float64(0.5), mask)

                mask_kernel()
                line["mask"] = gpu_us(mask_kernel)
                kept = {}
                for name, module, shared in (("old", old_hard, old_resolve_shared(words)),
                                             ("new", hf.CUDA_MODULE, hf.block_resolve_shared_bytes(words))):
                    kernel = module.get("block_resolve_kernel", None, dev)
                    opted_in_shared_limit(kernel, dev)
                    out = torch.empty(n + 1, dtype=torch.int64, device=dev)

                    def resolve(kernel=kernel, out=out, shared=shared):
                        launch(kernel, (1,), (hf.RESOLVE_THREADS,),
                               (mask, order, n, words, out, np.uint64(out.data_ptr() + 8 * n), None), shared_mem=shared)

                    line[f"resolve_{name}"] = gpu_us(resolve)
                    # as in the op: right after the mask kernel (at 32768 the mask is past L2)
                    line[f"after_mask_{name}"] = gpu_us(lambda resolve=resolve: (mask_kernel(), resolve())) - line["mask"]
                    kept[name] = out[: int(out[n])].clone()
                line["resolve_same"] = bool(torch.equal(kept["old"], kept["new"]))
                line["kept"] = kept["new"].numel()
            print(scenario, n, " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in line.items()),
                  flush=True)


if __name__ == "__main__":
    main()
