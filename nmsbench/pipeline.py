"""Detector post-processing: raw detector rows -> final detections, in stages.

The input is what YOLOv5's export emits, ``[B, R, 5 + C]`` per batch: for each of R
anchor rows ``cx, cy, w, h`` in input-image pixels, the objectness, and C class
probabilities (sigmoid already applied); YOLOv5 at 640 x 640 gives ``[B, 25200, 85]``.
Every pipeline does the same three things, the way the YOLOv5 GPU post-processing seed
describes them:

1. **decode** (confidence filter): score = objectness x best class probability; keep the
   rows whose score >= ``conf_threshold`` (compared in float32, as the CUDA kernel does);
   x1 = cx - w/2 ... clipped to the input image ``[0, W] x [0, H]``; label = best class
   (the lowest class index on ties). Rows whose objectness alone is below the threshold
   cannot pass (class probabilities are <= 1), so the numpy decode filters on objectness
   first, as YOLOv5 does; the result is the same.
2. **nms**: class-aware NMS (only boxes of one label interact) at ``iou_threshold``,
   then the ``max_det`` best by score.
3. **total**: both, end to end.

Each image's detections come out sorted by descending score, ties by lower raw row, and
carry the raw row they came from, so pipelines are compared detection by detection.

Pipelines (``pipelines()``):

- ``numpy``: the CPU reference, as the seed's baseline does it: numpy decode and filter,
  then greedy NMS per class in numpy (the classic sort-then-suppress loop).
- ``torch_batched_nms``: torch ops decode into a fixed candidate buffer, then
  ``torchvision.ops.batched_nms`` per image; runs on the CPU and on CUDA.
- ``torch+<impl>``: the same torch front end feeding each registered NMS implementation
  of the ``hard`` and ``allpairs`` families (``nmsbench.implementations()``).

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

BOX_FIELDS = 5  # cx, cy, w, h, objectness; class probabilities follow
STAGES = ("decode", "nms", "total")
DEFAULT_CONF = 0.25
DEFAULT_IOU = 0.45
DEFAULT_MAX_DET = 300
DEFAULT_MAX_CANDIDATES = 4096


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
            f"score >= {conf_threshold:g} than the buffer's {capacity} rows ({first}); nothing was dropped: "
            f"raise max_candidates or the confidence threshold"
        )


@dataclass(frozen=True)
class PipelineConfig:
    """The post-processing parameters (YOLOv5's detect defaults: conf 0.25, IoU 0.45, 300)."""

    conf_threshold: float = DEFAULT_CONF
    iou_threshold: float = DEFAULT_IOU
    max_det: int = DEFAULT_MAX_DET
    max_candidates: int = DEFAULT_MAX_CANDIDATES  # the torch front end's buffer, per image
    input_size: tuple[int, int] = (640, 640)  # (width, height): boxes are clipped to it

    def __post_init__(self):
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

def validate_raw(raw) -> None:
    """Raise ``ValueError`` naming the first problem with raw detector output.

    Expects a floating numpy array or torch tensor ``[B, R, 5 + C]`` (C >= 1), finite,
    with w, h >= 0 and objectness and class scores in [0, 1]. Runs once, outside timing.
    """
    if isinstance(raw, torch.Tensor):
        array = raw.detach().cpu().numpy() if raw.dtype != torch.bfloat16 else raw.detach().float().cpu().numpy()
    elif isinstance(raw, np.ndarray):
        array = raw
    else:
        raise ValueError(f"raw detector output must be a numpy array or torch tensor, got {type(raw).__name__}")
    if array.ndim != 3 or array.shape[2] < BOX_FIELDS + 1:
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
        what = "objectness" if c == 0 else f"class {c - 1} score"
        raise ValueError(
            f"objectness and class scores must be probabilities in [0, 1] (sigmoid already applied, as YOLOv5 "
            f"exports them); image {b}, row {r} has {what} = {probs[b, r, c]}")


# ------------------------------------------------------------------ numpy reference

def decode_numpy(raw: np.ndarray, conf_threshold: float, input_size: tuple[float, float]) -> list[Detections]:
    """Confidence filter and box decode of ``raw`` [B, R, 5 + C], one ``Detections`` per image
    (candidates in raw-row order)."""
    width, height = np.float32(input_size[0]), np.float32(input_size[1])
    threshold = np.float32(conf_threshold)
    zero, half = np.float32(0), np.float32(0.5)
    out = []
    for p in raw:
        rows = np.flatnonzero(p[:, 4] >= threshold)  # score <= objectness: an exact prefilter
        q = p[rows]
        cls = q[:, BOX_FIELDS:]
        best = cls.argmax(axis=1)
        score = q[:, 4] * np.take_along_axis(cls, best[:, None], axis=1)[:, 0]
        passed = score >= threshold
        rows, q, best, score = rows[passed], q[passed], best[passed], score[passed]
        hw, hh = q[:, 2] * half, q[:, 3] * half
        boxes = np.stack([np.clip(q[:, 0] - hw, zero, width), np.clip(q[:, 1] - hh, zero, height),
                          np.clip(q[:, 0] + hw, zero, width), np.clip(q[:, 1] + hh, zero, height)], axis=1)
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
                 buffer: CandidateBuffer) -> CandidateBuffer:
    """Confidence filter and decode with torch ops into ``buffer``'s fixed rows.

    As in YOLOv5's ``non_max_suppression``, rows whose objectness is below the threshold
    are dropped first (they cannot pass: class probabilities are <= 1), then score =
    objectness x best class is compared with the threshold in float32, as the CUDA kernel
    does. Raises :class:`CandidateOverflow` when an image has more candidates than the
    buffer holds; the counts come to the host for that check and for the NMS that follows.
    """
    batch, capacity = buffer.scores.shape
    if raw.shape[0] != batch:
        raise ValueError(f"raw has {raw.shape[0]} images but the buffer was made for {batch}")
    threshold = float(np.float32(conf_threshold))  # the float32 value, whatever precision compares it
    image, row = (raw[:, :, 4] >= threshold).nonzero(as_tuple=True)  # row-major: images ascending
    q = raw[image, row]
    best_score, best = q[:, BOX_FIELDS:].max(dim=1)  # the first maximum on ties
    score = q[:, 4] * best_score
    passed = score >= threshold
    image, row, q, best, score = image[passed], row[passed], q[passed], best[passed], score[passed]
    per_image = torch.bincount(image, minlength=batch)
    counts = per_image.tolist()
    if max(counts, default=0) > capacity:
        raise CandidateOverflow(counts, capacity, conf_threshold)
    slot = torch.arange(image.shape[0], device=raw.device) - (per_image.cumsum(0) - per_image)[image]
    half = q[:, 2:4] * 0.5
    width, height = float(input_size[0]), float(input_size[1])
    buffer.rows[image, slot] = row
    buffer.boxes[image, slot] = torch.stack(
        [(q[:, 0] - half[:, 0]).clamp(0, width), (q[:, 1] - half[:, 1]).clamp(0, height),
         (q[:, 0] + half[:, 0]).clamp(0, width), (q[:, 1] + half[:, 1]).clamp(0, height)], dim=1)
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
    are the timed calls; everything else (moves, casts, buffers) happened when it was made."""

    def __init__(self, decode: Callable[[], object], nms: Callable[[object], list[Detections]]):
        self.decode, self.nms = decode, nms

    def run(self) -> list[Detections]:
        return self.nms(self.decode())


@dataclass(frozen=True)
class Pipeline:
    """A registered post-processing pipeline.

    ``build(raw, config, device)`` gets the raw batch as a float32 numpy array on the host
    and returns a :class:`Prepared`; ``nms_family`` says which NMS definition its
    detections follow (``hard``: the numpy reference exactly; ``allpairs``: may suppress more).
    """

    name: str
    summary: str
    devices: tuple[str, ...]
    nms_family: str
    build: Callable[[np.ndarray, PipelineConfig, str], Prepared]
    requires: tuple[str, ...] = ()
    availability_of: Optional[Callable[[str], tuple[bool, str]]] = None

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
    return Prepared(lambda: decode_numpy(raw, config.conf_threshold, config.input_size),
                    lambda candidates: nms_numpy(candidates, config.iou_threshold, config.max_det))


def _torch_front_end(raw: np.ndarray, config: PipelineConfig, device: str):
    tensor = torch.from_numpy(np.ascontiguousarray(raw, dtype=np.float32)).to(device)
    buffer = empty_buffer(tensor.shape[0], config.max_candidates, device)
    return lambda: decode_torch(tensor, config.conf_threshold, config.input_size, buffer)


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

    ``raw`` is ``[B, R, 5 + C]`` (a single image's ``[R, 5 + C]`` is taken as B = 1).
    Returns one :class:`Detections` per image, by descending score.
    """
    config = PipelineConfig() if config is None else config
    if not isinstance(config, PipelineConfig):
        raise ValueError(f"config must be a PipelineConfig, got {type(config).__name__}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    if isinstance(raw, (np.ndarray, torch.Tensor)) and raw.ndim == 2:
        raw = raw[None]
    validate_raw(raw)
    pipeline = get_pipeline(name)
    available, reason = pipeline.availability(device)
    if not available:
        from .registry import BackendUnavailable

        raise BackendUnavailable(f"pipeline {name} on {device} is unavailable: {reason}")
    host = raw.detach().float().cpu().numpy() if isinstance(raw, torch.Tensor) else np.asarray(raw, dtype=np.float32)
    return pipeline.build(host, config, device).run()


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
