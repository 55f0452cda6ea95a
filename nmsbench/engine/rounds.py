"""Rotated rounds: the contenders of one case timed in turns, under the host gauge and
the noise rule, within the case's timeout. Benchmark-neutral: a benchmark prepares its
contenders (each a label and one prepared call per timer), and gets back, per contender,
a measurement per timer (:class:`Measured`) or the error that stopped it.

- ``Settings.rounds`` = K rounds; round r starts at contender r mod M and goes through
  all M in order, each timing each of its T timers in its turn (starting at timer r mod T)
  for ``min_run_time / K`` seconds (the rounds share the budget of one measurement; a wall
  timer's block size is fixed once, before the first round). A ratio between two
  contenders, or two timers of one, then does not depend on which ran while the host was busy.
- A measurement with fewer than ``timing.MIN_BLOCKS`` blocks is re-timed (at most that many
  more times) before it is summarized; ``repeat_noisy`` re-times a noisy one.
- The host's speed is read (``timing.HostGauge``) before and after every measurement; one
  timed while the host ran slow is marked so and left out of its row's median where at
  least half the rounds remain (``timing.summarize``), else the row is flagged. A timer
  that is not host-bound (``device``) is not judged. ``host_wait`` lets each turn wait that
  long for the usual speed first; a wait that runs out ends the waiting for the case.
- ``NoGpuActivity`` from a timer leaves that timer skipped, the others go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

import torch

from ..gpu_activity import NoGpuActivity
from ..timers import TIMERS
from ..timing import MIN_BLOCKS, Blocks, CpuMeter, HostGauge, Timing, kept_rounds, summarize
from .settings import SETTINGS_AXES, Settings, check_settings, is_real, is_whole  # noqa: F401  (re-exported)
from .samples import Samples


@dataclass(eq=False)
class Contender:
    """One thing timed in a case: ``calls`` maps each timer's name to its prepared call;
    ``cpu``: a CpuMeter watches its turns. ``spent``: seconds of its case so far (the case
    timeout's budget, preparation included)."""

    label: str
    calls: dict = field(default_factory=dict)
    cpu: bool = False
    spent: float = 0.0
    meter: Optional[CpuMeter] = None


@dataclass
class Measured:
    """One timer's measurement of a contender: its timing, the timings taken (``attempts``),
    and the raw numbers of the rounds its median came from."""

    timer: str
    timing: Timing
    attempts: int
    samples: Samples

    def columns(self) -> dict:
        """The row's measurement columns (every timer's extra columns, blank but this one's),
        and ``_samples`` for the results writer."""
        t = self.timing
        blank = {column: "" for timer in TIMERS.values() for column in timer.columns}
        return {"median_us": t.median_us, "iqr_us": t.iqr_us, "runs": t.runs, "rel_spread": t.rel_spread,
                "noisy": t.noisy, "attempts": self.attempts, "blocks": t.blocks, "rounds": t.rounds,
                "round_spread": "" if t.round_spread is None else t.round_spread, "noise": t.noise,
                **blank, **TIMERS[self.timer].extra(t), "_samples": self.samples}


@dataclass
class Outcome:
    """What became of a contender: an error, or a measurement per timer (and the timers it
    skipped, with why)."""

    error: Optional[BaseException] = None
    measured: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)


class CaseTimeout(Exception):
    """A case ran past ``Settings.case_timeout``."""


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
    returns. Ctrl-C or SIGTERM stop such a run within two seconds all the same
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
    """A ValueError where ``case_deadline`` cannot work (checked before a run starts)."""
    if seconds is None:
        return
    if not seconds > 0:
        raise ValueError(f"the case timeout must be a positive number of seconds, got {seconds!r}")
    if not hasattr(signal, "setitimer"):
        raise ValueError("a case timeout needs SIGALRM (POSIX); this platform has none")
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("a case timeout works in the main thread only (it uses SIGALRM)")


def error_text(exc: BaseException) -> str:
    """An exception as a row's ``error`` text: its type and message, at most 500 characters."""
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 500 else text[:497] + "..."


def error_rows(rows: Iterable[dict], exc: BaseException):
    """The case's rows as error rows carrying ``exc``. After a CUDA out-of-memory error the
    allocator's cache is emptied first, so that the next cases still run on that GPU."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        torch.cuda.empty_cache()
    message = error_text(exc)
    for row in rows:
        yield row | {"status": "error", "error": message}


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


@dataclass
class RunClock:
    """Where a run's seconds went: inside timed blocks, in contenders' preparation (warm-up
    and output checks), and the rest (box sets, references, compilation, writing rows)."""

    started: float = field(default_factory=time.perf_counter)
    timed_s: float = 0.0
    prepared_s: float = 0.0
    by_timer: dict = field(default_factory=dict)  # timer -> seconds inside its measurements (its own overhead included)

    def summary(self) -> dict:
        total = time.perf_counter() - self.started
        return {"total_s": round(total, 1), "timed_s": round(self.timed_s, 1), "prepared_s": round(self.prepared_s, 1),
                "other_s": round(max(total - self.timed_s - self.prepared_s, 0.0), 1)}

    def timers(self) -> dict:
        """Seconds spent measuring with each timer (a device timer's profiling included)."""
        return {timer: round(seconds, 1) for timer, seconds in self.by_timer.items()}


CLOCK = RunClock()  # the current run's (start_run starts a new one)


def start_run(grid, write: Callable[[dict], None], on_case: Callable[[dict], None],
              gauge: Optional[HostGauge]) -> tuple[Callable[[dict], None], dict, HostGauge]:
    """What every benchmark's run does first: check its grid again (its fields may have
    changed since it was made) and its case timeout, set its threads, make the row emitter
    and the host gauge (a new one unless given), and start the run's clock. Returns
    (emit, counts, gauge); :func:`finish_run` gives what the run returns."""
    global CLOCK
    grid.validate()
    check_case_timeout(grid.case_timeout)
    use_threads(grid.threads)
    emit, counts = row_emitter(write, on_case)
    CLOCK = RunClock()
    return emit, counts, gauge or HostGauge()


def finish_run(counts: dict, gauge: HostGauge) -> dict:
    """A run's counts with the host's speed while timing (``host``) and where its time went (``time``)."""
    return counts | {"host": gauge.summary(), "time": CLOCK.summary(), "timers_s": CLOCK.timers()}


def prepare(contender: Contender, settings: Settings, work: Callable[[], None]) -> None:
    """Run ``work`` (the contender's warm-up and checks) against what is left of its case
    timeout, with its CPU meter running; the time counts towards the case's budget."""
    start = time.perf_counter()
    try:
        _within_budget(contender, settings, work)
    finally:
        CLOCK.prepared_s += time.perf_counter() - start


def _within_budget(contender: Contender, settings: Settings, work: Callable[[], None]) -> None:
    if contender.cpu and contender.meter is None:
        contender.meter = CpuMeter(settings.threads)
    remaining = None
    if settings.case_timeout:
        remaining = settings.case_timeout - contender.spent
        if remaining <= 0:
            raise CaseTimeout(f"stopped after the case timeout of {settings.case_timeout:g} s (--case-timeout)")
    start = time.perf_counter()
    try:
        with case_deadline(remaining, settings.case_timeout), (contender.meter or contextlib.nullcontext()):
            work()
    finally:
        contender.spent += time.perf_counter() - start


def _gauged(gauge: HostGauge, timer: str, measure: Callable[[float], Blocks], seconds: float,
            before: float) -> tuple[Blocks, float]:
    """(blocks, the gauge's reading after them): ``measure(seconds)`` marked ``host_slow``
    where the host ran slow at ``before`` (the reading just before) or after it. GPU
    durations (a timer or blocks not ``host_bound``) are not judged."""
    start = time.perf_counter()
    try:
        blocks = measure(seconds)
    finally:
        spent = time.perf_counter() - start
        CLOCK.timed_s += spent
        CLOCK.by_timer[timer] = CLOCK.by_timer.get(timer, 0.0) + spent
    after = gauge.read()
    if not (blocks.host_bound and TIMERS[timer].host_bound):
        return blocks, after
    return dataclasses.replace(blocks, host_slow=gauge.judge(before, after)), after


def time_in_rounds(contenders: list[Contender], settings: Settings, gauge: HostGauge,
                   between_turns: Callable[[], None] = lambda: None) -> list[Outcome]:
    """Time every contender's calls in rotated rounds (see the module docstring); one
    :class:`Outcome` per contender, in order. ``between_turns()`` runs after each turn,
    while nothing is timed."""
    outcomes = [Outcome() for _ in contenders]
    measures: dict[int, dict] = {}  # contender -> timer -> seconds -> Blocks
    rounds: dict[int, dict] = {}  # contender -> timer -> [Blocks of each round]
    live = []
    for i, contender in enumerate(contenders):
        built: dict = {}
        try:  # a wall timer fixes its block size here, once for every round
            _within_budget(contender, settings, lambda: built.update(
                {timer: TIMERS[timer].measurer(call, settings) for timer, call in contender.calls.items()}))
        except Exception as exc:
            outcomes[i].error = exc
            continue
        measures[i], rounds[i] = built, {timer: [] for timer in built}
        live.append(i)
    share = settings.min_run_time / settings.rounds

    def turn(i: int, r: int) -> None:
        timers = list(measures[i])
        if not timers:  # every timer of it was skipped
            return
        first = r % len(timers)
        reading = gauge.read()
        for timer in timers[first:] + timers[:first]:  # rotated too: no timer always runs first
            try:
                blocks, reading = _gauged(gauge, timer, measures[i][timer], share, reading)
            except NoGpuActivity as exc:  # nothing for this timer to time: skipped, the rest go on
                outcomes[i].skipped[timer] = str(exc)
                del measures[i][timer], rounds[i][timer]
                continue
            rounds[i][timer].append(blocks)

    waiting = settings.host_wait > 0
    for r in range(settings.rounds):
        turning = [i for i in live if outcomes[i].error is None]
        if not turning:
            break
        start = r % len(turning)
        for i in turning[start:] + turning[:start]:
            if waiting and not gauge.wait_for_usual_speed(settings.host_wait):
                waiting = False  # still slow: a long stretch; this case waits no more
            try:
                _within_budget(contenders[i], settings, lambda: turn(i, r))
            except Exception as exc:
                outcomes[i].error = exc
            between_turns()
    for i in live:
        if outcomes[i].error is not None:
            continue
        try:
            outcomes[i].measured = {timer: _measured(contenders[i], timer, rounds[i][timer], measures[i][timer],
                                                     settings, gauge) for timer in measures[i]}
        except Exception as exc:
            outcomes[i].error = exc
    return outcomes


def _measured(contender: Contender, timer: str, rounds: list[Blocks], measure, settings: Settings,
              gauge: HostGauge) -> Measured:
    """One timer's measurement: its rounds summarized, after re-timing (at most MIN_BLOCKS
    more turns) while it has fewer than MIN_BLOCKS blocks. While the timing is noisy it is
    re-timed, up to ``settings.repeat_noisy`` times, in ``settings.rounds`` turns of this
    contender alone, with a CPU meter of its own; the measurement kept is the first clean
    one, else the one with the lowest relative spread."""
    share = settings.min_run_time / settings.rounds
    for _ in range(MIN_BLOCKS):  # each re-timing adds at least one block
        if sum(len(r.times_us) for r in rounds) >= MIN_BLOCKS:
            break
        _within_budget(contender, settings, lambda: rounds.append(_gauged(gauge, timer, measure, share, gauge.read())[0]))
    planned = settings.rounds
    best = summarize(rounds, contender.meter.contention() if contender.meter else "", planned)
    best_rounds, attempts = rounds, 1
    while best.noisy and attempts <= settings.repeat_noisy:
        again: list[Blocks] = []
        meter = CpuMeter(settings.threads) if contender.meter else None

        def retime():
            with meter or contextlib.nullcontext():
                reading = gauge.read()
                for _ in range(settings.rounds):
                    blocks, reading = _gauged(gauge, timer, measure, share, reading)
                    again.append(blocks)

        _within_budget(contender, settings, retime)
        timing, attempts = summarize(again, meter.contention() if meter else "", planned), attempts + 1
        if (timing.noisy, timing.rel_spread) < (best.noisy, best.rel_spread):
            best, best_rounds = timing, again
    return Measured(timer, best, attempts, Samples.from_blocks(kept_rounds(best_rounds, planned)[0]))
