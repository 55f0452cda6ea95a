"""Rows flagged for a slow host, timed again at the end of their pass (``--slow-retries``):
every benchmark that runs on a shared host's spare time (sweep, pipeline) holds them back
the same way."""

from __future__ import annotations

import contextlib
from typing import Callable

from ..results import case_key
from ..timing import slow_host_among
from .axes import Axis, ints
from .settings import is_whole

# the default re-timings of a run on CUDA alone, whose rows are cheap to time again; CPU
# rows on a busy machine would double a run, so a run with the CPU in it retries none
CUDA_SLOW_RETRIES = 1


def default_slow_retries(devices) -> int:
    """--slow-retries' default: CUDA_SLOW_RETRIES on a run of CUDA alone (its rows take
    a tenth of a second each to time again), 0 otherwise."""
    return CUDA_SLOW_RETRIES if devices and set(devices) == {"cuda"} else 0


def slow_retries_axis(together: str) -> Axis:
    """The --slow-retries option of a benchmark whose flagged rows of one ``together`` (its
    case group: "box set", ...) are re-timed together."""
    return Axis("slow_retries", "--slow-retries", ints("slow_retries", 0), None, many=False, metavar="K",
                check=lambda v: "" if is_whole(v) and v >= 0 else f"slow_retries must be a whole number >= 0, got {v!r}",
                help="Time again, at the end of their pass (up to K times), the rows flagged noisy for a slow host (most "
                     "of their rounds ran while the host's gauge read slow): a shared host's slow stretches last "
                     f"seconds, so a later turn usually finds its usual speed. The flagged rows of one {together} are "
                     "re-timed together, in rounds; a row keeps the clean (else least spread) timing, `attempts` counts them. "
                     f"Default: {CUDA_SLOW_RETRIES} on a run of --device cuda alone, else 0.")


class SlowHostRetries:
    """Rows flagged noisy for a slow host (most of their rounds ran while the gauge read
    slow; a wide spread often with it), held back and timed again at the end of their pass
    (``retries`` times at most), with the other flagged contenders of their group, so
    their rounds still rotate together; each row then keeps the better timing (clean first,
    then the smaller spread) and counts its attempts. A shared host's slow stretches last
    seconds, so a later turn usually finds its usual speed (results/PERFLOG.md). Held rows
    are written as they are when the pass stops early (:meth:`flush`).

    A group is ``members``, a list of (contender, its rows to produce); ``run(members)``
    yields the rows of such a list (the benchmark's group runner). Used as a context
    manager around a pass: a pass that stops (Ctrl-C) or fails writes its held rows as
    they are on the way out."""

    def __init__(self, retries: int, emit: Callable[[dict], None]):
        self.retries, self.emit = retries, emit
        self.held: dict = {}  # id(members) -> (run, members, {case key: (template row, the row as timed)})

    def __enter__(self) -> "SlowHostRetries":
        return self

    def __exit__(self, kind, error, trace) -> bool:
        if kind is not None:  # the pass's own error goes on, whatever writing the held rows meets
            with contextlib.suppress(Exception):
                self.flush()
        return False

    def hold(self, row: dict, members, run: Callable) -> bool:
        """Hold ``row`` (True) when it is worth timing again; ``run(members)`` times its group."""
        if not (self.retries and row.get("status") == "ok" and row.get("noisy") and slow_host_among(row.get("noise"))):
            return False
        key = case_key(row)
        template = next((r for _, rows in members for r in rows if case_key(r) == key), None)
        if template is None:
            return False
        self.held.setdefault(id(members), (run, members, {}))[2][key] = (template, row)
        return True

    def finish(self) -> None:
        """Time the held rows' groups again, then write every held row once."""
        for _ in range(self.retries):
            again = {}
            for ident, (run, members, held) in list(self.held.items()):
                flagged = [(who, [held[case_key(r)][0] for r in rows if case_key(r) in held]) for who, rows in members]
                flagged = [(who, rows) for who, rows in flagged if rows]
                still = {}
                for row in run(flagged):
                    key = case_key(row)
                    if key not in held:
                        continue
                    template, best = held[key]
                    best = better_timing(best, row)
                    if best["noisy"] and slow_host_among(best.get("noise")):  # held for the next retry
                        still[key] = (template, best)
                    else:
                        self.emit(best)
                    del held[key]
                still.update(held)  # a row the re-timing did not give again (an error ended its group)
                if still:
                    again[ident] = (run, members, still)
            self.held = again
        self.flush()

    def flush(self) -> None:
        """Write the rows still held, as they are."""
        held, self.held = self.held, {}
        for _, _, rows in held.values():
            for _, row in rows.values():
                self.emit(row)


def better_timing(first: dict, second: dict) -> dict:
    """Of two timings of one row, the one to keep (clean before noisy, then the smaller
    spread), its ``attempts`` counting both."""
    if second.get("status") != "ok":
        return first
    attempts = int(first.get("attempts") or 1) + int(second.get("attempts") or 1)

    def rank(row: dict) -> tuple:
        return bool(row["noisy"]), float(row.get("rel_spread") or 0.0)

    return (second if rank(second) < rank(first) else first) | {"attempts": attempts}
