"""Eager batch-of-one calls of nmsbench.batched_nms_from_head, back to back on the GPU.

Usage: ``python eager_b1_ab.py TREE [prof]`` with TREE ``HEAD`` (the installed nmsbench) or
a folder holding another commit's ``nmsbench/`` and ``implementations/`` (``git archive``),
loaded in its place; ``prof`` enters torch.profiler once first. Per synthetic head
(YOLOv5, YOLOv8): 1,000 calls to warm, then nine blocks of 3,000 calls, a sync at each
block's end; prints the median and best block in µs a call and the detections.
"""

import importlib.util
import os
import statistics
import sys
import time

TREE = sys.argv[1] if sys.argv[1] == "HEAD" else os.path.abspath(sys.argv[1])
if TREE != "HEAD":
    sys.path.insert(0, TREE)
    spec = importlib.util.spec_from_file_location("nmsbench.variants", TREE + "/implementations/__init__.py",
                                                  submodule_search_locations=[TREE + "/implementations"])
    import nmsbench

    assert nmsbench.__file__.startswith(TREE), nmsbench.__file__
    variants = importlib.util.module_from_spec(spec)
    sys.modules["nmsbench.variants"] = variants
    spec.loader.exec_module(variants)

import torch  # noqa: E402

import nmsbench  # noqa: E402
from nmsbench.pipeline_bench import load_source  # noqa: E402


def main() -> None:
    if "prof" in sys.argv[2:]:
        from torch.autograd.profiler import profile

        with profile():
            pass
    out = []
    for source, layout in (("synthetic", "yolov5"), ("synthetic_yolov8", "yolov8")):
        raw = torch.from_numpy(load_source(source, 1, 0)[0]).cuda()

        def call():
            return nmsbench.batched_nms_from_head(raw, layout=layout, iou_threshold=0.45, score_threshold=0.25,
                                                  max_output_boxes=300)

        for _ in range(1000):
            call()
        torch.cuda.synchronize()
        blocks = []
        for _ in range(9):
            start = time.perf_counter()
            for _ in range(3000):
                call()
            torch.cuda.synchronize()
            blocks.append((time.perf_counter() - start) / 3000 * 1e6)
        detections = int(call().num_detections[0])
        out.append(f"{layout} median {statistics.median(blocks):.2f} best {min(blocks):.2f} dets {detections}")
    print(TREE, sys.argv[2:], " | ".join(out))


if __name__ == "__main__":
    main()
