"""``nmsbench accuracy --cluster``: the images spread across Dask workers, the COCO
evaluation exact.

For each source and device (a group), two kinds of task:

- a batch, one per range of images: every case of the group run on the batch's images (its
  warm-up and detections, as :func:`nmsbench.accuracy.detect` runs them locally), then all
  of them timed together in rotated rounds, a pass over the batch's images as the timed
  call, under the engine's rounds and this worker's host gauge, with the batch's share of
  ``--min-run-time``; its detections and measurements come back;
- evaluation, one per case: the case's detections of every batch, joined in image order
  (the very table one process makes), scored by the COCO evaluator.

A case's time per image is then put together on the driver (:func:`merge_measured`): round
by round and block by block, the batches' pass times add up to a pass over every image
(the time one process measures, one process timing a pass over all of them), and that is
summarized as locally (median of the round medians, IQR, the noisy rule) and divided by the
images. A row is written when its evaluation and every batch's timing are in. Workers load
the source themselves (once per process): the synthetic scene sets from their seed, a coco
source from its files (which every worker must reach at the same path). What they need of
the accuracy benchmark comes as ``bench`` (:func:`nmsbench.accuracy_bench.cluster_parts`),
which imports this module.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Optional

import numpy as np

from .cluster import ClusterRun, Job, _TIMING, drive, gauge, identity, maybe_die

BATCHES_PER_WORKER = 3  # image batches per worker and group: the slow cases' passes spread evenly
MIN_BATCH = 8  # images: a smaller batch costs more in task overhead than it spreads

SOURCES_KEPT = 3  # sources a worker keeps loaded (the three scene sets): its tasks come from every group at once
_SOURCES: dict = {}  # worker side: (the grid's source fields, name, device) -> the source on that device, oldest first
_TRUTH: dict = {}  # worker side: (the grid's source fields, name) -> (ground truth, crowded images)


def _key(grid, name: str) -> tuple:
    return (name, grid.images, grid.seed, grid.candidates, grid.annotations, tuple(grid.image_ids or ()))


def _kept(cache: dict, key, make: Callable[[], object]):
    """``cache[key]``, made by ``make()`` on a miss; the oldest entry goes first once the
    cache holds SOURCES_KEPT."""
    if key not in cache:
        while len(cache) >= SOURCES_KEPT:
            del cache[next(iter(cache))]
        cache[key] = make()
    return cache[key]


def _source(bench, grid, name: str, device: str):
    return _kept(_SOURCES, (*_key(grid, name), device), lambda: bench.load_source(grid, name).to(device))


def batch_task(bench, grid, name: str, device: str, cases: list[tuple], start: int, stop: int,
               kill_once: Optional[str] = None) -> tuple[list, list, dict]:
    """A worker's task: each case (impl, iou, params) on images ``start:stop`` of the
    source, run once (warm-up and detections), then every case timed in rotated rounds (a
    pass over these images its call) for this batch's share of ``--min-run-time``. Returns
    (per case: (detections table, kept) or the error's text; per case: its Measured,
    ("skipped", why) or ("error", why); this worker's identity)."""
    from .accuracy import detect, nms_pass
    from .engine.rounds import Contender, error_text, prepare, time_in_rounds, use_threads
    from .timers import TIMERS, Callables

    TIMER = bench.TIMER
    with _TIMING:
        maybe_die(kill_once)
        use_threads(grid.threads)
        source = _source(bench, grid, name, device)
        part = dataclasses.replace(source, images=source.images[start:stop])
        share = (stop - start) / len(source.images) if source.images else 1.0
        settings = dataclasses.replace(grid.settings, min_run_time=grid.settings.min_run_time * share)
        found: list = [None] * len(cases)
        timed: list = [None] * len(cases)
        contenders = []
        for k, (impl, iou, params) in enumerate(cases):
            contender = Contender(f"{impl} {params} iou={iou:g}", cpu=device == "cpu")

            def work(k=k, impl=impl, iou=iou, params=params, contender=contender):
                result = detect(impl, part, iou, params, grid.max_det)  # the warm-up, as locally
                found[k] = (result.rows, result.kept)
                contender.calls[TIMER] = TIMERS[TIMER].build(Callables(op=nms_pass(impl, part, iou, params)))

            try:
                prepare(contender, settings, work)
            except Exception as exc:
                found[k] = timed[k] = error_text(exc)
                continue
            contenders.append((k, contender))
        outcomes = time_in_rounds([c for _, c in contenders], settings, gauge()) if contenders else []
        for (k, _), outcome in zip(contenders, outcomes):
            if outcome.error is not None:
                timed[k] = ("error", error_text(outcome.error))
            elif TIMER in outcome.skipped:
                timed[k] = ("skipped", outcome.skipped[TIMER])
            else:
                timed[k] = outcome.measured[TIMER]
    timed = [("error", t) if isinstance(t, str) else t for t in timed]
    return found, timed, identity()


def warm_task(bench, grid) -> None:
    """A worker's start-up for an accuracy run (every worker, before the cases): each
    implementation of the grid run once on the CPU on a few images of the first source, so
    the imports, numba caches and first-call costs every worker would pay in its first
    batch are paid in the start-up, once and side by side, and the cases' clock holds the
    cases. CUDA batches warm up in their task (only a GPU worker runs them). A failure is
    left to the cases, which meet it themselves."""
    from .accuracy import detect, evaluator_name
    from .engine.rounds import use_threads
    from .registry import implementations

    if "cpu" not in grid.devices or not grid.sources:
        return
    use_threads(grid.threads)
    try:
        evaluator_name()  # imports the COCO evaluator the evaluations use
        source = _source(bench, grid, grid.sources[0], "cpu")
    except Exception:
        return
    part = dataclasses.replace(source, images=source.images[:2])
    known = implementations()
    for impl in grid.impls:
        if impl not in known or bench.unrunnable(known[impl], impl, "cpu"):
            continue
        try:
            detect(impl, part, grid.ious[0], grid.param_sets(known[impl])[0], grid.max_det)
        except Exception:
            continue


def evaluate(bench, grid, name: str, tables: list) -> dict:
    """A worker's task: COCO metrics of one case's detections (its batches' tables, in order)."""
    from .accuracy import coco_metrics

    key = _key(grid, name)

    def truth_of_source():
        source = next((s for k, s in _SOURCES.items() if k[:-1] == key), None) or bench.load_source(grid, name)
        return source.ground_truth, source.crowded

    truth, crowded = _kept(_TRUTH, key, truth_of_source)
    rows = np.concatenate(tables) if tables else np.empty((0, 7))
    metrics = coco_metrics(truth, rows, crowded)
    return {k: "" if math.isnan(v) else v for k, v in metrics.items()}


def merge_measured(parts: list, sizes: list[int], per_image: Callable) -> dict:
    """A row's measurement columns per image from its batches' measurements (``parts``, one
    per batch of ``sizes`` images): round r's block j of a pass over every image is the sum
    of the batches' round-r block j (rounds and blocks up to the fewest any batch kept),
    summarized as one process summarizes its rounds, then divided by the images
    (``per_image``); ``runs``: the NMS calls timed over every batch; contention, slow
    rounds and attempts: the worst batch's. Fewer rounds or blocks in one batch (its slow
    rounds left out) leave fewer in the row, which the noisy rule then judges."""
    from .engine.rounds import Measured
    from .engine.samples import Samples
    from .timing import Blocks, summarize

    if len(parts) == 1:
        return per_image(parts[0], sizes[0])
    rounds = min(len(p.samples.blocks_us) for p in parts)
    merged = []
    for r in range(rounds):
        width = min(len(p.samples.blocks_us[r]) for p in parts)
        times = np.sum([np.asarray(p.samples.blocks_us[r][:width], dtype=float) for p in parts], axis=0)
        merged.append(Blocks(times, width))
    contention = next((p.timing.contention for p in parts if p.timing.contention), "")
    timing = dataclasses.replace(summarize(merged, contention, rounds),
                                 slow_rounds=min(rounds, max(p.timing.slow_rounds for p in parts)))
    whole = Measured(parts[0].timer, timing, max(p.attempts for p in parts), Samples.from_blocks(merged))
    columns = per_image(whole, sum(sizes))
    return columns | {"runs": sum(p.timing.runs * n for p, n in zip(parts, sizes))}


def batches(images: int, workers: int) -> list[tuple[int, int]]:
    """Image ranges that spread ``images`` over ``workers`` (BATCHES_PER_WORKER each, at
    least MIN_BATCH images each)."""
    count = max(1, min(workers * BATCHES_PER_WORKER, images // MIN_BATCH))
    size = max(1, -(-images // count))
    return [(start, min(start + size, images)) for start in range(0, images, size)] or [(0, 0)]


def run_accuracy(grid, write: Callable[[dict], None], on_case: Callable[[dict], None] = lambda row: None,
                 done=frozenset(), between_turns: Callable[[], None] = lambda: None, gauge_=None, bench=None) -> dict:
    """:func:`nmsbench.accuracy_bench.run_accuracy_bench` on ``grid.cluster`` (``bench``: its parts)."""
    import json

    from .engine.rounds import error_text
    from .registry import implementations
    from .results import case_key

    local = dataclasses.replace(grid, cluster=None)
    known = implementations()

    def body(run: ClusterRun) -> None:
        out = run.out
        workers = max(1, len(run.client.scheduler_info(n_workers=-1)["workers"]))
        jobs, groups = [], {}
        for name in grid.sources:
            try:
                source, failure = bench.load_source(grid, name), None
            except Exception as exc:
                source, failure = None, f"loading source {name}: {error_text(exc)}"
            base = {"benchmark": "accuracy", "scenario": name, "dtype": "float32", "timer": bench.TIMER,
                    "threads": grid.threads, "seed": grid.seed if name in bench.SYNTHETIC_SOURCES else ""}
            if source is not None:
                base |= {"image": source.image, "n": source.n, "classes": source.classes, "images": len(source.images),
                         "source_params": source.source_params}
            for device in grid.devices:
                rows = [bench.case_row(base, known.get(impl), impl, device, iou, given)
                        for impl in grid.impls for given in (grid.param_sets(known[impl]) if impl in known else [{}])
                        for iou in grid.ious]
                rows = [row for row in rows if case_key(row) not in done]
                if failure:
                    out.rows([row | {"status": "error", "error": failure} for row in rows])
                    continue
                runnable = []
                for row in rows:
                    skip = bench.unrunnable(known.get(row["impl"]), row["impl"], device)
                    if skip:
                        out.rows([row | {"status": "skipped", "error": skip}])
                    else:
                        runnable.append(row)
                if not runnable:
                    continue
                cases = [(row["impl"], row["iou_threshold"], json.loads(row["params"])) for row in runnable]
                ranges = batches(len(source.images), workers)
                groups[name, device] = {"rows": runnable, "ranges": ranges, "detected": {}, "timed": {}, "scored": {}}
                jobs += [Job(batch_task, (bench, local, name, device, cases, a, b, KILL()),
                             run.gpu if device == "cuda" else None, ("batch", name, device, i))
                         for i, (a, b) in enumerate(ranges)]
        for job, result in run.stream(jobs):  # evaluations join the jobs as batches complete
            kind, name, device, index = job.what
            group = groups[name, device]
            if isinstance(result, BaseException):
                result = _failed(kind, group, result)
            if kind == "batch":
                found, timed, me = result
                if me:
                    group.setdefault("worker", me["columns"])
                    out.rows([], me["worker"])
                group["detected"][index], group["timed"][index] = found, timed
                if len(group["detected"]) == len(group["ranges"]):
                    jobs += _evaluations(bench, local, name, device, group)
            else:
                group["scored"][index] = result
            out.rows(_finished(group, bench.per_image))

    return drive(grid, write, on_case, done, between_turns, gauge_, bench, body, warm=functools.partial(warm_task, bench, local))


def KILL():
    from . import cluster

    return cluster.KILL_ONCE


def _failed(kind: str, group: dict, error: BaseException):
    """A task that failed on every worker it ran on, as what it would have returned."""
    text = f"its task failed on the cluster: {type(error).__name__}: {error}"
    if kind == "batch":
        return [text] * len(group["rows"]), [("error", text)] * len(group["rows"]), None
    return text


def _evaluations(bench, grid, name: str, device: str, group: dict) -> list[Job]:
    """One evaluation task per case whose every batch gave detections (an error text makes
    its row an error row without one)."""
    jobs = []
    for k in range(len(group["rows"])):
        parts = [group["detected"][b][k] for b in range(len(group["ranges"]))]
        failed = next((p for p in parts if isinstance(p, str)), None)
        if failed is not None:
            group["scored"][k] = failed
            continue
        group["rows"][k]["kept"] = sum(kept for _, kept in parts)
        group["rows"][k]["detections"] = sum(len(table) for table, _ in parts)
        # before the batches still waiting: evaluations then fill the workers' gaps instead of trailing the run
        jobs.append(Job(evaluate, (bench, grid, name, [table for table, _ in parts]), None, ("eval", name, device, k), 1))
    return jobs


def _finished(group: dict, per_image: Callable) -> list[dict]:
    """The group's rows whose scores and every batch's timing are in (each given once)."""
    if len(group["timed"]) < len(group["ranges"]):
        return []
    sizes = [b - a for a, b in group["ranges"]]
    rows = []
    for k, row in enumerate(group["rows"]):
        if k not in group["scored"] or row.get("_done"):
            continue
        row["_done"] = True
        scored = group["scored"][k]
        timed = [group["timed"][b][k] for b in range(len(group["ranges"]))]
        failed = next((t for t in timed if isinstance(t, tuple)), None)
        clean = {c: v for c, v in row.items() if c != "_done"}
        if isinstance(scored, str):
            rows.append(clean | {"status": "error", "error": scored})
        elif failed is not None:
            rows.append(clean | {"status": failed[0], "error": failed[1]})
        else:
            try:
                rows.append(clean | scored | merge_measured(timed, sizes, per_image) | {"status": "ok", "error": ""})
            except Exception as exc:
                rows.append(clean | {"status": "error", "error": f"merging the batches' timings: {exc}"})
    worker = group.get("worker")
    return [row | (worker or {}) for row in rows]


__all__ = ["batch_task", "batches", "evaluate", "merge_measured", "run_accuracy"]
