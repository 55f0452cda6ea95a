"""Graph replay (back to back, a sync at each block's end) and CUPTI kernel times of the op on synthetic
YOLOv5 heads, B = 1, 8, 32, 64, for the tree argv[1]: HEAD (the installed checkout) or a copy of an
older tree's nmsbench and implementations (git archive <commit> nmsbench implementations | tar -x -C
<dir>). Run from the repository root, one process a tree, the trees alternated:

    python results/archive/gpu-check-20261206-h100-d/graph_ab.py <dir>
    python results/archive/gpu-check-20261206-h100-d/graph_ab.py HEAD

Prints a line a tree: each B's replay µs (median and best of nine blocks), the GPU µs a replay
(CUPTI: decode, nms_kernel, memset) and a digest of the outputs (equal digests: equal detections).
"""

import hashlib
import importlib.util
import os
import statistics
import sys
import time


def load_tree(tree: str) -> None:
    """Import nmsbench and its variants from an older tree's copy instead of the checkout."""
    sys.path.insert(0, tree)
    spec = importlib.util.spec_from_file_location("nmsbench.variants", tree + "/implementations/__init__.py",
                                                  submodule_search_locations=[tree + "/implementations"])
    import nmsbench

    assert nmsbench.__file__.startswith(tree), nmsbench.__file__
    module = importlib.util.module_from_spec(spec)
    sys.modules["nmsbench.variants"] = module
    spec.loader.exec_module(module)


def main() -> None:
    tree = sys.argv[1] if sys.argv[1] == "HEAD" else os.path.abspath(sys.argv[1])
    if tree != "HEAD":
        load_tree(tree)
    import torch
    from torch.autograd.profiler import profile

    import nmsbench
    from nmsbench.pipeline_bench import load_source

    sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
    from batched_op import kernel_times

    with profile():
        pass  # CUPTI before the first capture
    out = []
    for batch in (1, 8, 32, 64):
        raw = torch.from_numpy(load_source("synthetic", batch, 0)[0]).cuda()

        def call():
            return nmsbench.batched_nms_from_head(raw, layout="yolov5", iou_threshold=0.45, score_threshold=0.25,
                                                  max_output_boxes=300)

        for _ in range(20):
            call()
        torch.cuda.synchronize()
        with torch.cuda.stream(torch.cuda.Stream()):
            for _ in range(3):
                call()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            result = call()
        for _ in range(50):
            graph.replay()
        torch.cuda.synchronize()
        reps = max(50, int(20000 / (batch + 10)))
        blocks = []
        for _ in range(9):
            start = time.perf_counter()
            for _ in range(reps):
                graph.replay()
            torch.cuda.synchronize()
            blocks.append((time.perf_counter() - start) / reps * 1e6)
        kt = kernel_times(graph.replay)
        digest = hashlib.sha1(b"".join(x.cpu().numpy().tobytes() for x in result[:5])).hexdigest()[:10]
        gpu = kt["decode_us"] + kt["nms_us"] + kt["fused_us"] + kt["memset_us"]
        out.append(f"B={batch} replay {statistics.median(blocks):.2f} (best {min(blocks):.2f}) gpu {gpu:.2f} "
                   f"decode {kt['decode_us']} nms {kt['nms_us']} dets {int(result[0].sum())} {digest}")
    print(os.path.basename(tree), " | ".join(out))


if __name__ == "__main__":
    main()
