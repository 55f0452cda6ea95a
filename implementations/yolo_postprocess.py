"""The YOLOv5 GPU post-processing seed's pipeline: three CuPy kernels, one copy at the end.

``cupy_seed_kernels`` (a post-processing pipeline, see ``nmsbench.pipeline``): decode +
confidence filter with an atomic counter into a fixed buffer per image, class-aware
all-pairs NMS that reads the count on the device, compaction; no host synchronization
between them (yolo_postprocess.cu). The compacted survivors and both counts then come to
the host in one synchronization; there the few survivors are sorted by score (ties: lower
raw row) and cut to ``max_det``, as the seed does. A count above the buffer is reported as
:class:`~nmsbench.pipeline.CandidateOverflow`, never a silent drop. Its NMS is the
all-pairs rule, so it may suppress more than the greedy reference; the difference is
counted by the benchmark.

The pipelines' rule (``nmsbench.pipeline.RULE``) takes scores strictly above the threshold:
the kernel's ``score >= t`` is given the next float32 above the threshold, which is the
same test. Two differences of the seed's kernel stay, counted as mismatches: it clips the
boxes to the input image before NMS, and it picks the best class probability before the
product with the objectness (a label differs where two products round to one value). It
reads the yolov5 layout only.
"""

from __future__ import annotations

import numpy as np
import torch

from nmsbench.cuda import CudaModule, blocks, on_torch_stream
from nmsbench.pipeline import CandidateOverflow, Detections, Pipeline, Prepared, PipelineConfig, register_pipeline


DEFINES = {"NMS_THREADS": 128}  # threads (candidates) per block of allpairs_nms_kernel (NVRTC -D)
CUDA_MODULE = CudaModule("yolo_postprocess.cu", plain={"decode_filter_kernel": "QiifffiQQQQQ",
                                                       "allpairs_nms_kernel": "QQQQQidQ", "compact_kernel": "QQQQQQiQQ"},
                         defines=DEFINES)
DECODE_THREADS = 256
NMS_THREADS = DEFINES["NMS_THREADS"]
OUT_FIELDS = 7  # x1, y1, x2, y2, score, label, raw row


class _Buffers:
    """Device buffers for one batch shape, allocated once when the pipeline is built."""

    def __init__(self, batch: int, capacity: int, device: torch.device):
        f32, i64 = dict(dtype=torch.float32, device=device), dict(dtype=torch.int64, device=device)
        self.boxes = torch.zeros(batch, capacity, 4, **f32)
        self.scores = torch.zeros(batch, capacity, **f32)
        self.labels = torch.zeros(batch, capacity, **i64)
        self.raw_rows = torch.zeros(batch, capacity, **i64)
        self.suppressed = torch.zeros(batch, capacity, dtype=torch.uint8, device=device)
        self.out = torch.zeros(batch, capacity, OUT_FIELDS, **f32)
        self.counts = torch.zeros(2, batch, dtype=torch.int32, device=device)  # candidates, survivors
        self.host_out = torch.empty(self.out.shape, dtype=torch.float32, pin_memory=True)
        self.host_counts = torch.empty(self.counts.shape, dtype=torch.int32, pin_memory=True)


def _build(raw: np.ndarray, config: PipelineConfig, device: str) -> Prepared:
    device = torch.device(device)
    tensor = torch.from_numpy(np.ascontiguousarray(raw, dtype=np.float32)).to(device)
    batch, rows, fields = tensor.shape
    capacity = config.max_candidates
    buffers = _Buffers(batch, capacity, device)
    kernels = [CUDA_MODULE.get(name, None, device) for name in CUDA_MODULE.expressions]
    decode_filter, allpairs_nms, compact = kernels
    threshold = np.nextafter(np.float32(config.conf_threshold), np.float32(np.inf))  # score > t as score >= this
    width, height = np.float32(config.input_size[0]), np.float32(config.input_size[1])

    def decode() -> _Buffers:
        buffers.counts.zero_()
        with on_torch_stream(device) as launch:
            launch(decode_filter, (blocks(rows, DECODE_THREADS), batch), (DECODE_THREADS,),
                   (tensor, rows, fields, threshold, width, height, capacity, buffers.boxes, buffers.scores,
                    buffers.labels, buffers.raw_rows, buffers.counts[0]))
        return buffers

    def nms(b: _Buffers) -> list[Detections]:
        # The survivor counts start at 0 on every call: the benchmark times this stage
        # alone, again and again on one decoded batch (without this reset the counts grew
        # past the buffer).
        b.counts[1].zero_()
        with on_torch_stream(device) as launch:
            launch(allpairs_nms, (blocks(capacity, NMS_THREADS), batch), (NMS_THREADS,),
                   (b.boxes, b.scores, b.labels, b.raw_rows, b.counts[0], capacity,
                    np.float64(config.iou_threshold), b.suppressed))
            launch(compact, (blocks(capacity, DECODE_THREADS), batch), (DECODE_THREADS,),
                   (b.boxes, b.scores, b.labels, b.raw_rows, b.suppressed, b.counts[0], capacity, b.out, b.counts[1]))
        b.host_out.copy_(b.out, non_blocking=True)
        b.host_counts.copy_(b.counts, non_blocking=True)
        torch.cuda.current_stream(device).synchronize()  # the one synchronization of the pipeline
        candidates, survivors = b.host_counts.numpy()
        if int(candidates.max(initial=0)) > capacity:
            raise CandidateOverflow(candidates.tolist(), capacity, config.conf_threshold)
        return [_sorted_detections(b.host_out.numpy()[image, : survivors[image]], config.max_det)
                for image in range(batch)]

    return Prepared(decode, nms)


def _sorted_detections(out: np.ndarray, max_det: int) -> Detections:
    """Survivors (in atomic slot order) by descending score, ties by lower raw row, best max_det."""
    raw_rows = out[:, 6].astype(np.int64)
    order = np.lexsort((raw_rows, -out[:, 4]))[:max_det]
    return Detections(raw_rows[order], np.ascontiguousarray(out[order, :4]), out[order, 4].copy(),
                      out[order, 5].astype(np.int64))


register_pipeline(Pipeline(
    name="cupy_seed_kernels", devices=("cuda",), nms_family="allpairs", build=_build, requires=("cupy",),
    layouts=("yolov5",),
    summary="the seed's 3 CuPy kernels: decode + filter (atomic counter), all-pairs NMS reading the count on "
            "the device, compaction; one copy to the host, survivors sorted there",
))
