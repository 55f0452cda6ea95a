"""NMS scored as a detector is: pre-NMS candidates per image, NMS per image, COCO metrics.

A source (:class:`AccuracySource`) holds each image's candidates (boxes, scores, category
ids) and the ground truth as a COCO instances dataset. :func:`detect` runs one
implementation through ``nmsbench.run_nms`` on every image (class-aware: only candidates
of one category suppress each other), timing each call, and keeps the ``max_det`` best
detections per image by final score (decayed scores for Matrix NMS and Soft-NMS, moved
boxes for weighted NMS). :func:`coco_metrics` scores them with a COCO evaluator:
faster-coco-eval where installed, else pycocotools; never a hand-written AP.

Sources: :func:`synthetic_source` (``nmsbench.datasets.scenes``) and :func:`coco_source`
(a COCO results-format candidates file and a COCO instances annotations file, both
validated entry by entry).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import numbers
import re
import reprlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .api import run_nms

MAX_DETECTIONS = 100  # per image, COCO's AR@100 and detectors' usual max_per_img
# An image is crowded when two of its ground-truth objects of one category overlap with
# IoU above this: there class-aware greedy NMS at its usual thresholds can suppress a
# true object's best candidate with its neighbour's.
CROWDED_IOU = 0.3
METRICS = ("ap", "ap50", "ap75", "ar100", "ar100_crowded")


@dataclass
class ImageCandidates:
    """One image's pre-NMS candidates: boxes (N, 4) x1, y1, x2, y2, scores (N,), category ids (N,)."""

    image_id: int
    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor


@dataclass
class AccuracySource:
    """Candidates per image (in the order they are processed) and the COCO ground truth."""

    name: str  # the rows' scenario column
    images: list[ImageCandidates]
    ground_truth: dict  # COCO instances: images, annotations, categories
    source_params: str  # JSON: the noise model's parameters, or the files
    image: str = ""  # the rows' image column (a COCO source: the candidates file's name)
    seed: object = ""
    crowded: list[int] = field(default_factory=list)  # ids of the crowded images (CROWDED_IOU)

    @property
    def n(self) -> int:
        """Candidates over all images."""
        return sum(int(im.scores.numel()) for im in self.images)

    @property
    def classes(self) -> int:
        return len(self.ground_truth["categories"])

    def to(self, device: str) -> "AccuracySource":
        images = [ImageCandidates(im.image_id, im.boxes.to(device), im.scores.to(device), im.labels.to(device))
                  for im in self.images]
        return AccuracySource(self.name, images, self.ground_truth, self.source_params, self.image, self.seed,
                              self.crowded)


# --- sources


def _split_by_image(image_ids, index, boxes, scores, labels) -> list[ImageCandidates]:
    """Per image (``image_ids[k]`` for index k) its rows of the arrays; ``index`` sorted."""
    bounds = np.searchsorted(index, np.arange(len(image_ids) + 1))
    tb, ts, tl = torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(labels)
    return [ImageCandidates(int(image_id), tb[a:b], ts[a:b], tl[a:b])
            for image_id, a, b in zip(image_ids, bounds[:-1], bounds[1:])]


def _xywh(boxes: np.ndarray) -> np.ndarray:
    return np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)


def synthetic_source(kind: str, images: int = 200, seed: int = 0, model=None) -> AccuracySource:
    """Scenes of ``kind`` (``nmsbench.datasets.scenes.KINDS``) as a source; image ids
    1..images; ``model``: another ``NoiseModel`` than the kind's."""
    from .datasets.scenes import generate_scenes

    scenes = generate_scenes(kind, images, seed, model)
    gt_xywh = _xywh(scenes.gt_boxes.astype(np.float64))
    ids = np.arange(1, scenes.images + 1)
    ground_truth = {
        "images": [{"id": int(i), "width": scenes.model.image_size, "height": scenes.model.image_size} for i in ids],
        "categories": [{"id": c, "name": f"class {c}"} for c in range(1, scenes.model.classes + 1)],
        "annotations": [{"id": k + 1, "image_id": int(scenes.gt_image[k]) + 1, "category_id": int(scenes.gt_labels[k]),
                         "bbox": [float(v) for v in gt_xywh[k]], "area": float(gt_xywh[k, 2] * gt_xywh[k, 3]),
                         "iscrowd": 0} for k in range(len(gt_xywh))],
    }
    per_image = _split_by_image(ids, scenes.image, scenes.boxes, scenes.scores, scenes.labels)
    return AccuracySource(kind, per_image, ground_truth, scenes.model.to_json(), seed=seed,
                          crowded=crowded_images(ground_truth))


# Ids travel to the COCO evaluators inside float64 detection rows (their loadRes reads an
# array): beyond 2**53 two ids become one float, and the evaluators match the wrong image.
MAX_ID = 2**53
MAX_JSON_DEPTH = 64  # a COCO file nests 5 levels (segmentation polygons); json.loads recurses per level
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong, _SHORT.maxlevel = 60, 60, 40, 3


def _show(value) -> str:
    """``repr`` cut short: a bad field may hold a whole file's worth of JSON."""
    return _SHORT.repr(value)


def _is_int(value) -> bool:
    return type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def _is_number(value) -> bool:
    if type(value) is float:  # JSON's numbers are int and float: checked first, as the ABCs are slow
        return math.isfinite(value)
    if not (type(value) is int or (isinstance(value, numbers.Real) and not isinstance(value, bool))):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond float64
        return False


def _id_problem(value, lowest: int = -MAX_ID) -> Optional[str]:
    """Why ``value`` is not a usable COCO id from ``lowest`` to 2**53 (None when it is one)."""
    if _is_int(value) and lowest <= value <= MAX_ID:
        return None
    return f"must be a whole number from {'-2**53' if lowest == -MAX_ID else lowest} to 2**53, got {_show(value)}"


def _bbox_problem(value) -> Optional[str]:
    """Why ``value`` is not a COCO bbox [x, y, w, h] (None when it is one); its corners
    x, y, x + w, y + h must fit in float32, the boxes' dtype."""
    if type(value) is not list or len(value) != 4:
        return f"must be a list of 4 numbers [x, y, width, height], got {_show(value)}"
    if not all(_is_number(v) for v in value):
        return f"must hold 4 finite numbers [x, y, width, height], got {_show(value)}"
    if value[2] < 0 or value[3] < 0:
        return f"width and height must be >= 0, got {_show(value)}"
    x, y, w, h = (float(v) for v in value)
    if max(abs(x), abs(y), abs(x + w), abs(y + h)) > _FLOAT32_MAX:
        return f"{_show(value)} does not fit in float32"
    return None


_JSON_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # in a string: an escaped quote is text
_NOT_MARK = bytes(set(range(256)) - set(b'"[]{}'))
_BRACKET_STEP = np.zeros(256, dtype=np.int8)
_BRACKET_STEP[[ord("["), ord("{")]] = 1
_BRACKET_STEP[[ord("]"), ord("}")]] = -1
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]', re.DOTALL)


def _json_depth(text: str) -> int:
    """How deep ``text``'s arrays and objects nest, counted in numpy, without recursion: the
    quotes and brackets in order, brackets inside strings left out."""
    data = text.encode("utf-8", "surrogatepass")
    if b"\\" in data:
        data = _JSON_ESCAPE.sub(b"", data)
    marks = np.frombuffer(data.translate(None, _NOT_MARK), dtype=np.uint8)
    quote = marks == ord('"')
    steps = _BRACKET_STEP[marks[(np.cumsum(quote, dtype=np.int64) % 2 == 0) & ~quote]]
    return int(np.cumsum(steps, dtype=np.int64).max()) if steps.size else 0


def _too_deep(text: str, path: Path) -> str:
    """The message for ``text`` nested deeper than MAX_JSON_DEPTH: the entry and field of
    the first bracket too deep, and its line and column."""
    stack: list[list] = []  # per open container: [is_object, index, key]
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            stack.append([token == "{", 0, None])
            if len(stack) > MAX_JSON_DEPTH:
                break
        elif token in "]}":
            if stack:
                stack.pop()
        elif token == ",":
            if stack:
                stack[-1][1:] = [stack[-1][1] + 1, None]
        elif stack and stack[-1][0] and stack[-1][2] is None:  # an object's key
            stack[-1][2] = token[1:-1]
    else:
        return f"{path}: nested deeper than {MAX_JSON_DEPTH} levels"
    first, second = stack[0], stack[1]
    if first[0] and second[0]:  # {"key": {...
        place = f"field {first[2]!r}"
    else:  # an annotations file's {"annotations": [{..., a candidates file's [{...
        place, inner = (f"{first[2]}[{second[1]}]", stack[2]) if first[0] else (f"entry {first[1]}", second)
        place += f", field {inner[2]!r}" if inner[0] and inner[2] is not None else ""
    line = text.count("\n", 0, match.start()) + 1
    column = match.start() - text.rfind("\n", 0, match.start())
    return (f"{path}: {place}: nested deeper than {MAX_JSON_DEPTH} levels (line {line}, column {column}); "
            "a COCO file needs 5")


def _read_json(path: Path, what: str):
    """The JSON in ``path``; arrays and objects nested deeper than MAX_JSON_DEPTH are refused
    before the parser (which recurses per level) sees them."""
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except OSError as e:
        raise ValueError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: the {what} are not valid JSON (not UTF-8 text: {e})") from None
    if _json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(_too_deep(text, path))
    try:
        return json.loads(text)
    except RecursionError:  # not reached through the check above; kept as a last guard
        raise ValueError(f"{path}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:
        raise ValueError(f"{path}: the {what} are not valid JSON ({e})") from None


def load_annotations(path) -> dict:
    """A COCO instances file, checked: a clean ground-truth dict (images, categories,
    annotations with id, image_id, category_id, bbox, area, iscrowd), or a ValueError
    naming the file, the entry and the field."""
    path = Path(path)
    data = _read_json(path, "annotations")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a COCO instances object with images, annotations and categories, "
                         f"got a JSON {type(data).__name__}")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise ValueError(f"{path}: field '{key}': must be a list (a COCO instances file has images, annotations "
                             f"and categories), got {_show(data.get(key))}")

    def ids(key: str) -> list[int]:
        seen: set[int] = set()
        for i, entry in enumerate(data[key]):
            if not isinstance(entry, dict):
                raise ValueError(f"{path}: {key}[{i}]: must be an object with an 'id', got {_show(entry)}")
            value = entry.get("id")
            problem = _id_problem(value)
            if problem:
                raise ValueError(f"{path}: {key}[{i}], field 'id': {problem}")
            if value in seen:
                raise ValueError(f"{path}: {key}[{i}], field 'id': {value} appears twice")
            seen.add(value)
        return [int(entry["id"]) for entry in data[key]]

    images, categories = ids("images"), ids("categories")
    image_set, category_set = set(images), set(categories)
    annotations, annotation_ids = [], set()
    for i, entry in enumerate(data["annotations"]):
        where = f"{path}: annotations[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be an object, got {_show(entry)}")
        for key, known, what in (("image_id", image_set, "images"), ("category_id", category_set, "categories")):
            value = entry.get(key)
            problem = _id_problem(value)
            if problem:
                raise ValueError(f"{where}, field '{key}': {problem}")
            if value not in known:
                raise ValueError(f"{where}, field '{key}': {value} is not an id of its {what}")
        problem = _bbox_problem(entry.get("bbox"))
        if problem:
            raise ValueError(f"{where}, field 'bbox': {problem}")
        x, y, w, h = (float(v) for v in entry["bbox"])
        area = entry.get("area", w * h)
        if not _is_number(area) or area < 0:
            raise ValueError(f"{where}, field 'area': must be a finite number >= 0, got {_show(area)}")
        crowd = entry.get("iscrowd", 0)
        if isinstance(crowd, bool) or crowd not in (0, 1):
            raise ValueError(f"{where}, field 'iscrowd': must be 0 or 1, got {_show(crowd)}")
        annotation_id = entry.get("id", i + 1)
        problem = _id_problem(annotation_id, lowest=1)
        if problem:  # both evaluators mark a match with the object's id: 0 is "unmatched", and faster-coco-eval's < 0 too
            raise ValueError(f"{where}, field 'id': {problem} (an annotation id of 0 or below reads as no match)")
        if annotation_id in annotation_ids:
            raise ValueError(f"{where}, field 'id': {annotation_id} appears twice (an annotation without an id "
                             "takes its position + 1)")
        annotation_ids.add(annotation_id)
        annotations.append({"id": int(annotation_id), "image_id": int(entry["image_id"]),
                            "category_id": int(entry["category_id"]), "bbox": [x, y, w, h], "area": float(area),
                            "iscrowd": int(crowd)})
    return {"images": [{"id": i} for i in images], "categories": [{"id": c} for c in categories],
            "annotations": annotations}


def load_candidates(path, ground_truth: dict, annotations_name: str = "the annotations"):
    """A COCO results-format candidates file (a list of {image_id, category_id, bbox
    [x, y, w, h], score}) checked against ``ground_truth``: arrays (image ids, boxes x1, y1,
    x2, y2 float32, scores float32, category ids), or a ValueError naming the file, the
    entry and the field."""
    path = Path(path)
    data = _read_json(path, "candidates")
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of candidates in COCO results format "
                         f"([{{image_id, category_id, bbox, score}}, ...]), got a JSON {type(data).__name__}")
    images = {im["id"] for im in ground_truth["images"]}
    categories = {c["id"] for c in ground_truth["categories"]}
    for i, entry in enumerate(data):
        where = f"{path}: entry {i}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be an object {{image_id, category_id, bbox, score}}, got {_show(entry)}")
        for key in ("image_id", "category_id", "bbox", "score"):
            if key not in entry:
                raise ValueError(f"{where}, field '{key}': missing")
        image_id, category, bbox, score = entry["image_id"], entry["category_id"], entry["bbox"], entry["score"]
        for key, value, known, what in (("image_id", image_id, images, "an image"),
                                        ("category_id", category, categories, "a category")):
            problem = _id_problem(value)
            if problem:
                raise ValueError(f"{where}, field '{key}': {problem}")
            if value not in known:
                raise ValueError(f"{where}, field '{key}': {value} is not {what} of {annotations_name}")
        problem = _bbox_problem(bbox)
        if problem:
            raise ValueError(f"{where}, field 'bbox': {problem}")
        if not _is_number(score) or abs(score) > _FLOAT32_MAX:
            raise ValueError(f"{where}, field 'score': must be a finite number (within float32), got {_show(score)}")
    image_ids = np.array([entry["image_id"] for entry in data], dtype=np.int64)
    labels = np.array([entry["category_id"] for entry in data], dtype=np.int64)
    boxes = np.array([entry["bbox"] for entry in data], dtype=np.float64).reshape(-1, 4)
    scores = np.array([entry["score"] for entry in data], dtype=np.float64)
    boxes[:, 2:] += boxes[:, :2]
    return image_ids, boxes.astype(np.float32), scores.astype(np.float32), labels


def coco_source(candidates, annotations, image_ids: Optional[list[int]] = None) -> AccuracySource:
    """Candidates and ground truth from COCO files; ``image_ids``: only these images (in
    this order; default: every image of the annotations, in their order)."""
    candidates, annotations = Path(candidates), Path(annotations)
    ground_truth = load_annotations(annotations)
    known = [im["id"] for im in ground_truth["images"]]
    # checked against every image of the annotations, also those --image-ids leaves out
    ids, boxes, scores, labels = load_candidates(candidates, ground_truth, annotations.name)
    if image_ids is not None:
        bad = [i for i in image_ids if _id_problem(i)]
        if bad:
            raise ValueError(f"--image-ids: {_id_problem(bad[0])}")
        known_set = set(known)
        missing = [i for i in image_ids if i not in known_set]
        if missing:
            raise ValueError(f"{annotations}: has no image with id {', '.join(map(str, missing[:10]))}"
                             f"{' ...' if len(missing) > 10 else ''} (--image-ids)")
        if len(set(image_ids)) != len(image_ids):
            raise ValueError(f"--image-ids names an image twice: {', '.join(map(str, image_ids))}")
        chosen = set(image_ids)
        ground_truth = {"images": [im for im in ground_truth["images"] if im["id"] in chosen],
                        "categories": ground_truth["categories"],
                        "annotations": [a for a in ground_truth["annotations"] if a["image_id"] in chosen]}
    order = list(image_ids) if image_ids is not None else known
    # each candidate's image position in the processing order (-1: an image left out)
    position = {image_id: k for k, image_id in enumerate(order)}
    index = np.array([position.get(int(i), -1) for i in ids], dtype=np.int64)
    inside = index >= 0
    sort = np.argsort(index[inside], kind="stable")
    per_image = _split_by_image(order, index[inside][sort], boxes[inside][sort], scores[inside][sort],
                                labels[inside][sort])
    params = json.dumps({"candidates": candidates.name, "annotations": annotations.name}, sort_keys=True)
    return AccuracySource("coco", per_image, ground_truth, params, image=candidates.name,
                          crowded=crowded_images(ground_truth))


def crowded_images(ground_truth: dict, threshold: float = CROWDED_IOU) -> list[int]:
    """Ids of the images where two ground-truth objects of one category overlap with IoU >
    ``threshold`` (crowd annotations, ``iscrowd`` 1, left out)."""
    from torchvision.ops import box_iou

    by_key: dict[tuple[int, int], list] = {}
    for a in ground_truth["annotations"]:
        if not a.get("iscrowd", 0):
            by_key.setdefault((a["image_id"], a["category_id"]), []).append(a["bbox"])
    crowded = set()
    for (image_id, _), bboxes in by_key.items():
        if len(bboxes) < 2 or image_id in crowded:
            continue
        b = torch.tensor(bboxes, dtype=torch.float64)
        b[:, 2:] += b[:, :2]
        iou = box_iou(b, b).triu(diagonal=1)
        if bool((iou > threshold).any()):
            crowded.add(image_id)
    return [im["id"] for im in ground_truth["images"] if im["id"] in crowded]


# --- NMS per image


@dataclass
class Detections:
    """One implementation's output over a source: COCO results rows (image_id, x, y, w, h,
    score, category_id), the time of each call (ns) and the boxes NMS kept before the cap."""

    rows: np.ndarray
    times_ns: np.ndarray
    kept: int


def detect(name: str, source: AccuracySource, iou_threshold: float, params: dict | None = None,
           max_det: int = MAX_DETECTIONS) -> Detections:
    """Run implementation ``name`` on every image of ``source`` (on the device its tensors
    are on) through ``nmsbench.run_nms``, timing each call (CUDA synchronized before and
    after), and keep each image's ``max_det`` best detections by final score. A first,
    untimed call on the largest image compiles what the backend compiles."""
    params = params or {}
    cuda = bool(source.images) and source.images[0].boxes.is_cuda
    if source.images:
        warm = max(source.images, key=lambda im: im.scores.numel())
        run_nms(name, warm.boxes, warm.scores, iou_threshold=iou_threshold, labels=warm.labels, **params)
    times = np.empty(len(source.images), dtype=np.int64)
    rows, kept = [], 0
    for k, im in enumerate(source.images):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter_ns()
        result = run_nms(name, im.boxes, im.scores, iou_threshold=iou_threshold, labels=im.labels, **params)
        if cuda:
            torch.cuda.synchronize()
        times[k] = time.perf_counter_ns() - start
        keep = result.keep.cpu()
        kept += int(keep.numel())
        scores = (result.scores if result.scores is not None else im.scores[result.keep]).cpu().double()
        boxes = (result.boxes if result.boxes is not None else im.boxes[result.keep]).cpu().double()
        labels = im.labels[result.keep].cpu()
        best = torch.argsort(scores, descending=True, stable=True)[:max_det]
        b = boxes[best]
        rows.append(torch.cat([torch.full((len(best), 1), float(im.image_id), dtype=torch.float64),
                               b[:, :2], b[:, 2:] - b[:, :2], scores[best, None], labels[best, None].double()],
                              dim=1).numpy())
    table = np.concatenate(rows) if rows else np.empty((0, 7))
    return Detections(table, times, kept)


def nms_pass(name: str, source: AccuracySource, iou_threshold: float, params: dict | None = None):
    """A zero-argument call that runs implementation ``name`` once on every image of
    ``source`` through ``nmsbench.run_nms``, waiting for the GPU after each image as a
    detector does: the accuracy benchmark's timed call (its time / images is the time per
    image). Nothing is kept: the detections come from :func:`detect`."""
    params = params or {}
    cuda = bool(source.images) and source.images[0].boxes.is_cuda
    images = [(im.boxes, im.scores, im.labels) for im in source.images]

    def run() -> None:
        for boxes, scores, labels in images:
            run_nms(name, boxes, scores, iou_threshold=iou_threshold, labels=labels, **params)
            if cuda:
                torch.cuda.synchronize()

    return run


# --- scoring


def evaluator_name() -> str:
    """The COCO evaluator :func:`coco_metrics` uses here: faster-coco-eval, else pycocotools."""
    try:
        import faster_coco_eval  # noqa: F401

        return "faster-coco-eval"
    except ImportError:
        pass
    try:
        import pycocotools  # noqa: F401

        return "pycocotools"
    except ImportError:
        raise RuntimeError("no COCO evaluator is installed: pip install faster-coco-eval (or pycocotools)") from None


def _evaluate(ground_truth: dict, rows: np.ndarray, image_ids: Optional[list[int]] = None) -> np.ndarray:
    """COCO bbox ``stats`` (the 12 numbers of ``summarize``) of the detection ``rows``
    (image_id, x, y, w, h, score, category_id), over ``image_ids`` (default: all)."""
    gt_data = {key: ground_truth[key] for key in ("images", "categories", "annotations")}
    empty = gt_data | {"annotations": []}
    if evaluator_name() == "faster-coco-eval":
        from faster_coco_eval import COCO, COCOeval_faster

        def quiet(*args, **kwargs):
            pass

        gt = COCO(gt_data, use_deepcopy=True, print_function=quiet)
        dt = gt.loadRes(rows) if len(rows) else COCO(empty, use_deepcopy=True, print_function=quiet)
        evaluation = COCOeval_faster(gt, dt, "bbox", print_function=quiet)
    else:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval

        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
            gt = COCO()
            gt.dataset = json.loads(json.dumps(gt_data))
            gt.createIndex()
            if len(rows):
                dt = gt.loadRes(rows)
            else:  # its loadRes refuses an empty list
                dt = COCO()
                dt.dataset = json.loads(json.dumps(empty))
                dt.createIndex()
            evaluation = COCOeval(gt, dt, "bbox")
    if image_ids is not None:
        evaluation.params.imgIds = list(image_ids)
    with contextlib.redirect_stdout(io.StringIO()):
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return np.asarray(evaluation.stats, dtype=np.float64)


def coco_metrics(ground_truth: dict, rows: np.ndarray, crowded: Optional[list[int]] = None) -> dict:
    """COCO AP@[.5:.95], AP50, AP75 and AR@100 of the detections ``rows`` (image_id, x, y,
    w, h, score, category_id), as fractions; ``ar100_crowded``: AR@100 over the ``crowded``
    images only (NaN when there are none). A metric COCO cannot define (no ground truth) is NaN."""
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    rows = rows[np.argsort(rows[:, 0], kind="stable")]  # image by image, each image's own order kept
    stats = _evaluate(ground_truth, rows)

    def value(v: float) -> float:
        return float(v) if v >= 0 else math.nan  # COCO's -1: nothing to score

    metrics = {"ap": value(stats[0]), "ap50": value(stats[1]), "ap75": value(stats[2]), "ar100": value(stats[8])}
    if crowded:
        metrics["ar100_crowded"] = value(_evaluate(ground_truth, rows, crowded)[8])
    else:
        metrics["ar100_crowded"] = math.nan
    return metrics


__all__ = ["AccuracySource", "CROWDED_IOU", "Detections", "ImageCandidates", "MAX_DETECTIONS", "METRICS", "coco_metrics",
           "coco_source", "crowded_images", "detect", "evaluator_name", "load_annotations", "load_candidates", "nms_pass",
           "synthetic_source"]
