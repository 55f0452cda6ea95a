"""The batched op's one launch (fused_kernel) against its two (decode, then nms_kernel) on
synthetic heads, the two interleaved in rounds (A B, then B A, ...): per batch and layout
the medians over rounds of the eager call (`wall`: back-to-back calls, as the pipeline
benchmark times them), a CUDA-graph replay (`wall`) and the GPU time of a call (`device`,
CUPTI), with the detections compared. It decides ``batched_nms.FUSED_WAVES``:

    python benchmarks/batched_fused.py --batches 1,2,4 --rounds 4

Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from nmsbench.datasets.synthetic_raw import synthetic_raw
from nmsbench.timing import capture_graph, time_device, time_wall

from _common import parse_sizes
from batched_op import CONF, IOU, MAX_DET, same, to_yolov8

FORMS = {"one launch": True, "two launches": False}


def calls(raw: torch.Tensor, layout: str, fused: bool):
    """The op's eager call through the CUDA backend, with its launches as asked, and a
    graph replay of the same call (and what it writes)."""
    from nmsbench.variants import batched_nms

    n = raw.shape[1] if layout == "yolov5" else raw.shape[2]
    classes = raw.shape[2] - 5 if layout == "yolov5" else raw.shape[1] - 4

    def eager():
        return batched_nms.run(raw, None, None, layout=layout, cxcywh=True, n=n, classes=classes, multi_label=False,
                               class_agnostic=False, iou_threshold=IOU, score_threshold=CONF, max_output=MAX_DET,
                               max_per_class=MAX_DET, top_k=2**31 - 1, capacity=n, fused=fused)

    graph, captured = capture_graph(eager)

    def replay():
        graph.replay()
        return captured

    return eager, replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,2,4")
    parser.add_argument("--layouts", default="yolov5,yolov8")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--min-run-time", type=float, default=0.2, help="seconds per timer, form and round")
    args = parser.parse_args()
    raw16 = torch.from_numpy(synthetic_raw(16, seed=0))
    print("| layout | B | form | eager µs | replay µs | device µs | same |\n|---|---:|---|---:|---:|---:|---|")
    for layout in args.layouts.split(","):
        for batch in parse_sizes(args.batches):
            raw = raw16[:batch].contiguous()
            raw = (to_yolov8(raw) if layout == "yolov8" else raw).cuda()
            forms = {name: calls(raw, layout, fused) for name, fused in FORMS.items()}
            agree = same(forms["one launch"][0](), forms["two launches"][0]())
            times = {name: {"eager": [], "replay": [], "device": []} for name in FORMS}
            for round_ in range(args.rounds):
                for name in (FORMS if round_ % 2 == 0 else reversed(FORMS)):
                    eager, replay = forms[name]
                    times[name]["eager"].append(time_wall(eager, min_run_time=args.min_run_time, threads=1).median_us)
                    times[name]["replay"].append(time_wall(replay, min_run_time=args.min_run_time,
                                                           threads=1).median_us)
                    times[name]["device"].append(time_device(eager, min_run_time=args.min_run_time).median_us)
            for name in FORMS:
                medians = {timer: statistics.median(values) for timer, values in times[name].items()}
                print(f"| {layout} | {batch} | {name} | {medians['eager']:.2f} | {medians['replay']:.2f} | "
                      f"{medians['device']:.2f} | {agree} |", flush=True)


if __name__ == "__main__":
    main()
