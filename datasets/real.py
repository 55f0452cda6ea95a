"""The ``real`` scenario: YOLOv3-tiny candidates recorded on real photos.

``real_yolov3_tiny.npz`` (beside this file, made by ``record_real.py``; REAL.md says how
and under which licences) holds, for each recording (photo x input size, keyed like
``bus.jpg@1312``), every candidate whose score (objectness x best class probability) is
at least ``FLOOR``, and for a few recordings every raw detector row.

The scenario's knob is the confidence threshold applied before NMS: the box set is the
recording's candidates with score >= the threshold (a float32 comparison), so a higher
threshold gives fewer boxes. Unlike the synthetic scenarios' knobs it sets N rather than
the overlap. ``n`` caps N the way a detector's pre-NMS top-k does (mmdet's ``nms_pre``,
YOLOv5's ``max_nms``): when more candidates pass, the ``n`` best by score are kept (ties:
lower raw row), in raw-row order. Labels are the detector's classes (0..79, COCO).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from nmsbench.boxes import BoxSet

DATA = Path(__file__).with_name("real_yolov3_tiny.npz")
FLOOR = 1e-5  # the lowest threshold the scenario accepts; the file's floor must not be above it
DEFAULT_RECORDING = "bus.jpg@1312"  # 25,215 raw rows, like YOLOv5's 25,200 at 640
DEFAULT_CONF = 0.001  # YOLOv5's validation threshold
NUM_CLASSES = 80
ARRAYS = ("cand_boxes", "cand_scores", "cand_labels", "cand_rows", "cand_offsets", "raw_xywh", "raw_probs", "raw_offsets")


@dataclass(frozen=True)
class Recording:
    """One photo at one input size."""

    key: str  # "<photo>@<input size>"
    image: str
    input_size: int
    rows: int  # raw detector rows (15 x (input_size / 32)^2 for YOLOv3-tiny)
    candidates: int  # rows with score >= the file's floor
    has_raw: bool
    source: str
    licence: str


class RealData:
    """The recorded file, validated on load."""

    def __init__(self, path: Path, meta: dict, arrays: dict):
        self.path, self.meta, self._arrays = path, meta, arrays
        self.recordings: dict[str, Recording] = {}
        raw_index = 0
        self._raw_slot: dict[str, int] = {}
        for r in meta["recordings"]:
            self.recordings[r["key"]] = Recording(r["key"], r["image"], int(r["input_size"]), int(r["rows"]),
                                                  int(r["candidates"]), bool(r["raw"]), r["source"], r["licence"])
            self._raw_slot[r["key"]] = raw_index if r["raw"] else -1
            raw_index += bool(r["raw"])
        self._index = {key: i for i, key in enumerate(self.recordings)}

    @property
    def floor(self) -> float:
        return float(self.meta["floor"])

    @property
    def class_names(self) -> list[str]:
        return list(self.meta["classes"])

    def recording(self, key: str) -> Recording:
        if key not in self.recordings:
            raise ValueError(f"unknown recording {key!r}; known: {', '.join(self.recordings)}")
        return self.recordings[key]

    def candidates(self, key: str):
        """(rows int64, boxes float32 (K, 4), scores float32, labels int64) of a recording, in raw-row order."""
        i = self._index[self.recording(key).key]
        a = self._arrays
        lo, hi = a["cand_offsets"][i], a["cand_offsets"][i + 1]
        return (a["cand_rows"][lo:hi].astype(np.int64), a["cand_boxes"][lo:hi], a["cand_scores"][lo:hi],
                a["cand_labels"][lo:hi].astype(np.int64))

    def raw(self, key: str) -> np.ndarray:
        """Every raw row of a recording that has them: float32 [R, 85] (cx, cy, w, h, objectness, 80 classes)."""
        rec = self.recording(key)
        if not rec.has_raw:
            with_raw = [k for k, r in self.recordings.items() if r.has_raw]
            raise ValueError(f"recording {key} has no raw rows stored; these do: {', '.join(with_raw)}")
        slot, a = self._raw_slot[key], self._arrays
        lo, hi = a["raw_offsets"][slot], a["raw_offsets"][slot + 1]
        return np.concatenate([a["raw_xywh"][lo:hi], a["raw_probs"][lo:hi].astype(np.float32)], axis=1)


def _fail(path, message: str):
    raise ValueError(f"{path}: {message}")


@lru_cache(maxsize=4)
def load_real(path: Path | str = DATA) -> RealData:
    """Load and validate the recorded file (cached); any problem is a ``ValueError`` naming it."""
    path = Path(path)
    if not path.is_file():
        _fail(path, "the recorded real-detector file is missing (regenerate it: python -m nmsbench.datasets.record_real)")
    try:
        with np.load(path, allow_pickle=False) as data:
            missing = [k for k in ("meta", *ARRAYS) if k not in data.files]
            if missing:
                _fail(path, f"missing arrays {', '.join(missing)}")
            meta = json.loads(str(data["meta"]))
            arrays = {k: data[k] for k in ARRAYS}
    except ValueError:
        raise
    except Exception as e:  # zip/json errors: a damaged file
        _fail(path, f"cannot read ({type(e).__name__}: {e})")
    data = RealData(path, meta, arrays)
    validate_real(data)
    return data


def validate_real(data: RealData) -> None:
    """Check the recorded file's consistency: shapes, offsets, finiteness, boxes, labels, metadata."""
    a, meta, path = data._arrays, data.meta, data.path
    for key in ("recordings", "floor", "classes", "weights_sha256", "detector"):
        if key not in meta:
            _fail(path, f"metadata lacks {key!r}")
    if len(meta["classes"]) != NUM_CLASSES:
        _fail(path, f"expected {NUM_CLASSES} class names, found {len(meta['classes'])}")
    if data.floor > FLOOR:
        _fail(path, f"candidates were stored from confidence {data.floor}, above the scenario's lowest threshold {FLOOR}")
    recs = list(data.recordings.values())
    if not recs:
        _fail(path, "no recordings")
    m = a["cand_scores"].shape[0]
    offsets = a["cand_offsets"]
    if (a["cand_boxes"].shape != (m, 4) or a["cand_labels"].shape != (m,) or a["cand_rows"].shape != (m,)
            or offsets.shape != (len(recs) + 1,) or offsets[0] != 0 or offsets[-1] != m or (np.diff(offsets) < 0).any()):
        _fail(path, "candidate arrays and offsets do not line up")
    for rec, count in zip(recs, np.diff(offsets)):
        if count != rec.candidates:
            _fail(path, f"{rec.key}: metadata says {rec.candidates} candidates, arrays hold {count}")
        rows, boxes, scores, labels = data.candidates(rec.key)
        if len(rows) and (rows.max() >= rec.rows or (np.diff(rows) <= 0).any()):
            _fail(path, f"{rec.key}: candidate rows must be increasing and below {rec.rows}")
        if not (np.isfinite(boxes).all() and np.isfinite(scores).all()):
            _fail(path, f"{rec.key}: non-finite boxes or scores")
        if (boxes[:, 2] < boxes[:, 0]).any() or (boxes[:, 3] < boxes[:, 1]).any():
            _fail(path, f"{rec.key}: boxes with x2 < x1 or y2 < y1")
        if (boxes < 0).any() or (boxes > rec.input_size).any():
            _fail(path, f"{rec.key}: boxes outside the {rec.input_size} x {rec.input_size} input")
        if len(scores) and (scores.min() < np.float32(data.floor) or scores.max() > 1):
            _fail(path, f"{rec.key}: scores outside [{data.floor}, 1]")
        if len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
            _fail(path, f"{rec.key}: labels outside 0..{NUM_CLASSES - 1}")
    raw_recs = [r for r in recs if r.has_raw]
    raw_offsets = a["raw_offsets"]
    if (raw_offsets.shape != (len(raw_recs) + 1,) or raw_offsets[0] != 0 or raw_offsets[-1] != a["raw_xywh"].shape[0]
            or a["raw_xywh"].shape[1:] != (4,) or a["raw_probs"].shape != (a["raw_xywh"].shape[0], 1 + NUM_CLASSES)):
        _fail(path, "raw arrays and offsets do not line up")
    for rec, count in zip(raw_recs, np.diff(raw_offsets)):
        if count != rec.rows:
            _fail(path, f"{rec.key}: {rec.rows} raw rows expected, {count} stored")
    if not (np.isfinite(a["raw_xywh"]).all() and np.isfinite(a["raw_probs"]).all()):
        _fail(path, "non-finite raw rows")
    if (a["raw_xywh"][:, 2:] < 0).any() or (a["raw_probs"] < 0).any() or (a["raw_probs"] > 1).any():
        _fail(path, "raw rows with negative sizes or probabilities outside [0, 1]")


def recording_keys(path: Path | str = DATA) -> list[str]:
    return list(load_real(path).recordings)


def recording_columns(key: str) -> dict:
    """The result-row columns that name a recording: ``image`` and ``input_size``."""
    image, _, size = key.rpartition("@")
    return {"image": image, "input_size": int(size) if size.isdigit() else size}


def sample_real(n: int, t: float, seed: int, classes: int, path=None, recording: str | None = None):
    """The ``real`` scenario's sampler: candidates with score >= ``t``, at most the ``n`` best.

    ``seed``, ``classes`` and ``path`` are ignored (the boxes and labels are recorded).
    """
    data = load_real()
    key = recording or DEFAULT_RECORDING
    rec = data.recording(key)
    rows, boxes, scores, labels = data.candidates(key)
    passed = np.flatnonzero(scores >= np.float32(t))
    capped = len(passed) > n
    if capped:  # the n best by score, ties by lower raw row (passed is in raw-row order), kept in row order
        passed = np.sort(passed[np.argsort(-scores[passed], kind="stable")[:n]])
    result = BoxSet(torch.from_numpy(boxes[passed].copy()), torch.from_numpy(scores[passed].copy()),
                    torch.from_numpy(labels[passed].copy()))
    distinct = int(np.unique(labels[passed]).size)
    return result, {
        "recording": key, "image": rec.image, "input_size": rec.input_size, "raw_rows": rows[passed],
        "above_threshold": int(np.count_nonzero(scores >= np.float32(t))), "capped": capped,
        "classes": max(1, distinct),
        # the columns a results row records for this box set
        "row": {"image": rec.image, "input_size": rec.input_size, "n": len(passed), "n_cap": n, "classes": NUM_CLASSES},
    }


def real_raw(batch: int, recordings: list[str] | None = None, path: Path | str = DATA):
    """A batch of recorded raw rows: float32 [batch, R, 85], cycling through ``recordings``
    (default: every recording with raw rows); they must share one input size.

    Returns (raw, the recording key of each image, input size).
    """
    data = load_real(path)
    keys = recordings or [k for k, r in data.recordings.items() if r.has_raw]
    sizes = {data.recording(k).input_size for k in keys}
    if len(sizes) != 1:
        raise ValueError(f"recordings {', '.join(keys)} have different input sizes; a batch needs one")
    rows = [data.raw(k) for k in keys]
    chosen = [keys[i % len(keys)] for i in range(batch)]
    raw = np.stack([rows[i % len(keys)] for i in range(batch)]) if batch else np.zeros((0, 0, 85), np.float32)
    return raw, chosen, sizes.pop()
