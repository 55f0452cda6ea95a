"""The Python cost of one eager hard_fused / matrix_recompute call, without a GPU: every
CUDA call is stubbed (kernels found, launches packing their arguments and returning,
the count ready at once) and the tensors stay on the CPU, so what is timed is the
wrapper's own host work: choosing the path, allocating, packing the arguments, building
the result. Besides the whole call, the medians of what lies on the critical path of a
real call: "pre", from the call to the end of its first launch (the GPU idles), and
"post", from the wait's return to the call's (the GPU is done); work between the
launches and the wait overlaps the GPU. Run anywhere: python3 .ci/host_python_cost.py"""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import implementations._cuda as cuda  # noqa: E402
import implementations.hard_fused as hf  # noqa: E402
import implementations.matrix_recompute as mr  # noqa: E402


class StubKernel:
    ptr = 1


STAMPS = []  # ("launched" | "waited", perf_counter_ns)


class StubCount:
    address = 0

    def wait(self, device):
        STAMPS.append(("waited", time.perf_counter_ns()))
        return 1


class StubStream:
    def __init__(self, device):
        pass

    def __enter__(self):
        def launch(fn, grid, block, args, shared_mem=0, cooperative=False):
            cuda.pack_arguments(args)  # the packing is host work of every real launch
            STAMPS.append(("launched", time.perf_counter_ns()))

        launch.stream = 0
        return launch

    def __exit__(self, *exc_info):
        pass


def packed_compiled_launch(self, stream, *values):
    self._pack(cuda._launch_buffer.values, 0, *values)  # the packing is host work of every real launch
    STAMPS.append(("launched", time.perf_counter_ns()))


def stub_cuda():
    barrier = torch.zeros(2, dtype=torch.int32)
    cuda.CudaModule.get = lambda self, name, dtype, device: StubKernel()
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_properties = lambda index: type("Properties", (), {"multi_processor_count": 132})
    hf.stream_counters = lambda index, stream, count: barrier.data_ptr()
    cuda.CompiledLaunch.__call__ = packed_compiled_launch
    for module in (mr, hf):
        module.on_torch_stream = StubStream
        module.host_count = lambda device: StubCount()
        module.grid_barrier_address = lambda index, stream: barrier.data_ptr()
        module._current_stream = lambda device: (0, 0)
        module.opted_in_shared_limit = lambda kernel, device: 227 * 1024
    mr.cooperative_grid = lambda n, dtype, device, labels=False: cuda.blocks(n, mr.cooperative_threads(n, dtype) // 32)
    hf.mid_grid = lambda n, dtype, device: cuda.blocks(n, hf.MID_THREADS // 32)
    mr._resident_blocks = lambda dtype, device, threads, shared: 132 if shared <= 227 * 1024 else 0


def per_call_us(call, reps=20000):
    """(whole call, pre, post) in µs: the mean of a plain loop, then stamped medians."""
    call()
    start = time.perf_counter()
    for _ in range(reps):
        call()
    whole = 1e6 * (time.perf_counter() - start) / reps
    pre, post = [], []
    for _ in range(2000):
        STAMPS.clear()
        t0 = time.perf_counter_ns()
        call()
        t1 = time.perf_counter_ns()
        pre.append(next(t for k, t in STAMPS if k == "launched") - t0)
        post.append(t1 - next(t for k, t in STAMPS if k == "waited"))
    return whole, statistics.median(pre) / 1e3, statistics.median(post) / 1e3


def main():
    stub_cuda()
    for n in (64, 512, 1024, 4096, 8192):
        boxes, scores = torch.rand(n, 4), torch.rand(n)
        matrix = per_call_us(lambda: mr.matrix_recompute_cuda(boxes, scores, iou_threshold=0.5, kernel="gaussian",
                                                              sigma=2.0, score_threshold=0.05))
        hard = per_call_us(lambda: hf.hard_fused_cuda(boxes, scores, iou_threshold=0.5))
        print(f"N = {n}: matrix_recompute ({mr.choose_path(n, torch.float32, False, torch.device('cuda'))}) "
              f"{matrix[0]:.1f} us (pre {matrix[1]:.1f}, post {matrix[2]:.1f}), hard_fused {hard[0]:.1f} us "
              f"(pre {hard[1]:.1f}, post {hard[2]:.1f}) of Python per eager call", flush=True)


if __name__ == "__main__":
    main()
