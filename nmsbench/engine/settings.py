"""The measurement settings of a case (the CLI's --rounds, --min-run-time, --threads,
--host-wait, --repeat-noisy, --case-timeout) as one dataclass and as axes, checked in one place."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from dataclasses import dataclass
from typing import Callable, Optional

from ..timing import DEFAULT_ROUNDS
from .axes import Axis, check_axes, floats, ints


def is_real(value) -> bool:
    """A finite real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def is_whole(value) -> bool:
    """A whole number (not a bool)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


DEFAULT_RUN_TIME = 0.2  # seconds of timing per row: --min-run-time's default
CUDA_RUN_TIME = 0.1  # its default for a sweep on CUDA alone (runner.default_run_time)


def _need(ok: Callable[[object], bool], message: str) -> Callable[[object], str]:
    return lambda value: "" if ok(value) else f"{message}, got {value!r}"


# the measurement settings as axes: one option each for every benchmark that times in rounds
SETTINGS_AXES = (
    Axis("rounds", "--rounds", ints("rounds"), DEFAULT_ROUNDS, many=False, metavar="K",
         check=_need(lambda v: is_whole(v) and v >= 1, "rounds must be a whole number >= 1"),
         help="Interleaved rounds: the contenders of a case are timed K times in rotated order (round r starts at "
              "the r-th), each turn --min-run-time / K seconds; median_us is the median of the round medians."),
    # no default here: the benchmark's grid gives it (a sweep's depends on its devices)
    Axis("min_run_time", "--min-run-time", floats("--min-run-time", low=0.001), None, many=False,
         check=_need(lambda v: is_real(v) and v > 0, "min_run_time must be a positive number of seconds"),
         help=f"Seconds of timing per row, shared by its --rounds. Default: {DEFAULT_RUN_TIME:g}; a sweep on cuda alone "
              f"{CUDA_RUN_TIME:g} (GPU rows repeat within a few %, and README's GPU sweep of every implementation then "
              "fits in 4 minutes on an H200)."),
    Axis("host_wait", "--host-wait", floats("--host-wait", low=0), 0.0, many=False, metavar="SECONDS",
         check=_need(lambda v: is_real(v) and v >= 0, "host_wait must be a number of seconds >= 0"),
         help="Before each turn, wait up to SECONDS for the host to run at its usual speed (0: never wait)."),
    Axis("threads", "--threads", ints("threads"), os.cpu_count() or 1, many=False,
         check=_need(lambda v: is_whole(v) and v >= 1, "threads must be a whole number >= 1"),
         help="CPU threads for torch and numba during the run."),
    Axis("repeat_noisy", "--repeat-noisy", ints("repeat_noisy", low=0), 0, many=False, metavar="K",
         check=_need(lambda v: is_whole(v) and v >= 0, "repeat_noisy must be a whole number >= 0"),
         help="Re-time a noisy measurement up to K more times and keep the least noisy (the attempts column)."),
    Axis("case_timeout", "--case-timeout", floats("--case-timeout", low=0), None, many=False, metavar="SECONDS",
         check=_need(lambda v: is_real(v) and v > 0, "the case timeout must be a positive number of seconds"),
         help="Stop a case after SECONDS (an error row); default: no limit."),
)


def check_settings(grid) -> None:
    """GridError (naming the field) for a measurement setting of ``grid`` that cannot be used."""
    check_axes(grid, SETTINGS_AXES)


@dataclass(frozen=True)
class Settings:
    """How a case is measured (the CLI's --rounds, --min-run-time, --threads, --repeat-noisy,
    --case-timeout, --host-wait)."""

    rounds: int = DEFAULT_ROUNDS
    min_run_time: float = DEFAULT_RUN_TIME  # seconds of timing per measurement, shared by its rounds
    threads: int = 1
    repeat_noisy: int = 0  # re-time a noisy measurement up to this many times, keep the least noisy
    case_timeout: Optional[float] = None  # seconds per case (see case_deadline); None: no limit
    host_wait: float = 0.0  # seconds a turn may wait for the host's usual speed (0: never waits)

    @classmethod
    def of(cls, grid) -> "Settings":
        """The settings of a grid that holds these fields by name."""
        return cls(**{f.name: getattr(grid, f.name) for f in dataclasses.fields(cls) if hasattr(grid, f.name)})
