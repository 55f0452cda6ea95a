"""hard_fused and matrix_recompute by stage, on the GPU alone: each stage is launched 20
times inside one captured CUDA graph and the replay is timed with CUDA events (so launch
and host costs drop out). Also the whole op: `wall` (eager, with its host sync) and
`graph` (padded), and torchvision's wall for the same input. Prints one line per number.
Run on the device: python3 .ci/stage_probe_ours.py [host] [hard] [matrix] [matrix_stages]
(default: host, hard, matrix)."""
import sys
import time

import numpy as np
import torch
import torchvision

import nmsbench
from nmsbench import datasets
from nmsbench.variants import hard_fused as hf
from nmsbench.variants import matrix_recompute as mr
from nmsbench.variants._cuda import blocks, on_torch_stream, rank_by_score
from probe_timers import captured_graph

dev = torch.device("cuda")
REPS = 20


def gpu_us(stage):
    """GPU time of one call of `stage`, from a graph of REPS calls (the best of 5 replays)."""
    graph = captured_graph(stage, REPS)
    graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        best = min(best, 1000 * start.elapsed_time(stop) / REPS)
    return best


def wall_us(f, reps=200):
    f()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            f()
        torch.cuda.synchronize()
        best = min(best, 1e6 * (time.perf_counter() - t) / reps)
    return best


def hard_stages(b, s, n):
    words = (n + 31) // 32
    out = torch.empty(n + 1, dtype=torch.int64, device=dev)
    outputs = (np.uint64(out.data_ptr()), np.uint64(out.data_ptr() + 8 * n), None)
    th = np.float64(0.5)
    with on_torch_stream(dev) as launch:
        order, ranked = rank_by_score(launch, b, s, None)
    mask = torch.empty((n, words), dtype=torch.int32, device=dev)
    stages = {}

    def rank():
        with on_torch_stream(dev) as launch:
            rank_by_score(launch, b, s, None)

    def sort_rank():
        o = torch.sort(s + 0.0, descending=True, stable=True).indices
        b.index_select(0, o)

    def mask_stage():
        with on_torch_stream(dev) as launch:
            hf.launch_tile_mask(launch, b.dtype, dev, ranked.sorted_boxes, None, n, th, mask)

    def seed_mask_stage():  # bitmask_two_phase's ballot mask (the same mask), for comparison
        from nmsbench.variants import bitmask_two_phase as b2

        with on_torch_stream(dev) as launch:
            launch(b2.CUDA_MODULE.get("ballot_mask_kernel", b.dtype, dev), (blocks(n, 8),), (256,),
                   (ranked.sorted_boxes, None, n, words, th, mask))

    def resolve():
        with on_torch_stream(dev) as launch:
            if words <= 32:
                hf.staged_resolve_fits(n, dev)
                launch(hf.CUDA_MODULE.get("staged_resolve_kernel", None, dev), (1,), (hf.STAGED_THREADS,),
                       (mask, order, n, words, *outputs), shared_mem=hf.staged_shared_bytes(n))
            else:
                kernel = hf.CUDA_MODULE.get("block_resolve_kernel", None, dev)
                hf.opted_in_shared_limit(kernel, dev)
                launch(kernel, (1,), (hf.RESOLVE_THREADS,), (mask, order, n, words, *outputs),
                       shared_mem=hf.block_resolve_shared_bytes(words))

    if n <= 8192:  # the counting rank where it may win
        stages["rank(count)"] = gpu_us(rank)
    stages["rank(sort)"] = gpu_us(sort_rank)
    stages["mask(seed)"] = gpu_us(seed_mask_stage)
    stages["mask"] = gpu_us(mask_stage)
    stages["resolve"] = gpu_us(resolve)
    return stages, int(out[n])


def hard():
    for scenario in ("clustered", "uniform"):
        for n in (64, 128, 256, 512, 1024, 2048, 4096, 8192, 32768):
            bs = datasets.generate(scenario, n, seed=0).to("cuda")
            b, s = bs.boxes, bs.scores
            reps = 200 if n <= 4096 else 30
            line = {"tv_wall": wall_us(lambda: torchvision.ops.nms(b, s, 0.5), reps),
                    "wall": wall_us(lambda: hf.hard_fused_cuda(b, s, iou_threshold=0.5), reps),
                    "graph": gpu_us(lambda: hf.hard_fused_cuda(b, s, iou_threshold=0.5, padded=True))}
            kept = None
            if hf.SMALL_MAX < n <= hf.MID_MAX:  # eager without the cooperative launch: rank, mask, resolve
                mid_max, hf.MID_MAX = hf.MID_MAX, 0
                line["wall3"] = wall_us(lambda: hf.hard_fused_cuda(b, s, iou_threshold=0.5), reps)
                hf.MID_MAX = mid_max
            if n > hf.SMALL_MAX:
                stages, kept = hard_stages(b, s, n)
                line.update(stages)
            print("hard_fused", scenario, n, "kept", kept, " ".join(f"{k}={v:.1f}" for k, v in line.items()), flush=True)


def matrix():
    for scenario in ("clustered", "uniform"):
        for n in (64, 128, 192, 256, 384, 512, 1024, 2048, 4096, 8192):
            bs = datasets.generate(scenario, n, seed=0).to("cuda")
            b, s = bs.boxes, bs.scores
            line = {}
            for path in ("single", "cooperative", "counting"):
                if path == "single" and n > mr.single_block_capacity(b.dtype):
                    continue
                if path == "cooperative" and mr.cooperative_grid(n, b.dtype, b.device) == 0:
                    continue
                if path != "cooperative":  # eager only (not captured in graphs)
                    line[path] = gpu_us(lambda: mr.matrix_recompute_cuda_path(b, s, None, "gaussian", 0.5, 0.05, True,
                                                                              path=path))
                line[path + "_wall"] = wall_us(
                    lambda: mr.matrix_recompute_cuda_path(b, s, None, "gaussian", 0.5, 0.05, False, path=path))
            for other in ("matrix_fused", "matrix_naive"):  # side by side, same input
                line[other + "_wall"] = wall_us(lambda: nmsbench.run_nms(other, b, s, 0.5, kernel="gaussian", sigma=0.5,
                                                                         score_threshold=0.05), 50)
            print("matrix_recompute", scenario, n, " ".join(f"{k}={v:.1f}" for k, v in line.items()), flush=True)


def matrix_stages(b, s, n, path):
    """GPU time of each launch of matrix_recompute's multi-block paths (as its wrapper
    issues them; gaussian kernel, no labels)."""
    from nmsbench.variants._cuda import Scratch

    dtype, arith = b.dtype, mr.arith_dtype(b.dtype)
    outputs = mr._Outputs(n, dtype, dev)
    keep, out_scores, count = outputs.keep, outputs.scores, outputs.count
    chunks, segment = blocks(n, mr.CHILDREN), mr.segment_length(n)
    segments = max(1, -(-(n - 1) // segment))
    scratch = Scratch(dev, order=(n, torch.int64), sbox=(4 * n, arith), sarea=(n, arith), sscore=(n, arith),
                      cmax=(n, arith), acc=(n, torch.int64), done=(chunks, torch.int32), final=(n, arith))
    get = lambda name: mr.CUDA_MODULE.get(name, dtype, dev)  # noqa: E731
    sigma, threshold, grid = np.float64(0.5), np.float64(0.05), (segments, chunks)
    order = scratch.order if path == "counting" else torch.sort(s, descending=True, stable=True).indices

    def rank():
        with on_torch_stream(dev) as launch:
            if path == "counting":
                launch(get("rank_kernel"), (blocks(n, 32),), (32 * mr.RANK_WARPS,),
                       (b, s, None, 1, n, order, scratch.sbox, scratch.sarea, None, scratch.sscore, scratch.cmax,
                        scratch.acc, scratch.done, chunks, None))
            else:
                o = torch.sort(s, descending=True, stable=True).indices
                launch(get("gather_kernel"), (blocks(n, 256),), (256,),
                       (b, s, None, 1, n, o, scratch.sbox, scratch.sarea, None, scratch.sscore, scratch.cmax,
                        scratch.acc, scratch.done, chunks, count))

    def cmax():
        with on_torch_stream(dev) as launch:
            launch(get("cmax_kernel"), grid, (mr.CHILDREN,), (scratch.sbox, scratch.sarea, None, n, segment, scratch.cmax))

    def decay():
        with on_torch_stream(dev) as launch:
            launch(get("decay_kernel"), grid, (mr.CHILDREN,),
                   (scratch.sbox, scratch.sarea, None, scratch.cmax, scratch.sscore, order, n, segment, False, sigma,
                    threshold, scratch.acc, scratch.done, scratch.final, None if path == "counting" else count))

    def select():
        with on_torch_stream(dev) as launch:
            if path == "counting":
                launch(get("select_kernel"), (blocks(n, 32),), (32 * mr.SEL_WARPS,),
                       (scratch.final, n, keep, out_scores, count, None))
            else:
                final_sorted, index_sorted = torch.sort(scratch.tensor("final"), descending=True, stable=True)
                launch(get("finalize_kernel"), (blocks(n, 256),), (256,),
                       (final_sorted, index_sorted, n, count, keep, out_scores, None))

    rank()
    cmax()
    return {f"{path}:{name}": gpu_us(stage) for name, stage in
            (("rank", rank), ("cmax", cmax), ("decay", decay), ("select", select))}


def matrix_by_stage():
    for scenario in ("clustered", "uniform"):
        for n in (1024, 4096, 8192, 32768):
            bs = datasets.generate(scenario, n, seed=0).to("cuda")
            line = {}
            for path in ("counting", "sort"):
                if path == "counting" and n > mr.COUNTING_MAX_N:
                    continue
                line[path] = gpu_us(lambda: mr.matrix_recompute_cuda_path(bs.boxes, bs.scores, None, "gaussian", 0.5,
                                                                          0.05, True, path=path))
                line.update(matrix_stages(bs.boxes, bs.scores, n, path))
            print("matrix_recompute stages", scenario, n, " ".join(f"{k}={v:.1f}" for k, v in line.items()), flush=True)


def host():
    """What the host pays per op piece (the GPU idle): a launch by argument count, an
    allocation, a stream synchronization, a whole small op."""
    from nmsbench.variants._cuda import Scratch, host_count

    fn = hf.CUDA_MODULE.get("tile_mask_kernel", torch.float32, dev)  # n = 0: the kernel returns at once
    buf = torch.zeros(64, device=dev)
    few = (buf, None, 0, 0, np.float64(0.5), buf)
    many = few + (buf, buf, 0, 0, buf, buf, buf, np.float64(0.5), 0)
    with on_torch_stream(dev) as launch:
        print("host: launch 6 args", round(wall_us(lambda: launch(fn, (1,), (32,), few), 2000), 1),
              "launch 15 args", round(wall_us(lambda: launch(fn, (1,), (32,), many), 2000), 1), flush=True)
    hc = host_count(dev)
    print("host: on_torch_stream enter", round(wall_us(lambda: on_torch_stream(dev).__enter__(), 2000), 1),
          "torch.empty", round(wall_us(lambda: torch.empty(1000, device=dev), 2000), 1),
          "Scratch(3)", round(wall_us(lambda: Scratch(dev, a=(10, torch.int64), b=(10, torch.float32), c=(4, torch.int32)), 2000), 1),
          "HostCount.wait", round(wall_us(lambda: hc.wait(dev), 2000), 1),
          "torch sync", round(wall_us(torch.cuda.synchronize, 2000), 1), flush=True)


def profile():
    """Where an eager call's host time goes: cProfile over 2000 calls (top entries by own
    time), for hard_fused and matrix_recompute at a few N."""
    import cProfile
    import pstats

    for name, n in (("hard_fused", 64), ("hard_fused", 1024), ("hard_fused", 4096), ("matrix_recompute", 64),
                    ("matrix_recompute", 1024), ("matrix_recompute", 4096)):
        bs = datasets.generate("clustered", n, seed=0).to("cuda")
        op = (lambda: hf.hard_fused_cuda(bs.boxes, bs.scores, iou_threshold=0.5)) if name == "hard_fused" else (
            lambda: mr.matrix_recompute_cuda(bs.boxes, bs.scores, iou_threshold=0.5, kernel="gaussian", sigma=0.5,
                                             score_threshold=0.05))
        print("profile", name, n, "wall", round(wall_us(op, 2000), 1), flush=True)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(2000):
            op()
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(14)


which = sys.argv[1:] or ["host", "hard", "matrix"]
if "profile" in which:
    profile()
if "host" in which:
    host()
if "hard" in which:
    hard()
if "matrix" in which:
    matrix()
if "matrix_stages" in which:
    matrix_by_stage()
