"""One small run of each of our CUDA kernels, for compute-sanitizer (see .ci/gpu).

Sizes that are not multiples of 16, 32 or 64 and ones that are, with and without labels,
float32 and float16, both Matrix NMS kernels.
"""

import torch

import nmsbench
from nmsbench import datasets

KERNEL_IMPLS = ["allpairs", "bitmask_classic", "bitmask_two_phase", "matrix_fused"]

for name in KERNEL_IMPLS:
    for n in (31, 64, 100, 1000):
        for classes in (1, 3):
            for dtype in (torch.float32, torch.float16):
                boxes = datasets.generate("clustered", n, seed=n, classes=classes).to("cuda", dtype)
                variants = [{}, {"kernel": "linear"}] if name == "matrix_fused" else [{}]
                for params in variants:
                    nmsbench.run_nms(name, boxes.boxes, boxes.scores, 0.5, labels=boxes.labels, **params)
    torch.cuda.synchronize()
    print(name, "ran", flush=True)
