"""One small run of each of our CUDA kernels, for compute-sanitizer (see .ci/gpu).

Sizes that are not multiples of 16, 32 or 64 and ones that are, with and without labels,
float32 and float16, both Matrix NMS kernels; matrix_recompute on each of its three paths
(single block, counting, torch.sort), forced, at every size it takes, padded output too.
"""

import os
import sys

import torch

import nmsbench
from nmsbench import datasets

# Arguments pick what to run (default: everything), e.g. `cupy_seed_kernels` alone.
ALL = ["allpairs", "bitmask_classic", "bitmask_two_phase", "hard_fused", "matrix_fused", "matrix_recompute",
       "cupy_seed_kernels"]
# hard_fused has a path per size range: one block (<= 160), one cooperative launch (eager,
# <= 1024), the tile mask and the staged resolve (padded, <= 1024), the streamed resolve
# (> 1024; the tile mask and the block resolve when forced); its padded form runs too.
# matrix_recompute's four paths are forced one by one at each size below.
SIZES = {"hard_fused": (31, 64, 100, 200, 257, 1000, 1500, 4500), "matrix_recompute": (31, 64, 100, 1000, 1025, 3000)}
SELECTED = sys.argv[1:] or ALL
# SANITIZE_SIZES=31,1025 runs those sizes only (racecheck is slow: split it over processes)
if os.environ.get("SANITIZE_SIZES"):
    ONLY = tuple(int(v) for v in os.environ["SANITIZE_SIZES"].split(","))
    SIZES = {name: tuple(n for n in SIZES.get(name, (31, 64, 100, 1000)) if n in ONLY) for name in ALL}
KERNEL_IMPLS = [name for name in ALL[:-1] if name in SELECTED]

for name in KERNEL_IMPLS:
    for n in SIZES.get(name, (31, 64, 100, 1000)):
        for classes in (1, 3):
            for dtype in (torch.float32, torch.float16):
                boxes = datasets.generate("clustered", n, seed=n, classes=classes).to("cuda", dtype)
                variants = [{}, {"kernel": "linear"}] if name.startswith("matrix_") else [{}]
                if name == "hard_fused":
                    variants = [{}, {"padded": True}]
                for params in variants:
                    if name == "matrix_recompute":
                        from nmsbench.variants import matrix_recompute as mr

                        full = {"kernel": "gaussian", "sigma": 0.5, "score_threshold": 0.05, **params}
                        for path in ("single", "cooperative", "counting", "sort"):
                            if path == "single" and n > mr.single_block_capacity(dtype):
                                continue
                            if path == "cooperative" and (n > mr.COOPERATIVE_MAX_N or mr.cooperative_grid(
                                    n, dtype, boxes.boxes.device, boxes.labels is not None) == 0):
                                continue
                            for padded in (False, True):
                                mr.matrix_recompute_cuda_path(boxes.boxes, boxes.scores, boxes.labels, full["kernel"],
                                                              full["sigma"], full["score_threshold"], padded, path=path)
                        continue
                    nmsbench.run_nms(name, boxes.boxes, boxes.scores, 0.5, labels=boxes.labels, **params)
                    if name == "hard_fused" and n > 1024:  # the block resolve after the tile mask, forced
                        from nmsbench.variants import hard_fused as hf

                        limit, plans, hf.STREAMED_MAX_N, hf._plans = hf.STREAMED_MAX_N, hf._plans, 0, {}
                        nmsbench.run_nms(name, boxes.boxes, boxes.scores, 0.5, labels=boxes.labels, **params)
                        hf.STREAMED_MAX_N, hf._plans = limit, plans
    if name == "hard_fused":  # rank.cu's merge (every kernel backend's rank from 8193 boxes), at small sizes
        from nmsbench.variants._cuda import on_torch_stream, rank_by_score

        for n in (1, 300, 5000):
            for dtype in (torch.float32, torch.float16, torch.float64):
                boxes = datasets.generate("degenerate", n, seed=n, classes=3).to("cuda", dtype)
                with on_torch_stream(boxes.boxes.device) as launch:
                    rank_by_score(launch, boxes.boxes, boxes.scores, boxes.labels, with_scores=True, method="merge")
    torch.cuda.synchronize()
    print(name, "ran", flush=True)

# The YOLOv5 seed's three pipeline kernels, on the recorded raw rows (one small batch).
from nmsbench.datasets import real  # noqa: E402
from nmsbench.pipeline import PipelineConfig, run_pipeline  # noqa: E402

if "cupy_seed_kernels" not in SELECTED:
    sys.exit(0)
raw, _, size = real.real_raw(2)
for conf in (0.25, 0.001):
    run_pipeline("cupy_seed_kernels", torch.from_numpy(raw).cuda(), PipelineConfig(conf, input_size=(size, size)), "cuda")
torch.cuda.synchronize()
print("cupy_seed_kernels ran", flush=True)
