import time, torch, numpy as np, cupy, nmsbench
from nmsbench import datasets
from nmsbench.variants import _cuda, bitmask_two_phase as btp, matrix_fused as mf
dev = torch.device("cuda")
def bench(label, f, reps=2000):
    f(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps): f()
    torch.cuda.synchronize()
    print(f"{label:45s} {1e6*(time.perf_counter()-t)/reps:9.1f} us", flush=True)
bs = datasets.generate("uniform", 64, seed=0).to("cuda")
for name in ["torchvision", "allpairs", "bitmask_classic", "bitmask_two_phase", "matrix_fused", "matrix_naive"]:
    bench(f"run_nms {name} n=64", lambda: nmsbench.run_nms(name, bs.boxes, bs.scores, 0.5), 300)
impl = nmsbench.implementations()
fn_tp = impl["bitmask_two_phase"].backend("cuda").fn
bench("two_phase backend fn direct n=64", lambda: fn_tp(bs.boxes, bs.scores, iou_threshold=0.5), 300)
bench("get_function", lambda: btp.CUDA_MODULE.get("ballot_mask_kernel", torch.float32, dev))
k = btp.CUDA_MODULE.get("ballot_mask_kernel", torch.float32, dev)
mask = torch.zeros((64, 2), dtype=torch.int32, device="cuda")
args = (bs.boxes, None, 64, 2, np.float64(0.5), mask)
bench("launch() full", lambda: _cuda.launch(k, (8,), (256,), args))
conv = tuple(_cuda._argument(a) for a in args)
bench("raw fn call, no ctx", lambda: k((8,), (256,), conv))
s = _cuda._streams[torch.cuda.current_stream().cuda_stream]
def with_stream():
    with s: k((8,), (256,), conv)
bench("raw fn call in stream ctx", with_stream)
def with_dev():
    with cupy.cuda.Device(0): k((8,), (256,), conv)
bench("raw fn call in Device ctx", with_dev)
bench("argument conversion", lambda: tuple(_cuda._argument(a) for a in args))
bench("torch.cuda.current_stream", lambda: torch.cuda.current_stream())
bench("score_order", lambda: torch.sort(bs.scores, descending=True, stable=True))
bench("torch.zeros", lambda: torch.zeros((64,2), dtype=torch.int32, device="cuda"))
# stage times at 8192 uniform / clustered for two_phase
for scen in ["uniform", "clustered"]:
    b = datasets.generate(scen, 8192, seed=0).to("cuda")
    order = torch.sort(b.scores, descending=True, stable=True).indices
    sb = b.boxes[order].contiguous(); n=8192; words=256
    m = torch.zeros((n, words), dtype=torch.int32, device="cuda")
    keep = torch.empty(n, dtype=torch.int64, device="cuda"); cnt = torch.empty(1, dtype=torch.int32, device="cuda")
    k1 = btp.CUDA_MODULE.get("ballot_mask_kernel", torch.float32, dev); k2 = btp.CUDA_MODULE.get("greedy_resolve_kernel", None, dev)
    def ph1(): _cuda.launch(k1, (1024,), (256,), (sb, None, n, words, np.float64(0.5), m))
    def ph2(): _cuda.launch(k2, (1,), (256,), (m, order, n, words, keep, cnt), shared_mem=words*4)
    for label, f in (("phase1", ph1), ("phase2", ph2)):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        f(); torch.cuda.synchronize(); e0.record()
        for _ in range(20): f()
        e1.record(); torch.cuda.synchronize()
        print(f"{scen} 8192 {label} device {1000*e0.elapsed_time(e1)/20:.1f} us kept {int(cnt.item())}", flush=True)
    tv = lambda: nmsbench.run_nms("torchvision", b.boxes, b.scores, 0.5)
    bench(f"{scen} 8192 torchvision wall", tv, 50)
    bench(f"{scen} 8192 two_phase wall", lambda: nmsbench.run_nms("bitmask_two_phase", b.boxes, b.scores, 0.5), 50)
    bench(f"{scen} 8192 matrix_fused wall", lambda: nmsbench.run_nms("matrix_fused", b.boxes, b.scores, 0.5), 50)
