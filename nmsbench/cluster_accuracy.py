"""``nmsbench accuracy --cluster``: the images spread across Dask workers, the COCO
evaluation exact.

For each source and device (a group), three kinds of task:

- detection, one per image batch: every case of the group run on the batch's images (as
  :func:`nmsbench.accuracy.detect` runs them locally); its detections per image come back;
- evaluation, one per case: the case's detections of every batch, joined in image order
  (the very table one process makes), scored by the COCO evaluator;
- timing, one per group: every case of the group a contender timing a pass over all the
  images in rotated rounds (the local run's measurement, on one worker).

A row is written when its case's evaluation and timing are both in. Workers load the
source themselves (once per process): the synthetic scene sets from their seed, a coco
source from its files (which every worker must reach at the same path). What they need of
the accuracy benchmark comes as ``bench`` (:func:`nmsbench.accuracy_bench.cluster_parts`),
which imports this module.
"""

from __future__ import annotations

import math
from typing import Callable

from .cluster import (Deduplicated, Job, _TIMING, check_grid, connect, gauge, gpu_resources, identity, maybe_die,
                      release, stream)

BATCHES_PER_WORKER = 2  # image batches per worker and group: enough to keep every worker busy
MIN_BATCH = 8  # images: a smaller batch costs more in task overhead than it spreads

_SOURCES: dict = {}  # worker side: (the grid's source fields, name, device) -> the source on that device
_TRUTH: dict = {}  # worker side: (the grid's source fields, name) -> (ground truth, crowded images)


def _key(grid, name: str) -> tuple:
    return (name, grid.images, grid.seed, grid.candidates, grid.annotations, tuple(grid.image_ids or ()))


def _source(bench, grid, name: str, device: str):
    key = (*_key(grid, name), device)
    if key not in _SOURCES:
        _SOURCES.clear()  # one source at a time: a worker's tasks come group by group
        _SOURCES[key] = bench.load_source(grid, name).to(device)
    return _SOURCES[key]


def detect_batch(bench, grid, name: str, device: str, cases: list[tuple], start: int, stop: int, kill_once=None) -> dict:
    """A worker's task: each case (impl, iou, params) on images ``start:stop`` of the source;
    {case index: (detections table, kept) or the error's text}."""
    from .accuracy import AccuracySource, detect
    from .engine.rounds import error_text, use_threads

    with _TIMING:
        maybe_die(kill_once)
        use_threads(grid.threads)
        source = _source(bench, grid, name, device)
        part = AccuracySource(source.name, source.images[start:stop], source.ground_truth, source.source_params,
                              source.image, source.seed, source.crowded)
        found = {}
        for k, (impl, iou, params) in enumerate(cases):
            try:
                result = detect(impl, part, iou, params, grid.max_det)
                found[k] = (result.rows, result.kept)
            except Exception as exc:
                found[k] = error_text(exc)
    return found


def evaluate(bench, grid, name: str, tables: list) -> dict:
    """A worker's task: COCO metrics of one case's detections (its batches' tables, in order)."""
    import numpy as np

    from .accuracy import coco_metrics

    key = _key(grid, name)
    if key not in _TRUTH:
        source = next((s for k, s in _SOURCES.items() if k[:-1] == key), None) or bench.load_source(grid, name)
        _TRUTH.clear()
        _TRUTH[key] = (source.ground_truth, source.crowded)
    truth, crowded = _TRUTH[key]
    rows = np.concatenate(tables) if tables else np.empty((0, 7))
    metrics = coco_metrics(truth, rows, crowded)
    return {k: "" if math.isnan(v) else v for k, v in metrics.items()}


def time_group(bench, grid, name: str, device: str, cases: list[tuple], kill_once=None) -> tuple[list, dict]:
    """A worker's task: every case timed in rotated rounds over all the images, as
    locally; per case its measurement columns (per image), ("skipped", why) or ("error", why)."""
    from .accuracy import nms_pass
    from .engine.rounds import Contender, error_text, prepare, time_in_rounds, use_threads
    from .timers import TIMERS, Callables

    with _TIMING:
        maybe_die(kill_once)
        use_threads(grid.threads)
        source = _source(bench, grid, name, device)
        settings = grid.settings
        TIMER = bench.TIMER
        results: list = [None] * len(cases)
        contenders = []
        for k, (impl, iou, params) in enumerate(cases):
            contender = Contender(f"{impl} {params} iou={iou:g}", cpu=device == "cpu")
            call = nms_pass(impl, source, iou, params)

            def build(contender=contender, call=call):
                call()  # the warm-up (locally: detect's first calls)
                contender.calls[TIMER] = TIMERS[TIMER].build(Callables(op=call))

            try:
                prepare(contender, settings, build)
            except Exception as exc:
                results[k] = ("error", error_text(exc))
                continue
            contenders.append((k, contender))
        outcomes = time_in_rounds([c for _, c in contenders], settings, gauge()) if contenders else []
        for (k, _), outcome in zip(contenders, outcomes):
            if outcome.error is not None:
                results[k] = ("error", error_text(outcome.error))
            elif TIMER in outcome.skipped:
                results[k] = ("skipped", outcome.skipped[TIMER])
            else:
                results[k] = bench.per_image(outcome.measured[TIMER], len(source.images))
    me = identity()
    return results, me


def batches(images: int, workers: int) -> list[tuple[int, int]]:
    """Image ranges that spread ``images`` over ``workers`` (BATCHES_PER_WORKER each, at
    least MIN_BATCH images each)."""
    count = max(1, min(workers * BATCHES_PER_WORKER, images // MIN_BATCH))
    size = -(-images // count)
    return [(start, min(start + size, images)) for start in range(0, images, size)] or [(0, 0)]


def run_accuracy(grid, write: Callable[[dict], None], on_case: Callable[[dict], None] = lambda row: None,
                 done=frozenset(), between_turns: Callable[[], None] = lambda: None, gauge_=None, bench=None) -> dict:
    """:func:`nmsbench.accuracy_bench.run_accuracy_bench` on ``grid.cluster`` (``bench``: its parts)."""
    import json

    from .engine.rounds import error_text, finish_run, start_run
    from .registry import implementations
    from .results import case_key

    check_grid(grid, reach=False)
    SYNTHETIC_SOURCES, TIMER, _case_row, _unrunnable, load_source = (
        bench.SYNTHETIC_SOURCES, bench.TIMER, bench.case_row, bench.unrunnable, bench.load_source)
    emit, counts, driver_gauge = start_run(grid, write, on_case, gauge_)
    client = connect(grid.cluster, grid.devices)
    local = dataclass_replace(grid, cluster=None)
    known = implementations()
    try:
        out = Deduplicated(emit, done)
        gpu = gpu_resources(client, grid.devices)
        workers = max(1, len(client.scheduler_info(n_workers=-1)["workers"]))
        jobs, groups = [], {}
        for name in grid.sources:
            try:
                source, failure = load_source(grid, name), None
            except Exception as exc:
                source, failure = None, f"loading source {name}: {error_text(exc)}"
            base = {"benchmark": "accuracy", "scenario": name, "dtype": "float32", "timer": TIMER,
                    "threads": grid.threads, "seed": grid.seed if name in SYNTHETIC_SOURCES else ""}
            if source is not None:
                base |= {"image": source.image, "n": source.n, "classes": source.classes, "images": len(source.images),
                         "source_params": source.source_params}
            for device in grid.devices:
                rows = [_case_row(base, known.get(impl), impl, device, iou, given)
                        for impl in grid.impls for given in (grid.param_sets(known[impl]) if impl in known else [{}])
                        for iou in grid.ious]
                rows = [row for row in rows if case_key(row) not in done]
                if failure:
                    out.rows([row | {"status": "error", "error": failure} for row in rows])
                    continue
                runnable = []
                for row in rows:
                    skip = _unrunnable(known.get(row["impl"]), row["impl"], device)
                    if skip:
                        out.rows([row | {"status": "skipped", "error": skip}])
                    else:
                        runnable.append(row)
                if not runnable:
                    continue
                cases = [(row["impl"], row["iou_threshold"], json.loads(row["params"])) for row in runnable]
                ranges = batches(len(source.images), workers)
                resources = gpu if device == "cuda" else None
                group = {"rows": runnable, "detected": {}, "batches": len(ranges), "scored": {}, "timed": None}
                groups[name, device] = group
                jobs.append(Job(time_group, (bench, local, name, device, cases, KILL()), resources, ("time", name, device)))
                jobs += [Job(detect_batch, (bench, local, name, device, cases, a, b, KILL()), resources, ("detect", name, device, i))
                         for i, (a, b) in enumerate(ranges)]
        for job, result in stream(client, jobs, between_turns):  # evaluations join the jobs as detections complete
            kind, name, device = job.what[:3]
            group = groups[name, device]
            if isinstance(result, BaseException):
                result = _failed(kind, group, result)
            if kind == "detect":
                group["detected"][job.what[3]] = result
                if len(group["detected"]) == group["batches"]:
                    jobs += _evaluations(bench, local, name, device, group)
            elif kind == "eval":
                group["scored"][job.what[3]] = result
            else:
                if isinstance(result, tuple):  # the timing worker's columns name the rows' machine
                    result, me = result
                    group["worker"] = me["columns"]
                    out.rows([], me["worker"])
                group["timed"] = result
            out.rows(_finished(group))
        note = out.note(grid.cluster)
    finally:
        release(grid.cluster)
    return finish_run(counts, driver_gauge) | {"cluster": note}


def KILL():
    from . import cluster

    return cluster.KILL_ONCE


def dataclass_replace(grid, **changes):
    import dataclasses

    return dataclasses.replace(grid, **changes)


def _failed(kind: str, group: dict, error: BaseException):
    """A task that failed on every worker it ran on, as what it would have returned."""
    text = f"its task failed on the cluster: {type(error).__name__}: {error}"
    if kind == "detect":
        return {k: text for k in range(len(group["rows"]))}
    if kind == "eval":
        return text
    return [("error", text)] * len(group["rows"])


def _evaluations(bench, grid, name: str, device: str, group: dict) -> list[Job]:
    """One evaluation task per case whose every batch gave detections (an error text makes
    its row an error row without one)."""
    jobs = []
    for k in range(len(group["rows"])):
        parts = [group["detected"][b][k] for b in range(group["batches"])]
        failed = next((p for p in parts if isinstance(p, str)), None)
        if failed is not None:
            group["scored"][k] = failed
            continue
        group["rows"][k]["kept"] = sum(kept for _, kept in parts)
        group["rows"][k]["detections"] = sum(len(table) for table, _ in parts)
        jobs.append(Job(evaluate, (bench, grid, name, [table for table, _ in parts]), None, ("eval", name, device, k)))
    return jobs


def _finished(group: dict) -> list[dict]:
    """The group's rows whose scores and timing are both in (each given once)."""
    if group["timed"] is None:
        return []
    rows = []
    for k, row in enumerate(group["rows"]):
        if k not in group["scored"] or row.get("_done"):
            continue
        row["_done"] = True
        scored, timed = group["scored"][k], group["timed"][k]
        clean = {c: v for c, v in row.items() if c != "_done"}
        if isinstance(scored, str):
            rows.append(clean | {"status": "error", "error": scored})
        elif isinstance(timed, tuple):
            rows.append(clean | {"status": timed[0], "error": timed[1]})
        else:
            rows.append(clean | scored | timed | {"status": "ok", "error": ""})
    worker = group.get("worker")
    return [row | (worker or {}) for row in rows]


__all__ = ["batches", "detect_batch", "evaluate", "run_accuracy", "time_group"]
