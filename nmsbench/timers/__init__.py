"""The timers: one registered :class:`Timer` per module of this package.

A timer says on which devices it gives rows, whether it needs a ``graph_safe`` backend,
how it builds the timed call from what a benchmark offers (:class:`Callables`), how it
measures that call (``seconds -> Blocks``, :mod:`nmsbench.timing`), and the result
columns it fills beyond the common ones. Every benchmark, ``--help`` and the plots read
the registry; adding a timer is adding a module here that calls :func:`register_timer`.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Protocol

from ..timing import BLOCKS_PER_MEASUREMENT, DEFAULT_TIMERS, Blocks, Timing


class Settings(Protocol):
    """What a timer reads of a case's measurement settings (``nmsbench.engine.settings.Settings``
    has these and more; timers sit below the engine and never import it)."""

    rounds: int
    min_run_time: float
    threads: int


__all__ = ["Callables", "Timer", "TIMERS", "DEFAULT_TIMERS", "register_timer", "timers_for", "discover",
           "block_seconds", "min_calls", "blank_extra"]


@dataclass(frozen=True)
class Callables:
    """What a benchmark offers a timer to build its timed call from: ``op`` (the call as the
    benchmark runs it), ``public`` (the same work through the public API, for ``api``),
    ``capture`` (a sync-free form of it to capture in a CUDA graph, for ``graph``) and
    ``check(timer, output)``, which raises where a built call's output is not ``op``'s."""

    op: Callable[[], object]
    public: Optional[Callable[[], object]] = None
    capture: Optional[Callable[[], object]] = None
    check: Callable[[str, object], None] = lambda timer, output: None


def blank_extra(timing: Timing) -> dict:
    """A timer without columns of its own fills none."""
    return {}


@dataclass(frozen=True)
class Timer:
    """One timer (see the module docstring). ``separate_pass``: it profiles, so a sweep times
    it after every other timer (CUPTI, once attached, slows the host side of later calls);
    ``order``: its place in listings (help, validation messages)."""

    name: str
    devices: tuple[str, ...]
    help: str
    build: Callable[[Callables], Callable[[], object]]
    measurer: Callable[[Callable[[], object], Settings], Callable[[float], Blocks]]
    extra: Callable[[Timing], dict] = blank_extra
    needs_graph_safe: bool = False
    host_bound: bool = True
    dash: str = "solid"
    columns: tuple[str, ...] = ()
    separate_pass: bool = False
    order: int = 100


TIMERS: dict[str, Timer] = {}


def register_timer(timer: Timer) -> Timer:
    """Add ``timer`` to :data:`TIMERS` (in ``order``); ValueError for a second timer of one name."""
    if not timer.name or not timer.devices or not set(timer.devices) <= {"cpu", "cuda"}:
        raise ValueError(f"timer {timer.name!r}: a name and devices among cpu, cuda are needed, got {timer.devices!r}")
    known = TIMERS.get(timer.name)
    if known is not None and known != timer:
        raise ValueError(f"a timer named {timer.name!r} is registered already")
    TIMERS[timer.name] = timer
    ordered = sorted(TIMERS.values(), key=lambda t: (t.order, t.name))
    TIMERS.clear()
    TIMERS.update((t.name, t) for t in ordered)
    return timer


def timers_for(device: str, names: Iterable[str]) -> list[str]:
    """The timers of ``names`` that give rows on ``device``, in the order given."""
    return [name for name in names if name in TIMERS and device in TIMERS[name].devices]


def discover() -> dict[str, Timer]:
    """Import every module of this package (each registers its timer); the registry."""
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    return TIMERS


def block_seconds(settings: Settings) -> float:
    """A wall block's length: about a tenth of one round's share of the measurement."""
    return settings.min_run_time / settings.rounds / BLOCKS_PER_MEASUREMENT


def min_calls(settings: Settings) -> int:
    """Calls a one-call-a-block timer takes per round: at least 10 a row, all rounds together."""
    return max(2, math.ceil(10 / settings.rounds))


discover()


def timer_passes(grid) -> list:
    """A grid (a dataclass with ``timers`` and ``devices``) as the passes that time it: every
    timer but those of a pass of their own first, then each of those on its devices. Once a
    process has profiled (``device``), CUPTI stays attached and every later CUDA call costs
    the host more, so nothing is timed by another timer after the first profile."""
    import dataclasses

    others = [t for t in grid.timers if not TIMERS[t].separate_pass]
    passes = [dataclasses.replace(grid, timers=others)] if others else []
    for timer in (t for t in grid.timers if TIMERS[t].separate_pass):
        devices = [d for d in grid.devices if d in TIMERS[timer].devices]
        if devices:
            passes.append(dataclasses.replace(grid, timers=[timer], devices=devices))
    return passes
