"""``nmsbench pipeline --cluster``: the pipeline benchmark's case groups on Dask workers.

A case group is one source, batch size and confidence threshold on one device with all its
pipelines (their stages and timers timed together in rotated rounds, as locally); a task
runs the benchmark's own pass (``pipeline_pass``, given by :mod:`nmsbench.pipeline_bench`,
which imports this module) on a grid of that one group, each timer pass after the other as
locally. A worker loads a source once per run, at the run's largest batch (a smaller batch
is its first images, as in one process), and keeps it for the run's later groups and passes.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import uuid
from typing import Callable, Optional

from .cluster import Job, _TIMING, gauge, identity, maybe_die

_LOADED: dict = {}  # worker side: the run's token and its sources at the largest batch


def pipeline_group(sub, largest: int, done, kill_once: Optional[str], pipeline_pass: Callable, load: Callable,
                   token: str):
    """A worker's task: every case of ``sub`` (one source, batch, threshold and device) not in
    ``done`` through ``pipeline_pass``; the source loaded at batch ``largest`` by ``load``
    (the benchmark's loader, which checks it as the pass does). (rows with this worker's columns,
    the worker, the task's seconds)."""
    from .engine.rounds import use_threads

    with _TIMING:
        started = time.perf_counter()
        maybe_die(kill_once)
        use_threads(sub.threads)
        if _LOADED.get("token") != token:
            _LOADED.clear()
            _LOADED["token"] = token
        source, batch = sub.sources[0], sub.batches[0]
        recordings = tuple(sub.recordings or ())
        loaded = {}
        try:
            if source not in _LOADED:
                _LOADED[source] = load(source, largest, sub.seed, sub.recordings)
            raw, images, size = _LOADED[source]
            loaded[source, batch, sub.seed, recordings] = raw[:batch], images[:batch], size
        except Exception:
            pass  # the pass loads it again and makes the error rows, as locally
        rows: list[dict] = []
        pipeline_pass(sub, rows.append, done, lambda: None, gauge(), loaded)
        spent = time.perf_counter() - started
    me = identity()
    return [row | me["columns"] for row in rows], me["worker"], spent


class _Failed:
    """A source that cannot be unpacked: the pass then makes its group's rows error rows."""

    def __init__(self, error: BaseException):
        self.error = error

    def __iter__(self):
        raise RuntimeError(f"its case group failed on the cluster: {type(self.error).__name__}: {self.error}")


def run_pipeline(grid, write: Callable[[dict], None], on_case: Callable[[dict], None] = lambda row: None,
                 done=frozenset(), between_turns: Callable[[], None] = lambda: None, gauge_=None,
                 bench: tuple = ()) -> dict:
    """:func:`nmsbench.pipeline_bench.run_pipeline_bench` on ``grid.cluster``; ``bench``: its
    (pipeline pass, checked source loader, timer passes)."""
    from . import cluster

    pipeline_pass, load, timer_passes = bench

    def body(run: cluster.ClusterRun) -> None:
        token, largest = uuid.uuid4().hex, max(grid.batches)
        for part in timer_passes(grid):
            jobs = []
            for source, batch, conf, device in itertools.product(part.sources, part.batches, part.confs, part.devices):
                if not part.timers_for(device):
                    continue
                sub = dataclasses.replace(part, sources=[source], batches=[batch], confs=[conf], devices=[device],
                                          cluster=None)
                written = cluster.done_for(done, scenario=source, device=device, batch=batch)
                jobs.append(Job(pipeline_group, (sub, largest, written, cluster.KILL_ONCE, pipeline_pass, load, token),
                                run.gpu if device == "cuda" else None, sub))
            for job, result in run.stream(jobs):
                if isinstance(result, BaseException):
                    sub, rows = job.what, []
                    key = (sub.sources[0], sub.batches[0], sub.seed, tuple(sub.recordings or ()))
                    pipeline_pass(sub, rows.append, run.out.written, lambda: None, run.driver_gauge,
                                  {key: _Failed(result)})
                    run.out.rows(rows)
                else:
                    run.out.rows(*result)

    return cluster.drive(grid, write, on_case, done, between_turns, gauge_, pipeline_pass, body)


__all__ = ["pipeline_group", "run_pipeline"]
