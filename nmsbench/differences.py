"""What two NMS variants suppress differently, on one regenerated box set.

    >>> case = run_case("chain", 256, overlap=0.6, seed=0, iou_threshold=0.5)
    >>> classes, counts = classify(case.n, case.keeps["torchvision"], case.keeps["allpairs"])
    >>> agreement_matrix(case.keeps)      # Jaccard of kept sets, every pair

Implementations that cannot run here (no backend for the device, a missing module, no
CUDA device) or that raise are reported with the reason in ``CaseRun.unavailable`` /
``CaseRun.errors``, never raised.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from . import datasets
from .agreement import compare_keep
from .api import run_nms
from .registry import implementations

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


def devices() -> list[str]:
    """Where the differences can run on this machine."""
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def availability(device: str) -> dict[str, str]:
    """name -> "" when the implementation can run on ``device`` here, else the reason."""
    out = {}
    for name, impl in sorted(implementations().items()):
        if device not in impl.backends:
            out[name] = f"no {device} backend (has: {', '.join(impl.devices)})"
            continue
        ok, reason = impl.backends[device].availability()
        out[name] = "" if ok else reason
    return out


def run_case(scenario: str, n: int, overlap: float | None = None, seed: int = 0, iou_threshold: float = 0.5,
             classes: int = 1, impls: Sequence[str] | None = None, device: str = "cpu", path=None) -> CaseRun:
    """Regenerate the box set (on the CPU, deterministic from ``seed``), move it to
    ``device`` and run each implementation (default: all registered) on it once."""
    box_set = datasets.generate(scenario, n, overlap=overlap, seed=seed, classes=classes, path=path)
    run = CaseRun(scenario, len(box_set), box_set.meta["overlap"], seed, float(iou_threshold), classes, device,
                  box_set.boxes.numpy().astype(float), box_set.scores.numpy().astype(float))
    names = list(impls) if impls is not None else sorted(implementations())
    ready = availability(device)
    if any(ready.get(name) == "" for name in names):
        try:
            data = box_set.to(device)
        except Exception as exc:  # e.g. a CUDA build of torch on a machine without a driver
            ready = {name: f"cannot move the boxes to {device}: {type(exc).__name__}: {exc}" for name in ready}
    for name in names:
        if name not in ready:
            run.errors[name] = f"unknown implementation {name!r}"
            continue
        if ready[name]:
            run.unavailable[name] = ready[name]
            continue
        try:
            run_nms(name, data.boxes, data.scores, iou_threshold=iou_threshold, labels=data.labels)  # warm-up (numba, NVRTC)
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            result = run_nms(name, data.boxes, data.scores, iou_threshold=iou_threshold, labels=data.labels)
            if device == "cuda":
                torch.cuda.synchronize()
            run.seconds[name] = time.perf_counter() - start
            run.keeps[name] = result.keep.cpu().numpy().astype(np.int64)
        except Exception as exc:  # a variant that breaks is shown as broken, not a crashed page
            run.errors[name] = f"{type(exc).__name__}: {exc}"
    return run


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
    """Jaccard index of two kept sets (1.0 when both are empty), as in the results' column."""
    return compare_keep(torch.as_tensor(np.asarray(keep_a, dtype=np.int64)),
                        torch.as_tensor(np.asarray(keep_b, dtype=np.int64)))["jaccard"]


def agreement_matrix(keeps: dict[str, np.ndarray]) -> pd.DataFrame:
    """Jaccard of kept sets for every pair of implementations (symmetric, 1 on the diagonal)."""
    names = list(keeps)
    matrix = pd.DataFrame(np.ones((len(names), len(names))), index=names, columns=names)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            matrix.loc[a, b] = matrix.loc[b, a] = jaccard(keeps[a], keeps[b])
    return matrix
