"""Timers, and the rule that calls a measurement noisy.

Timers, labelled in every row and never mixed:

- ``wall``: blocks of back-to-back calls with a fixed thread count (:class:`WallTimer`,
  the loop and CUDA-synchronizing clock of ``torch.utils.benchmark``); it waits for the
  GPU, so it is what a Python caller waits for, launches included.
- ``api``: the same clock around ``nmsbench.run_nms(name, ...)`` exactly as a user calls
  it, input validation included (CPU and CUDA).
- ``device`` (CUDA only): what the GPU did per call, from CUPTI's activity records read
  through ``torch.profiler`` (:mod:`nmsbench.gpu_activity`): ``median_us`` is the summed
  duration of the call's kernels, copies and sets; ``span_us`` the GPU's busy span (first
  start to last end); ``launches``, ``copies`` and ``syncs`` what the call asked of the
  GPU and how often it waited for it. Profiled in passes of its own, so the profiler's
  overhead stays out of every other timer.
- ``events`` (CUDA only, not a default): CUDA events around each call, one sync at the
  end. The events also time the host's gaps while the GPU idles inside a call (every op
  here waits for its kept count), so this is host-bound time on the GPU's clock.
- ``graph`` (CUDA, ``graph_safe`` backends only): the op's padded, sync-free form is
  captured once in a CUDA graph and the replays are timed like ``wall`` (replay plus
  synchronize): what a post-processing step inside a captured graph costs.

A measurement is a list of rounds (see ``nmsbench.engine.rounds``: the contenders of a case
take turns), each round a list of blocks; a block's time is its per-call mean. A row
reports (:func:`summarize`):

- ``median_us``: the median of the round medians (with one round: the median block);
- ``iqr_us``: the IQR of all blocks of all rounds, pooled; ``rel_spread`` = IQR / median;
- ``runs``: calls timed; ``blocks``: blocks timed, all rounds together;
- ``round_spread``: (max - min) / median of the round medians (blank with one round).

The noisy rule (:attr:`Timing.noise` names every reason that applies; nothing is trimmed):

- fewer than ``MIN_BLOCKS`` blocks (the rounds loop re-times such a measurement, a bounded
  number of times, before it flags it): too few to show a spread at all;
- ``rel_spread`` above ``NOISY_SPREAD``;
- a long tail: the 90th percentile of the blocks above ``TAIL_RATIO`` x the median (an
  IQR can stay small while a tenth of the calls wait for a descheduled thread);
- rounds that disagree: ``round_spread`` above :func:`round_spread_limit` of the row's
  K rounds, ``ROUND_SPREAD`` at the default K = 5 and scaled for other K so that it
  always asks the same certainty of the reported median (a range of K draws grows with
  K while the median of K rounds grows surer, so a fixed limit would flag more rows the
  more rounds were timed);
- CPU contention (CPU rows): while the row was timed, other processes kept busy more of
  this process's CPUs than ``--threads`` leaves free (:class:`CpuMeter`), so a parallel
  backend's threads waited for cores;
- a slow host: fewer than half of the row's rounds were timed while the host ran at its
  usual speed (:class:`HostGauge`), so its median comes from slow rounds too.

A slow host: on a shared machine (a VM whose cores others share) the host runs much
slower than usual in stretches of up to seconds, and every host-bound timing moves
with it, each implementation by its own factor (results/PERFLOG.md).
(The device timer's GPU durations do not move with it, and are not judged.)
So the rounds loop reads :class:`HostGauge` (a fixed pure-Python loop, against its usual
speed in this process: a low quantile of its readings, not its single fastest, which can
be an outlier far below the rest) around every measurement of a turn; a measurement with the gauge
slow before or after it is marked ``host_slow`` and left out of the row's median where
at least half the row's rounds remain, else the row keeps them all and is flagged.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import time
import timeit
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

DEFAULT_TIMERS = ("wall", "device")  # the registry of timers is nmsbench.timers (which re-exports this)
DEFAULT_ROUNDS = 5
MIN_BLOCKS = 5
NOISY_SPREAD = 0.10
TAIL_RATIO = 1.5
ROUND_SPREAD = 0.25  # the rounds-spread limit at DEFAULT_ROUNDS rounds (round_spread_limit scales it)
HOST_SLOW = 1.3  # a HostGauge reading this many times its usual speed marks the host slow (between its usual and slow readings)
USUAL_QUANTILE = 10  # the gauge's usual speed: this percentile of its readings (its minimum until USUAL_REFRESH of them)
USUAL_REFRESH = 32  # readings between two updates of the usual speed
CANARY_LOOP, CANARY_REPEATS = 2000, 5  # the gauge's loop: sum(range(CANARY_LOOP)), best of CANARY_REPEATS
SLOW_HOST = "the host ran slow"  # the noise reason of a row most of whose rounds ran on a slow host


def slow_host_among(noise: str) -> bool:
    """Whether a slow host is among a row's noise reasons (its ``noise`` column); the others
    (a wide IQR, rounds that disagree) then often come from it: its usual rounds beside slow ones."""
    return any(r.strip().startswith(SLOW_HOST) for r in str(noise or "").split(";"))

NOISY_RULE = (f"a row is noisy when it has fewer than {MIN_BLOCKS} timing blocks, its IQR exceeds {NOISY_SPREAD:.0%} "
              f"of its median, the 90th percentile of its blocks exceeds {TAIL_RATIO:g} x the median, its rounds' "
              f"medians spread more than {ROUND_SPREAD:.0%} of the median (at {DEFAULT_ROUNDS} rounds; more rounds "
              "allow a wider spread, their median being surer), (CPU rows) other processes kept busy cores that "
              "--threads needed, or fewer than half of its rounds ran while the host ran at its usual speed")


@functools.lru_cache(maxsize=None)
def expected_range(k: int) -> float:
    """The expected range (max - min) of ``k`` draws from a standard normal distribution
    (the control-chart constant d2: 1.128 for 2, 2.326 for 5, 3.078 for 10), by numerical
    integration of 1 - F(x)^k - (1 - F(x))^k."""
    x, dx = np.linspace(-10.0, 10.0, 8001, retstep=True)  # the integrand is ~0 beyond +-10 for any k we use
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    return float(np.sum(1.0 - cdf**k - (1.0 - cdf) ** k) * dx)


def round_spread_limit(rounds: int) -> float:
    """The largest ``round_spread`` a row of ``rounds`` rounds may have and stay clean:
    ``ROUND_SPREAD`` at ``DEFAULT_ROUNDS``; for K rounds the spread at which the median of
    the K round medians is as uncertain as at the default (its standard error goes with
    the rounds' standard deviation, estimated as range / d2(K), over sqrt(K))."""
    return ROUND_SPREAD * (expected_range(rounds) / expected_range(DEFAULT_ROUNDS)) * math.sqrt(rounds / DEFAULT_ROUNDS)


@dataclass(frozen=True)
class Blocks:
    """One blocked measurement: the per-call time of each block (µs) and the calls timed."""

    times_us: np.ndarray
    calls: int
    host_slow: bool = False  # timed while the host ran slow (HostGauge): left out of a row's median
    host_bound: bool = True  # False: GPU durations (device timer), which a slow host does not lengthen
    activity: Optional[dict] = None  # device timer: per-call arrays of gpu_activity.activity_arrays

@dataclass(frozen=True)
class Timing:
    median_us: float
    iqr_us: float
    runs: int
    blocks: Optional[int] = None  # None: as many as runs (one call a block)
    p90_us: Optional[float] = None
    rounds: int = 1
    round_spread: Optional[float] = None  # None with one round
    contention: str = ""  # why the CPU was contended while this was timed ("" if it was not)
    slow_rounds: int = 0  # rounds timed while the host ran slow; flagged when they are the median's
    span_us: Optional[float] = None  # device timer: the GPU's busy span per call (median of round medians)
    span_iqr_us: Optional[float] = None
    launches: Optional[float] = None  # device timer: kernels, copies and host syncs per call (medians)
    copies: Optional[float] = None
    syncs: Optional[float] = None

    @property
    def rel_spread(self) -> float:
        return self.iqr_us / self.median_us if self.median_us > 0 else 0.0

    @property
    def noise(self) -> str:
        """Every reason of the noisy rule that applies, "; "-separated ("" when clean)."""
        reasons = []
        blocks = self.runs if self.blocks is None else self.blocks
        if blocks < MIN_BLOCKS:
            reasons.append(f"{blocks} block{'s' if blocks != 1 else ''} (< {MIN_BLOCKS})")
        if self.rel_spread > NOISY_SPREAD:
            reasons.append(f"IQR {self.rel_spread:.0%} of the median")
        if self.p90_us is not None and self.median_us > 0 and self.p90_us > TAIL_RATIO * self.median_us:
            reasons.append(f"90th percentile {self.p90_us / self.median_us:.1f}x the median")
        if self.round_spread is not None and self.round_spread > (limit := round_spread_limit(self.rounds)):
            reasons.append(f"rounds spread {self.round_spread:.0%} of the median (over {limit:.0%} for {self.rounds} rounds)")
        if self.contention:
            reasons.append(self.contention)
        if self.slow_rounds:
            reasons.append(f"{SLOW_HOST} in {self.slow_rounds} of {self.rounds} rounds")
        return "; ".join(reasons)

    @property
    def noisy(self) -> bool:
        return bool(self.noise)


def enough_usual(rounds: int) -> int:
    """Rounds at the host's usual speed a row of ``rounds`` rounds needs for its median to
    leave the slow ones out: half, rounded up."""
    return -(-rounds // 2)


def kept_rounds(rounds: Sequence[Blocks], planned: Optional[int] = None) -> tuple[list[Blocks], int]:
    """(the rounds a row's median comes from, how many of them ran on a slow host): those
    timed while the host ran slow are left out where enough others remain
    (:func:`enough_usual` of the ``planned`` rounds, default all of them); else all count."""
    rounds = [r for r in rounds if len(r.times_us)]
    usual = [r for r in rounds if not r.host_slow]
    if len(usual) >= enough_usual(planned or len(rounds)):
        return usual, 0
    return rounds, len(rounds) - len(usual)


def summarize(rounds: Sequence[Blocks], contention: str = "", planned: Optional[int] = None) -> Timing:
    """One row's timing from its rounds (see the module docstring for what each field is),
    over :func:`kept_rounds`; ``slow_rounds`` says how many of those ran on a slow host."""
    rounds, slow_rounds = kept_rounds(rounds, planned)
    if not rounds:
        raise ValueError("no timing blocks to summarize")
    pooled = np.concatenate([r.times_us for r in rounds])
    medians = np.array([np.median(r.times_us) for r in rounds])
    median = float(np.median(medians))
    q1, q3, p90 = np.percentile(pooled, [25, 75, 90])
    spread = float((medians.max() - medians.min()) / median) if len(rounds) > 1 and median > 0 else None
    return Timing(median_us=median, iqr_us=float(q3 - q1), runs=sum(r.calls for r in rounds), blocks=len(pooled),
                  p90_us=float(p90), rounds=len(rounds), round_spread=spread, contention=contention,
                  slow_rounds=slow_rounds, **_activity_fields(rounds))


def _activity_fields(rounds: Sequence[Blocks]) -> dict:
    """The device timer's extra fields of a row (none for other timers): the busy span as
    median of round medians and pooled IQR, like ``median_us``; the counts as medians."""
    if any(r.activity is None for r in rounds):
        return {}
    span_medians = [np.median(r.activity["span_us"]) for r in rounds]
    span = np.concatenate([r.activity["span_us"] for r in rounds])
    q1, q3 = np.percentile(span, [25, 75])
    counts = {name: float(np.median(np.concatenate([r.activity[name] for r in rounds])))
              for name in ("launches", "copies", "syncs")}
    return {"span_us": float(np.median(span_medians)), "span_iqr_us": float(q3 - q1), **counts}


class HostGauge:
    """How fast the host runs now, against its usual speed in this process: a fixed
    pure-Python loop timed ``CANARY_REPEATS`` times, the best taken (µs). The usual speed
    is the ``USUAL_QUANTILE``-th percentile of the readings so far (their minimum while
    there are fewer than ``USUAL_REFRESH``), so one outlier fast reading does not make the
    host's ordinary speed look slow. A reading above ``HOST_SLOW`` x the usual speed means
    the host runs slow (see the module docstring). ``turns`` and ``slow_turns`` count the
    measurements it judged."""

    def __init__(self):
        self.best = self.usual = math.inf
        self.readings: list[float] = []
        self.turns = self.slow_turns = 0
        self.waited = 0.0  # seconds spent waiting for the usual speed (--host-wait)

    def loop_us(self) -> float:
        """One run of the canary loop, in µs."""
        start = time.perf_counter()
        sum(range(CANARY_LOOP))
        return (time.perf_counter() - start) * 1e6

    def canary_us(self) -> float:
        """One reading: the best of ``CANARY_REPEATS`` runs of the loop (µs), not recorded."""
        return min(self.loop_us() for _ in range(CANARY_REPEATS))

    def read(self) -> float:
        return self.note(self.canary_us())

    def note(self, reading: float) -> float:
        """Record a reading (best and usual speed updated); the reading."""
        self.readings.append(reading)
        self.best = min(self.best, reading)
        count = len(self.readings)
        if count < USUAL_REFRESH:
            self.usual = self.best
        elif count % USUAL_REFRESH == 0:
            self.usual = float(np.percentile(self.readings, USUAL_QUANTILE))
        return reading

    def slow(self, reading: float) -> bool:
        return reading > HOST_SLOW * self.usual

    def judge(self, before: float, after: float) -> bool:
        """Whether a measurement between two readings ran on a slow host (counted)."""
        slow = self.slow(before) or self.slow(after)
        self.turns += 1
        self.slow_turns += slow
        return slow

    def wait_for_usual_speed(self, seconds: float) -> bool:
        """Read every few ms until the host runs at its usual speed, for at most ``seconds``;
        whether it does. The time waited is counted in ``waited``. The readings taken while
        waiting are not recorded: they are the slow ones by construction, and would drag the
        usual speed towards them."""
        start = time.monotonic()
        usual = not self.slow(self.read())
        while not usual and time.monotonic() - start < seconds:
            time.sleep(0.005)
            usual = not self.slow(self.canary_us())
        self.waited += time.monotonic() - start
        return usual

    def summary(self) -> dict:
        """What the sidecar records of the run's host speed: the canary's best, usual and
        median readings (µs), the limit, and how many measurements were judged slow."""
        def us(value):
            return None if math.isinf(value) else round(value, 2)

        median = float(np.median(self.readings)) if self.readings else math.inf
        return {"canary_best_us": us(self.best), "canary_usual_us": us(self.usual), "canary_median_us": us(median),
                "slow_limit": HOST_SLOW, "measurements": self.turns, "slow": self.slow_turns,
                "waited_s": round(self.waited, 2)}


class SteadyHost(HostGauge):
    """A gauge that never judges the host slow (tests; timers whose host speed is known)."""

    def read(self) -> float:
        return 1.0


def wall_clock() -> float:
    """``time.perf_counter`` after waiting for the GPU when CUDA is in use (the clock
    ``torch.utils.benchmark`` times with), so a block's time includes its kernels."""
    import torch  # here, not at the top: the dashboard reads timers and results without torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


class WallTimer:
    """Blocks of back-to-back calls of ``fn()`` on :func:`wall_clock`, timed by the
    standard library's ``timeit.Timer`` (the loop ``torch.utils.benchmark`` runs too,
    garbage collection off) with ``threads`` torch threads, and a block size fixed once
    from one single call (three, median, when a call is shorter than a block) so that a block lasts about ``block_seconds`` (at least one
    call). A short measurement (one round of several) then still has several blocks, and
    every round of a row uses the same block size. (``torch.utils.benchmark.Timer.timeit``
    would add warm-up calls to every block: for slow calls, most of the time.)"""

    def __init__(self, fn: Callable[[], object], *, threads: int, block_seconds: float):
        self.threads = threads
        self._timer = timeit.Timer(stmt=fn, timer=wall_clock)
        with _torch_threads(threads):
            single = self._timer.timeit(1)
            if single < block_seconds:  # a call longer than a block is a block by itself; else the median of three
                single = float(np.median([single, self._timer.timeit(1), self._timer.timeit(1)]))
        self.number = int(max(1, min(1_000_000, block_seconds // max(single, 1e-9))))

    def blocks(self, min_run_time: float) -> Blocks:
        """Blocks until ``min_run_time`` seconds were timed (at least one block)."""
        times, total = [], 0.0
        with _torch_threads(self.threads):
            while not times or total < min_run_time:
                elapsed = self._timer.timeit(self.number)
                times.append(elapsed / self.number)
                total += elapsed
        return Blocks(np.asarray(times) * 1e6, len(times) * self.number)


@contextlib.contextmanager
def _torch_threads(threads: int):
    import torch
    previous = torch.get_num_threads()
    if previous != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if previous != threads:
            torch.set_num_threads(previous)


BLOCKS_PER_MEASUREMENT = 10  # a block lasts about this fraction of a measurement's time


def wall_blocks(fn: Callable[[], object], *, min_run_time: float, threads: int) -> Blocks:
    """``fn()`` timed for ``min_run_time`` seconds in about ``BLOCKS_PER_MEASUREMENT`` blocks."""
    timer = WallTimer(fn, threads=threads, block_seconds=min_run_time / BLOCKS_PER_MEASUREMENT)
    return timer.blocks(min_run_time)


DEVICE_MAX_CALLS = 16  # calls one device-timer measurement profiles at most (their records are read in Python)


def device_blocks(fn: Callable[[], object], *, min_run_time: float, min_runs: int = 10,
                  max_runs: int = DEVICE_MAX_CALLS) -> Blocks:
    """What the GPU did in each call of ``fn()`` (one call a block: its summed kernel, copy
    and set durations), from a profile of ``min_runs`` to ``max_runs`` calls lasting about
    ``min_run_time`` seconds (:func:`nmsbench.gpu_activity.profile_calls`). Not host-bound:
    the gauge does not judge it."""
    from .gpu_activity import activity_arrays, profile_calls

    activity = activity_arrays(profile_calls(fn, min_run_time=min_run_time, min_calls=min_runs, max_calls=max_runs))
    return Blocks(activity["gpu_us"], len(activity["gpu_us"]), host_bound=False, activity=activity)


def event_blocks(fn: Callable[[], object], *, min_run_time: float, min_runs: int = 10, max_runs: int = 10_000) -> Blocks:
    """CUDA events around each call of ``fn()`` (one call a block), one sync at the end:
    the ``events`` timer (the GPU's clock, the host's gaps inside a call included)."""
    import torch
    fn()
    torch.cuda.synchronize()
    deadline = time.perf_counter() + min_run_time
    events = []
    while len(events) < max_runs and (len(events) < min_runs or time.perf_counter() < deadline):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return Blocks(np.array([s.elapsed_time(e) * 1e3 for s, e in events]), len(events))


def time_wall(fn: Callable[[], object], *, min_run_time: float, threads: int) -> Timing:
    """Median and IQR of ``fn()`` by ``blocked_autorange`` (per-call times, in µs), one round."""
    return summarize([wall_blocks(fn, min_run_time=min_run_time, threads=threads)])


def time_device(fn: Callable[[], object], *, min_run_time: float, min_runs: int = 10,
                max_runs: int = DEVICE_MAX_CALLS) -> Timing:
    """What the GPU did per call of ``fn()`` (:func:`device_blocks`), one round."""
    return summarize([device_blocks(fn, min_run_time=min_run_time, min_runs=min_runs, max_runs=max_runs)])


def time_events(fn: Callable[[], object], *, min_run_time: float, min_runs: int = 10, max_runs: int = 10_000) -> Timing:
    """CUDA events around each call of ``fn()`` (:func:`event_blocks`), one round."""
    return summarize([event_blocks(fn, min_run_time=min_run_time, min_runs=min_runs, max_runs=max_runs)])


def capture_graph(fn: Callable[[], object]):
    """Capture ``fn()`` in a CUDA graph, after a warm-up on a side stream as PyTorch's
    graph documentation asks. Returns ``(graph, output)``: ``output`` is the captured
    call's result, whose tensors every ``graph.replay()`` rewrites. The graph keeps
    ``fn`` (``graph.captured_call``): its replays read the memory of the tensors that
    ``fn`` holds, which must not be freed and reused while the graph lives."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = fn()
    graph.captured_call = fn
    return graph, output


# --------------------------------------------------------------------------- CPU load


def usable_cpus() -> list[int]:
    """The CPUs this process may run on."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def load_average() -> Optional[tuple[float, float, float]]:
    """The 1, 5 and 15 minute load averages (None where the platform has none)."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        return None


def load_warning(threads: int) -> str:
    """A warning when the load leaves fewer free CPUs than ``threads`` ("" otherwise); a
    CPU counts as busy when the load keeps it so more than half the last minute (the
    starting command itself adds a little)."""
    load = load_average()
    cpus = len(usable_cpus())
    if load is None or cpus - math.floor(load[0] + 0.5) >= threads:
        return ""
    return (f"the 1-minute load average is {load[0]:.1f} on {cpus} CPU(s), which leaves fewer free than --threads "
            f"{threads}: parallel CPU backends will wait for cores (their rows are flagged noisy when the meter sees it; "
            "a lower --threads or a quieter machine gives truer times)")


def _busy_jiffies(cpus: list[int]) -> Optional[tuple[int, int]]:
    """(busy, total) jiffies of ``cpus`` from /proc/stat (None where it cannot be read)."""
    try:
        lines = open("/proc/stat").read().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{c}" for c in cpus}
    busy = total = 0
    for line in lines:
        fields = line.split()
        if fields and fields[0] in wanted:
            values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
            total += sum(values)
            busy += sum(values) - values[3] - values[4]
    return busy, total


def _own_jiffies() -> Optional[int]:
    """CPU time of this process (all its threads), in jiffies."""
    try:
        fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime


class CpuMeter:
    """How many of this process's CPUs other processes kept busy while it timed.

    ``with meter: ...`` around each timed stretch; :meth:`contention` then compares the
    busy CPUs of others (the CPUs' busy time minus this process's own, over the time
    measured) with what ``threads`` leaves free. Linux only (/proc); elsewhere it never
    reports contention."""

    TOLERANCE = 0.25  # of one CPU: jiffies are coarse, and short bursts of others do not matter

    def __init__(self, threads: int):
        self.threads = threads
        self.cpus = usable_cpus()
        self.others = 0.0
        self.elapsed = 0.0
        self._start = None

    def __enter__(self):
        system, own = _busy_jiffies(self.cpus), _own_jiffies()
        self._start = None if system is None or own is None else (system, own)
        return self

    def __exit__(self, *exc):
        if self._start is None:
            return
        system, own = _busy_jiffies(self.cpus), _own_jiffies()
        if system is None or own is None:
            return
        (busy0, total0), own0 = self._start
        self.others += max((system[0] - busy0) - (own - own0), 0)
        self.elapsed += (system[1] - total0) / len(self.cpus)  # jiffies of wall time

    @property
    def busy_others(self) -> Optional[float]:
        """CPUs kept busy by other processes, on average (None before any jiffy was measured)."""
        return self.others / self.elapsed if self.elapsed > 0 else None

    def contention(self) -> str:
        busy = self.busy_others
        free = len(self.cpus) - self.threads
        if busy is None or busy <= free + self.TOLERANCE:
            return ""
        return f"other processes kept {busy:.1f} of {len(self.cpus)} CPUs busy (--threads {self.threads})"
