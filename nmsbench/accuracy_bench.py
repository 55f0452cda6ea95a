"""The accuracy benchmark: COCO metrics and per-image time of each NMS on pre-NMS candidates.

The grid is source x device x implementation x IoU threshold x parameter set; each case
gives one row in the results schema (``benchmark = "accuracy"``, ``timer = "wall"``):
``median_us`` / ``iqr_us`` over the images of one NMS call per image (``runs`` calls),
``ap``, ``ap50``, ``ap75``, ``ar100``, ``ar100_crowded`` from the COCO evaluator, ``images``,
``detections`` (kept after the cap of 100 per image), ``kept`` (kept by NMS), ``n`` (the
candidates over all images) and ``source_params``. A source is loaded once and moved to
each device once; a case that raises is an error row, an unavailable backend a skipped
row, and rows already in a resumed file are not run again.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from .accuracy import MAX_DETECTIONS, AccuracySource, coco_metrics, coco_source, detect, synthetic_source
from .registry import Implementation, implementations
from .results import case_key
from .runner import _error_text, error_rows, row_emitter, use_threads

SYNTHETIC_SOURCES = ("scenes-sparse", "scenes-clustered", "scenes-crowd")
COCO_SOURCE = "coco"
DEFAULT_IMAGES = 200


@dataclass
class AccuracyGrid:
    """The accuracy benchmark's axes; their product is the set of rows."""

    impls: list[str]
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    sources: list[str] = field(default_factory=lambda: list(SYNTHETIC_SOURCES))
    ious: list[float] = field(default_factory=lambda: [0.5])
    # parameter name -> the values to run; an implementation runs every combination of the
    # names it takes (none: its defaults)
    params: dict = field(default_factory=dict)
    images: int = DEFAULT_IMAGES  # per synthetic source
    seed: int = 0  # of the synthetic sources
    candidates: Optional[str] = None  # the coco source's files
    annotations: Optional[str] = None
    image_ids: Optional[list[int]] = None
    threads: int = 1
    max_det: int = MAX_DETECTIONS

    def param_sets(self, impl: Implementation) -> list[dict]:
        """The parameter sets ``impl`` runs with: each combination of the values of the
        names it takes (as given, not yet checked)."""
        taken = {name: values for name, values in self.params.items() if name in {p.name for p in impl.params}}
        return [dict(zip(taken, combo)) for combo in itertools.product(*taken.values())] or [{}]

    def count(self) -> int:
        known = implementations()
        per_source = sum(len(self.param_sets(known[name])) if name in known else 1 for name in self.impls)
        return len(self.sources) * len(self.devices) * len(self.ious) * per_source


def load_source(grid: AccuracyGrid, name: str) -> AccuracySource:
    """The source ``name`` of ``grid`` (a synthetic kind, or coco: the grid's files)."""
    if name == COCO_SOURCE:
        return coco_source(grid.candidates, grid.annotations, grid.image_ids)
    if name in SYNTHETIC_SOURCES:
        return synthetic_source(name, grid.images, grid.seed)
    raise ValueError(f"unknown source {name!r}; known: {', '.join(SYNTHETIC_SOURCES + (COCO_SOURCE,))}")


def run_accuracy_bench(grid: AccuracyGrid, write: Callable[[dict], None],
                       on_case: Callable[[dict], None] = lambda row: None, done: frozenset | set = frozenset()) -> dict:
    """Run every case of ``grid``; ``write`` gets each row as soon as it exists. Rows whose
    :func:`~nmsbench.results.case_key` is in ``done`` (already written) are not run again."""
    use_threads(grid.threads)
    emit, counts = row_emitter(write, on_case)
    known = implementations()
    for source_name in grid.sources:
        try:
            source, failure = load_source(grid, source_name), None
        except Exception as exc:
            source, failure = None, f"loading source {source_name}: {_error_text(exc)}"
        base = {"benchmark": "accuracy", "scenario": source_name, "dtype": "float32", "timer": "wall",
                "threads": grid.threads,
                "seed": grid.seed if source_name in SYNTHETIC_SOURCES else ""}
        if source is not None:
            base |= {"image": source.image, "n": source.n, "classes": source.classes, "images": len(source.images),
                     "source_params": source.source_params}
        for device in grid.devices:
            on_device = None
            for name in grid.impls:
                impl = known.get(name)
                for given in (grid.param_sets(impl) if impl else [{}]):
                    for iou in grid.ious:
                        row = _case_row(base, impl, name, device, iou, given)
                        if case_key(row) in done:
                            continue
                        if failure:
                            emit(row | {"status": "error", "error": failure})
                            continue
                        skip = _unrunnable(impl, name, device)
                        if skip:
                            emit(row | {"status": "skipped", "error": skip})
                            continue
                        try:
                            params = impl.resolve_params(given)
                            row["params"] = json.dumps(params, sort_keys=True)
                            if on_device is None:
                                on_device = source.to(device)
                            emit(row | _measure(name, on_device, iou, params, grid.max_det))
                        except Exception as exc:
                            for error in error_rows([row], exc):
                                emit(error)
    return counts


def _case_row(base: dict, impl: Optional[Implementation], name: str, device: str, iou: float, given: dict) -> dict:
    """The identifying columns of one case's row (params: resolved where they check out, so
    that a resumed run finds the rows it wrote)."""
    backend = impl.backends.get(device) if impl else None
    try:
        params = impl.resolve_params(given) if impl else given
    except ValueError:
        params = given
    return base | {"impl": name, "family": impl.family if impl else "", "device": device, "iou_threshold": iou,
                   "params": json.dumps(params, sort_keys=True),
                   "host_sync": backend.host_sync if backend else "", "graph_safe": backend.graph_safe if backend else ""}


def _unrunnable(impl: Optional[Implementation], name: str, device: str) -> Optional[str]:
    """Why a case cannot run here (a skipped row), or None."""
    if impl is None:
        return f"no implementation named {name}"
    backend = impl.backends.get(device)
    if backend is None:
        return f"{name} has no {device} backend"
    available, reason = backend.availability()
    if not available:
        return reason
    if torch.float32 not in backend.dtypes:
        return f"float32 not supported on {device}"
    return None


def _measure(name: str, source: AccuracySource, iou: float, params: dict, max_det: int) -> dict:
    """One case's measured columns: NMS on every image, timed, then scored."""
    result = detect(name, source, iou, params, max_det)
    metrics = coco_metrics(source.ground_truth, result.rows, source.crowded)
    times_us = result.times_ns / 1e3
    median = float(np.median(times_us)) if len(times_us) else math.nan
    iqr = float(np.subtract(*np.percentile(times_us, [75, 25]))) if len(times_us) else math.nan
    return {"status": "ok", "error": "", "median_us": median, "iqr_us": iqr, "runs": len(times_us),
            "rel_spread": iqr / median if median > 0 else "", "kept": result.kept, "detections": len(result.rows),
            **{k: "" if math.isnan(v) else v for k, v in metrics.items()}}


__all__ = ["AccuracyGrid", "COCO_SOURCE", "DEFAULT_IMAGES", "SYNTHETIC_SOURCES", "load_source", "run_accuracy_bench"]
