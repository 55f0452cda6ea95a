"""matrix_fused / bitmask_two_phase cost by stage: wall time of the op cut after each stage."""
import time, torch, numpy as np
from nmsbench import datasets
from nmsbench.variants import matrix_fused as mf, bitmask_two_phase as tp, matrix_naive as mn
from nmsbench.variants._cuda import Scratch, blocks, on_torch_stream, rank_by_score
dev = torch.device("cuda")
def wall(f, reps):
    f(); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(reps): f()
    torch.cuda.synchronize(); return 1e6 * (time.perf_counter() - t) / reps
def fused(b, s, stop):
    n = b.shape[0]; tiles = blocks(n, 16); packed = tiles * (tiles + 1) // 2; splits = min(32, blocks(tiles, 16))
    kept = torch.empty(n + 1, dtype=torch.int64, device=dev); ks = torch.empty(n, device=dev)
    sc = Scratch(dev, tile_iou=(packed * 256, torch.float32), partial=(n * tiles, torch.float32), split_min=(splits * n, torch.float64),
                 splits_done=(tiles, torch.int32), final_by_input=(n, torch.float32))
    get = lambda k: mf.CUDA_MODULE.get(k, torch.float32, dev)
    with on_torch_stream(dev) as launch:
        order, r = rank_by_score(launch, b, s, None, with_scores=True)
        if stop == 0: return
        launch(get("iou_tile_kernel"), (blocks(packed, 8),), (16, 16), (r.sorted_boxes, None, n, np.int64(packed), sc.tile_iou, sc.partial))
        if stop == 1: return
        launch(get("max_reduce_kernel"), (tiles,), (16, 16), (sc.partial, n, sc.splits_done, kept))
        if stop == 2: return
        launch(get("decay_kernel"), (splits, tiles), (16, 16), (sc.tile_iou, sc.partial, r.sorted_scores, order, n, tiles, False, np.float64(0.5), sc.split_min, sc.splits_done, sc.final_by_input))
        if stop == 3: return
        launch(get("select_kernel"), (blocks(n, 32),), (256,), (sc.final_by_input, n, np.float64(0.05), kept, ks))
    if stop == 4: return
    c = int(kept[n]); kept[:c]; ks[:c]
for n in (64, 2048, 8192):
    bs = datasets.generate("clustered", n, seed=0).to("cuda")
    reps = 300 if n <= 2048 else 40
    print(n, "fused full", round(wall(lambda: mf.matrix_fused_cuda(bs.boxes, bs.scores, iou_threshold=0.5, labels=None, kernel="gaussian", sigma=0.5, score_threshold=0.05), reps)), flush=True)
    for stop, label in enumerate(["rank", "+iou_tile", "+max_reduce", "+decay", "+select", "+count sync"]):
        print(n, "fused up to", label, round(wall(lambda: fused(bs.boxes, bs.scores, stop), reps)), flush=True)
    print(n, "naive", round(wall(lambda: mn.matrix_naive(bs.boxes, bs.scores, iou_threshold=0.5, kernel="gaussian", sigma=0.5, score_threshold=0.05), reps)), flush=True)
    print(n, "two_phase", round(wall(lambda: tp.bitmask_two_phase_cuda(bs.boxes, bs.scores, iou_threshold=0.5), reps)), "torchvision", round(wall(lambda: __import__("torchvision").ops.nms(bs.boxes, bs.scores, 0.5), reps)), flush=True)
    sc = bs.scores
    print(n, "torch.sort", round(wall(lambda: torch.sort(sc, descending=True, stable=True), reps)),
          "index_select", round(wall(lambda: bs.boxes.index_select(0, torch.arange(n, device=dev)), reps)),
          "sum.item", round(wall(lambda: int((sc >= 0.05).sum()), reps)),
          "empty", round(wall(lambda: torch.empty(n, device=dev), reps)), flush=True)

# Host-side costs of the bridge at N = 64 (the GPU is idle there; the host is the bottleneck).
import cupy
bs = datasets.generate("clustered", 64, seed=0).to("cuda")
fn = mf.CUDA_MODULE.get("max_reduce_kernel", torch.float32, dev)
part = torch.zeros(64, device=dev); done = torch.zeros(4, dtype=torch.int32, device=dev); kp = torch.zeros(2, dtype=torch.int64, device=dev)
args = (part, 1, done, kp)
def ctx_only():
    with on_torch_stream(dev) as launch: pass
def one_launch():
    with on_torch_stream(dev) as launch: launch(fn, (1,), (16, 16), args)
stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
def function_launch():
    fn((1,), (16, 16), (np.uint64(part.data_ptr()), np.int32(1), np.uint64(done.data_ptr()), np.uint64(kp.data_ptr())), 0, stream)
print("context", round(wall(ctx_only, 2000), 1), "context+launch", round(wall(one_launch, 2000), 1),
      "module.get", round(wall(lambda: mf.CUDA_MODULE.get("max_reduce_kernel", torch.float32, dev), 2000), 1),
      "current_stream", round(wall(lambda: torch.cuda.current_stream(dev), 2000), 1), flush=True)
try:
    print("Function launch with stream, no context", round(wall(function_launch, 2000), 1), flush=True)
except Exception as e:
    print("Function launch failed", repr(e))
