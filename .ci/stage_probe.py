"""matrix_fused / bitmask_two_phase cost by stage: wall time of the op cut after each stage."""
import time, torch, numpy as np
from nmsbench import datasets
from nmsbench.variants import matrix_fused as mf, bitmask_two_phase as tp
from nmsbench.variants._cuda import on_torch_stream, blocks
dev = torch.device("cuda")
def wall(f, reps):
    f(); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(reps): f()
    torch.cuda.synchronize(); return 1e6 * (time.perf_counter() - t) / reps
def fused(b, s, stop):
    n = b.shape[0]; ss, order = torch.sort(s, descending=True, stable=True)
    if stop == 0: return
    tiles = blocks(n, 16); sb = b.index_select(0, order).contiguous()
    ti = torch.empty(tiles*(tiles+1)//2*256, device=dev); part = torch.empty((n, tiles), device=dev)
    key = torch.empty(n, dtype=torch.int64, device=dev); fin = torch.empty(n, device=dev)
    with on_torch_stream(dev) as launch:
        launch(mf.CUDA_MODULE.get("iou_tile_kernel", torch.float32, dev), (tiles, tiles), (16, 16), (sb, None, n, tiles, mf._ordered_key(0.0), ti, part, key))
        if stop == 1: return
        lv, ln = 0, tiles
        while ln > 1:
            launch(mf.CUDA_MODULE.get("max_reduce_pass", torch.float32, dev), (tiles,), (16, 16), (part, n, tiles, lv)); lv, ln = lv + 1, blocks(ln, 16)
        if stop == 2: return
        launch(mf.CUDA_MODULE.get("decay_kernel", torch.float32, dev), (tiles, tiles), (16, 16), (ti, part, n, tiles, False, key))
        if stop == 3: return
        launch(mf.CUDA_MODULE.get("final_score_kernel", torch.float32, dev), (blocks(n, 256),), (256,), (ss, order, key, n, False, np.float64(0.5), fin))
    if stop == 4: return
    f, idx = torch.sort(fin, descending=True, stable=True); k = int((f >= 0.05).sum()); idx[:k]; f[:k]
for n in (64, 2048, 8192):
    bs = datasets.generate("clustered", n, seed=0).to("cuda")
    reps = 300 if n <= 2048 else 40
    print(n, "fused full", round(wall(lambda: mf.matrix_fused_cuda(bs.boxes, bs.scores, iou_threshold=0.5, labels=None, kernel="gaussian", sigma=0.5, score_threshold=0.05), reps)), flush=True)
    for stop, label in enumerate(["sort", "+iou_tile", "+max_reduce", "+decay", "+final", "+sort,count,sync"]):
        print(n, "fused up to", label, round(wall(lambda: fused(bs.boxes, bs.scores, stop), reps)), flush=True)
    print(n, "naive", round(wall(lambda: __import__("nmsbench").variants.matrix_naive.matrix_naive(bs.boxes, bs.scores, iou_threshold=0.5, kernel="gaussian", sigma=0.5, score_threshold=0.05), reps)), flush=True)
    print(n, "two_phase", round(wall(lambda: tp.bitmask_two_phase_cuda(bs.boxes, bs.scores, iou_threshold=0.5), reps)), "torchvision", round(wall(lambda: __import__("torchvision").ops.nms(bs.boxes, bs.scores, 0.5), reps)), flush=True)
    sc = bs.scores
    print(n, "torch.sort", round(wall(lambda: torch.sort(sc, descending=True, stable=True), reps)),
          "index_select", round(wall(lambda: bs.boxes.index_select(0, torch.arange(n, device=dev)), reps)),
          "sum.item", round(wall(lambda: int((sc >= 0.05).sum()), reps)),
          "empty", round(wall(lambda: torch.empty(n, device=dev), reps)), flush=True)
