"""The sweep: every case of the grid, timed and compared, one row each.

For each box set (scenario x overlap x n, generated once on the CPU) the runner computes
the realized overlap and the reference greedy NMS once per IoU threshold, then for each
device x dtype x implementation: prepares the inputs (cast, move, validate), calls the
op once (warm-up: numba/NVRTC compilation; its output is the one checked against the
reference), and times that very same call. Any exception becomes an error row, an
unsupported cell a skipped row; the sweep goes on.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from . import datasets
from .agreement import compare_keep
from .boxes import BoxSet, validate_nms_inputs
from .overlap import realized_overlap
from .registry import Implementation, get
from .results import case_key
from .timing import DEFAULT_TIMERS, Timing, capture_graph, time_device, time_graph, time_wall

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16}
REFERENCE = "torchvision"


@dataclass
class Grid:
    """The sweep axes; their product is the set of cases."""

    impls: list[str]
    devices: list[str]
    dtypes: list[str]
    scenarios: list[str]
    ns: list[int]
    ious: list[float]
    overlaps: Optional[list[float]] = None  # None: each scenario's default knob value
    seed: int = 0
    classes: int = 1
    params: dict = field(default_factory=dict)  # given to implementations that accept them
    timers: list[str] = field(default_factory=lambda: list(DEFAULT_TIMERS))
    min_run_time: float = 0.2
    threads: int = 1
    file: Optional[str] = None
    recordings: Optional[list[str]] = None  # for the real scenario; None: its default recording
    case_timeout: Optional[float] = None  # seconds per case (see case_deadline); None: no limit
    repeat_noisy: int = 0  # re-time a noisy measurement up to this many times, keep the least noisy

    def overlaps_for(self, scenario: str) -> list[float]:
        return list(self.overlaps) if self.overlaps else [datasets.SCENARIOS[scenario].default_overlap]

    def recordings_for(self, scenario: str) -> list[Optional[str]]:
        """The recordings a scenario replays (``[None]``: its default, or it replays none)."""
        if datasets.SCENARIOS[scenario].recordings is None:
            return [None]
        return list(self.recordings) if self.recordings else [None]

    def timers_for(self, device: str) -> list[str]:
        return [t for t in self.timers if t == "wall" or device == "cuda"]

    def count(self) -> int:
        """Number of rows the sweep will write (graph rows of backends that are not
        graph-safe are written as skipped)."""
        per_set = sum(len(self.timers_for(d)) for d in self.devices) * len(self.dtypes) * len(self.impls) * len(self.ious)
        return sum(len(self.overlaps_for(s)) * len(self.recordings_for(s)) for s in self.scenarios) * len(self.ns) * per_set


def _resolve_params(impl: Implementation, given: dict) -> tuple[dict, Optional[str]]:
    """(the parameters its rows record, the error that makes its cases fail, or None)."""
    taken = impl.accepted_params(given)
    try:
        return impl.resolve_params(taken), None
    except ValueError as exc:
        return taken, _error_text(exc)


class CaseTimeout(Exception):
    """A case ran past ``Grid.case_timeout``."""


@contextlib.contextmanager
def case_deadline(seconds: Optional[float]):
    """Raise :class:`CaseTimeout` in the body once ``seconds`` have passed (None: no limit).

    SIGALRM (``signal.setitimer``) in the main thread: the exception is raised the next
    time the interpreter runs Python bytecode, which stops a case that hangs or loops in
    Python (and between native calls: torch ops, timer loops). A single native call that
    never returns (a numba ``nopython`` loop, a deadlocked CUDA kernel waited on) does not
    see the signal and cannot be stopped this way; one that returns late is stopped when it
    returns. Stop such a sweep (Ctrl-C, or kill it) and ``--resume`` it without the
    implementation that hangs. After a stopped CUDA case, kernels it queued may still run.
    POSIX only, main thread only.
    """
    if not seconds:
        yield
        return

    def alarm(signum, frame):
        raise CaseTimeout(f"stopped after the case timeout of {seconds:g} s (--case-timeout)")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_case_timeout(seconds: Optional[float]) -> None:
    """A ValueError where ``case_deadline`` cannot work (checked before a sweep starts)."""
    if seconds is None:
        return
    if not seconds > 0:
        raise ValueError(f"the case timeout must be a positive number of seconds, got {seconds!r}")
    if not hasattr(signal, "setitimer"):
        raise ValueError("a case timeout needs SIGALRM (POSIX); this platform has none")
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("a case timeout works in the main thread only (it uses SIGALRM)")


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 500 else text[:497] + "..."


def error_rows(rows: list[dict], exc: BaseException):
    """The case's rows as error rows carrying ``exc``. After a CUDA out-of-memory error the
    allocator's cache is emptied first, so that the next cases still run on that GPU."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        torch.cuda.empty_cache()
    message = _error_text(exc)
    for row in rows:
        yield row | {"status": "error", "error": message}


def _reference(data: BoxSet, iou: float) -> torch.Tensor:
    """Greedy NMS by torchvision on the CPU, on exactly the case's (cast) values."""
    if data.boxes.dtype == torch.float16:  # torchvision's CPU kernel has no half; float32 holds them exactly
        data = data.to("cpu", torch.float32)
    backend = get(REFERENCE).backend("cpu")
    return backend.fn(data.boxes, data.scores, iou_threshold=iou, labels=data.labels).keep


def _measure(impl, backend, data: BoxSet, iou: float, params: dict, timers: list[str], grid: Grid, ref_keep):
    """Run one case: warm-up call (checked), then each timer on the same call."""
    device = data.boxes.device

    def op():
        return backend.fn(data.boxes, data.scores, iou_threshold=iou, labels=data.labels, **params)

    peak = ""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    result = op()
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated(device) - before
    agreement = compare_keep(result.keep.cpu(), ref_keep)
    timings: dict[str, tuple[Timing, int]] = {}
    for timer in timers:
        timed = _captured_graph(backend, data, iou, params, result) if timer == "graph" else op
        timings[timer] = _least_noisy(timed, timer, grid)
    return agreement, timings, peak


def _captured_graph(backend, data: BoxSet, iou: float, params: dict, eager):
    """The padded op captured once in a CUDA graph, after checking that a replay gives the
    eager call's output (the graph timer times exactly this graph's replays)."""
    graph, padded = capture_graph(
        lambda: backend.fn(data.boxes, data.scores, iou_threshold=iou, labels=data.labels, padded=True, **params))
    graph.replay()
    replayed = padded.trimmed()
    same = torch.equal(replayed.keep, eager.keep) and (
        eager.scores is None or (replayed.scores is not None and torch.equal(replayed.scores, eager.scores)))
    if not same:
        raise RuntimeError("the CUDA graph replay's output differs from the eager call's")
    return graph


def _least_noisy(op, timer: str, grid: Grid) -> tuple[Timing, int]:
    """(timing, attempts): ``op`` timed once, and again while the kept timing is noisy, up
    to ``grid.repeat_noisy`` more times; the one with the lowest relative spread is kept
    (the first of equals), so the row may still be noisy after every attempt. For the
    graph timer ``op`` is the captured graph."""
    def measure() -> Timing:
        if timer == "wall":
            return time_wall(op, min_run_time=grid.min_run_time, threads=grid.threads)
        if timer == "graph":
            return time_graph(op, min_run_time=grid.min_run_time, threads=grid.threads)
        return time_device(op, min_run_time=grid.min_run_time)

    best, attempts = measure(), 1
    while best.noisy and attempts <= grid.repeat_noisy:
        timing, attempts = measure(), attempts + 1
        if timing.rel_spread < best.rel_spread:
            best = timing
    return best, attempts


def use_threads(threads: int) -> None:
    """Fix the CPU threads torch and numba use for the rest of a run."""
    torch.set_num_threads(threads)
    try:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass


def row_emitter(write: Callable[[dict], None], on_case: Callable[[dict], None]):
    """(emit, counts): ``emit(row)`` writes the row, counts it by status (and noisy) and
    reports it to ``on_case``; ``counts`` is what a run returns."""
    counts = {"ok": 0, "error": 0, "skipped": 0, "noisy": 0}

    def emit(row: dict) -> None:
        write(row)
        counts[row["status"]] += 1
        counts["noisy"] += bool(row.get("noisy"))
        on_case(row)

    return emit, counts


def run_sweep(grid: Grid, write: Callable[[dict], None], on_case: Callable[[dict], None] = lambda row: None,
              done: frozenset | set = frozenset()) -> dict:
    """Run every case of ``grid``; ``write`` gets each row as soon as it exists. Rows whose
    :func:`~nmsbench.results.case_key` is in ``done`` (already written) are not run again."""
    check_case_timeout(grid.case_timeout)
    use_threads(grid.threads)
    impls = [get(name) for name in grid.impls]
    params_by_impl = {impl.name: _resolve_params(impl, grid.params) for impl in impls}
    emit, counts = row_emitter(write, on_case)

    def pending(rows: list[dict]) -> list[dict]:
        return [row for row in rows if case_key(row) not in done]

    seen: dict = {}  # real scenario: (recording, knob, N) -> the n cap that ran that box set
    for scenario, n in itertools.product(grid.scenarios, grid.ns):
        for overlap, recording in itertools.product(grid.overlaps_for(scenario), grid.recordings_for(scenario)):
            base = {"scenario": scenario, "overlap": overlap, "n": n, "seed": grid.seed, "classes": grid.classes}
            recorded = datasets.SCENARIOS[scenario].recordings is not None
            if recorded:  # rows name the recording
                base |= datasets.real.recording_columns(recording or datasets.real.DEFAULT_RECORDING) | {"n_cap": n}
            duplicate = None
            try:
                box_set = datasets.generate(scenario, n, overlap=overlap, seed=grid.seed, classes=grid.classes, path=grid.file,
                                            recording=recording)
                base |= box_set.meta.get("row", {})  # a recording's rows carry the N it gave (<= the cap n)
                if recorded:  # when fewer boxes pass than the cap allows, a larger cap gives the same set
                    duplicate = seen.setdefault((scenario, recording, overlap, len(box_set)), n)
                    duplicate = None if duplicate == n else duplicate
                cases = [(device, dtype_name, iou, impl,
                          pending(_case_rows(impl, device, dtype_name, iou, grid, base, params_by_impl[impl.name][0])))
                         for device, dtype_name, iou, impl in itertools.product(grid.devices, grid.dtypes, grid.ious, impls)]
                cases = [case for case in cases if case[-1]]
                if duplicate is None and cases:
                    mean_max_iou = realized_overlap(box_set.boxes, box_set.scores, box_set.labels)["mean_max_iou"]
                    for row in itertools.chain.from_iterable(case[-1] for case in cases):
                        row["mean_max_iou"] = mean_max_iou
            except Exception as exc:  # e.g. a file with fewer than n boxes: this set's cases become error rows
                message = f"generating {scenario}: {_error_text(exc)}"
                for device, dtype_name, iou, impl in itertools.product(grid.devices, grid.dtypes, grid.ious, impls):
                    for row in pending(_case_rows(impl, device, dtype_name, iou, grid, base, params_by_impl[impl.name][0])):
                        emit(row | {"status": "error", "error": message})
                continue
            if duplicate is not None:  # recorded, not re-timed: the same N boxes ran under the smaller cap
                message = (f"same box set as n_cap={duplicate}: only {len(box_set)} candidates have score >= {overlap:g}")
                for *_, rows in cases:
                    for row in rows:
                        emit(row | {"status": "skipped", "error": message})
                continue
            references: dict = {}  # (dtype, iou) -> reference keep, computed once per box set

            def reference(dtype_name: str, iou: float) -> torch.Tensor:
                if (dtype_name, iou) not in references:
                    references[dtype_name, iou] = _reference(box_set.to("cpu", DTYPES[dtype_name]), iou)
                return references[dtype_name, iou]

            for device, dtype_name, iou, impl, rows in cases:
                impl_params, params_error = params_by_impl[impl.name]
                for row in _run_case(impl, device, dtype_name, iou, grid, box_set, rows, reference, impl_params, params_error):
                    emit(row)
    return counts


def _case_rows(impl: Implementation, device: str, dtype_name: str, iou: float, grid: Grid, base: dict, params: dict) -> list[dict]:
    """The identifying columns of the rows one case produces (one per timer)."""
    backend = impl.backends.get(device)
    common = base | {
        "benchmark": "nms", "impl": impl.name, "family": impl.family, "device": device, "dtype": dtype_name,
        "iou_threshold": iou, "params": json.dumps(params, sort_keys=True), "threads": grid.threads,
        "host_sync": backend.host_sync if backend else "", "graph_safe": backend.graph_safe if backend else "",
    }
    return [common | {"timer": t} for t in grid.timers_for(device)]


def _run_case(impl, device, dtype_name, iou, grid, box_set: BoxSet, rows: list[dict], reference,
              params: dict, params_error: Optional[str]) -> Iterator[dict]:
    backend = impl.backends.get(device)
    skip = None
    if backend is None:
        skip = f"{impl.name} has no {device} backend"
    else:
        available, reason = backend.availability()
        if not available:
            skip = reason
        elif DTYPES[dtype_name] not in backend.dtypes:
            skip = f"{dtype_name} not supported on {device}"
    if skip:
        for row in rows:
            yield row | {"status": "skipped", "error": skip}
        return
    if params_error:
        for row in rows:
            yield row | {"status": "error", "error": params_error}
        return
    if not backend.graph_safe:  # no padded, sync-free form to capture
        for row in rows:
            if row["timer"] == "graph":
                yield row | {"status": "skipped", "error": f"{impl.name} on {device} is not graph-safe"}
        rows = [row for row in rows if row["timer"] != "graph"]
        if not rows:
            return
    try:
        with case_deadline(grid.case_timeout):
            data = box_set.to(device, DTYPES[dtype_name])
            validate_nms_inputs(data.boxes, data.scores, data.labels)  # once, outside the timed calls
            ref_keep = reference(dtype_name, iou)
            agreement, timings, peak = _measure(impl, backend, data, iou, params, [r["timer"] for r in rows], grid, ref_keep)
    except Exception as exc:
        yield from error_rows(rows, exc)
        return
    n = len(box_set)
    suppressed = {"greedy_suppressed_frac": 1 - agreement["ref_kept"] / n if n else 0.0}
    for row in rows:
        t, attempts = timings[row["timer"]]
        yield row | agreement | suppressed | {
            "status": "ok", "error": "", "median_us": t.median_us, "iqr_us": t.iqr_us, "runs": t.runs,
            "rel_spread": t.rel_spread, "noisy": t.noisy, "peak_mem_bytes": peak, "attempts": attempts,
        }
