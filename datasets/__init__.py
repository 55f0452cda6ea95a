"""Overlap scenarios: deterministic box sets with one overlap knob each.

    >>> from nmsbench.datasets import generate, SCENARIOS
    >>> boxset = generate("clustered", 1000, overlap=0.9, seed=0)

Synthetic scenarios live on a 1024 x 1024 canvas (or, with ``canvas="density"``, one whose
side grows as sqrt(n), so the density of boxes stays that of 1024 boxes on 1024 px) and
are generated on the CPU from
``numpy.random.default_rng(seed)``. For every synthetic scenario a larger knob means more
overlap. The ``real`` scenario replays recorded YOLOv3-tiny candidates (``real.py``,
REAL.md): its knob is the confidence threshold applied before NMS, so a larger knob
means fewer boxes, and ``recording=`` picks the photo and input size.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Optional

import numpy as np
import torch

from nmsbench.boxes import BoxSet
from nmsbench.inputs import validate_nms_inputs

from . import real, synthetic
from .file_loader import load_boxes_file, sample_file
from .synthetic import CANVAS


@dataclass(frozen=True)
class Scenario:
    """One box distribution and the meaning, default and valid range of its overlap knob."""

    name: str
    knob: str
    default_overlap: float
    knob_range: tuple[float, float]  # closed range
    description: str
    _sampler: Callable = field(repr=False, compare=False)
    recordings: Optional[Callable[[], list[str]]] = field(default=None, repr=False, compare=False)

    def generate(self, n: int, overlap: float | None = None, seed: int = 0, classes: int = 1,
                 path=None, recording: str | None = None, canvas: str | None = None) -> BoxSet:
        """``n`` boxes with knob ``overlap`` (None: the default), deterministic from ``seed``.

        ``classes`` > 1 adds int64 labels; ``path`` is only used by the ``file`` scenario,
        ``recording`` (e.g. ``"bus.jpg@1312"``) only by scenarios that replay recordings
        (``real``), where ``n`` caps the box count (see ``real.py``). ``canvas`` (synthetic
        scenarios only): ``"fixed"`` (the default, 1024 px) or ``"density"`` (the side grows
        as sqrt(n), so each box has as many neighbours at any n: ``synthetic.canvas_extent``).
        """
        n = _whole("n", n, 0)
        seed = _whole("seed", seed, 0)
        classes = _whole("classes", classes, 1)
        t = self.check_overlap(overlap)
        if canvas is not None and canvas not in synthetic.CANVASES:
            raise ValueError(f"canvas must be one of {', '.join(synthetic.CANVASES)}, got {canvas!r}")
        if canvas not in (None, "fixed") and self.name not in SYNTHETIC:
            raise ValueError(f"{self.name}: canvas={canvas!r} is for the synthetic scenarios ({', '.join(SYNTHETIC)})")
        if recording is not None and self.recordings is None:
            raise ValueError(f"{self.name}: recording= is only for scenarios that replay recordings (real)")
        if self.name in SYNTHETIC:
            result, extra = self._sampler(n, t, seed, classes, path, canvas=canvas or "fixed")
        elif recording is None:
            result, extra = self._sampler(n, t, seed, classes, path)
        elif self.recordings is None:
            raise ValueError(f"{self.name}: recording= is only for scenarios that replay recordings (real)")
        else:
            result, extra = self._sampler(n, t, seed, classes, path, recording=recording)
        result.meta = {"scenario": self.name, "overlap": t, "seed": seed, "classes": classes, **extra}
        validate_nms_inputs(result.boxes, result.scores, result.labels)
        return result

    def check_overlap(self, overlap) -> float:
        """The knob value as a float (the default for None), or a ``ValueError``."""
        if overlap is None:
            return float(self.default_overlap)
        if isinstance(overlap, bool) or not isinstance(overlap, numbers.Real):
            raise ValueError(f"{self.name}: overlap must be a number, got {overlap!r}")
        lo, hi = self.knob_range
        value = float(overlap)
        if not (math.isfinite(value) and lo <= value <= hi):
            raise ValueError(f"{self.name}: overlap ({self.knob}) must be in [{lo}, {hi}], got {overlap!r}")
        return value


def _whole(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


# Peak bytes per box while a synthetic set is made: the generators' float64 temporaries
# (centres, sizes, jitter, scores: a few (n, 4) arrays) plus the float32 BoxSet, rounded up.
BYTES_PER_BOX = 256


def available_memory() -> Optional[int]:
    """Bytes of memory available to a new allocation (Linux MemAvailable, else the
    physical memory), or None where neither is known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits(n: int) -> None:
    """A ValueError, before anything is allocated, when ``n`` synthetic boxes cannot fit in memory."""
    need, have = n * BYTES_PER_BOX, available_memory()
    if have is not None and need > have:
        raise ValueError(f"n={n:,} boxes need about {need / 2**30:,.1f} GiB to generate; this machine has "
                         f"{have / 2**30:,.1f} GiB available")


def _synthetic(generator) -> Callable:
    """A sampler around a ``synthetic`` generator: seeding, clipping to the canvas, float32."""
    return partial(_sample_synthetic, generator)


def _sample_synthetic(generator, n: int, t: float, seed: int, classes: int, path=None, canvas: str = "fixed"):
    check_fits(n)
    extent = synthetic.canvas_extent(canvas, n)
    boxes, scores, labels = generator(np.random.default_rng(seed), n, t, classes, extent)
    boxes = np.clip(np.asarray(boxes, dtype=np.float64).reshape(n, 4), 0.0, extent).astype(np.float32)
    return BoxSet(
        boxes=torch.from_numpy(boxes),
        scores=torch.from_numpy(np.asarray(scores, dtype=np.float32).reshape(n)),
        labels=None if labels is None else torch.from_numpy(np.asarray(labels, dtype=np.int64).reshape(n)),
    ), {"canvas": canvas, "extent": extent}


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("uniform", "box side as a fraction of the canvas", 0.05, (0.001, 1.0),
             "sparse overlap: boxes uniform on the canvas, sides knob x 1024 x U(0.5, 1.5)",
             _synthetic(synthetic.uniform)),
    Scenario("clustered", "1 - relative jitter of candidates around their object", 0.7, (0.0, 1.0),
             "detector-like: ~n/16 objects, candidates jittered by 0.01 + 0.29 x (1 - knob) of the "
             "object size, best-aligned candidate scores highest",
             _synthetic(synthetic.clustered)),
    Scenario("crowd", "how tightly objects pack (grid pitch 1.25 - knob object sides)", 0.5, (0.0, 1.0),
             "objects that overlap each other on a jittered grid, 4 candidates per object",
             _synthetic(synthetic.crowd)),
    Scenario("chain", "IoU between neighbouring boxes of a chain", 0.6, (0.01, 0.99),
             f"non-touching rows of {synthetic.CHAIN_LENGTH} equal boxes, scores falling along each row: "
             "greedy and all-pairs NMS disagree when knob > iou_threshold",
             _synthetic(synthetic.chain)),
    Scenario("degenerate", "fraction of boxes that are degenerate (zero-area, duplicate, tiny)", 0.5, (0.0, 1.0),
             f"scores quantized to {synthetic.SCORE_LEVELS} levels (ties always), exact duplicate boxes, "
             "zero-area boxes, sub-pixel boxes",
             _synthetic(synthetic.degenerate)),
    Scenario("file", "scale factor of box sizes about their centres (1 = as recorded)", 1.0, (0.01, 10.0),
             "the first n boxes of an .npz/.pt/.csv file (path=...); labels come from the file",
             sample_file),
    Scenario("real", "confidence threshold before NMS (higher: fewer boxes; n caps N by top score)",
             real.DEFAULT_CONF, (real.FLOOR, 1.0),
             "YOLOv3-tiny candidates recorded on real photos (recording photo@size, default "
             f"{real.DEFAULT_RECORDING}); N = candidates with score >= knob, the n best of them at most; "
             "labels are the detector's 80 COCO classes",
             real.sample_real, recordings=real.recording_keys),
)}

SYNTHETIC = ("uniform", "clustered", "crowd", "chain", "degenerate")


def generate(name: str, n: int, overlap: float | None = None, seed: int = 0, classes: int = 1,
             path: str | None = None, recording: str | None = None, canvas: str | None = None) -> BoxSet:
    """Generate scenario ``name`` (see ``SCENARIOS``); ``path`` is for the ``file`` scenario,
    ``recording`` for the ``real`` one, ``canvas`` ("fixed" or "density") for the synthetic ones."""
    if not isinstance(name, str) or name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return SCENARIOS[name].generate(n, overlap, seed, classes, path, recording, canvas)


RECORDED = ("real",)  # scenarios that replay recorded detector output

__all__ = ["CANVAS", "RECORDED", "SCENARIOS", "SYNTHETIC", "Scenario", "check_fits", "generate", "load_boxes_file"]
