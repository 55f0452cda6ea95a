"""Made-up runs for the compare tests (test_compare.py, test_app.py): rows of the current
schema and their raw samples, written through the real results writer. Not measurements."""

from __future__ import annotations

import numpy as np

from nmsbench.engine.samples import Samples
from nmsbench.results import ResultWriter

ENV_A = {"machine": "box-a", "cpu": "cpu A", "gpu": "", "git_commit": "aaaaaaa", "timestamp": "2026-01-01T00:00:00+00:00"}
ENV_B = {"machine": "box-b", "cpu": "cpu B", "gpu": "", "git_commit": "bbbbbbb", "timestamp": "2026-02-01T00:00:00+00:00"}


def draws(scale: float, seed: int, rounds: int = 5, blocks: int = 10, noise: float = 0.02, drift: float = 0.0) -> Samples:
    """Block times around ``scale`` µs (relative ``noise``); ``drift``: each round's own offset."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        level = scale * (1 + drift * rng.standard_normal())
        out.append(tuple(float(v) for v in level * (1 + noise * rng.standard_normal(blocks))))
    return Samples(tuple(float(np.median(b)) for b in out), tuple(out))


def row(**over) -> dict:
    """A sweep row of the current schema (a made-up case, not a measurement)."""
    base = {"benchmark": "nms", "impl": "torchvision", "family": "hard", "device": "cpu", "dtype": "float32",
            "timer": "wall", "scenario": "uniform", "canvas": "fixed", "overlap": 0.5, "classes": 1, "n": 256,
            "iou_threshold": 0.5, "seed": 0, "params": "{}", "status": "ok", "median_us": 100.0, "noisy": False,
            "kept": 10, "ref_kept": 10, "jaccard": 1.0, "extra": 0, "missing": 0}
    return {**base, **over}


def write_run(path, rows, env=ENV_A):
    """A results file (and its samples beside it) through the real writer."""
    writer = ResultWriter(path, env, grid={}, command="made up for a test")
    try:
        for r in rows:
            writer.write(r)
    finally:
        writer.close()
    return path


def timed(scale: float, seed: int, **over) -> dict:
    s = draws(scale, seed)
    return row(median_us=float(np.median(s.round_medians_us)), _samples=s, **over)
