"""The batched op (``nmsbench.batched_nms``) on images of many candidates: the op as it
runs (from ``WIDE_MIN_CAPACITY`` candidates an image the whole GPU sorts them, and from
``GRAPH_MIN_OUTPUT`` detections it also resolves them on the overlap graph:
``wide_sort_kernel``), the op held to one block an image (``wide=False, graph=False``:
nms_kernel's chunks and merges in global memory, each candidate tested against the
detections so far), the overlap graph's greedy NMS (``hard_graph``, one
image, the whole GPU) and torchvision's ``nms``, on the same boxes (one class, every box a
candidate), with the op's detections checked against torchvision's first ``max_output``
keeps (hard_graph's where torchvision is skipped). Times are CUPTI device times
(``nmsbench.timing.time_device``); the op's split by kernel beside them.

    python benchmarks/batched_large.py --n 8192,65536,262144,1048576 --max-output 300,all

torchvision's nms is skipped above ``--torchvision-max`` boxes (its N x N/64 mask does not
fit a GPU at a million boxes). Append what is worth keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse
import csv

import torch
import torchvision

import nmsbench
from nmsbench import datasets
from nmsbench.timing import time_device
from nmsbench.variants import batched_nms

from _common import parse_sizes
from batched_op import kernel_times

IOU = 0.5


def op_call(boxes: torch.Tensor, scores: torch.Tensor, max_output: int, one_block: bool):
    """The op on a batch of one through the CUDA backend (``one_block``: no whole-GPU pass)."""
    n = boxes.shape[0]
    data, values = boxes[None].contiguous(), scores[None].contiguous()
    return lambda: batched_nms.run(data, values, None, layout="scores", cxcywh=False, n=n, classes=1,
                                   multi_label=False, class_agnostic=False, iou_threshold=IOU, score_threshold=-1.0,
                                   max_output=max_output, max_per_class=max_output, top_k=2**31 - 1, capacity=n,
                                   **(dict(wide=False, graph=False) if one_block else {}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="8192,65536,262144,1048576")
    parser.add_argument("--scenario", default="uniform,clustered")
    parser.add_argument("--max-output", default="300,all", help="detections an image: numbers, or all (N)")
    parser.add_argument("--torchvision-max", type=int, default=262144)
    parser.add_argument("--one-block-max", type=int, default=262144,
                        help="the op held to one block only up to this many boxes (its merges take seconds beyond)")
    parser.add_argument("--all-max", type=int, default=65536,
                        help="max-output all held to one block only up to this many boxes: nms_kernel tests each "
                             "candidate against the detections so far (seconds at hundreds of thousands)")
    parser.add_argument("--min-run-time", type=float, default=0.2)
    parser.add_argument("--csv", default="", help="also write the rows here")
    args = parser.parse_args()
    rows = []
    for scenario in args.scenario.split(","):
        for n in parse_sizes(args.n):
            boxes = datasets.generate(scenario, n, seed=0, canvas="density").to("cuda")
            b, s = boxes.boxes, boxes.scores
            graph_keep = nmsbench.run_nms("hard_graph", b, s, IOU).keep
            truth = torchvision.ops.nms(b, s, IOU) if n <= args.torchvision_max else graph_keep
            contenders = {"hard_graph": lambda: nmsbench.run_nms("hard_graph", b, s, IOU)}
            if n <= args.torchvision_max:
                contenders["torchvision"] = lambda: torchvision.ops.nms(b, s, IOU)
            for k_text in args.max_output.split(","):
                k = n if k_text == "all" else int(k_text)
                contenders[f"op K={k_text}"] = op_call(b, s, k, False)
                if n <= args.one_block_max and (k_text != "all" or n <= args.all_max):
                    contenders[f"op one block K={k_text}"] = op_call(b, s, k, True)
            for name, call in contenders.items():
                out = call()
                torch.cuda.synchronize()
                same = ""
                if name.startswith("op"):
                    k = out[1].shape[1]
                    m = min(k, truth.numel())
                    same = int(out[0][0]) == m and torch.equal(out[4][0, :m], truth[:m].to(out[4].dtype))
                timing = time_device(call, min_run_time=args.min_run_time, min_runs=3, max_runs=200)
                split = kernel_times(call, 3) if name.startswith("op") else {}
                row = dict(scenario=scenario, n=n, keeps=truth.numel(), contender=name,
                           device_us=round(timing.median_us, 1), iqr_us=round(timing.iqr_us, 1), noise=timing.noise,
                           same_as_reference=same, **split)
                rows.append(row)
                print(row, flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(key for row in rows for key in row)))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
