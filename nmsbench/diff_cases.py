"""An `nmsbench diff` file's case: one box set and what each implementation kept on it
(:class:`CaseRun`), written and read as JSON (:func:`write_case`, :func:`read_case`), and
the comparisons the dashboard draws from it (:func:`classify`, :func:`jaccard`,
:func:`agreement_matrix`, :func:`remaining_score`). Needs numpy and pandas only: the
dashboard reads these files without importing torch (seconds on a small machine);
:mod:`nmsbench.differences` runs the implementations that fill a case.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from .results import folder_files

# Codes of classify(): indices into nmsbench.plots.BOX_CLASSES.
SUPPRESSED_BY_BOTH, KEPT_BY_BOTH, ONLY_A, ONLY_B = range(4)
CLASS_NAMES = ("suppressed by both", "kept by both", "only A", "only B")


@dataclass
class CaseRun:
    """One regenerated box set and what each implementation kept on it."""

    scenario: str
    n: int
    overlap: float
    seed: int
    iou_threshold: float
    classes: int
    device: str
    boxes: np.ndarray
    scores: np.ndarray
    keeps: dict[str, np.ndarray] = field(default_factory=dict)  # name -> kept input indices
    seconds: dict[str, float] = field(default_factory=dict)     # name -> one warm call's wall time (not a benchmark)
    unavailable: dict[str, str] = field(default_factory=dict)   # name -> why it cannot run here
    errors: dict[str, str] = field(default_factory=dict)        # name -> what it raised
    finals: dict[str, np.ndarray] = field(default_factory=dict)  # name -> final scores of its kept boxes (matrix, soft)
    moved: dict[str, np.ndarray] = field(default_factory=dict)   # name -> its kept boxes as it moved them (weighted)
    families: dict[str, str] = field(default_factory=dict)      # name -> its family
    params: dict[str, dict] = field(default_factory=dict)       # name -> the parameters it ran with
    labels: np.ndarray | None = None
    meta: dict = field(default_factory=dict)                    # the command, the environment, the time written
    canvas: str = "fixed"                                       # the synthetic scenarios' canvas (datasets.synthetic)
    file: str = ""                                              # the boxes file of the file scenario


def default_diff_path(directory: Path = Path("results") / "runs") -> Path:
    """Where ``nmsbench diff`` writes without --out: ``results/runs/diff-<time>.json``."""
    return directory / f"diff-{time.strftime('%Y%m%d-%H%M%S')}.json"



# --- the results file of `nmsbench diff` ------------------------------------------------

FORMAT = "nmsbench-diff"
FORMAT_VERSION = 1


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    return value


def case_to_dict(case: CaseRun) -> dict:
    """The case as plain JSON data: the case's knobs, the boxes, scores and labels, and for
    every implementation that ran its family, parameters, kept indices and (for variants
    that change scores) the final scores of the kept boxes, (for variants that move boxes)
    the kept boxes where they moved them."""
    return _jsonable({
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "case": {"scenario": case.scenario, "overlap": case.overlap, "n": case.n, "seed": case.seed,
                 "iou_threshold": case.iou_threshold, "classes": case.classes, "device": case.device,
                 "canvas": case.canvas, **({"file": case.file} if case.file else {})},
        "boxes": case.boxes.tolist(), "scores": case.scores.tolist(),
        "labels": None if case.labels is None else case.labels.tolist(),
        "implementations": {
            name: {"family": case.families.get(name, ""), "params": case.params.get(name, {}),
                   "keep": case.keeps[name].tolist(),
                   "final_scores": case.finals[name].tolist() if name in case.finals else None,
                   "moved_boxes": case.moved[name].tolist() if name in case.moved else None,
                   "one_call_s": case.seconds.get(name)}
            for name in case.keeps},
        "unavailable": case.unavailable, "errors": case.errors, **case.meta,
    })


def write_case(case: CaseRun, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(case_to_dict(case), separators=(",", ":")) + "\n")
    return path


def case_from_dict(data: dict, name: str = "the file") -> CaseRun:
    """A :class:`CaseRun` from :func:`case_to_dict`'s data; ValueError naming what is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{name}: not an `nmsbench diff` file (no \"format\": \"{FORMAT}\")")
    try:
        c = data["case"]
        run = CaseRun(str(c["scenario"]), int(c["n"]), float(c["overlap"]), int(c["seed"]), float(c["iou_threshold"]),
                      int(c.get("classes", 1)), str(c.get("device", "")),
                      np.asarray(data["boxes"], dtype=float).reshape(-1, 4), np.asarray(data["scores"], dtype=float),
                      labels=None if data.get("labels") is None else np.asarray(data["labels"], dtype=np.int64),
                      unavailable=dict(data.get("unavailable") or {}), errors=dict(data.get("errors") or {}),
                      canvas=str(c.get("canvas", "fixed")), file=str(c.get("file") or ""),
                      meta={k: v for k, v in data.items() if k not in ("case", "boxes", "scores", "labels", "implementations",
                                                                      "unavailable", "errors")})
        for impl, entry in data["implementations"].items():
            keep = np.asarray(entry["keep"], dtype=np.int64)
            if len(keep) and (keep.min() < 0 or keep.max() >= run.n):
                raise ValueError(f"{impl} keeps an index outside 0..{run.n - 1}")
            run.keeps[impl] = keep
            run.families[impl] = str(entry.get("family", ""))
            run.params[impl] = dict(entry.get("params") or {})
            if entry.get("one_call_s") is not None:
                run.seconds[impl] = float(entry["one_call_s"])
            if entry.get("final_scores") is not None:
                run.finals[impl] = np.asarray(entry["final_scores"], dtype=float)
                if len(run.finals[impl]) != len(keep):
                    raise ValueError(f"{impl} has {len(run.finals[impl])} final scores for {len(keep)} kept boxes")
            if entry.get("moved_boxes") is not None:
                moved = np.asarray(entry["moved_boxes"], dtype=float)
                if moved.shape != (len(keep), 4) and not (moved.size == 0 and len(keep) == 0):
                    raise ValueError(f"{impl} has moved boxes of shape {moved.shape} for {len(keep)} kept boxes")
                run.moved[impl] = moved.reshape(-1, 4)
    except (KeyError, TypeError) as e:
        raise ValueError(f"{name}: an `nmsbench diff` file without {e}") from None
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    if len(run.boxes) != run.n or len(run.scores) != run.n:
        raise ValueError(f"{name}: {len(run.boxes)} boxes and {len(run.scores)} scores for n = {run.n}")
    return run


def read_case(path) -> CaseRun:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f"{path.name}: not readable JSON ({e})") from None
    return case_from_dict(data, path.name)


def diff_files(folder, include_archive: bool = False) -> list[Path]:
    """The ``nmsbench diff`` files of a results folder: diff-*.json at its top and anywhere
    under runs/ (and archive/ when asked), in name order."""
    return folder_files(folder, "diff-*.json", include_archive)


def remaining_score(case: CaseRun, names: Sequence[str]) -> np.ndarray:
    """Per box, the smallest final score / input score among ``names`` that keep it and
    change scores (Matrix NMS, Soft-NMS); NaN where none of them does. 1 means untouched,
    0.1 that a box is kept with a tenth of its score."""
    out = np.full(case.n, np.nan)
    for name in names:
        if name not in case.finals:
            continue
        keep = case.keeps[name]
        ratio = np.divide(case.finals[name], case.scores[keep], out=np.ones(len(keep)), where=case.scores[keep] > 0)
        current = out[keep]
        out[keep] = np.where(np.isnan(current), ratio, np.minimum(current, ratio))
    return out


def classify(n: int, keep_a, keep_b) -> tuple[np.ndarray, dict[str, int]]:
    """Per box: kept by both, only by A, only by B, or suppressed by both (codes above),
    and the count of each class by name."""
    a = np.zeros(n, dtype=bool)
    b = np.zeros(n, dtype=bool)
    a[np.asarray(keep_a, dtype=np.int64)] = True
    b[np.asarray(keep_b, dtype=np.int64)] = True
    codes = np.full(n, SUPPRESSED_BY_BOTH, dtype=np.int64)
    codes[a & b] = KEPT_BY_BOTH
    codes[a & ~b] = ONLY_A
    codes[~a & b] = ONLY_B
    counts = {name: int((codes == code).sum()) for code, name in enumerate(CLASS_NAMES)}
    return codes, counts


def jaccard(keep_a, keep_b) -> float:
    """Jaccard index of two kept sets (1.0 when both are empty), as the results' column
    (:func:`nmsbench.agreement.compare_keep`) computes it."""
    a, b = set(np.asarray(keep_a, dtype=np.int64).tolist()), set(np.asarray(keep_b, dtype=np.int64).tolist())
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def agreement_matrix(keeps: dict[str, np.ndarray]) -> pd.DataFrame:
    """Jaccard of kept sets for every pair of implementations (symmetric, 1 on the diagonal)."""
    names = list(keeps)
    matrix = pd.DataFrame(np.ones((len(names), len(names))), index=names, columns=names)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            matrix.loc[a, b] = matrix.loc[b, a] = jaccard(keeps[a], keeps[b])
    return matrix
