"""The kernels of hard_fused and matrix_recompute under Nsight Compute: each case runs
once to compile and warm up, then once inside the profiler range, so ncu sees exactly
one launch of each kernel per case. Run on the device:

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section LaunchStats \
        python3 .ci/ncu_probe.py [hard] [matrix] [hard_small] [hard_big] [matrix_coop] [mid]
"""
import sys

import torch

from nmsbench import datasets
from nmsbench.variants import hard_fused as hf
from nmsbench.variants import matrix_recompute as mr

dev = torch.device("cuda")
which = sys.argv[1:] or ["hard", "matrix"]
cases = []
if "hard" in which:
    for scenario in ("clustered", "uniform"):
        for n, padded in ((512, False), (1024, False), (1024, True), (8192, True)):
            cases.append(("hard_fused", scenario, n, padded))
if "matrix" in which:
    for scenario in ("clustered", "uniform"):
        cases.append(("matrix_recompute", scenario, 8192, True))
        cases.append(("matrix_recompute", scenario, 1024, False))  # the cooperative launch
        cases.append(("matrix_recompute", scenario, 2048, False))

if "hard_small" in which:  # the one-block kernel, the cooperative mid kernel, the block resolve at 8192
    cases += [("hard_fused", "clustered", 256, False), ("hard_fused", "clustered", 1024, False),
              ("hard_fused", "clustered", 8192, True)]
if "hard_big" in which:  # the tile mask and the block resolve at large N
    cases += [("hard_fused", "clustered", 32768, True), ("hard_fused", "uniform", 8192, True)]
if "mid" in which:  # matrix_recompute's cooperative launch at 1024 and 4096, the streamed resolve at 4096
    cases += [("matrix_recompute", "clustered", 1024, False), ("matrix_recompute", "clustered", 4096, False),
              ("hard_fused", "clustered", 4096, True), ("hard_fused", "uniform", 4096, True)]
if "matrix_coop" in which:  # the cooperative launch from 4096 on (1024-thread blocks)
    cases += [("matrix_recompute", "clustered", 4096, False), ("matrix_recompute", "clustered", 8192, False)]

for name, scenario, n, padded in cases:
    bs = datasets.generate(scenario, n, seed=0).to(dev)
    if name == "hard_fused":
        call = lambda: hf.hard_fused_cuda(bs.boxes, bs.scores, iou_threshold=0.5, padded=padded)  # noqa: E731
    else:
        call = lambda: mr.matrix_recompute_cuda_path(bs.boxes, bs.scores, None, "gaussian", 0.5, 0.05, padded)  # noqa: E731
    call()
    torch.cuda.synchronize()
    print("case", name, scenario, n, "padded" if padded else "eager", flush=True)
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
