"""Where the batched op's nms_kernel spends one image's time, phase by phase: a copy of
the kernel whose thread 0 of block 0 reads ``clock64`` at the end of each phase of
select_nms (the class-segmented path a usual image takes: its classes small enough to
select without sorting), run on synthetic YOLOv5 batches (``--block`` stamps another
image's block; an image that leaves select_nms for the sorted path stamps its first
phases only);
the medians of the phases' SM cycles and the kernels' CUPTI times beside them:

    python benchmarks/batched_phases.py --batches 1,8 --calls 200

Block 0 is image 0 (104 candidates, 10 detections in ``synthetic_raw(seed=0)``). The
stamps cost a few cycles each, so the copy's CUPTI time is within a few percent of the
op's. The copy is made by inserting the stamps after fixed lines of the kernel's text:
when the kernel changes, a line that is no longer there stops the probe with its text
(update ``STAMPS``). ``--twice`` runs the path twice in one launch and reports the
second pass too (warm caches: what is left is the work itself; its "counts read" is the
first pass's, shown as 0). Append what is worth
keeping to results/PERFLOG.md.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from nmsbench.datasets.synthetic_raw import synthetic_raw
from nmsbench.variants import batched_nms

from _common import parse_sizes
from batched_op import CONF, IOU, MAX_DET, kernel_times

HEADER = r'''
__device__ unsigned long long phase_stamps[32];
__device__ int stamp_pass;
#define STAMP(k) do { if (threadIdx.x == 0 && blockIdx.x == STAMP_BLOCK) phase_stamps[(k) + 16 * stamp_pass] = clock64(); } while (0)
'''
# (the phase a stamp ends, the kernel line it follows); the first marks the kernel's entry
STAMPS = [
    ("entry", "    const long long image = (long long)b * capacity;\n    const int* image_cands = cands + image;\n"),
    ("counts read", "    __syncthreads();\n    const int n = s_count;\n"),
    ("records", "    unsigned int slot = 0u, local = 0u;\n"),
    ("classes hashed", "        local = atomicAdd(&t_count[slot], 1u);\n    }\n    __syncthreads();\n"),
    ("segments", "    if (__syncthreads_or(big)) return false;\n"),
    ("runs written", "    const IouThreshold threshold(iou_threshold);\n    __syncthreads();\n"),
    ("ranks", "                r_area[first + rank] = g_area[position];\n            }\n        }\n        __syncthreads();\n"),
    ("masks", "            if (q < mask_words && k0 == 0) mask[q] = bits;\n        }\n        __syncthreads();\n"),
    ("resolve", "    __syncthreads();\n    const int detections = s_keeps;\n"),
    ("written", "                       classes, out_boxes, out_scores, out_classes, out_indices);\n"
                "    pad_detections(b, output, max_output, out_boxes, out_scores, out_classes, out_indices);\n"),
]
TWICE = r'''
template <typename T, typename... Args>
__device__ bool select_twice(Args... args) {
    select_nms<T>(args...);
    __syncthreads();
    if (threadIdx.x == 0 && blockIdx.x == STAMP_BLOCK) stamp_pass = 1;  // the stamped block's own pass
    __syncthreads();
    return select_nms<T>(args...);
}
'''
KERNEL = "template <typename T>\n__device__ __forceinline__ void nms_image("  # the path twice: before its caller
PHASES = [name for name, _ in STAMPS[1:]]


def instrumented(text: str, twice: bool, block: int = 0) -> str:
    """The module's source with the stamps in, on block ``block`` (and the path run twice)."""
    def once(anchor: str) -> None:
        if text.count(anchor) != 1:
            raise SystemExit(f"batched_phases: the kernel no longer has this line once; update STAMPS:\n{anchor}")

    for k, (_, anchor) in enumerate(STAMPS):
        once(anchor)
        reset = "if (threadIdx.x == 0 && blockIdx.x == STAMP_BLOCK) stamp_pass = 0; " if k == 0 else ""
        text = text.replace(anchor, f"{anchor}{reset}STAMP({k});\n")
    if twice:
        once(KERNEL)
        text = text.replace(KERNEL, TWICE + KERNEL).replace("if (select_nms<T>(", "if (select_twice<T>(")
    return f"#define STAMP_BLOCK {block}\n" + HEADER + text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1")
    parser.add_argument("--calls", type=int, default=200, help="stamped calls a batch (medians)")
    parser.add_argument("--twice", action="store_true", help="the path twice in one launch; both passes reported")
    parser.add_argument("--block", type=int, default=0, help="the image whose block is stamped (default 0)")
    args = parser.parse_args()
    module = batched_nms.CUDA_MODULE
    plain = module.source
    module.source = lambda: instrumented(plain(), args.twice, args.block)  # before the module's first compile
    from cupy_backends.cuda.api import runtime

    raw64 = torch.from_numpy(synthetic_raw(16, seed=0)).repeat(4, 1, 1)
    device = torch.device("cuda")
    for batch in parse_sizes(args.batches):
        raw = raw64[:batch].contiguous().to(device)
        n, classes = raw.shape[1], raw.shape[2] - 5

        def call():
            return batched_nms.run(raw, None, None, layout="yolov5", cxcywh=True, n=n, classes=classes,
                                   multi_label=False, class_agnostic=False, iou_threshold=IOU, score_threshold=CONF,
                                   max_output=MAX_DET, max_per_class=MAX_DET, top_k=2**31 - 1, capacity=n,
                                   fused=False)  # nms_kernel's block STAMP_BLOCK is the image's

        first = call()
        address = module.get("nms_kernel", torch.float32, device).module.get_global_var("phase_stamps")
        stamps = np.zeros(32, dtype=np.int64)
        passes = [[] for _ in range(2 if args.twice else 1)]
        for _ in range(args.calls):
            runtime.memset(address, 0, stamps.nbytes)
            call()
            torch.cuda.synchronize()
            runtime.memcpy(stamps.ctypes.data, address, stamps.nbytes, runtime.memcpyDeviceToHost)
            for start in (0, 16):  # a phase the image skips (no stamp written) takes no cycles
                stamps[start:start + 16] = np.maximum.accumulate(stamps[start:start + 16])
            last = len(PHASES)  # the first pass's last stamp
            passes[0].append(np.diff(stamps[:last + 1]))
            if args.twice:  # the second pass starts where the first wrote its detections (counts are read once)
                passes[1].append(np.diff(np.concatenate([[stamps[last], stamps[last]], stamps[16 + 2:16 + last + 1]])))
        if args.block >= batch:
            continue
        image = args.block
        print(f"B = {batch}: image {image}'s {int(first[6][image])} candidates, {int(first[0][image])} detections; "
              f"CUPTI µs a call {kernel_times(call)}")
        for k, cycles in enumerate(passes):
            medians = np.median(np.array(cycles), axis=0)
            print(f"  pass {k + 1}, SM cycles (medians of {args.calls}): " + ", ".join(
                f"{name} {value:.0f}" for name, value in zip(PHASES, medians)) + f"; all {medians.sum():.0f}")


if __name__ == "__main__":
    main()
