"""One small run of each of our CUDA kernels, for compute-sanitizer (see .ci/gpu).

What runs comes from the registry: every implementation whose CUDA backend launches our
kernels (``nmsbench.cuda.kernels.kernel_implementations``). A backend with a table of
paths (``nmsbench.cuda.path_table(name)``: hard_fused, matrix_recompute, ...) runs every path, forced with ``path=``, at every
size below that the path takes, eager and padded; the others run at a few sizes, padded
too where graph safe, all through ``nmsbench.run_nms`` (its input check included, and a
NaN box that it must report); forced paths also with ``check_values``. Sizes are
multiples of 16, 32 or 64 and not, with and without labels, float32 and float16;
rank.cu's merge runs through the largest sizes (from 8193 boxes) and at small sizes
directly. Then the pipelines whose kernels are ours.
Arguments pick what to run (default: everything), e.g. `hard_fused` or `pipelines`;
SANITIZE_SIZES=31,1500 runs those sizes only (racecheck is slow: .ci/gpu splits it over
processes); `--groups` prints the split .ci/gpu uses, one "name [sizes]" a line.
"""

import os
import sys

import torch

import nmsbench
from nmsbench import datasets
from nmsbench.cuda import path_table
from nmsbench.cuda.kernels import holds_cuda_module, kernel_implementations

SIZES = {"hard_fused": (31, 100, 257, 1000, 1500, 4500), "matrix_recompute": (31, 64, 100, 1000, 1025, 3000)}
OTHER_SIZES = (31, 64, 100, 1000)
CASES = ((1, torch.float32), (3, torch.float32), (3, torch.float16))  # (classes, dtype)
PARAMS = {"matrix": [{"kernel": "gaussian", "sigma": 0.5, "score_threshold": 0.05},
                     {"kernel": "linear", "sigma": 0.5, "score_threshold": 0.05}],
          "soft": [{"kernel": "gaussian", "sigma": 0.5, "score_threshold": 0.001},
                   {"kernel": "linear", "sigma": 0.5, "score_threshold": 0.0}],
          "diou": [{"beta": 1.0}, {"beta": 0.6}]}  # beta 0.6: the kernels' pow
KERNEL_IMPLS = kernel_implementations()
if sys.argv[1:] == ["--groups"]:  # one process each: the implementations with paths by size, the rest together
    rest = [name for name in KERNEL_IMPLS if name not in SIZES] + ["pipelines", "overlap_graph"]
    for name in KERNEL_IMPLS:
        if name in SIZES:
            print(name, ",".join(map(str, SIZES[name])))
    print(" ".join(rest))
    sys.exit(0)
SELECTED = sys.argv[1:] or KERNEL_IMPLS + ["pipelines", "overlap_graph"]
ONLY = tuple(int(v) for v in os.environ["SANITIZE_SIZES"].split(",")) if os.environ.get("SANITIZE_SIZES") else None


for name in (n for n in KERNEL_IMPLS if n in SELECTED):
    impl = nmsbench.implementations()[name]
    backend, table = impl.backend("cuda"), path_table(name)  # the implementation's table of paths, if any
    sizes = SIZES.get(name, OTHER_SIZES)
    for n in (s for s in sizes if ONLY is None or s in ONLY):
        for classes, dtype in CASES:
            boxes = datasets.generate("clustered", n, seed=n, classes=classes).to("cuda", dtype)
            device, labels = boxes.boxes.device, boxes.labels is not None
            for params in PARAMS.get(impl.family, [{}]):
                # through the public call (its input check's kernel too), on the path the chooser picks
                for padded in (False, True) if backend.graph_safe else (False,):
                    nmsbench.run_nms(name, boxes.boxes, boxes.scores, 0.5, labels=boxes.labels,
                                     **({"padded": True} if padded else {}), **params)
                bad = boxes.boxes.clone()
                bad[n // 2, 0] = float("nan")  # the value check's report of a bad row (in the op's launch or alone)
                try:
                    nmsbench.run_nms(name, bad, boxes.scores, 0.5, labels=boxes.labels, **params)
                except ValueError:
                    pass
                else:
                    raise SystemExit(f"{name} at n={n} took a NaN box")
                if table is None:
                    continue
                for path in table:
                    for padded in (False, True) if backend.graph_safe else (False,):
                        if table.refusal(path, n, dtype, padded, device, labels) is None:
                            for checked in (False, True) if backend.checks_values and not padded else (False,):
                                backend.fn(boxes.boxes, boxes.scores, iou_threshold=0.5, labels=boxes.labels,
                                           path=path, **({"padded": True} if padded else {}), **params,
                                           **({"check_values": True} if checked else {}))
    # rank.cu's merge (every kernel backend's rank from 8193 boxes), at small sizes, in one process of a split
    if name == "hard_fused" and (ONLY is None or min(sizes) in ONLY):
        from nmsbench.cuda import input_verdict, on_torch_stream, rank_by_score

        for n in (1, 300, 5000):
            for dtype in (torch.float32, torch.float16, torch.float64):
                boxes = datasets.generate("degenerate", n, seed=n, classes=3).to("cuda", dtype)
                with on_torch_stream(boxes.boxes.device) as launch:
                    rank_by_score(launch, boxes.boxes, boxes.scores, boxes.labels, with_scores=True, path="merge",
                                  verdict=input_verdict(boxes.boxes.device))
    torch.cuda.synchronize()
    print(name, "ran", flush=True)

# The registered pipelines whose CUDA build is ours (its module holds a CudaModule), on the recorded raw rows.
if "pipelines" in SELECTED:
    from nmsbench.datasets import real
    from nmsbench.pipeline import PipelineConfig, pipelines, run_pipeline

    raw, _, size = real.real_raw(2)
    for name, pipe in pipelines().items():
        if "cuda" not in pipe.devices or not holds_cuda_module(pipe.build.__module__):
            continue
        for conf in (0.25, 0.001):
            run_pipeline(name, torch.from_numpy(raw).cuda(), PipelineConfig(conf, input_size=(size, size)), "cuda")
        torch.cuda.synchronize()
        print(name, "ran", flush=True)

# The overlap graph (implementations/overlap_graph.py): its density estimate, its
# rows both ways, greedy NMS and Matrix NMS on them, constant density and everything overlapping.
if "overlap_graph" in SELECTED:
    from nmsbench.variants import overlap_graph
    from nmsbench.cuda import on_torch_stream

    for scenario, n, canvas in (("uniform", 3000, "density"), ("clustered", 3000, "density"), ("crowd", 500, "fixed")):
        for classes, dtype in CASES:
            boxes = datasets.generate(scenario, n, seed=n, classes=classes, canvas=canvas).to("cuda", dtype)
            overlap_graph.greedy_on_graph(boxes.boxes, boxes.scores, 0.5, boxes.labels, max_tests=1 << 40)
            overlap_graph.greedy_on_graph(boxes.boxes, boxes.scores, 0.5, boxes.labels, slots=4)  # overflow: two passes
            for kernel in ("gaussian", "linear"):
                overlap_graph.matrix_on_graph(boxes.boxes, boxes.scores, boxes.labels, kernel=kernel, sigma=0.5,
                                              score_threshold=0.05)
            grid = overlap_graph.device_grid(boxes.boxes, labels=boxes.labels)
            with on_torch_stream(boxes.boxes.device) as launch:
                overlap_graph.graph_rows(launch, grid, n, 0.0, False, boxes.boxes.device)
    torch.cuda.synchronize()
    print("overlap_graph ran", flush=True)
