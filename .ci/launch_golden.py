"""Without a GPU: every launch hard_fused and matrix_recompute make, recorded with the CUDA
calls stubbed (kernel, grid, block, argument codes and values, device addresses made
relative to their allocation, shared memory, cooperative or not) and their results, over
468 inputs (sizes on every path, three dtypes, labels or not, padded or not). Prints a
digest: a refactor of the host path that changes no launch keeps it.
Usage: python3 .ci/launch_golden.py TREE OUT.json   (TREE: a checkout's root)"""
import hashlib
import json
import sys
sys.path.insert(0, sys.argv[1])
import os  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import nmsbench.cuda as cuda  # the bridge (nmsbench/cuda/)
import implementations.hard_fused.cuda as hf  # the host sides of the two packages
import implementations.matrix_recompute.cuda as mr

records = []
allocs = []
real_empty = torch.empty
def tracking_empty(*a, **k):
    k.pop("device", None)
    t = real_empty(*a, **k)
    allocs.append(t)
    return t
torch.empty = tracking_empty
real_full = torch.full
def rel(v):
    for i, t in enumerate(allocs):
        base, size = t.data_ptr(), t.numel() * t.element_size()
        if base <= v < base + max(size, 1):
            return f"a{i}+{v - base}"
    return "ext" if v > 1 << 20 else v
class K:
    def __init__(self, name):
        self.name, self.ptr = name, 1
cuda.CudaModule.get = lambda self, name, dtype, device: K(f"{os.path.basename(self.cu_file)}:{name}:{dtype}")
class Count:
    address = np.uint64(12345)
    def wait(self, device): return 1  # <= every n that waits
def shown(codes, values):  # an argument as recorded: addresses relative to their allocation
    return [str(rel(int(v))) if c == "Q" else str(int(v)) if c in "iI" else str(v) for c, v in zip(codes, values)]
class Stream:
    def __init__(self, device): pass
    def __enter__(self):
        def launch(fn, grid, block, args, shared_mem=0, cooperative=False):
            codes, values = cuda.pack_arguments(args)
            records.append([fn.name, list(grid), list(block), codes, shown(codes, values), shared_mem, cooperative])
        launch.stream = 0
        return launch
    def __exit__(self, *e): pass
def record_compiled(self, stream, *values):  # CompiledLaunch (newer trees): the same record
    records.append([self.function.name, list(self.grid), list(self.block), self.codes, shown(self.codes, values), self.shared_mem,
                    self.cooperative])
cuda.CompiledLaunch.__call__ = record_compiled
barrier = torch.zeros(2, dtype=torch.int32)
for m in (mr, hf):
    m.on_torch_stream = Stream
    m.host_count = lambda device: Count()
    m.grid_barrier_state = lambda device: barrier
    m.grid_barrier_address = lambda index, stream: barrier.data_ptr()
    m._current_stream = lambda device: (0, 0)
    m.opted_in_shared_limit = lambda kernel, device: 227 * 1024
cuda.on_torch_stream = Stream
torch.cuda.current_device = lambda: 0
torch.cuda.get_device_properties = lambda index: type("Properties", (), {"multi_processor_count": 132})
counters = torch.zeros(12288, dtype=torch.int32)
hf.stream_counters = lambda index, stream, count: counters.data_ptr()
mr.cooperative_grid = lambda n, dtype, device, labels=False: mr.balanced_grid(cuda.blocks(n, mr.cooperative_threads(n, dtype) // 32),
                                                                             132 * (1 if n > 2048 else 2))
hf.mid_grid = lambda n, dtype, device: cuda.blocks(n, hf.MID_THREADS // 32)
if hasattr(mr, "_resident_blocks"):  # the mark slots' occupancy check (from b0110e2 on)
    mr._resident_blocks = lambda dtype, device, threads, shared: 132 if shared <= 227 * 1024 else 0
hf.staged_resolve_fits = lambda n, device: n <= 1024
torch.sort = lambda t, descending=True, stable=True: torch.return_types.sort((t, torch.arange(t.shape[0])))
out = []
for n in (0, 1, 31, 64, 97, 257, 512, 1000, 1025, 4096, 8192, 8193, 20000):
    for dtype in (torch.float32, torch.float64, torch.float16):
        for labels in (None, torch.zeros(n, dtype=torch.int64), torch.zeros(n, dtype=torch.int32)):
            for padded in (False, True):
                b, s = torch.rand(n, 4).to(dtype), torch.rand(n).to(dtype)
                for name, f in (("mr", lambda: mr.matrix_recompute_cuda(b, s, iou_threshold=0.5, labels=labels, kernel="gaussian",
                                                                        sigma=2.0, score_threshold=0.05, padded=padded)),
                                ("hf", lambda: hf.hard_fused_cuda(b, s, iou_threshold=0.5, labels=labels, padded=padded))):
                    allocs.clear()
                    records.clear()
                    allocs.extend([b, s, barrier, counters] + ([labels] if labels is not None else []))
                    try:
                        r = f()
                        res = [type(r).__name__] + [None if x is None else [list(x.shape), str(x.dtype), str(rel(x.data_ptr()))] for x in r]
                    except Exception as e:
                        res = ["error", type(e).__name__, str(e)]
                    out.append([name, n, str(dtype), labels is None or str(labels.dtype), padded, res, json.loads(json.dumps(records))])
text = json.dumps(out, sort_keys=True)
print(len(out), hashlib.sha1(text.encode()).hexdigest())
open(sys.argv[2], "w").write(text)
