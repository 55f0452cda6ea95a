"""The sweep: every case of the grid, timed and compared, one row each.

For each box set (scenario x overlap x n, generated once on the CPU) the runner computes
the realized overlap once, and the reference greedy NMS once per dtype and IoU threshold.
Then, for each device x dtype x IoU threshold, it moves and validates the box set once
and prepares every implementation: calls the op once (warm-up: numba/NVRTC compilation;
its output is the one checked against the reference), builds each timer's callable (the
same call; ``api``: ``nmsbench.run_nms`` on the same tensors, checked to give the same
output; ``graph``: the padded call captured once) and times them in interleaved rounds:

- ``Grid.rounds`` = K rounds; round r starts at implementation r mod M and goes through
  all M in order, each implementation timing each of its T timers in its turn (starting
  at timer r mod T) for ``min_run_time / K`` seconds (the rounds share the budget of one
  measurement; a wall timer's block size is fixed once, before the first round). A ratio
  between two implementations, or two timers of one (api - wall), then does not depend on
  which of them ran while the host was busy.
- A measurement with fewer than ``timing.MIN_BLOCKS`` blocks is re-timed (at most that many
  more times) before it is summarized; ``--repeat-noisy`` re-times a noisy one.
- The host's speed is read (``timing.HostGauge``) before and after every measurement; one
  timed while the host ran slow is marked so and left out of its row's median where at
  least half the rounds remain, else the row keeps all its rounds and is flagged. No
  measurement is repeated for it: extra turns until the host recovered made sweeps much
  longer without making two runs agree better (results/PERFLOG.md). ``Grid.host_wait``
  (``--host-wait``) instead lets each turn wait that long for the usual speed first; a
  wait that runs out ends the waiting for the rest of the case (a long slow stretch
  costs a case one wait).

The ``device`` timer's rows come in a second pass over the grid, after every other
timer's (:func:`sweep_passes`): it profiles, and once a process has profiled, CUPTI stays
attached and slows the host side of every later CUDA call. Its measurements are GPU
durations, so the host gauge does not judge them.

Any exception becomes an error row, an unsupported cell a skipped row (the device timer's
too, when the profiler sees no GPU work in a call); the sweep goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import numbers
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from . import api, datasets
from .agreement import FAMILY_REFERENCES, NO_FAMILY_REFERENCE, compare_family, compare_keep
from .boxes import BoxSet, validate_nms_inputs
from .gpu_activity import NoGpuActivity
from .overlap import realized_overlap
from .registry import Implementation, get, implementations
from .results import case_key
from .timing import (BLOCKS_PER_MEASUREMENT, CPU_TIMERS, DEFAULT_ROUNDS, DEFAULT_TIMERS, MIN_BLOCKS, TIMERS, Blocks,
                     CpuMeter, HostGauge, Timing, WallTimer, capture_graph, device_blocks, event_blocks, summarize)

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16}
REFERENCE = "torchvision"
# From this many boxes on the greedy reference is hard_graph: index for index torchvision's
# (the property tests hold it there) in O(N + E), where torchvision's CPU NMS, which tests
# every kept box against every later one, grows too slow to wait for on large images.
LARGE_REFERENCE, LARGE_REFERENCE_MIN_N = "hard_graph", 32769


class GridError(ValueError):
    """A grid that cannot be swept; ``field`` names the Grid field at fault (the CLI
    turns it into the option's name)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


DEVICES = ("cpu", "cuda")


@dataclass
class Grid:
    """The sweep axes; their product is the set of cases. A Grid checks itself when it is
    made (:meth:`validate`): a bad value is a :class:`GridError` (a ValueError)."""

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
    min_run_time: float = 0.2  # seconds of timing per measurement, shared by its rounds
    threads: int = 1
    file: Optional[str] = None
    recordings: Optional[list[str]] = None  # for the real scenario; None: its default recording
    case_timeout: Optional[float] = None  # seconds per case (see case_deadline); None: no limit
    repeat_noisy: int = 0  # re-time a noisy measurement up to this many times, keep the least noisy
    rounds: int = DEFAULT_ROUNDS  # interleaved rounds per measurement (see the module docstring)
    host_wait: float = 0.0  # seconds a turn may wait for the host's usual speed (0: never waits)
    canvases: list[str] = field(default_factory=lambda: ["fixed"])  # synthetic scenarios' canvas (datasets.synthetic)
    # leave a backend out above its sweep_max_n (the CLI's sweep of every implementation,
    # without --impl): a plain per-pick loop would take hours at the largest N
    cap_slow: bool = False

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise :class:`GridError` for anything that cannot be swept."""
        def need(ok: bool, name: str, message: str) -> None:
            if not ok:
                raise GridError(name, message)

        def names(value, name: str) -> list:
            need(isinstance(value, (list, tuple)) and len(value) > 0, name, f"{name} must be a non-empty list, got {value!r}")
            return list(value)

        known = implementations()
        unknown = [i for i in names(self.impls, "impls") if i not in known]
        need(not unknown, "impls", f"unknown {', '.join(map(str, unknown))}; known: {', '.join(sorted(known))}")
        bad = [d for d in names(self.devices, "devices") if d not in DEVICES]
        need(not bad, "devices", f"{', '.join(map(str, bad))}: choose cpu and/or cuda")
        bad = [d for d in names(self.dtypes, "dtypes") if d not in DTYPES]
        need(not bad, "dtypes", f"unknown {', '.join(map(str, bad))}; choose from {', '.join(DTYPES)}")
        bad = [s for s in names(self.scenarios, "scenarios") if s not in datasets.SCENARIOS]
        need(not bad, "scenarios", f"unknown {', '.join(map(str, bad))}; known: {', '.join(datasets.SCENARIOS)}")
        bad = [t for t in names(self.timers, "timers") if t not in TIMERS]
        need(not bad, "timers", f"choose from {', '.join(TIMERS)}, got {', '.join(map(str, self.timers))}")
        idle = [d for d in self.devices if not self.timers_for(d)]
        need(not idle, "timers", f"{', '.join(self.timers)} time{'s' if len(self.timers) == 1 else ''} the GPU only, so "
             f"{' and '.join(idle)} would give no rows; add wall and/or api ({', '.join(CPU_TIMERS)} time CPU rows too)")
        bad = [n for n in names(self.ns, "ns") if not _whole(n) or n < 1]
        need(not bad, "ns", f"box counts must be positive whole numbers, got {', '.join(map(repr, bad))}")
        bad = [v for v in names(self.ious, "ious") if not _real(v) or not 0.0 <= v <= 1.0]
        need(not bad, "ious", f"IoU thresholds must lie in [0, 1], got {', '.join(map(repr, bad))}")
        if self.overlaps is not None:
            overlaps = names(self.overlaps, "overlaps")
            need(all(_real(v) for v in overlaps), "overlaps", f"overlap values must be numbers, got {overlaps!r}")
            for name in self.scenarios:
                lo, hi = datasets.SCENARIOS[name].knob_range
                outside = [v for v in overlaps if not lo <= v <= hi]
                need(not outside, "overlaps", f"{outside} outside {name}'s knob range [{lo}, {hi}]")
        need("file" not in self.scenarios or bool(self.file), "file", "the file scenario needs a boxes file (--file PATH)")
        need(not self.file or "file" in self.scenarios, "file",
             f"a boxes file ({self.file}) is only read by the file scenario; add it (--scenario file) or leave the file out")
        bad = [c for c in names(self.canvases, "canvases") if c not in datasets.synthetic.CANVASES]
        need(not bad, "canvases", f"unknown canvas {', '.join(map(str, bad))}; choose {' and/or '.join(datasets.synthetic.CANVASES)}")
        need(self.canvases == ["fixed"] or any(s in datasets.SYNTHETIC for s in self.scenarios), "canvases",
             f"a canvas is for the synthetic scenarios ({', '.join(datasets.SYNTHETIC)}); add one or leave --canvas out")
        if self.recordings is not None:
            names(self.recordings, "recordings")
            need(any(datasets.SCENARIOS[s].recordings for s in self.scenarios), "recordings",
                 "--recording is for the real scenario (add --scenario real; Grid.recordings)")
        need(_whole(self.seed) and self.seed >= 0, "seed", f"seed must be a whole number >= 0, got {self.seed!r}")
        need(_whole(self.classes) and self.classes >= 1, "classes", f"classes must be a whole number >= 1, got {self.classes!r}")
        need(_whole(self.threads) and self.threads >= 1, "threads", f"threads must be a whole number >= 1, got {self.threads!r}")
        need(_whole(self.rounds) and self.rounds >= 1, "rounds", f"rounds must be a whole number >= 1, got {self.rounds!r}")
        need(_real(self.host_wait) and 0 <= self.host_wait < math.inf, "host_wait",
             f"host_wait must be a number of seconds >= 0, got {self.host_wait!r}")
        need(_whole(self.repeat_noisy) and self.repeat_noisy >= 0, "repeat_noisy",
             f"repeat_noisy must be a whole number >= 0, got {self.repeat_noisy!r}")
        need(_real(self.min_run_time) and self.min_run_time > 0, "min_run_time",
             f"min_run_time must be a positive number of seconds, got {self.min_run_time!r}")
        need(isinstance(self.params, dict), "params", f"params must be a dict, got {self.params!r}")
        need(self.case_timeout is None or (_real(self.case_timeout) and self.case_timeout > 0), "case_timeout",
             f"the case timeout must be a positive number of seconds, got {self.case_timeout!r}")

    def overlaps_for(self, scenario: str) -> list[float]:
        return list(self.overlaps) if self.overlaps else [datasets.SCENARIOS[scenario].default_overlap]

    def recordings_for(self, scenario: str) -> list[Optional[str]]:
        """The recordings a scenario replays (``[None]``: its default, or it replays none)."""
        if datasets.SCENARIOS[scenario].recordings is None:
            return [None]
        return list(self.recordings) if self.recordings else [None]

    def canvases_for(self, scenario: str) -> list[str]:
        """The canvases a scenario is generated on (``[""]``: it generates no boxes)."""
        return list(self.canvases) if scenario in datasets.SYNTHETIC else [""]

    def timers_for(self, device: str) -> list[str]:
        return [t for t in self.timers if t in CPU_TIMERS or device == "cuda"]

    def count(self) -> int:
        """Number of rows the sweep will write (graph rows of backends that are not
        graph-safe are written as skipped)."""
        per_set = sum(len(self.timers_for(d)) for d in self.devices) * len(self.dtypes) * len(self.impls) * len(self.ious)
        return sum(len(self.overlaps_for(s)) * len(self.recordings_for(s)) * len(self.canvases_for(s))
                   for s in self.scenarios) * len(self.ns) * per_set


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


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
def case_deadline(seconds: Optional[float], limit: Optional[float] = None):
    """Raise :class:`CaseTimeout` in the body once ``seconds`` have passed (None: no limit).
    ``limit``: the whole case's timeout, when ``seconds`` is what its earlier timers left
    of it (the message names both).

    SIGALRM (``signal.setitimer``) in the main thread: the exception is raised the next
    time the interpreter runs Python bytecode, which stops a case that hangs or loops in
    Python (and between native calls: torch ops, timer loops). A single native call that
    never returns (a numba ``nopython`` loop, a deadlocked CUDA kernel waited on) does not
    see the signal and cannot be stopped this way; one that returns late is stopped when it
    returns. Ctrl-C or SIGTERM stop such a sweep within two seconds all the same
    (:mod:`nmsbench.stopping`); ``--resume`` it without the implementation that hangs.
    After a stopped CUDA case, kernels it queued may still run. POSIX only, main thread only.
    """
    if not seconds:
        yield
        return

    def alarm(signum, frame):
        if limit is None or limit <= seconds:
            raise CaseTimeout(f"stopped after the case timeout of {seconds:g} s (--case-timeout)")
        raise CaseTimeout(f"stopped after the case timeout of {limit:g} s (--case-timeout): the case's earlier "
                          f"timers took {limit - seconds:.1f} s of it, this one the remaining {seconds:.3g} s")

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


def _family_result(name: str, box_set: BoxSet, dtype_name: str, iou: float, params: dict):
    """The family reference ``name`` on the CPU on the case's boxes (float16: on the float32
    copy of the float16 values, as the CPU backends compute it, so the comparison measures
    the backend, not the rounding of its inputs), or None where it cannot run here."""
    from .registry import implementations

    impl = implementations().get(name)
    if impl is None or "cpu" not in impl.backends or not impl.backends["cpu"].availability()[0]:
        return None
    data = box_set.to("cpu", DTYPES[dtype_name])
    if dtype_name == "float16":
        data = data.to("cpu", torch.float32)
    try:
        return impl.backends["cpu"].fn(data.boxes, data.scores, iou_threshold=iou, labels=data.labels, **params)
    except Exception:  # a reference that cannot take these boxes leaves the columns blank
        return None


def _reference(data: BoxSet, iou: float) -> torch.Tensor:
    """Greedy NMS on the CPU on exactly the case's (cast) values: torchvision's, or from
    LARGE_REFERENCE_MIN_N boxes on, LARGE_REFERENCE's (the same indices)."""
    if data.boxes.dtype == torch.float16:  # torchvision's CPU kernel has no half; float32 holds them exactly
        data = data.to("cpu", torch.float32)
    name = REFERENCE
    if data.boxes.shape[0] >= LARGE_REFERENCE_MIN_N and get(LARGE_REFERENCE).backend("cpu").availability()[0]:
        name = LARGE_REFERENCE
    backend = get(name).backend("cpu")
    return backend.fn(data.boxes, data.scores, iou_threshold=iou, labels=data.labels).keep


def _captured_graph(backend, data: BoxSet, iou: float, params: dict, eager):
    """The padded op captured once in a CUDA graph, after checking that a replay gives the
    eager call's output (the graph timer times exactly this graph's replays)."""
    graph, padded = capture_graph(
        lambda: backend.fn(data.boxes, data.scores, iou_threshold=iou, labels=data.labels, padded=True, **params))
    graph.replay()
    replayed = padded.trimmed()
    if not _same_output(replayed, eager):
        raise RuntimeError("the CUDA graph replay's output differs from the eager call's")
    return graph


def _same_output(result, eager) -> bool:
    def same(a, b) -> bool:
        return b is None or (a is not None and torch.equal(a, b))

    return torch.equal(result.keep, eager.keep) and same(result.scores, eager.scores) and \
        same(getattr(result, "boxes", None), eager.boxes)


def _api_call(impl, data: BoxSet, iou: float, params: dict, eager) -> Callable[[], object]:
    """``nmsbench.run_nms`` exactly as a user calls it on the case's tensors (validation
    included), after checking that it gives the backend call's output."""
    run_nms, name, boxes, scores, labels = api.run_nms, impl.name, data.boxes, data.scores, data.labels

    def call():
        return run_nms(name, boxes, scores, iou_threshold=iou, labels=labels, **params)

    if not _same_output(call(), eager):
        raise RuntimeError("nmsbench.run_nms's output differs from the backend call's")
    return call


@dataclass
class _Contender:
    """One implementation of a case while its rounds are timed."""

    impl: Implementation
    rows: list[dict]
    calls: dict  # timer -> the callable (the graph timer: the captured graph's replay)
    agreement: dict
    peak: object
    measure: dict = field(default_factory=dict)  # timer -> seconds -> Blocks
    rounds: dict = field(default_factory=dict)  # timer -> [Blocks of each round]
    spent: float = 0.0  # seconds of this case so far (the case timeout's budget)
    meter: Optional[CpuMeter] = None
    skipped: dict = field(default_factory=dict)  # timer -> why it has nothing to time (its row is skipped)


def _measurer(timer: str, call, grid: Grid) -> Callable[[float], Blocks]:
    """``seconds -> Blocks`` for one timer of a case: the device timer's profile, the events
    timer's CUDA events, or a :class:`WallTimer` whose block size is fixed here, once for
    all rounds."""
    min_runs = max(2, math.ceil(10 / grid.rounds))  # at least 10 calls a row, all rounds together
    if timer == "device":
        return lambda seconds: device_blocks(call, min_run_time=seconds, min_runs=min_runs)
    if timer == "events":
        return lambda seconds: event_blocks(call, min_run_time=seconds, min_runs=min_runs)
    block = grid.min_run_time / grid.rounds / BLOCKS_PER_MEASUREMENT
    return WallTimer(call, threads=grid.threads, block_seconds=block).blocks


def _within_budget(contender: _Contender, grid: Grid, work: Callable[[], None]) -> None:
    """Run ``work`` against what is left of the contender's case timeout (if any), with
    its CPU meter running."""
    remaining = None
    if grid.case_timeout:
        remaining = grid.case_timeout - contender.spent
        if remaining <= 0:
            raise CaseTimeout(f"stopped after the case timeout of {grid.case_timeout:g} s (--case-timeout)")
    start = time.perf_counter()
    try:
        with case_deadline(remaining, grid.case_timeout), (contender.meter or contextlib.nullcontext()):
            work()
    finally:
        contender.spent += time.perf_counter() - start


def _gauged(gauge: HostGauge, measure: Callable[[float], Blocks], seconds: float, before: float) -> tuple[Blocks, float]:
    """(blocks, the gauge's reading after them): ``measure(seconds)`` marked ``host_slow``
    where the host ran slow at ``before`` (the reading just before) or after it. GPU
    durations (``host_bound`` False: the device timer) are not judged."""
    blocks = measure(seconds)
    after = gauge.read()
    if not blocks.host_bound:
        return blocks, after
    return dataclasses.replace(blocks, host_slow=gauge.judge(before, after)), after


def _timing(contender: _Contender, timer: str, grid: Grid, gauge: HostGauge) -> tuple[Timing, int]:
    """(timing, attempts) of one row: its rounds summarized, after re-timing (at most
    MIN_BLOCKS more turns) while it has fewer than MIN_BLOCKS blocks. While the timing is
    noisy it is re-timed, up to ``grid.repeat_noisy`` times, in ``grid.rounds`` turns of
    this implementation alone, with a CPU meter of its own; the measurement kept is the
    first clean one, else the one with the lowest relative spread."""
    rounds = contender.rounds[timer]
    share = grid.min_run_time / grid.rounds
    measure = contender.measure[timer]
    for _ in range(MIN_BLOCKS):  # each re-timing adds at least one block
        if sum(len(r.times_us) for r in rounds) >= MIN_BLOCKS:
            break
        _within_budget(contender, grid, lambda: rounds.append(_gauged(gauge, measure, share, gauge.read())[0]))
    planned = grid.rounds
    best, attempts = summarize(rounds, contender.meter.contention() if contender.meter else "", planned), 1
    while best.noisy and attempts <= grid.repeat_noisy:
        again: list[Blocks] = []
        meter = CpuMeter(grid.threads) if contender.meter else None

        def retime():
            with meter or contextlib.nullcontext():
                reading = gauge.read()
                for _ in range(grid.rounds):
                    blocks, reading = _gauged(gauge, measure, share, reading)
                    again.append(blocks)

        _within_budget(contender, grid, retime)
        timing, attempts = summarize(again, meter.contention() if meter else "", planned), attempts + 1
        if (timing.noisy, timing.rel_spread) < (best.noisy, best.rel_spread):
            best = timing
    return best, attempts


def _timed_rows(contender: _Contender, grid: Grid, n: int, gauge: HostGauge) -> Iterator[dict]:
    suppressed = {"greedy_suppressed_frac": 1 - contender.agreement["ref_kept"] / n if n else 0.0}
    timings = {}
    for timer in contender.calls:
        timings[timer] = _timing(contender, timer, grid, gauge)
    for row in contender.rows:
        if row["timer"] in contender.skipped:
            yield row | {"status": "skipped", "error": contender.skipped[row["timer"]]}
            continue
        t, attempts = timings[row["timer"]]
        yield row | contender.agreement | suppressed | {
            "status": "ok", "error": "", "median_us": t.median_us, "iqr_us": t.iqr_us, "runs": t.runs,
            "rel_spread": t.rel_spread, "noisy": t.noisy, "peak_mem_bytes": contender.peak, "attempts": attempts,
            "blocks": t.blocks, "rounds": t.rounds, "round_spread": "" if t.round_spread is None else t.round_spread,
            "noise": t.noise, **activity_columns(t),
        }


def activity_columns(t: Timing) -> dict:
    """The device timer's columns of a row (busy span, launches, copies, syncs per call;
    blank for other timers)."""
    values = {"span_us": t.span_us, "span_iqr_us": t.span_iqr_us, "launches": t.launches, "copies": t.copies,
              "syncs": t.syncs}
    return {k: "" if v is None else v for k, v in values.items()}


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
              done: frozenset | set = frozenset(), between_turns: Callable[[], None] = lambda: None,
              gauge: Optional[HostGauge] = None) -> dict:
    """Run every case of ``grid``; ``write`` gets each row as soon as it exists. Rows whose
    :func:`~nmsbench.results.case_key` is in ``done`` (already written) are not run again.
    ``between_turns()`` is called after each implementation's turn of a round, while
    nothing is timed (a progress display redraws there: a case's rows come only after all
    its rounds). ``gauge`` reads the host's speed (default: a new ``HostGauge``); the
    counts returned carry its summary under ``host``."""
    gauge = gauge or HostGauge()
    grid.validate()  # again: its fields may have changed since it was made
    check_case_timeout(grid.case_timeout)
    use_threads(grid.threads)
    emit, counts = row_emitter(write, on_case)
    for part in sweep_passes(grid):
        _sweep_pass(part, emit, done, between_turns, gauge)
    return counts | {"host": gauge.summary()}


def sweep_passes(grid: Grid) -> list[Grid]:
    """The grid as the passes that time it: every timer but ``device`` first, then the
    ``device`` timer's cuda cases. Once a process has profiled, CUPTI stays attached and
    every later CUDA call costs the host more (results/PERFLOG.md), so nothing is timed
    by another timer after the first profile."""
    others = [t for t in grid.timers if t != "device"]
    passes = [dataclasses.replace(grid, timers=others)] if others else []
    if "device" in grid.timers and "cuda" in grid.devices:
        passes.append(dataclasses.replace(grid, timers=["device"], devices=["cuda"]))
    return passes


def _sweep_pass(grid: Grid, emit: Callable[[dict], None], done, between_turns: Callable[[], None],
                gauge: HostGauge) -> None:
    """Every case of ``grid`` (one pass of :func:`run_sweep`), its rows to ``emit``."""
    impls = [get(name) for name in grid.impls]
    params_by_impl = {impl.name: _resolve_params(impl, grid.params) for impl in impls}

    def pending(rows: list[dict]) -> list[dict]:
        return [row for row in rows if case_key(row) not in done]

    seen: dict = {}  # real scenario: (recording, knob, N) -> the n cap that ran that box set
    for scenario, n in itertools.product(grid.scenarios, grid.ns):
        for overlap, recording, canvas in itertools.product(grid.overlaps_for(scenario), grid.recordings_for(scenario),
                                                            grid.canvases_for(scenario)):
            base = {"scenario": scenario, "canvas": canvas, "overlap": overlap, "n": n, "seed": grid.seed,
                    "classes": grid.classes}
            recorded = datasets.SCENARIOS[scenario].recordings is not None
            if recorded:  # rows name the recording
                base |= datasets.real.recording_columns(recording or datasets.real.DEFAULT_RECORDING) | {"n_cap": n}
            duplicate = None
            try:
                box_set = datasets.generate(scenario, n, overlap=overlap, seed=grid.seed, classes=grid.classes, path=grid.file,
                                            recording=recording, canvas=canvas or None)
                base |= box_set.meta.get("row", {})  # a recording's rows carry the N it gave (<= the cap n)
                if recorded:  # when fewer boxes pass than the cap allows, a larger cap gives the same set
                    duplicate = seen.setdefault((scenario, recording, overlap, len(box_set)), n)
                    duplicate = None if duplicate == n else duplicate
                cases = [(device, dtype_name, iou, impl,
                          pending(_case_rows(impl, device, dtype_name, iou, grid, base, params_by_impl[impl.name][0])))
                         for device, dtype_name, iou, impl in itertools.product(grid.devices, grid.dtypes, grid.ious, impls)]
                cases = [case for case in cases if case[-1]]
                if duplicate is None and cases:  # exact up to overlap.EXACT_MAX_N boxes, from a fixed sample above
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

            family_results: dict = {}  # (reference implementation, dtype, iou, params) -> its result or None

            def family_reference(family: str, dtype_name: str, iou: float, params: dict, known=None):
                """The family reference's result on these boxes (``known``: the reference's
                own warm-up result on the CPU, which it is, so it is not run again)."""
                name = FAMILY_REFERENCES.get(family)
                if name is None:
                    return None
                key = (name, dtype_name, iou, json.dumps(params, sort_keys=True, default=str))
                if key not in family_results:
                    family_results[key] = known if known is not None else _family_result(name, box_set, dtype_name,
                                                                                          iou, params)
                return None if family_results[key] is None else (name, family_results[key])

            # the implementations of one device, dtype and IoU are timed together, in rounds
            for (device, dtype_name, iou), group in itertools.groupby(cases, key=lambda case: case[:3]):
                members = [(impl, rows) for *_, impl, rows in group]
                for row in _run_group(members, device, dtype_name, iou, grid, box_set, reference, params_by_impl,
                                      between_turns, gauge, family_reference):
                    emit(row)


def _case_rows(impl: Implementation, device: str, dtype_name: str, iou: float, grid: Grid, base: dict, params: dict) -> list[dict]:
    """The identifying columns of the rows one case produces (one per timer)."""
    backend = impl.backends.get(device)
    common = base | {
        "benchmark": "nms", "impl": impl.name, "family": impl.family, "device": device, "dtype": dtype_name,
        "iou_threshold": iou, "params": json.dumps(params, sort_keys=True), "threads": grid.threads,
        "host_sync": backend.host_sync if backend else "", "graph_safe": backend.graph_safe if backend else "",
    }
    return [common | {"timer": t} for t in grid.timers_for(device)]


def _unrunnable(impl, device, dtype_name, rows, params_error, cap_slow: bool = False) -> Optional[Iterator[dict]]:
    """Skipped or error rows for a case that cannot run, or that a sweep of every
    implementation leaves out (``cap_slow``: above the backend's sweep_max_n); None when it runs."""
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
        elif cap_slow and backend.sweep_max_n is not None and rows and rows[0]["n"] > backend.sweep_max_n:
            skip = (f"{impl.name} on {device} is left out above N = {backend.sweep_max_n} when --impl does not name it "
                    "(its calls take seconds there)")
    if skip:
        return (row | {"status": "skipped", "error": skip} for row in rows)
    if params_error:
        return (row | {"status": "error", "error": params_error} for row in rows)
    return None


def _run_group(members, device: str, dtype_name: str, iou: float, grid: Grid, box_set: BoxSet, reference,
               params_by_impl: dict, between_turns: Callable[[], None] = lambda: None,
               gauge: Optional[HostGauge] = None, family_reference: Optional[Callable] = None) -> Iterator[dict]:
    """The rows of every implementation of one box set, device, dtype and IoU: each
    prepared and checked, then all timed together in rotated rounds."""
    runnable = []
    for impl, rows in members:
        params, params_error = params_by_impl[impl.name]
        cannot = _unrunnable(impl, device, dtype_name, rows, params_error, grid.cap_slow)
        if cannot is not None:
            yield from cannot
            continue
        if not impl.backends[device].graph_safe:  # no padded, sync-free form to capture
            for row in rows:
                if row["timer"] == "graph":
                    yield row | {"status": "skipped", "error": f"{impl.name} on {device} is not graph-safe"}
            rows = [row for row in rows if row["timer"] != "graph"]
        if rows:
            runnable.append((impl, rows, params))
    if not runnable:
        return
    try:  # once for every implementation of the group
        data = box_set.to(device, DTYPES[dtype_name])
        validate_nms_inputs(data.boxes, data.scores, data.labels)  # outside the timed calls
        ref_keep = reference(dtype_name, iou)
    except Exception as exc:
        for _, rows, _ in runnable:
            yield from error_rows(rows, exc)
        return
    contenders: list[_Contender] = []
    for impl, rows, params in runnable:
        contender = _Contender(impl, rows, {}, {}, "", meter=CpuMeter(grid.threads) if device == "cpu" else None)
        try:
            _within_budget(contender, grid, lambda: _prepare(contender, data, iou, params, ref_keep, grid,
                                                             family_reference, dtype_name))
        except Exception as exc:
            yield from error_rows(rows, exc)
            continue
        contender.rounds = {timer: [] for timer in contender.calls}
        contenders.append(contender)
    gauge = gauge or HostGauge()
    share = grid.min_run_time / grid.rounds
    failed: dict[int, BaseException] = {}

    def turn(contender: _Contender, r: int) -> None:
        timers = list(contender.measure)
        if not timers:  # every timer of it was skipped
            return
        first = r % len(timers)
        reading = gauge.read()
        for timer in timers[first:] + timers[:first]:  # rotated too: no timer always runs first
            try:
                blocks, reading = _gauged(gauge, contender.measure[timer], share, reading)
            except NoGpuActivity as exc:  # nothing for the device timer to time: a skipped row, the rest go on
                contender.skipped[timer] = str(exc)
                del contender.measure[timer], contender.calls[timer], contender.rounds[timer]
                continue
            contender.rounds[timer].append(blocks)

    waiting = grid.host_wait > 0

    def take_turn(contender: _Contender, r: int) -> None:
        nonlocal waiting
        if waiting and not gauge.wait_for_usual_speed(grid.host_wait):
            waiting = False  # still slow: a long stretch; this case waits no more
        try:
            _within_budget(contender, grid, lambda: turn(contender, r))
        except Exception as exc:
            failed[id(contender)] = exc
        between_turns()

    for r in range(grid.rounds):
        live = [c for c in contenders if id(c) not in failed]
        if not live:
            break
        start = r % len(live)
        for contender in live[start:] + live[:start]:
            take_turn(contender, r)
    n = len(box_set)
    for contender in contenders:
        if id(contender) in failed:
            yield from error_rows(contender.rows, failed[id(contender)])
            continue
        try:
            rows = list(_timed_rows(contender, grid, n, gauge))
        except Exception as exc:
            yield from error_rows(contender.rows, exc)
            continue
        yield from rows


def _prepare(contender: _Contender, data: BoxSet, iou: float, params: dict, ref_keep, grid: Grid,
             family_reference: Optional[Callable] = None, dtype_name: str = "") -> None:
    """The warm-up call (its output is checked against the references: greedy NMS, and the
    family's exact CPU implementation where it has one), its peak memory, and each timer's
    callable."""
    impl = contender.impl
    backend = impl.backends[data.boxes.device.type]
    device = data.boxes.device

    def op():
        return backend.fn(data.boxes, data.scores, iou_threshold=iou, labels=data.labels, **params)

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    result = op()
    if device.type == "cuda":
        torch.cuda.synchronize()
        contender.peak = torch.cuda.max_memory_allocated(device) - before
    contender.agreement = compare_keep(result.keep.cpu(), ref_keep) | NO_FAMILY_REFERENCE
    # the reference itself on the CPU, on the values it would be given (float16 takes a float32 copy)
    itself = impl.name == FAMILY_REFERENCES.get(impl.family) and device.type == "cpu" and dtype_name != "float16"
    found = (family_reference(impl.family, dtype_name, iou, params, known=result if itself else None)
             if family_reference is not None else None)
    if found is not None:
        contender.agreement |= compare_family(result, found[1], found[0])
    for row in contender.rows:
        timer = row["timer"]
        if timer == "graph":
            contender.calls[timer] = _captured_graph(backend, data, iou, params, result).replay
        elif timer == "api":
            contender.calls[timer] = _api_call(impl, data, iou, params, result)
        else:
            contender.calls[timer] = op
    contender.measure = {timer: _measurer(timer, call, grid) for timer, call in contender.calls.items()}
