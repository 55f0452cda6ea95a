"""Eager B=1 batched_nms_from_head, back-to-back calls on the GPU (sync at block ends), for the tree argv[1]."""
import sys, time, statistics, importlib.util
import os
tree = sys.argv[1] if sys.argv[1] == "HEAD" else os.path.abspath(sys.argv[1])
if tree != "HEAD":
    sys.path.insert(0, tree)
    spec = importlib.util.spec_from_file_location("nmsbench.variants", tree + "/implementations/__init__.py",
                                                  submodule_search_locations=[tree + "/implementations"])
    import nmsbench
    assert nmsbench.__file__.startswith(tree), nmsbench.__file__
    mod = importlib.util.module_from_spec(spec); sys.modules["nmsbench.variants"] = mod; spec.loader.exec_module(mod)
import torch, nmsbench
from nmsbench.pipeline_bench import load_source
from nmsbench.variants import batched_nms as backend
print("backend", backend.__file__)
if "prof" in sys.argv[2:]:
    from torch.autograd.profiler import profile
    with profile(): pass
out = []
for source, layout in (("synthetic", "yolov5"), ("synthetic_yolov8", "yolov8")):
    raw = torch.from_numpy(load_source(source, 1, 0)[0]).cuda()
    call = lambda: nmsbench.batched_nms_from_head(raw, layout=layout, iou_threshold=0.45, score_threshold=0.25,
                                                 max_output_boxes=300)
    for _ in range(1000): call()
    torch.cuda.synchronize()
    blocks = []
    for _ in range(9):
        t = time.perf_counter()
        for _ in range(3000): call()
        torch.cuda.synchronize()
        blocks.append((time.perf_counter() - t) / 3000 * 1e6)
    r = call(); n = int(r.num_detections[0])
    out.append(f"{layout} median {statistics.median(blocks):.2f} best {min(blocks):.2f} dets {n}")
print(tree, sys.argv[2:], " | ".join(out))
