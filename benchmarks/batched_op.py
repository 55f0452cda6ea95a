"""The batched op (``nmsbench.batched_nms_from_head``) on a GPU: first a check that its CUDA
kernels give the CPU backend's detections bit for bit (random batches and YOLOv5- and
YOLOv8-shaped raw heads, single- and multi-label, low and usual thresholds), then its
times on raw YOLOv5 [B, 25200, 85] (and the same batch as YOLOv8's [B, 84, 25200]) at
conf 0.25, IoU 0.45, 300 detections an image:

- ``eager``: the call and its synchronization (``nmsbench.timing``'s wall timer);
- ``graph``: the call captured once in a CUDA graph, the replay and its synchronization;
- ``device``: what the GPU did per call (torch.profiler's CUPTI records: kernels and
  memsets summed, and the busy span).

The input is ``nmsbench.datasets.synthetic_raw`` (the pipeline's detector-like heads:
about 1.7 % of rows above the objectness threshold, 100 to 500 candidates an image).
Beside the times: the decode's floor (the bytes it must move against a large copy's
bandwidth, and torch reading the objectness column alone) and a probe of nms_kernel's
two paths on the same images. Prints a table and writes the rows to a CSV:

    python benchmarks/batched_op.py --csv batched.csv --batches 1,8,32,64

``--sanitize`` runs only small calls on every path (no timing, no CPU comparison), for
compute-sanitizer: ``compute-sanitizer --tool memcheck python benchmarks/batched_op.py --sanitize``.
Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys

import torch

import nmsbench
from nmsbench.datasets.synthetic_raw import synthetic_raw
from nmsbench.timing import capture_graph, time_device, time_events, time_wall

from _common import parse_sizes

CONF, IOU, MAX_DET = 0.25, 0.45, 300


def same(a, b) -> bool:
    """Two BatchedDetections equal field for field, bit for bit."""
    for x, y in zip(a, b):
        x, y = x.cpu(), y.cpu()
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if x.is_floating_point():
            kind = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
            x, y = x.view(kind), y.view(kind)
        if not torch.equal(x, y):
            return False
    return True


def to_yolov8(raw: torch.Tensor) -> torch.Tensor:
    """A YOLOv5 raw batch as YOLOv8's [B, 4 + C, A] (class scores x objectness)."""
    return torch.cat([raw[..., :4], raw[..., 4:5] * raw[..., 5:]], dim=-1).transpose(1, 2).contiguous()


def random_batch(batch: int, n: int, classes: int, seed: int, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    corner = torch.randint(0, 600, (batch, n, 2), generator=generator).double()
    side = torch.randint(0, 60, (batch, n, 2), generator=generator).double()
    scores = torch.randint(0, 50, (batch, n, classes), generator=generator).double() / 50  # ties
    return torch.cat([corner, corner + side], dim=-1).to(dtype), scores.to(dtype)


def kernel_times(call, calls: int = 20) -> dict[str, float]:
    """Mean GPU µs a call of each of the op's kernels and its memset (torch.profiler);
    fused_us: fused_kernel, a small batch's one launch (decode and NMS)."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    times = {"decode_us": 0.0, "nms_us": 0.0, "fused_us": 0.0, "memset_us": 0.0, "other_us": 0.0}
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0.0)
        if not total or event.key.startswith(("cuda", "cu")):
            continue
        name = ("decode_us" if "decode" in event.key else "nms_us" if "nms_kernel" in event.key
                else "fused_us" if "fused_kernel" in event.key
                else "memset_us" if "memset" in event.key.lower() else "other_us")
        times[name] += total / calls
    return {name: round(value, 2) for name, value in times.items()}


def clock_mhz():
    try:
        return torch.cuda.clock_rate()
    except Exception:  # no NVML here
        return ""


def probe_paths(raw64: torch.Tensor, args) -> list[dict]:
    """The YOLOv5 op through the CUDA backend with nms_kernel's class-segmented path
    (default) and without it (``fast_max=0``: the tile path), and with a smaller shared-memory
    sort: what each path costs on the same images. Same detections required."""
    from nmsbench.variants import batched_nms

    rows = []
    for batch in (1, 32):
        raw = raw64[:batch].cuda()
        outputs = {}
        for name, options in (("default", {}), ("tiles", dict(fast_max=0)),
                              ("tiles, sort 1024", dict(fast_max=0, sort_capacity=1024))):
            def call(options=options):
                return batched_nms.run(raw, None, None, layout="yolov5", cxcywh=True, n=raw.shape[1],
                                       classes=raw.shape[2] - 5, multi_label=False, class_agnostic=False,
                                       iou_threshold=IOU, score_threshold=CONF, max_output=MAX_DET, max_per_class=MAX_DET,
                                       top_k=2**31 - 1, capacity=raw.shape[1], **options)

            outputs[name] = call()
            wall = time_wall(call, min_run_time=args.min_run_time, threads=args.threads)
            row = dict(batch=batch, path=name, wall_us=round(wall.median_us, 2), **kernel_times(call),
                       same=same(outputs[name], outputs["default"]))
            rows.append(row)
            print("probe", row, flush=True)
    return rows


def decode_floor(raw64: torch.Tensor, batches) -> dict[int, dict]:
    """The decode's two numbers: the bytes it must move (a 32-byte sector a row for the
    objectness, whole rows where it passes) against a large copy's bandwidth, and the time
    of torch reading the objectness column alone (one strided load a row)."""
    def events(fn, reps=100):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000)
        return statistics.median(times)

    def copy_bandwidth() -> float:
        """Bytes per µs of a device-to-device copy (read + write)."""
        src = torch.empty(2**28, dtype=torch.float32, device="cuda").uniform_()
        dst = torch.empty_like(src)
        return 2 * src.numel() * 4 / events(lambda: dst.copy_(src), 20)

    bandwidth = copy_bandwidth()
    floors = {}
    for batch in batches:
        raw = raw64[:batch].cuda()
        passing = int((raw[..., 4] > CONF).sum())
        moved = batch * raw.shape[1] * 32 + passing * raw.shape[2] * raw.element_size()
        floors[batch] = dict(decode_bytes=moved, decode_floor_us=round(moved / bandwidth, 2),
                             objectness_read_us=round(events(lambda: torch.gt(raw[..., 4], CONF)), 2),
                             copy_tb_s=round(bandwidth * 1e-6, 2), rows_passing=round(passing / raw[..., 4].numel(), 4))
        print("floor", batch, floors[batch], flush=True)
    return floors


def check(raw64: torch.Tensor) -> list[str]:
    """Every case where the CUDA op and the CPU backend differ (empty: all agree)."""
    failures = []
    cases = []
    for dtype in (torch.float32, torch.float64, torch.float16):
        boxes, scores = random_batch(6, 3000, 4, seed=7, dtype=dtype)
        for kwargs in (dict(), dict(multi_label=True), dict(class_agnostic=True, max_output_boxes=1000),
                       dict(multi_label=True, max_output_boxes_per_class=20, pre_nms_top_k=2000)):
            cases.append((f"random {dtype} {kwargs}", lambda d, b=boxes, s=scores, k=kwargs: nmsbench.batched_nms(
                b.to(d), s.to(d), iou_threshold=0.5, score_threshold=0.3, **k)))
    for layout, raw in (("yolov5", raw64[:8]), ("yolov8", to_yolov8(raw64[:8]))):
        for kwargs in (dict(), dict(multi_label=True), dict(score_threshold=0.001, multi_label=True),
                       dict(score_threshold=0.001, max_output_boxes=1000)):
            cases.append((f"{layout} {kwargs}", lambda d, r=raw, lay=layout, k=kwargs: nmsbench.batched_nms_from_head(
                r.to(d), lay, **k)))
    for name, call in cases:
        gpu, cpu = call("cuda"), call("cpu")
        ok = same(gpu, cpu)
        print(f"check {'ok  ' if ok else 'FAIL'} {name}: detections {gpu.num_detections.sum().item()}, "
              f"candidates {gpu.num_candidates.sum().item()}, overflow {gpu.overflow.sum().item()}", flush=True)
        if not ok:
            failures.append(name)
    return failures


def sanitize() -> None:
    """Small calls on every path, for compute-sanitizer (racecheck included)."""
    from nmsbench.variants import batched_nms

    boxes, scores = random_batch(3, 300, 3, seed=1)
    boxes, scores = boxes.cuda(), scores.cuda()
    for dtype in (torch.float32, torch.float64, torch.float16):
        b, s = boxes.to(dtype), scores.to(dtype)
        for kwargs in (dict(), dict(multi_label=True, max_output_boxes=600), dict(max_output_boxes_per_class=5),
                       dict(class_agnostic=True, pre_nms_top_k=50), dict(multi_label=True, max_candidates=100)):
            nmsbench.batched_nms(b, s, iou_threshold=0.5, score_threshold=0.3, **kwargs)
        labels = torch.randint(0, 4, (3, 300), device="cuda")
        nmsbench.batched_nms(b, s[..., 0], labels, iou_threshold=0.5, box_format="cxcywh")
        nmsbench.batched_nms(b, s, iou_threshold=0.5, class_agnostic=True, max_output_boxes=300)
        # the merge in global memory, forced by a small shared-memory sort and no class-segmented path
        batched_nms.run(b, s.contiguous(), None, layout="scores", cxcywh=False, n=300, classes=3, multi_label=True,
                        class_agnostic=False, iou_threshold=0.5, score_threshold=0.1, max_output=700, max_per_class=700,
                        top_k=2**31 - 1, capacity=900, sort_capacity=32, fast_max=0)
        # the whole-GPU sort (wide_sort_kernel: images of about 8,000 candidates, four chunks
        # and merge passes), forced the same way
        wide_b, wide_s = (t.to(dtype).cuda() for t in random_batch(2, 3000, 3, seed=2))
        batched_nms.run(wide_b, wide_s, None, layout="scores", cxcywh=False, n=3000, classes=3, multi_label=True,
                        class_agnostic=False, iou_threshold=0.5, score_threshold=0.1, max_output=700, max_per_class=700,
                        top_k=2**31 - 1, capacity=9000, sort_capacity=32, fast_max=0, wide=True)
        # its overlap graph's rounds (forced), per class and class-agnostic
        for agnostic in (False, True):
            batched_nms.run(wide_b, wide_s, None, layout="scores", cxcywh=False, n=3000, classes=3, multi_label=True,
                            class_agnostic=agnostic, iou_threshold=0.5, score_threshold=0.1, max_output=700,
                            max_per_class=700, top_k=2**31 - 1, capacity=9000, graph=True)
        # the class-segmented path: one class for all, and labels beyond 32 bits (its fallback)
        nmsbench.batched_nms(b, s[..., 0], labels * 2**40, iou_threshold=0.5, max_output_boxes=40)
    raw = torch.from_numpy(synthetic_raw(2, seed=3))
    raw = raw[:, ::8].contiguous().cuda()  # 3150 rows
    nmsbench.batched_nms_from_head(raw)
    nmsbench.batched_nms_from_head(raw * 0.9)  # the same shape: the scratch the last call left, counters zeroed
    full = torch.from_numpy(synthetic_raw(2, seed=4)).cuda()  # 2 x 99 decode blocks: past the SMs at once
    for fused in (False, True):  # the two launches, and fused_kernel's one (each twice: the kept scratch)
        for rows_per_thread in (1, 4):  # decode_rows_kernel's rows, every row listed
            for _ in range(2):
                batched_nms.run(raw, None, None, layout="yolov5", cxcywh=True, n=raw.shape[1], classes=80,
                                multi_label=False, class_agnostic=False, iou_threshold=0.45, score_threshold=-1.0,
                                max_output=300, max_per_class=300, top_k=2**31 - 1, capacity=raw.shape[1],
                                rows_per_thread=rows_per_thread, fused=fused)
        for head, layout, multi_label, conf in ((raw, "yolov5", True, 0.01), (to_yolov8(raw), "yolov8", False, 0.25),
                                                (raw.half(), "yolov5", False, 0.25), (full, "yolov5", False, 0.25)):
            n = head.shape[1] if layout == "yolov5" else head.shape[2]
            capacity = 4 * n if multi_label else n  # below the whole-GPU pass, which fused=True refuses
            batched_nms.run(head, None, None, layout=layout, cxcywh=True, n=n, classes=80, multi_label=multi_label,
                            class_agnostic=False, iou_threshold=0.45, score_threshold=conf, max_output=300,
                            max_per_class=300, top_k=2**31 - 1, capacity=capacity, fused=fused)
    graph, _ = capture_graph(lambda: nmsbench.batched_nms_from_head(raw))
    graph.replay()
    torch.cuda.synchronize()
    print("sanitize: done", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", help="write the rows here")
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--layouts", default="yolov5,yolov8")
    parser.add_argument("--min-run-time", type=float, default=0.3, help="seconds per timer and row")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sanitize", action="store_true", help="small calls on every path only")
    parser.add_argument("--skip-check", action="store_true")
    parser.add_argument("--skip-probe", action="store_true", help="no probe of nms_kernel's paths")
    args = parser.parse_args()
    if args.sanitize:
        sanitize()
        return
    batches = parse_sizes(args.batches)
    # 16 synthetic images, repeated up to the largest batch (drawing 64 takes longer than timing them)
    raw64 = torch.from_numpy(synthetic_raw(16, seed=0))
    raw64 = raw64.repeat(-(-max(batches) // 16), 1, 1)
    failures = [] if args.skip_check else check(raw64)
    floors = decode_floor(raw64, batches)
    rows = []
    device = torch.cuda.get_device_name(0)
    warm = raw64[:max(batches)].cuda()
    for _ in range(2000):  # the GPU's clocks up before the first row
        nmsbench.batched_nms_from_head(warm)
    torch.cuda.synchronize()
    del warm
    for layout in args.layouts.split(","):
        for batch in batches:
            raw = raw64[:batch] if layout == "yolov5" else to_yolov8(raw64[:batch])
            raw = raw.cuda()

            def call():
                return nmsbench.batched_nms_from_head(raw, layout, iou_threshold=IOU, score_threshold=CONF,
                                                      max_output_boxes=MAX_DET)

            det = call()
            eager = time_wall(call, min_run_time=args.min_run_time, threads=args.threads)
            graph, _ = capture_graph(call)
            replay = time_wall(graph.replay, min_run_time=args.min_run_time, threads=args.threads)
            try:
                gpu = time_device(call, min_run_time=args.min_run_time)
                gpu_us, span_us, launches, sets = gpu.median_us, gpu.span_us, gpu.launches, gpu.copies
            except Exception as error:  # a profiler that cannot see the GPU: CUDA events instead
                print(f"device timer failed ({error}); CUDA events instead", file=sys.stderr)
                gpu_us, span_us, launches, sets = time_events(call, min_run_time=args.min_run_time).median_us, "", "", ""
            rows.append(dict(
                layout=layout, batch=batch, rows=25200, classes=80, conf=CONF, iou=IOU, max_det=MAX_DET,
                eager_us=round(eager.median_us, 2), eager_iqr_us=round(eager.iqr_us, 2),
                graph_us=round(replay.median_us, 2), graph_iqr_us=round(replay.iqr_us, 2),
                device_us=round(gpu_us, 2), device_span_us=span_us, launches=launches, memsets=sets,
                **kernel_times(call), **(floors[batch] if layout == "yolov5" else {}),
                sm_clock_mhz=clock_mhz(),
                eager_us_per_image=round(eager.median_us / batch, 2),
                graph_us_per_image=round(replay.median_us / batch, 2),
                candidates_per_image=round(det.num_candidates.float().mean().item(), 1),
                detections_per_image=round(det.num_detections.float().mean().item(), 1),
                overflow_images=int(det.overflow.sum().item()), noisy="; ".join(filter(None, (eager.noise, replay.noise))),
                gpu=device, torch=torch.__version__))
            print(f"{layout:7s} B={batch:3d}  eager {eager.median_us:8.1f} us  graph {replay.median_us:8.1f} us  "
                  f"device {gpu_us:7.1f} us  per image: eager {eager.median_us / batch:7.1f}  graph "
                  f"{replay.median_us / batch:7.1f}  | candidates/image {rows[-1]['candidates_per_image']}, "
                  f"detections/image {rows[-1]['detections_per_image']} | decode {rows[-1]['decode_us']} nms "
                  f"{rows[-1]['nms_us']} memset {rows[-1]['memset_us']} us, SM {rows[-1]['sm_clock_mhz']} MHz",
                  flush=True)
    probes = [] if args.skip_probe else probe_paths(raw64, args)
    if any(not row["same"] for row in probes):
        failures.append("nms path probe")
    if args.csv and rows:
        with open(args.csv, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(k for row in rows for k in row)))
            writer.writeheader()
            writer.writerows(rows)
    print("\n| layout | B | eager µs | graph µs | device µs | decode µs | nms µs | eager µs/image |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['layout']} | {row['batch']} | {row['eager_us']} | {row['graph_us']} | {row['device_us']} | "
              f"{row['decode_us']} | {row['nms_us']} | {row['eager_us_per_image']} |")
    if failures:
        print(f"\n{len(failures)} check(s) FAILED: CUDA differs from the CPU backend: {failures}")
        raise SystemExit(1)
    print(f"\nchecks: CUDA equals the CPU backend in every case; median of eager per image "
          f"{statistics.median(r['eager_us_per_image'] for r in rows):.1f} us")


if __name__ == "__main__":
    main()
