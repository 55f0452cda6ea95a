"""Detector post-processing: raw detector rows -> final detections, in stages.

The input is a detector head's raw output in one of two layouts (``PipelineConfig.layout``):
``yolov5``, what YOLOv5's export emits, ``[B, R, 5 + C]``: for each of R anchor rows
``cx, cy, w, h`` in input-image pixels, the objectness, and C class probabilities (sigmoid
already applied; YOLOv5 at 640 x 640 gives ``[B, 25200, 85]``); ``yolov8``, channels first
``[B, 4 + C, A]`` (YOLOv8 / YOLO11): cx, cy, w, h, then C class scores, no objectness.
Every pipeline does the same three things, by one rule (:data:`RULE`: the batched op's,
``nmsbench.batched_nms_from_head``, which is ultralytics' and ONNX Runtime's):

1. **decode** (confidence filter): a class scores objectness x class probability (yolov5,
   the product in float32) or its class score (yolov8); a row's label is its best class
   (the first of equal best scores) and it is a candidate iff that score is *strictly
   above* ``conf_threshold`` (rounded to float32 first); box x1 = cx - w/2 ... , **not**
   clipped (ultralytics clips only after NMS, when it scales boxes to the photo). yolov5
   rows whose objectness alone is not above the threshold cannot pass (class
   probabilities are <= 1), so the decodes filter on objectness first, as YOLOv5 does.
2. **nms**: class-aware NMS (only boxes of one label interact) at ``iou_threshold``,
   then the ``max_det`` best by score.
3. **total**: both, end to end. A pipeline that is one call (the batched op) has only
   this stage (``Pipeline.stages``).

The YOLOv5 seed's rule (score >= threshold, boxes clipped to the input, best class before
the product) is :data:`SEED_RULE`; :func:`decode_numpy` still takes it (the recordings'
floors were written with it), and ``cupy_seed_kernels`` keeps its clipping and class
choice (its differences are counted, not hidden).

Each image's detections come out sorted by descending score, ties by lower raw row, and
carry the raw row they came from, so pipelines are compared detection by detection.

Pipelines (``pipelines()``):

- ``numpy``: the CPU reference, as the seed's baseline does it: numpy decode and filter,
  then greedy NMS per class in numpy (the classic sort-then-suppress loop); both layouts.
- ``torch_batched_nms``: torch ops decode into a fixed candidate buffer, then
  ``torchvision.ops.batched_nms`` per image; runs on the CPU and on CUDA.
- ``torch+<impl>``: the same torch front end feeding each registered NMS implementation
  of the ``hard`` and ``allpairs`` families (``nmsbench.implementations()``).

Further contenders register from ``implementations/pipeline_*.py``: ``ultralytics_loop``,
``torchvision_batched_nms``, ``onnxruntime_nms``, ``batched_op`` and ``batched_op_graph``.

The torch front end writes candidates into a fixed buffer of ``max_candidates`` rows per
image, as the CUDA design does (the seed's ``MAX_FILTERED = 4096``). When more candidates
pass than fit, it raises :class:`CandidateOverflow`: a benchmark records that as an
error row, and nothing is ever dropped silently.

Extension point: another pipeline registers itself with :func:`register_pipeline` (a
module under ``implementations/`` may do so when it is imported). The seed's three CUDA
kernels (decode + filter, all-pairs NMS, compaction) through CuPy register there as
``cupy_seed_kernels`` (``implementations/yolo_postprocess.py``).
"""

from __future__ import annotations

import importlib.util
import math
import numbers
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

import numpy as np
import torch

BOX_FIELDS = 5  # cx, cy, w, h, objectness; class probabilities follow (yolov5)
LAYOUTS = ("yolov5", "yolov8")
LAYOUT_FIELDS = {"yolov5": 5, "yolov8": 4}  # fields before the class scores
STAGES = ("decode", "nms", "total")
DEFAULT_CONF = 0.25
DEFAULT_IOU = 0.45
DEFAULT_MAX_DET = 300
DEFAULT_MAX_CANDIDATES = 4096


class Rule(NamedTuple):
    """How a decode picks candidates: ``strict`` score > threshold (else >=), ``clip`` boxes
    to the input, ``best_of_products`` the label is the best objectness x class product
    (else the best class probability, multiplied after)."""

    strict: bool
    clip: bool
    best_of_products: bool


RULE = Rule(strict=True, clip=False, best_of_products=True)  # every pipeline's (the module docstring)
SEED_RULE = Rule(strict=False, clip=True, best_of_products=False)  # the YOLOv5 GPU seed's


class Detections(NamedTuple):
    """One image's boxes: candidates (raw-row order) or final detections (by score).

    ``rows`` int64 index of the raw row each box came from; ``boxes`` (K, 4) float32
    x1, y1, x2, y2; ``scores`` (K,) float32; ``labels`` (K,) int64. numpy arrays or
    torch tensors, depending on the pipeline.
    """

    rows: object
    boxes: object
    scores: object
    labels: object

    def numpy(self) -> "Detections":
        """The same detections as numpy arrays on the host."""
        return Detections(*(a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a) for a in self))


class CandidateOverflow(RuntimeError):
    """More candidates passed the confidence threshold than the fixed buffer holds."""

    def __init__(self, counts: list[int], capacity: int, conf_threshold: float):
        self.counts, self.capacity = list(counts), capacity
        over = [(b, c) for b, c in enumerate(counts) if c > capacity]
        first = ", ".join(f"image {b}: {c}" for b, c in over[:4]) + (" ..." if len(over) > 4 else "")
        super().__init__(
            f"candidate buffer overflow: {len(over)} of {len(counts)} images have more candidates with "
            f"score > {conf_threshold:g} than the buffer's {capacity} rows ({first}); nothing was dropped: "
            f"raise max_candidates or the confidence threshold"
        )


@dataclass(frozen=True)
class PipelineConfig:
    """The post-processing parameters (YOLOv5's detect defaults: conf 0.25, IoU 0.45, 300)."""

    conf_threshold: float = DEFAULT_CONF
    iou_threshold: float = DEFAULT_IOU
    max_det: int = DEFAULT_MAX_DET
    max_candidates: int = DEFAULT_MAX_CANDIDATES  # the torch front end's buffer, per image
    input_size: tuple[int, int] = (640, 640)  # (width, height): where the seed's kernels clip boxes
    layout: str = "yolov5"  # of the raw output: yolov5 [B, R, 5 + C] or yolov8 [B, 4 + C, A]

    def __post_init__(self):
        if not isinstance(self.layout, str) or self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        for name in ("conf_threshold", "iou_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
                    math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
        for name in ("max_det", "max_candidates"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        size = self.input_size
        if (not isinstance(size, (tuple, list)) or len(size) != 2
                or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v > 0
                           for v in size)):
            raise ValueError(f"input_size must be (width, height), two positive numbers; got {size!r}")


# ------------------------------------------------------------------ input validation

def validate_raw(raw, layout: str = "yolov5") -> None:
    """Raise ``ValueError`` naming the first problem with raw detector output.

    Expects a floating numpy array or torch tensor ``[B, R, 5 + C]`` (``yolov5``) or
    ``[B, 4 + C, A]`` (``yolov8``), C >= 1, finite, with w, h >= 0 and objectness and class
    scores in [0, 1]. Runs once, outside timing.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if isinstance(raw, torch.Tensor):
        array = raw.detach().cpu().numpy() if raw.dtype != torch.bfloat16 else raw.detach().float().cpu().numpy()
    elif isinstance(raw, np.ndarray):
        array = raw
    else:
        raise ValueError(f"raw detector output must be a numpy array or torch tensor, got {type(raw).__name__}")
    if layout == "yolov8":
        if array.ndim != 3 or array.shape[1] < LAYOUT_FIELDS["yolov8"] + 1:
            raise ValueError(
                f"raw yolov8 output must have shape [B, 4 + classes, A] (cx, cy, w, h, class scores, channels first; "
                f"YOLOv8 at 640: [B, 84, 8400]); got {list(array.shape)}")
        array = array.transpose(0, 2, 1)  # the checks below read rows
    elif array.ndim != 3 or array.shape[2] < BOX_FIELDS + 1:
        raise ValueError(
            f"raw detector output must have shape [B, R, 5 + classes] (cx, cy, w, h, objectness, class scores; "
            f"YOLOv5 at 640: [B, 25200, 85]); got {list(array.shape)}")
    if array.dtype.kind != "f":
        raise ValueError(f"raw detector output must be floating point, got {array.dtype}")
    bad = ~np.isfinite(array)
    if bad.any():
        b, r, c = np.argwhere(bad)[0]
        raise ValueError(f"raw detector output contains NaN or Inf (first at image {b}, row {r}, column {c}: {array[b, r, c]})")
    if array.dtype.itemsize > 4:  # the pipelines compute in float32
        bad = np.abs(array) > np.finfo(np.float32).max
        if bad.any():
            b, r, c = np.argwhere(bad)[0]
            raise ValueError(f"raw detector output overflows float32, the pipelines' dtype (first at image {b}, row {r}, "
                             f"column {c}: {array[b, r, c]})")
    bad = array[:, :, 2:4] < 0
    if bad.any():
        b, r, c = np.argwhere(bad)[0]
        raise ValueError(f"box width and height must be >= 0; image {b}, row {r} has {'wh'[c]} = {array[b, r, 2 + c]}")
    probs = array[:, :, 4:]
    bad = (probs < 0) | (probs > 1)
    if bad.any():
        b, r, c = np.argwhere(bad)[0]
        value = probs[b, r, c]
        c += layout == "yolov8"  # no objectness column: column 4 is class 0
        what = "objectness" if c == 0 else f"class {c - 1} score"
        raise ValueError(
            f"objectness and class scores must be probabilities in [0, 1] (sigmoid already applied, as YOLOv5 "
            f"exports them); image {b}, row {r} has {what} = {value}")


# ------------------------------------------------------------------ numpy reference

def decode_numpy(raw: np.ndarray, conf_threshold: float, input_size: tuple[float, float], layout: str = "yolov5",
                 rule: Rule = SEED_RULE) -> list[Detections]:
    """Confidence filter and box decode of ``raw`` (``layout``) by ``rule``, one
    ``Detections`` per image (candidates in raw-row order). The pipelines pass :data:`RULE`;
    the default is the seed's rule, with which the recordings' floors were written."""
    width, height = np.float32(input_size[0]), np.float32(input_size[1])
    threshold = np.float32(conf_threshold)
    zero, half = np.float32(0), np.float32(0.5)
    above = np.greater if rule.strict else np.greater_equal
    out = []
    for p in raw:
        if layout == "yolov8":  # [4 + C, A]: reduced over the classes in place, the candidates' columns read after
            cls = p[LAYOUT_FIELDS["yolov8"]:]
            rows = np.flatnonzero(above(cls.max(axis=0), threshold))
            q, cls = p[:, rows].T, cls[:, rows]
            best = cls.argmax(axis=0)
            score = cls[best, np.arange(len(rows))]
        else:
            rows = np.flatnonzero(above(p[:, 4], threshold))  # score <= objectness: an exact prefilter
            q = p[rows]
            cls = q[:, BOX_FIELDS:]
            if rule.best_of_products:
                products = cls * q[:, 4:5]
                best = products.argmax(axis=1)
                score = np.take_along_axis(products, best[:, None], axis=1)[:, 0]
            else:
                best = cls.argmax(axis=1)
                score = q[:, 4] * np.take_along_axis(cls, best[:, None], axis=1)[:, 0]
            passed = above(score, threshold)
            rows, q, best, score = rows[passed], q[passed], best[passed], score[passed]
        hw, hh = q[:, 2] * half, q[:, 3] * half
        corners = [q[:, 0] - hw, q[:, 1] - hh, q[:, 0] + hw, q[:, 1] + hh]
        if rule.clip:
            corners = [np.clip(v, zero, limit) for v, limit in zip(corners, (width, height, width, height))]
        boxes = np.stack(corners, axis=1).reshape(-1, 4)
        out.append(Detections(rows.astype(np.int64), boxes, score, best.astype(np.int64)))
    return out


def greedy_nms_numpy(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Greedy NMS, the classic numpy loop: kept indices by descending score (ties: lower index).

    IoU arithmetic is torchvision's, in the boxes' dtype, compared with the threshold in
    float64 as torchvision does; 0/0 (two zero-area boxes) never exceeds it.
    """
    order = np.argsort(-scores, kind="stable")
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    zero, threshold = boxes.dtype.type(0), np.float64(iou_threshold)
    keep = []
    while order.size:
        i, rest = order[0], order[1:]
        keep.append(i)
        w = np.maximum(zero, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]))
        h = np.maximum(zero, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]))
        inter = w * h
        with np.errstate(invalid="ignore", divide="ignore"):
            iou = inter / (areas[i] + areas[rest] - inter)
        order = rest[~(iou > threshold)]
    return np.asarray(keep, dtype=np.int64)


def _by_score_numpy(keep: np.ndarray, scores: np.ndarray) -> np.ndarray:
    keep = np.sort(keep)
    return keep[np.argsort(-scores[keep], kind="stable")]


def nms_numpy(candidates: list[Detections], iou_threshold: float, max_det: int) -> list[Detections]:
    """Per image: greedy NMS per class, merged by score (ties: lower raw row), the best ``max_det``."""
    out = []
    for c in candidates:
        kept = [np.zeros(0, np.int64)]
        for label in np.unique(c.labels):
            members = np.flatnonzero(c.labels == label)
            kept.append(members[greedy_nms_numpy(c.boxes[members], c.scores[members], iou_threshold)])
        keep = _by_score_numpy(np.concatenate(kept), c.scores)[:max_det]
        out.append(Detections(c.rows[keep], c.boxes[keep], c.scores[keep], c.labels[keep]))
    return out


# ------------------------------------------------------------------ torch front end

class CandidateBuffer(NamedTuple):
    """The torch front end's output: fixed [B, capacity] buffers and per-image counts (host ints)."""

    rows: torch.Tensor
    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor
    counts: list[int]

    def image(self, b: int) -> Detections:
        n = self.counts[b]
        return Detections(self.rows[b, :n], self.boxes[b, :n], self.scores[b, :n], self.labels[b, :n])


def empty_buffer(batch: int, capacity: int, device) -> CandidateBuffer:
    """Buffers for :func:`decode_torch`, allocated once (outside any timed region)."""
    return CandidateBuffer(
        torch.zeros(batch, capacity, dtype=torch.int64, device=device),
        torch.zeros(batch, capacity, 4, dtype=torch.float32, device=device),
        torch.zeros(batch, capacity, dtype=torch.float32, device=device),
        torch.zeros(batch, capacity, dtype=torch.int64, device=device),
        [0] * batch,
    )


def decode_torch(raw: torch.Tensor, conf_threshold: float, input_size: tuple[float, float],
                 buffer: CandidateBuffer, layout: str = "yolov5", rule: Rule = RULE) -> CandidateBuffer:
    """Confidence filter and decode with torch ops into ``buffer``'s fixed rows, by ``rule``.

    As in YOLOv5's ``non_max_suppression``, yolov5 rows whose objectness is not above the
    threshold are dropped first (they cannot pass: class probabilities are <= 1), then the
    score is compared with the threshold in float32, as the CUDA kernels do. Raises
    :class:`CandidateOverflow` when an image has more candidates than the buffer holds; the
    counts come to the host for that check and for the NMS that follows.
    """
    batch, capacity = buffer.scores.shape
    if raw.shape[0] != batch:
        raise ValueError(f"raw has {raw.shape[0]} images but the buffer was made for {batch}")
    threshold = float(np.float32(conf_threshold))  # the float32 value, whatever precision compares it

    def above(values: torch.Tensor) -> torch.Tensor:
        return values > threshold if rule.strict else values >= threshold

    if layout == "yolov8":
        best_score, best = raw[:, LAYOUT_FIELDS["yolov8"]:].max(dim=1)  # over the classes; the first maximum on ties
        image, row = above(best_score).nonzero(as_tuple=True)  # row-major: images ascending
        q, best, score = raw.transpose(1, 2)[image, row], best[image, row], best_score[image, row]
    else:
        image, row = above(raw[:, :, 4]).nonzero(as_tuple=True)
        q = raw[image, row]
        if rule.best_of_products:
            score, best = (q[:, BOX_FIELDS:] * q[:, 4:5]).max(dim=1)
        else:
            best_score, best = q[:, BOX_FIELDS:].max(dim=1)
            score = q[:, 4] * best_score
        passed = above(score)
        image, row, q, best, score = image[passed], row[passed], q[passed], best[passed], score[passed]
    per_image = torch.bincount(image, minlength=batch)
    counts = per_image.tolist()
    if max(counts, default=0) > capacity:
        raise CandidateOverflow(counts, capacity, conf_threshold)
    slot = torch.arange(image.shape[0], device=raw.device) - (per_image.cumsum(0) - per_image)[image]
    half = q[:, 2:4] * 0.5
    corners = [q[:, 0] - half[:, 0], q[:, 1] - half[:, 1], q[:, 0] + half[:, 0], q[:, 1] + half[:, 1]]
    if rule.clip:
        width, height = float(input_size[0]), float(input_size[1])
        corners = [v.clamp(0, limit) for v, limit in zip(corners, (width, height, width, height))]
    buffer.rows[image, slot] = row
    buffer.boxes[image, slot] = torch.stack(corners, dim=1)
    buffer.scores[image, slot] = score
    buffer.labels[image, slot] = best
    return buffer._replace(counts=counts)


def _by_score_torch(keep: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    keep = keep.sort().values
    return keep[torch.sort(scores[keep], descending=True, stable=True).indices]


def nms_torch(buffer: CandidateBuffer, nms: Callable[[Detections], torch.Tensor], max_det: int) -> list[Detections]:
    """Per image: ``nms(candidates)`` gives kept indices; ordered by score (ties: lower raw row), cut to ``max_det``."""
    out = []
    for b in range(len(buffer.counts)):
        c = buffer.image(b)
        keep = _by_score_torch(nms(c), c.scores)[:max_det]
        out.append(Detections(c.rows[keep], c.boxes[keep], c.scores[keep], c.labels[keep]))
    return out


# ------------------------------------------------------------------ pipelines

class Prepared:
    """One pipeline set up on one batch: ``decode()``, ``nms(candidates)`` and ``run()``
    are the timed calls; everything else (moves, casts, buffers) happened when it was made.

    A pipeline that is one call gives ``call`` instead (its only stage is ``total``) and
    ``finish(output)``, which turns the call's output into one :class:`Detections` per image
    outside the timed region."""

    def __init__(self, decode: Optional[Callable[[], object]] = None,
                 nms: Optional[Callable[[object], list[Detections]]] = None, *,
                 call: Optional[Callable[[], object]] = None, finish: Optional[Callable[[object], list]] = None):
        if (call is None) == (decode is None or nms is None):
            raise ValueError("a prepared pipeline has decode and nms, or one call")
        self.decode, self.nms, self.call = decode, nms, call
        self._finish = finish

    @property
    def stages(self) -> tuple[str, ...]:
        return ("total",) if self.call is not None else STAGES

    def run(self) -> object:
        return self.call() if self.call is not None else self.nms(self.decode())

    def finish(self, output) -> list[Detections]:
        """The detections of a ``run()`` (or ``nms``) output."""
        return self._finish(output) if self._finish is not None else output

    def detections(self) -> list[Detections]:
        return self.finish(self.run())


@dataclass(frozen=True)
class Pipeline:
    """A registered post-processing pipeline.

    ``build(raw, config, device)`` gets the raw batch as a float32 numpy array on the host
    and returns a :class:`Prepared`; ``nms_family`` says which NMS definition its
    detections follow (``hard``: the numpy reference exactly; ``allpairs``: may suppress more);
    ``stages`` the stages it has (one call: ``total`` only); ``layouts`` the raw layouts it reads.
    """

    name: str
    summary: str
    devices: tuple[str, ...]
    nms_family: str
    build: Callable[[np.ndarray, PipelineConfig, str], Prepared]
    requires: tuple[str, ...] = ()
    availability_of: Optional[Callable[[str], tuple[bool, str]]] = None
    stages: tuple[str, ...] = STAGES
    layouts: tuple[str, ...] = LAYOUTS

    def reads(self, layout: str) -> tuple[bool, str]:
        """(readable, reason): whether it reads raw output of ``layout``."""
        if layout in self.layouts:
            return True, ""
        return False, f"{self.name} reads the {' and '.join(self.layouts)} layout{'s' if len(self.layouts) > 1 else ''} only"

    def availability(self, device: str) -> tuple[bool, str]:
        """(available, reason) for ``device`` on this machine."""
        if device not in self.devices:
            return False, f"{self.name} has no {device} path"
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return False, f"{module} not installed"
        if device == "cuda" and not torch.cuda.is_available():
            return False, "no CUDA device"
        return self.availability_of(device) if self.availability_of else (True, "")


_PIPELINES: dict[str, Pipeline] = {}


def register_pipeline(pipeline: Pipeline) -> Pipeline:
    """Add a pipeline (the extension point: e.g. the seed's CuPy kernels, later)."""
    if pipeline.name in _PIPELINES or pipeline.name.startswith("torch+"):
        raise ValueError(f"pipeline name {pipeline.name!r} is taken (torch+<impl> names are derived from the NMS registry)")
    _PIPELINES[pipeline.name] = pipeline
    return pipeline


def unregister_pipeline(name: str) -> None:
    _PIPELINES.pop(name, None)


def _build_numpy(raw: np.ndarray, config: PipelineConfig, device: str) -> Prepared:
    raw = np.ascontiguousarray(raw, dtype=np.float32)
    return Prepared(lambda: decode_numpy(raw, config.conf_threshold, config.input_size, config.layout, RULE),
                    lambda candidates: nms_numpy(candidates, config.iou_threshold, config.max_det))


def _torch_front_end(raw: np.ndarray, config: PipelineConfig, device: str):
    tensor = torch.from_numpy(np.ascontiguousarray(raw, dtype=np.float32)).to(device)
    buffer = empty_buffer(tensor.shape[0], config.max_candidates, device)
    return lambda: decode_torch(tensor, config.conf_threshold, config.input_size, buffer, config.layout)


def _build_batched_nms(raw: np.ndarray, config: PipelineConfig, device: str) -> Prepared:
    import torchvision

    def nms(c: Detections) -> torch.Tensor:
        return torchvision.ops.batched_nms(c.boxes, c.scores, c.labels, config.iou_threshold)

    return Prepared(_torch_front_end(raw, config, device), lambda buffer: nms_torch(buffer, nms, config.max_det))


def _registry_pipeline(impl) -> Pipeline:
    def build(raw: np.ndarray, config: PipelineConfig, device: str) -> Prepared:
        fn = impl.backend(device).fn
        params = impl.resolve_params({})

        def nms(c: Detections) -> torch.Tensor:
            return fn(c.boxes, c.scores, iou_threshold=config.iou_threshold, labels=c.labels, **params).keep

        return Prepared(_torch_front_end(raw, config, device), lambda buffer: nms_torch(buffer, nms, config.max_det))

    def availability(device: str) -> tuple[bool, str]:
        backend = impl.backend(device)
        available, reason = backend.availability()
        if available and torch.float32 not in backend.dtypes:
            return False, f"{impl.name} on {device} does not take float32"
        return available, reason

    return Pipeline(
        name=f"torch+{impl.name}", devices=impl.devices, nms_family=impl.family, build=build,
        summary=f"torch decode into the fixed buffer, then {impl.name} ({impl.family}) per image",
        availability_of=availability,
    )


register_pipeline(Pipeline(
    "numpy", "CPU reference: numpy decode and filter, greedy NMS per class in numpy", ("cpu",), "hard", _build_numpy))
register_pipeline(Pipeline(
    "torch_batched_nms", "torch decode into the fixed buffer, torchvision.ops.batched_nms per image", ("cpu", "cuda"),
    "hard", _build_batched_nms, requires=("torchvision",)))

PIPELINE_NMS_FAMILIES = ("hard", "allpairs")  # registered NMS families that a torch+<impl> pipeline is made for
REFERENCE_PIPELINE = "numpy"


def pipelines() -> dict[str, Pipeline]:
    """Every pipeline by name: the registered ones and ``torch+<impl>`` per hard/all-pairs NMS."""
    from .registry import implementations

    impls = implementations()  # imports implementations/, whose modules may register pipelines
    derived = {f"torch+{name}": _registry_pipeline(impl) for name, impl in sorted(impls.items())
               if impl.family in PIPELINE_NMS_FAMILIES}
    return {**_PIPELINES, **derived}


def get_pipeline(name: str) -> Pipeline:
    known = pipelines()
    if name not in known:
        raise ValueError(f"unknown pipeline {name!r}; known: {', '.join(known)}")
    return known[name]


def run_pipeline(name: str, raw, config: PipelineConfig | None = None, device: str = "cpu") -> list[Detections]:
    """Validate ``raw`` and run pipeline ``name`` once on it: the Python API.

    ``raw`` is ``[B, R, 5 + C]`` or, with ``config.layout`` yolov8, ``[B, 4 + C, A]`` (a
    single image without the batch axis is taken as B = 1).
    Returns one :class:`Detections` per image, by descending score.
    """
    config = PipelineConfig() if config is None else config
    if not isinstance(config, PipelineConfig):
        raise ValueError(f"config must be a PipelineConfig, got {type(config).__name__}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    if isinstance(raw, (np.ndarray, torch.Tensor)) and raw.ndim == 2:
        raw = raw[None]
    validate_raw(raw, config.layout)
    pipeline = get_pipeline(name)
    available, reason = pipeline.availability(device)
    if available:
        available, reason = pipeline.reads(config.layout)
    if not available:
        from .registry import BackendUnavailable

        raise BackendUnavailable(f"pipeline {name} on {device} is unavailable: {reason}")
    host = raw.detach().float().cpu().numpy() if isinstance(raw, torch.Tensor) else np.asarray(raw, dtype=np.float32)
    return pipeline.build(host, config, device).detections()


def compare_detections(detections: list[Detections], reference: list[Detections]) -> dict:
    """Agreement with the reference, detection by detection (a detection is an (image, raw row)).

    kept / ref_kept (totals over the batch), Jaccard of the two sets, extra and missing;
    ``mismatched`` counts common detections whose box, score or label differ.
    """
    if len(detections) != len(reference):
        raise ValueError(f"{len(detections)} images against a reference of {len(reference)}")
    kept = ref_kept = common = mismatched = 0
    for det, ref in zip(detections, reference):
        det, ref = det.numpy(), ref.numpy()
        kept, ref_kept = kept + len(det.rows), ref_kept + len(ref.rows)
        shared, i, j = np.intersect1d(det.rows, ref.rows, assume_unique=True, return_indices=True)
        common += len(shared)
        same = ((det.boxes[i] == ref.boxes[j]).all(axis=1) & (det.scores[i] == ref.scores[j])
                & (det.labels[i] == ref.labels[j]))
        mismatched += int((~same).sum())
    union = kept + ref_kept - common
    return {"kept": kept, "ref_kept": ref_kept, "jaccard": common / union if union else 1.0,
            "extra": kept - common, "missing": ref_kept - common, "mismatched": mismatched}
