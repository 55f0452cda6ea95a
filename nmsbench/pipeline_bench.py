"""The post-processing benchmark: raw detector output -> final detections, per stage.

The grid is source x batch x confidence threshold x device x pipeline, and each case
gives one row per stage (decode, nms, total) and timer, in the results schema of
``nmsbench sweep`` (``benchmark = "pipeline"``). For each source the raw batch is made
once for the largest batch size (smaller batches are its first images) and validated
once; for each (batch, threshold) the numpy reference runs once, and every pipeline's
detections are compared with it detection by detection (``kept, ref_kept, jaccard,
extra, missing, mismatched``). A pipeline is built outside the timed region (tensor
moves, buffers), called once (warm-up: numba compilation; its output is the one
compared), then each stage is timed: ``decode`` on the raw batch, ``nms`` on the
candidates that decode produced, ``total`` end to end. A candidate-buffer overflow, or
any exception, is an error row with the message; an unavailable pipeline a skipped row.

Sources: ``real`` replays the recorded YOLOv3-tiny raw rows (``nmsbench.datasets.real``;
images cycle through the recordings that keep raw rows); ``synthetic`` is a YOLOv5-shaped
[B, 25200, 85] tensor (``nmsbench.datasets.synthetic_raw``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from . import datasets
from .pipeline import (REFERENCE_PIPELINE, STAGES, Pipeline, PipelineConfig, compare_detections, pipelines,
                       validate_raw)
from .results import case_key
from .runner import _error_text, activity_columns, case_deadline, check_case_timeout, error_rows, row_emitter, use_threads
from .gpu_activity import NoGpuActivity
from .timing import time_device, time_events, time_wall

SOURCES = ("real", "synthetic")
DEFAULT_BATCHES = (1, 8, 32)


@dataclass
class PipelineGrid:
    """The pipeline benchmark's axes; their product (times stages and timers) is the set of rows."""

    pipelines: list[str]
    devices: list[str]
    sources: list[str]
    batches: list[int] = field(default_factory=lambda: list(DEFAULT_BATCHES))
    confs: list[float] = field(default_factory=lambda: [0.25])
    iou: float = 0.45
    max_det: int = 300
    max_candidates: int = 4096
    seed: int = 0  # of the synthetic source
    recordings: Optional[list[str]] = None  # of the real source; None: every recording with raw rows
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    timers: list[str] = field(default_factory=lambda: ["wall", "device"])
    min_run_time: float = 0.2
    threads: int = 1
    case_timeout: Optional[float] = None  # seconds a pipeline case may take (None: no limit)

    def timers_for(self, device: str) -> list[str]:
        return [t for t in self.timers if t == "wall" or device == "cuda"]

    def count(self) -> int:
        per_case = sum(len(self.timers_for(d)) for d in self.devices) * len(self.pipelines) * len(self.stages)
        return len(self.sources) * len(self.batches) * len(self.confs) * per_case


def load_source(source: str, batch: int, seed: int = 0, recordings: Optional[list[str]] = None):
    """(raw float32 [batch, R, 85], the image of each batch entry, input size) for a source."""
    if source == "real":
        return datasets.real.real_raw(batch, recordings)
    if source == "synthetic":
        from .datasets.synthetic_raw import INPUT_SIZE, synthetic_raw

        return synthetic_raw(batch, seed), [f"synthetic:{seed}:{b}" for b in range(batch)], INPUT_SIZE
    raise ValueError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")


def _images_column(source: str, images: list[str], seed: int) -> str:
    if source == "synthetic":
        return f"synthetic(seed={seed})"
    return ",".join(dict.fromkeys(key.rpartition("@")[0] for key in images))


def run_pipeline_bench(grid: PipelineGrid, write: Callable[[dict], None],
                       on_case: Callable[[dict], None] = lambda row: None, done: frozenset | set = frozenset()) -> dict:
    """Run every case of ``grid``; ``write`` gets each row as soon as it exists. Rows whose
    :func:`~nmsbench.results.case_key` is in ``done`` (already written) are not run again;
    a case past ``grid.case_timeout`` becomes error rows."""
    check_case_timeout(grid.case_timeout)
    use_threads(grid.threads)
    emit, counts = row_emitter(write, on_case)
    # the device timer's rows last: once a process has profiled, CUPTI stays attached and
    # every later CUDA call costs the host more (nmsbench.runner.sweep_passes)
    others = [t for t in grid.timers if t != "device"]
    for timers in ([others] if others else []) + ([["device"]] if "device" in grid.timers else []):
        _pipeline_pass(dataclasses.replace(grid, timers=timers), emit, done)
    return counts


def _pipeline_pass(grid: PipelineGrid, emit: Callable[[dict], None], done) -> None:
    """Every case of ``grid`` (one pass of :func:`run_pipeline_bench`), its rows to ``emit``."""
    known = pipelines()

    def rows_of(base: dict, name: str, device: str) -> list[dict]:
        pipeline = known.get(name)
        common = base | {"impl": name, "family": pipeline.nms_family if pipeline else "", "device": device}
        rows = [common | {"stage": s, "timer": t} for s in grid.stages for t in grid.timers_for(device)]
        return [row for row in rows if case_key(row) not in done]

    params = json.dumps({"max_det": grid.max_det, "max_candidates": grid.max_candidates}, sort_keys=True)
    for source in grid.sources:
        try:
            raw_all, images, size = load_source(source, max(grid.batches), grid.seed, grid.recordings)
            validate_raw(raw_all)
            failure = None
        except Exception as exc:
            raw_all, images, size, failure = None, [], "", f"loading source {source}: {_error_text(exc)}"
        for batch in grid.batches:
            for conf in grid.confs:
                base = {"benchmark": "pipeline", "scenario": source, "overlap": conf, "iou_threshold": grid.iou,
                        "seed": grid.seed if source == "synthetic" else "", "classes": 80, "dtype": "float32",
                        "batch": batch, "params": params, "threads": grid.threads, "input_size": size}
                if failure:
                    for device in grid.devices:
                        for name in grid.pipelines:
                            for row in rows_of(base, name, device):
                                emit(row | {"status": "error", "error": failure})
                    continue
                raw = raw_all[:batch]
                base |= {"n": raw.shape[1], "image": _images_column(source, images[:batch], grid.seed)}
                cases = [(device, name) for device in grid.devices for name in grid.pipelines if rows_of(base, name, device)]
                if not cases:  # all written already (--resume)
                    continue
                try:
                    config = PipelineConfig(conf, grid.iou, grid.max_det, grid.max_candidates, (size, size))
                    reference_pipeline = known[REFERENCE_PIPELINE].build(raw, config, "cpu")
                    candidates = reference_pipeline.decode()
                    reference = reference_pipeline.nms(candidates)
                    base["candidates"] = sum(len(c.rows) for c in candidates)
                    failure_case = None
                except Exception as exc:
                    config, reference, failure_case = None, None, f"reference pipeline: {_error_text(exc)}"
                for device, name in cases:
                    rows = rows_of(base, name, device)  # base now holds the candidate count
                    if failure_case:
                        for row in rows:
                            emit(row | {"status": "error", "error": failure_case})
                        continue
                    for row in _run_case(known.get(name), name, device, raw, config, reference, rows, grid):
                        emit(row)


def _run_case(pipeline: Optional[Pipeline], name: str, device: str, raw: np.ndarray, config: PipelineConfig,
              reference, rows: list[dict], grid: PipelineGrid):
    if pipeline is None:
        skip = f"no pipeline named {name}"
    else:
        available, skip = pipeline.availability(device)
        skip = None if available else skip
    if skip:
        for row in rows:
            yield row | {"status": "skipped", "error": skip}
        return
    try:
        with case_deadline(grid.case_timeout):  # past it: CaseTimeout, error rows like any exception
            peak = ""
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            prepared = pipeline.build(raw, config, device)
            detections = prepared.run()  # warm-up, and the output that is checked
            if device == "cuda":
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() - before
            agreement = compare_detections(detections, reference)
            candidates = prepared.decode()
            calls = {"decode": prepared.decode, "nms": lambda: prepared.nms(candidates), "total": prepared.run}
            timings = {}
            for row in rows:
                call, timer = calls[row["stage"]], row["timer"]
                try:
                    timings[row["stage"], timer] = _time(timer, call, grid)
                except NoGpuActivity as exc:  # the device timer has nothing to time: a skipped row
                    timings[row["stage"], timer] = exc
    except Exception as exc:
        yield from error_rows(rows, exc)
        return
    for row in rows:
        t = timings[row["stage"], row["timer"]]
        if isinstance(t, NoGpuActivity):
            yield row | {"status": "skipped", "error": str(t)}
            continue
        yield row | agreement | {
            "status": "ok", "error": "", "median_us": t.median_us, "iqr_us": t.iqr_us, "runs": t.runs,
            "rel_spread": t.rel_spread, "noisy": t.noisy, "peak_mem_bytes": peak, "blocks": t.blocks, "rounds": t.rounds,
            "noise": t.noise, "host_sync": device == "cuda" and name != REFERENCE_PIPELINE, **activity_columns(t),
        }


def _time(timer: str, call, grid: PipelineGrid):
    """One stage's timing by one timer (see nmsbench.timing)."""
    if timer == "wall":
        return time_wall(call, min_run_time=grid.min_run_time, threads=grid.threads)
    if timer == "events":
        return time_events(call, min_run_time=grid.min_run_time)
    return time_device(call, min_run_time=grid.min_run_time)


def per_image_table(frame) -> "pandas.DataFrame":
    """Pipeline rows of a results frame as time per image: one row per (source, device, pipeline,
    batch, stage, timer, conf) with ``us_per_image`` = median_us / batch (ok rows only)."""
    rows = frame[(frame["benchmark"] == "pipeline") & (frame["status"] == "ok")].copy()
    rows["us_per_image"] = rows["median_us"] / rows["batch"].astype(float)
    keys = ["scenario", "device", "impl", "batch", "stage", "timer", "overlap"]
    return rows[keys + ["us_per_image", "median_us", "candidates", "kept", "ref_kept", "jaccard"]].sort_values(keys)
