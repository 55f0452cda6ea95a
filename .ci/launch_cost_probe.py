"""What one kernel launch costs the host, by kernel: each op's launches are recorded
once (arguments, grid, shared memory), then replayed 500 times, each timed alone with
perf_counter around it and a stream synchronization after it (not timed): the packing
(pack_arguments, the pointer array, struct.pack_into) and the driver's launch call apart.
Medians in µs. Run on the device, from the repository root: python3 .ci/launch_cost_probe.py"""
import statistics
import struct
import time

import torch
from cupy_backends.cuda.api import driver, runtime

from nmsbench import datasets
from nmsbench.variants import _cuda
from nmsbench.variants import hard_fused as hf
from nmsbench.variants import matrix_recompute as mr

RECORDED = []
real_launch = _cuda._launch


def recording_launch(*args, **kwargs):
    RECORDED.append((args, kwargs))
    real_launch(*args, **kwargs)


def main():
    cases = [("hard_fused", 64), ("hard_fused", 512), ("hard_fused", 4096), ("matrix_recompute", 64),
             ("matrix_recompute", 1024), ("matrix_recompute", 4096)]
    for name, n in cases:
        bs = datasets.generate("clustered", n, seed=0).to("cuda")
        if name == "hard_fused":
            def op():
                return hf.hard_fused_cuda(bs.boxes, bs.scores, iou_threshold=0.5)
        else:
            def op():
                return mr.matrix_recompute_cuda(bs.boxes, bs.scores, iou_threshold=0.5, kernel="gaussian", sigma=0.5,
                                                score_threshold=0.05)
        op()
        RECORDED.clear()
        _cuda._launch = recording_launch
        keep_alive = op()  # the recorded addresses point into its memory
        _cuda._launch = real_launch
        stream = torch.cuda.current_stream().cuda_stream
        for k, (args, kwargs) in enumerate(RECORDED):
            function_ptr, grid, block, kernel_args, shared_mem, _stream, *rest = args
            cooperative = rest[0] if rest else kwargs.get("cooperative", False)
            pack, launch, whole = [], [], []
            buffer = _cuda._launch_buffer
            gx, gy, gz = (*grid, 1, 1)[:3]
            bx, by, bz = (*block, 1, 1)[:3]
            for _ in range(500):
                t0 = time.perf_counter_ns()
                codes, values = _cuda.pack_arguments(kernel_args)
                pointers = buffer.pointer_array(codes)
                struct.pack_into("@" + codes, buffer.values, 0, *values)
                t1 = time.perf_counter_ns()
                if cooperative:
                    driver.launchCooperativeKernel(function_ptr, gx, gy, gz, bx, by, bz, shared_mem, stream, pointers)
                else:
                    driver.launchKernel(function_ptr, gx, gy, gz, bx, by, bz, shared_mem, stream, pointers, 0)
                t2 = time.perf_counter_ns()
                runtime.streamSynchronize(stream)
                t3 = time.perf_counter_ns()
                real_launch(function_ptr, grid, block, kernel_args, shared_mem, stream, cooperative)
                t4 = time.perf_counter_ns()
                runtime.streamSynchronize(stream)
                pack.append((t1 - t0) / 1e3)
                launch.append((t2 - t1) / 1e3)
                whole.append((t4 - t3) / 1e3)
            print(f"{name:16s} n={n:5d} launch {k} args={len(kernel_args):2d} shared={shared_mem:6d} "
                  f"cooperative={int(bool(cooperative))} pack={statistics.median(pack):5.2f} "
                  f"driver={statistics.median(launch):5.2f} _launch={statistics.median(whole):5.2f}", flush=True)
        del keep_alive


if __name__ == "__main__":
    main()
