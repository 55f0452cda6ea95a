"""Recorded box sets: ``.npz``, ``.pt`` and ``.csv`` files, and the ``file`` scenario."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from nmsbench.boxes import BoxSet
from nmsbench.inputs import validate_nms_inputs

CSV_COLUMNS = ("x1", "y1", "x2", "y2", "score")
INT64_RANGE = (-(2.0**63), 2.0**63)  # float labels in [low, high) are exact int64 values when whole
try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct
except ImportError:
    from numpy.core.multiarray import _reconstruct
# what a pickled numeric numpy array calls and builds, under the names numpy 1 and 2 save it
# with (its dtype's class too: numpy.dtypes.Float32DType ...): the weights-only unpickler
# allows these and nothing else besides tensors
NUMPY_ARRAY_GLOBALS = [np.ndarray, np.dtype, (_reconstruct, "numpy.core.multiarray._reconstruct"),
                       (_reconstruct, "numpy._core.multiarray._reconstruct"),
                       *{type(np.dtype(code)) for code in "?bBhHiIlLqQefdg"}]


class _Problem(ValueError):
    """A problem with the file's content, reported as is (not as a read failure)."""


def load_boxes_file(path, rows: int | None = None) -> BoxSet:
    """Load boxes, scores and optional labels from an ``.npz``, ``.pt`` or ``.csv`` file.

    ``.npz``: arrays ``boxes`` (N, 4), ``scores`` (N,), optional ``labels`` (N,).
    ``.pt``: a dict with the same keys (tensors or numpy arrays), read with ``weights_only=True``
    (numpy's array globals allowed, nothing else).
    ``.csv``: columns ``x1, y1, x2, y2, score`` and optional ``label``; ``rows``: read only
    the first ``rows`` rows (the rest of the file is not parsed, nor checked).
    Returns float32 boxes/scores and int64 labels on the CPU (labels must be integers
    within int64); any problem raises a ``ValueError`` that names the file and the problem.
    """
    if path is None:
        raise ValueError("no boxes file given (path is None)")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: {'is not a file' if path.exists() else 'no such file'}")
    readers = {".npz": _read_npz, ".pt": _read_pt, ".pth": _read_pt, ".csv": _read_csv}
    suffix = path.suffix.lower()
    if suffix not in readers:
        raise ValueError(f"{path}: unknown file type {suffix or '(no extension)'!r}; expected .npz, .pt or .csv")
    try:
        arrays = _read_csv(path, rows) if suffix == ".csv" else readers[suffix](path)
        boxes, scores, labels = _check_arrays(arrays)
    except _Problem as e:
        raise ValueError(f"{path}: {e}") from None
    except Exception as e:  # zipfile, pickle, torch and pandas parse errors: corrupt or foreign files
        detail = (str(e).strip().splitlines() or [""])[0][:200]  # torch's pickle errors run to pages
        raise ValueError(f"{path}: cannot read as {suffix} (corrupt, truncated or not a box file): "
                         f"{type(e).__name__}: {detail}") from e
    result = BoxSet(torch.from_numpy(boxes), torch.from_numpy(scores),
                    None if labels is None else torch.from_numpy(labels), {"source": str(path)})
    try:
        validate_nms_inputs(result.boxes, result.scores, result.labels)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    return result


def _read_npz(path: Path) -> dict:
    data = np.load(path, allow_pickle=False)
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise _Problem("not an .npz archive (a single .npy array?); expected arrays boxes, scores[, labels]")
    with data:
        return {key: data[key] for key in ("boxes", "scores", "labels") if key in data.files} | {
            "_found": list(data.files)}


def _read_pt(path: Path) -> dict:
    with warnings.catch_warnings():  # a corrupt file's odd protocol number: the error that follows says enough
        warnings.filterwarnings("ignore", message="Detected pickle protocol")
        safe_globals = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
        with safe_globals(NUMPY_ARRAY_GLOBALS) if safe_globals else contextlib.nullcontext():
            obj = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(obj, Mapping):
        raise _Problem(f"expected a dict with keys boxes, scores[, labels], got {type(obj).__name__}")
    out = {"_found": [str(k) for k in obj]}
    for key in ("boxes", "scores", "labels"):
        if key in obj:
            value = obj[key]
            if isinstance(value, torch.Tensor):
                value = value.detach().cpu()
                if value.dtype in (torch.float16, torch.bfloat16):
                    value = value.float()  # numpy has no bfloat16
                value = value.numpy()
            out[key] = value
    return out


def _read_csv(path: Path, rows: int | None = None) -> dict:
    df = pd.read_csv(path, nrows=rows)
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in CSV_COLUMNS if c not in df.columns]
    if missing:
        raise _Problem(f"missing column(s) {', '.join(missing)}; found {', '.join(df.columns) or 'none'}")
    for column in CSV_COLUMNS + (("label",) if "label" in df.columns else ()):
        if not pd.api.types.is_numeric_dtype(df[column]) or pd.api.types.is_bool_dtype(df[column]):
            bad = pd.to_numeric(df[column], errors="coerce").isna() & df[column].notna()
            row = int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else 0
            raise _Problem(f"column {column!r} is not numeric (row {row}: {df[column].iloc[row]!r})")
    out = {"boxes": df[list(CSV_COLUMNS[:4])].to_numpy(np.float64), "scores": df["score"].to_numpy(np.float64)}
    if "label" in df.columns:
        out["labels"] = df["label"].to_numpy()
    return out


def _numeric(name: str, value) -> np.ndarray:
    try:
        array = np.asarray(value)
    except Exception as e:
        raise _Problem(f"{name} is not an array: {e}") from None
    if array.dtype.kind not in "iuf":
        raise _Problem(f"{name} must be numeric, got dtype {array.dtype}")
    return array


def _check_arrays(arrays: dict):
    found = arrays.pop("_found", list(arrays))
    for key in ("boxes", "scores"):
        if key not in arrays:
            raise _Problem(f"missing {key!r} (found: {', '.join(found) or 'nothing'})")
    boxes = _numeric("boxes", arrays["boxes"])
    scores = _numeric("scores", arrays["scores"])
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise _Problem(f"boxes must have shape (N, 4) as x1, y1, x2, y2; got {boxes.shape}")
    n = boxes.shape[0]
    if scores.ndim != 1:
        raise _Problem(f"scores must have shape (N,); got {scores.shape}")
    if scores.shape[0] != n:
        raise _Problem(f"length mismatch: {n} boxes but {scores.shape[0]} scores")
    labels = None
    if arrays.get("labels") is not None:
        labels = _numeric("labels", arrays["labels"])
        if labels.ndim != 1 or labels.shape[0] != n:
            raise _Problem(f"length mismatch: {n} boxes but labels have shape {labels.shape}")
        if labels.dtype.kind == "f":  # a cast would turn 1e20 and 3e20 alike into -2**63
            with np.errstate(invalid="ignore"):
                bad = ~np.isfinite(labels) | (labels != np.round(labels)) | (labels < INT64_RANGE[0]) | (
                    labels >= INT64_RANGE[1])
        else:  # uint64 above 2**63 - 1 would wrap
            bad = labels > np.iinfo(np.int64).max if labels.dtype == np.uint64 else np.zeros(n, dtype=bool)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise _Problem(f"labels must be integers within int64 (row {row}: {labels[row]})")
        labels = labels.astype(np.int64)
    with np.errstate(over="ignore"):  # values beyond float32 become inf, which validation reports
        boxes, scores = boxes.astype(np.float32), scores.astype(np.float32)
    return np.ascontiguousarray(boxes), np.ascontiguousarray(scores), labels


def sample_file(n: int, t: float, seed: int, classes: int, path) -> tuple[BoxSet, dict]:
    """The first ``n`` boxes of ``path``, scaled by ``t`` about their centres.

    ``seed`` and ``classes`` are ignored: the boxes and labels are the file's.
    """
    if path is None:
        raise ValueError("the 'file' scenario needs path= (an .npz, .pt or .csv boxes file)")
    loaded = load_boxes_file(path, rows=n)
    if len(loaded) < n:
        raise ValueError(f"{path}: asked for n={n} boxes but the file has only {len(loaded)}")
    boxes, scores = loaded.boxes[:n].clone(), loaded.scores[:n].clone()
    labels = None if loaded.labels is None else loaded.labels[:n].clone()
    if t != 1.0:
        b = boxes.double()
        centre = (b[:, :2] + b[:, 2:]) / 2
        half = (b[:, 2:] - b[:, :2]) / 2 * t
        boxes = torch.cat([centre - half, centre + half], dim=1).float()
    distinct = 1 if labels is None else max(1, int(labels.unique().numel()))
    # "row": what the sweep's rows record of this set (their classes column: the labels the boxes hold)
    return BoxSet(boxes, scores, labels), {"source": str(path), "classes": distinct, "row": {"classes": distinct}}
