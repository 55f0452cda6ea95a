"""Running a benchmark behind a progress bar: the results file's lock, resuming a stopped
run, stopping on Ctrl-C or SIGTERM with a summary, and the load notes of the sidecar.

The command line calls :func:`run_with_progress`; the rows it collects (``counts["rows"]``)
are what :mod:`nmsbench.summary` renders, so a results file is never read back for it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from nmsbench.cuda import TUNABLES_VARIABLE

from .results import (ResultsFileBusy, ResultsLock, ResultWriter, cut_partial_row, describe_holder, environment,
                      library_versions, read_sidecar, resume_state)
from .timing import load_average, load_warning, usable_cpus


def make_console(stderr: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when its stream is piped."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, soft_wrap=True, width=None if stream.isatty() else 160)


console = make_console(stderr=True)  # progress, messages and summaries


class FileInUse(click.ClickException):
    """Another run holds the results file's lock: exit status 2 with the message alone."""

    exit_code = 2


def lock_results(path: Path, what: str) -> ResultsLock:
    """The lock of results file ``path`` (:class:`ResultsLock`), or :class:`FileInUse` naming
    the run that holds it (``what``: "write" or "resume")."""
    try:
        return ResultsLock(path)
    except ResultsFileBusy as e:
        raise FileInUse(f"cannot {what} {path}: another run is writing it ({describe_holder(e.holder)}); wait for it "
                        f"to end or stop it{', or choose another --out' if what == 'write' else ''}") from None
    except ValueError as e:
        raise FileInUse(f"cannot {what} {path}: {e}") from None


# the lock check_resume took, by file, for the run_with_progress that follows to write under
_resume_locks: dict[str, ResultsLock] = {}


# measurement settings a resumed file must share (rows do not record --min-run-time)
RESUME_SAME = ("min_run_time", "threads", "rounds", "host_wait")
# what a sidecar written before a setting existed was timed with
RECORDED_BEFORE = {"rounds": 1, "host_wait": 0.0}
# grid fields that may differ between a run and its resumption without a note
RESUME_FREE = ("case_timeout", "repeat_noisy", "cluster", "slow_retries")


def check_resume(path: Path, grid, benchmark: str = "nms", without_metadata: bool = False) -> set:
    """The case keys already in ``path`` (a ``benchmark`` file of this machine, timed with
    ``grid``'s measurement settings as its sidecar records them), or a UsageError saying why
    it cannot be resumed. Takes the file's lock first (:class:`FileInUse` when another run has
    it) and keeps it for :func:`run_with_progress`; every check comes before the one change it
    may make (cutting a partial last row), so a file it refuses is left as it was.
    ``without_metadata`` (``--resume-without-metadata``) accepts a missing or unreadable sidecar."""
    import warnings

    from .results import PartialRowWarning

    stale = _resume_locks.pop(str(path), None)  # from a check in this process whose run never came
    if stale is not None:
        stale.release()
    lock = lock_results(path, "resume") if path.is_file() else None  # no file: resume_state says so
    try:
        try:
            size = path.stat().st_size if lock else None
            # a cluster run's rows may come from any of its workers' machines (nmsbench.cluster)
            done, keep = resume_state(path, environment(), benchmark, any_machine=bool(getattr(grid, "cluster", None)))
        except ValueError as e:
            raise click.UsageError(f"cannot resume: {e}") from None
        meta, problem = read_sidecar(path)
        if meta is None and not without_metadata:
            raise click.UsageError(f"cannot resume: {problem}. It records how the rows of {path.name} were timed "
                                   "(--min-run-time, --rounds, --threads), which one file's rows must share; pass "
                                   "--resume-without-metadata to resume without that check")
        if meta is None:
            console.print(f"[yellow]warning[/]: {problem}; resuming without checking that this command times rows as "
                          f"{path.name}'s were (--resume-without-metadata)")
        else:
            _same_measurement(path, meta["grid"], grid, without_metadata)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PartialRowWarning)
            try:
                cut_partial_row(path, keep, size)
            except ValueError as e:
                raise click.UsageError(f"cannot resume: {e}") from None
        for warning in caught:
            console.print(f"[yellow]warning[/]: {warning.message}")
    except BaseException:
        if lock:
            lock.release()
        raise
    _resume_locks[str(path)] = lock
    return done


def _same_measurement(path: Path, recorded: dict, grid, without_metadata: bool = False) -> None:
    """A UsageError where ``grid`` times rows otherwise than the sidecar's ``recorded`` grid
    (RESUME_SAME), or where the sidecar does not say (a warning with ``without_metadata``);
    a note where other fields differ."""
    now = json.loads(json.dumps(grid_record(grid), default=str))
    for name in RESUME_SAME:
        if name not in now:
            continue
        option = "--" + name.replace("_", "-")
        was = recorded.get(name, RECORDED_BEFORE.get(name))
        if was is None and without_metadata:
            console.print(f"[yellow]warning[/]: the sidecar of {path} records no {option}; not checked "
                          "(--resume-without-metadata)")
            continue
        if was is None:
            raise click.UsageError(f"cannot resume: the sidecar of {path} records no {option}, which one file's rows "
                                   "must share; pass --resume-without-metadata to resume without that check")
        if was != now[name]:
            raise click.UsageError(f"cannot resume: {path} was timed with {option} {was}, this command asks for "
                                   f"{now[name]}; rows of one file must be measured alike")
    differ = [k for k in now if k in recorded and recorded[k] != now[k] and k not in RESUME_FREE]
    if differ:
        console.print(f"[yellow]note[/]: the grid differs from the run that wrote {path.name} in {', '.join(differ)}: "
                      "cases of this grid that the file lacks are added")


def grid_record(grid) -> dict:
    """A grid's fields as the sidecar records them, its measurement settings among them
    (a ``settings`` field's own fields come up to the top level)."""
    record = dict(getattr(grid, "__dict__", grid))
    settings = record.pop("settings", None)
    if settings is not None:
        record.update(vars(settings))
    return record


def _load_note(when: str) -> dict:
    load = load_average()
    return {"when": when, "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "loadavg": list(load) if load else None, "cpus": len(usable_cpus())}


def _required_modules(names, devices) -> list[str]:
    """The modules that the backends on ``devices`` of the registered implementations among
    ``names`` need (their ``requires``); names that are not registered implementations
    (pipelines) add none."""
    from .registry import implementations

    registered = implementations()
    return [module for name in names if name in registered
            for device, backend in registered[name].backends.items() if device in devices
            for module in backend.requires]


def _local_cluster_warning(grid: dict) -> str:
    """A warning when a local cluster's workers would time CPU rows on more cores than this
    machine has (K workers x --threads), "" otherwise."""
    from .cluster import LOCAL  # the spec's syntax; no dask

    local = LOCAL.fullmatch(str(grid.get("cluster") or ""))
    if not local or "cpu" not in (grid.get("devices") or ["cpu"]):
        return ""
    workers, threads, cpus = int(local[1]), int(grid.get("threads") or 1), len(usable_cpus())
    if workers * threads <= cpus:
        return ""
    return (f"{workers} local workers x --threads {threads} time CPU rows on up to {workers * threads} cores of this "
            f"machine's {cpus}: they will wait for each other (their rows flagged noisy); --threads "
            f"{max(cpus // workers, 1)} or fewer workers gives truer times")


def run_with_progress(command: str, out: Path, force: bool, total: int, grid: dict, reproduce: str,
                      run: Callable, describe: Callable[[dict], str], label: Callable[[dict], str], *,
                      append: bool = False, completed: int = 0, resume_command: str | None = None,
                      verbose: bool = False) -> dict:
    """Write a run's rows to ``out`` (refusing to overwrite without ``force``; ``append``
    adds to it) behind a progress bar; error rows are printed as they come, named by
    ``label(row)`` (the whole case), noisy rows are a count beside the bar (``verbose``:
    each printed as it comes, like an error row); the machine's load goes into the sidecar at
    the start and the end, with a warning at the start when it leaves fewer free CPUs
    than the run's threads (runs with CPU rows). Ctrl-C at any moment stops with a summary of what was written
    (and ``resume_command``) and exit status 130; SIGTERM likewise, with 143.
    ``run(write, on_case, redraw)`` does the work (calling ``redraw()`` where nothing is
    timed, to keep the elapsed time moving) and returns the counts, to which ``noisy_rows``
    (descriptions of this run's noisy rows), ``error_rows``, ``rows`` (this run's rows, as
    ``on_case`` saw them) and ``before`` (``completed``: this grid's cases a resumed file held) are added.

    ``out``'s lock is held throughout, taken before ``out`` is looked at (``--force``
    truncates it only under the lock): the one :func:`check_resume` took (``append``), or a
    new one; :class:`FileInUse` names the run that holds it otherwise."""
    lock = _resume_locks.pop(str(out), None) if append else None
    try:
        if os.environ.get(TUNABLES_VARIABLE, "").strip():
            raise click.UsageError(f"{TUNABLES_VARIABLE} is set ({os.environ[TUNABLES_VARIABLE]}): it compiles the "
                                   "kernels' probe variants, and a run's rows would time them as the product's; unset it "
                                   "(the probes in benchmarks/ take it)")
        lock = lock or lock_results(out, "resume" if append else "write")
        if out.exists() and not force and not append:
            raise click.UsageError(f"{out} exists; pass --force to overwrite it or choose another --out")
        return _run_locked(command, out, lock, total, grid, reproduce, run, describe, label, append=append,
                           completed=completed, resume_command=resume_command, verbose=verbose)
    finally:
        if lock is not None:
            lock.release()


def _run_locked(command: str, out: Path, lock: ResultsLock, total: int, grid: dict, reproduce: str, run: Callable,
                describe: Callable[[dict], str], label: Callable[[dict], str], *, append: bool, completed: int,
                resume_command: str | None, verbose: bool = False) -> dict:
    """:func:`run_with_progress` once ``out``'s lock is held."""
    tally = {"ok": 0, "error": 0, "skipped": 0}
    rows: list[dict] = []  # what the summary shows (never read back from the file)
    noisy_rows: list[str] = []
    error_rows: list[str] = []
    writer = None
    try:
        with _sigterm_as_interrupt(watchdog=True) as stop:
            console.print(f"nmsbench {command}: {total} rows -> {out}" + (f" ({completed} already there)" if append else ""))
            # --threads sets what CPU rows run with; CUDA rows do not use the cores it counts
            warning = load_warning(int(grid.get("threads") or 1)) if "cpu" in grid.get("devices", ["cpu"]) else ""
            if warning:
                console.print(f"[yellow]warning[/]: {warning}")
            crowded = _local_cluster_warning(grid)
            if crowded:
                console.print(f"[yellow]warning[/]: {crowded}")
            writer = ResultWriter(out, environment(), grid, reproduce, append=append, lock=lock,
                                  libraries=library_versions(_required_modules(grid.get("impls") or [],
                                                                             grid.get("devices") or [])))
            writer.note("load", _load_note("start"))
            stop.attach(out, _forced_stop_summary(out, total, completed if append else 0, resume_command))
            # redrawn between rows only: rich's refresh thread would take the interpreter from
            # the timing loops several times a second (host-bound CUDA calls time that too)
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("[yellow]{task.fields[noisy]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                          console=console, transient=False, auto_refresh=False) as progress:
                task = progress.add_task("starting", total=total, completed=completed, noisy="")
                progress.refresh()

                def on_case(row):
                    progress.update(task, advance=1, description=describe(row), refresh=True)
                    tally[row["status"]] += 1
                    rows.append({k: v for k, v in row.items() if not k.startswith("_")})
                    if row["status"] == "error":
                        text = f"{label(row)}: {row['error']}"
                        error_rows.append(text)
                        progress.console.print(f"[red]error[/] {text}")
                    if row.get("noisy"):
                        reason = row.get("noise") or f"IQR {row['rel_spread']:.0%} of the median"
                        text = f"{label(row)}: {reason}" + (
                            f" (after {row['attempts']} timings)" if (row.get("attempts") or 1) > 1 else "")
                        noisy_rows.append(text)
                        progress.update(task, noisy=f"{len(noisy_rows)} noisy", refresh=True)
                        if verbose:
                            progress.console.print(f"[yellow]noisy[/] {text}")

                counts = run(stop.guard(writer.write), on_case, progress.refresh)
            writer.note("load", _load_note("end"))
            if counts.get("host"):
                writer.note("host", counts["host"])  # the host's speed while timing (timing.HostGauge)
            if counts.get("time"):
                # where the run's seconds went (engine.rounds.RunClock), and each timer's share
                writer.note("time", counts["time"] | {"timers_s": counts.get("timers_s") or {}})
            if counts.get("cluster"):
                writer.note("cluster", counts["cluster"])  # the Dask workers that gave rows (nmsbench.cluster)
    except KeyboardInterrupt as stop:
        terminated = isinstance(stop, Terminated)
        what = "terminated (SIGTERM)" if terminated else "interrupted"
        if writer is None:
            console.print(f"[yellow]{what}[/] before {out} was opened: no rows written")
            if not append:
                console.print(f"start it again with: {reproduce}", soft_wrap=True)
            elif resume_command:
                console.print(f"resume with: {resume_command}", soft_wrap=True)
        else:
            there = writer.rows_written + (completed if append else 0)
            console.print(f"[yellow]{what}[/]: {there} of {total} rows are in {out} (this run: {tally['ok']} ok, "
                          f"{tally['error']} error, {tally['skipped']} skipped"
                          + (f"; {completed} were there before" if append else "") + ")")
            if resume_command:
                console.print(f"resume with: {resume_command}", soft_wrap=True)
        raise SystemExit(128 + signal.SIGTERM if terminated else 130) from None
    finally:
        if writer is not None:
            writer.close()
    return counts | {"noisy_rows": noisy_rows, "error_rows": error_rows, "rows": rows, "before": completed if append else 0}


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler's or `kill`'s stop), handled like Ctrl-C."""


@contextmanager
def _sigterm_as_interrupt(watchdog: bool = False):
    """Within the block, SIGTERM raises ``Terminated`` (main thread only; elsewhere a no-op).
    Yields a :class:`~nmsbench.stopping.Watchdog`, running with ``watchdog``: where the
    main thread has not left the block ``stopping.GRACE`` seconds after SIGTERM or Ctrl-C
    (inside a native call that does not return), it ends the process itself with 143 or 130."""
    from .stopping import Watchdog

    if threading.current_thread() is not threading.main_thread():
        yield Watchdog()
        return

    def terminate(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        if not watchdog:
            yield Watchdog()
            return
        with Watchdog() as stop:
            yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)


def _forced_stop_summary(out: Path, total: int, before: int, resume_command: str | None) -> Callable:
    """What a watchdog's forced exit prints (``rows``: this run's rows, None if unknown)."""
    def summary(rows: int | None) -> str:
        there = (f"the rows written before it are in {out}" if rows is None
                 else f"{rows + before} of {total} rows are in {out}")
        return there + (f"\nresume with: {resume_command}" if resume_command else "")

    return summary


class NothingToShow(click.ClickException):
    """The given files and selection hold nothing to show (no measured rows, no such
    benchmark or timer): bad input, so exit status 2 like click's usage errors, with the
    message alone."""

    exit_code = 2
