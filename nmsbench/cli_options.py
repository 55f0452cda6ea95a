"""What ``nmsbench sweep``, ``nmsbench pipeline`` and ``nmsbench accuracy`` share: options, option parsing, the
progress display, stopping (Ctrl-C, SIGTERM), the results file's lock and resuming.

A module of its own so that neither command module imports the other: ``nmsbench.cli``
imports this module and ``nmsbench.pipeline_cli`` (and registers its command);
``nmsbench.pipeline_cli`` imports only this module.
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

from nmsbench.variants._cuda import TUNABLES_VARIABLE

from .results import (ResultsFileBusy, ResultsLock, ResultWriter, cut_partial_row, describe_holder, environment,
                      library_versions, read_sidecar, resume_state)
from .timing import NOISY_SPREAD, load_average, load_warning, usable_cpus


def _console(stderr: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when its stream is piped."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, soft_wrap=True, width=None if stream.isatty() else 160)


console = _console(stderr=True)  # progress, messages and summaries


def _split(values: tuple[str, ...]) -> list[str]:
    """Options given several times and/or comma-separated, in order, without repeats."""
    items = [v.strip() for value in values for v in value.split(",") if v.strip()]
    return list(dict.fromkeys(items))


def parse_params(items: tuple[str, ...]) -> dict:
    """``--param KEY=VALUE`` options as a dict, values as int, float or text; a
    BadParameter for an item that is not KEY=VALUE."""
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--param")
        params[key.strip()] = _param_value(value.strip())
    return params


def _param_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_devices(values: tuple[str, ...]) -> list[str]:
    """``--device`` options as a list of "cpu" and/or "cuda": a BadParameter for anything
    else or for none, a UsageError for cuda on a machine without a CUDA device."""
    devices = _split(values)
    bad = [d for d in devices if d not in ("cpu", "cuda")]
    if bad or not devices:
        raise click.BadParameter(f"{', '.join(bad) or 'none given'}: choose cpu and/or cuda", param_hint="--device")
    require_cuda_if_asked(devices)
    return devices


def require_cuda_if_asked(devices: list[str]) -> None:
    """A UsageError where cuda is among ``devices`` and this machine has no CUDA device."""
    import torch

    if "cuda" in devices and not torch.cuda.is_available():
        raise click.UsageError("--device cuda was asked for, but no CUDA device is available here "
                               "(torch.cuda.is_available() is False)")


def _floats(values: tuple[str, ...], what: str) -> list[float]:
    try:
        return [float(v) for v in _split(values)]
    except ValueError:
        raise click.BadParameter(f"{what} must be numbers, got {', '.join(values)}") from None


WITHOUT_METADATA = "resume_without_metadata"  # where --resume-without-metadata leaves its value (ctx.meta)


def resume_option(what_is_a_row: str):
    """``--resume FILE`` and ``--resume-without-metadata``; ``what_is_a_row`` lists the
    columns that identify a row. The flag reaches :func:`_check_resume` through the click
    context, so the commands' signatures do not carry it."""
    resume = click.option(
        "--resume", "resume", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
        help=f"Continue a stopped run: append to FILE the rows of this grid it lacks, never repeating one (a row is "
             f"{what_is_a_row}). Refused, leaving FILE as it was, when FILE has another schema, a damaged row, a "
             "case measured twice or other benchmarks' rows, came from another machine, was timed with another "
             "--min-run-time, --threads or --rounds, has no readable sidecar (FILE's .json), or another run is "
             "writing it. Give the same options as the stopped run.")
    without_metadata = click.option(
        "--resume-without-metadata", is_flag=True, expose_value=False, callback=_remember_without_metadata,
        help="With --resume: resume even though FILE's sidecar (.json) is missing or unreadable. The sidecar records "
             "how FILE's rows were timed (--min-run-time, --rounds, --threads); without it this command's settings "
             "cannot be checked against theirs, so give the same options as the run that wrote FILE.")
    return lambda command: resume(without_metadata(command))


def _remember_without_metadata(ctx, param, value) -> None:
    ctx.meta[WITHOUT_METADATA] = value


def _without_metadata() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.meta.get(WITHOUT_METADATA))


def case_timeout_option(what_is_a_case: str):
    """``--case-timeout SECONDS``; ``what_is_a_case`` says what one case covers."""
    return click.option(
        "--case-timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
        help=f"Stop a case ({what_is_a_case}) that runs longer than this: its rows become status=error rows naming "
             "the timeout, and the run goes on. Uses SIGALRM, which Python sees between bytecodes: it stops a case "
             "looping in Python at once, and one inside a long native call (a torch op, a numba kernel, a CUDA wait) "
             "only when that call returns; a native call that never returns is not stopped by it. Ctrl-C or SIGTERM "
             "stop the whole run within 2 s even then, keeping every row written: --resume it without what hangs.")


def check_resume_options(resume: Path | None, out: Path | None, force: bool) -> None:
    """--resume FILE writes to FILE: refuse another --out, and --force."""
    if resume and out and Path(out) != resume:
        raise click.BadParameter("--resume FILE writes to FILE; leave --out out", param_hint="--resume")
    if resume and force:
        raise click.BadParameter("--resume appends to FILE; --force (overwrite) contradicts it", param_hint="--force")
    if _without_metadata() and not resume:
        raise click.BadParameter("it goes with --resume FILE", param_hint="--resume-without-metadata")


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


# the lock _check_resume took, by file, for the run_with_progress that follows to write under
_resume_locks: dict[str, ResultsLock] = {}


# measurement settings a resumed file must share (rows do not record --min-run-time)
RESUME_SAME = ("min_run_time", "threads", "rounds", "host_wait")
# what a sidecar written before a setting existed was timed with
RECORDED_BEFORE = {"rounds": 1, "host_wait": 0.0}
# grid fields that may differ between a run and its resumption without a note
RESUME_FREE = ("case_timeout", "repeat_noisy")


def _check_resume(path: Path, grid, benchmark: str = "nms", without_metadata: bool | None = None) -> set:
    """The case keys already in ``path`` (a ``benchmark`` file of this machine, timed with
    ``grid``'s measurement settings as its sidecar records them), or a UsageError saying why
    it cannot be resumed. Takes the file's lock first (:class:`FileInUse` when another run has
    it) and keeps it for :func:`run_with_progress`; every check comes before the one change it
    may make (cutting a partial last row), so a file it refuses is left as it was.
    ``without_metadata`` (default: ``--resume-without-metadata``) accepts a missing or
    unreadable sidecar."""
    import warnings

    from .results import PartialRowWarning

    if without_metadata is None:
        without_metadata = _without_metadata()
    stale = _resume_locks.pop(str(path), None)  # from a check in this process whose run never came
    if stale is not None:
        stale.release()
    lock = lock_results(path, "resume") if path.is_file() else None  # no file: resume_state says so
    try:
        try:
            size = path.stat().st_size if lock else None
            done, keep = resume_state(path, environment(), benchmark)
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
    now = json.loads(json.dumps(grid.__dict__, default=str))
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


def run_with_progress(command: str, out: Path, force: bool, total: int, grid: dict, reproduce: str,
                      run: Callable, describe: Callable[[dict], str], label: Callable[[dict], str], *,
                      append: bool = False, completed: int = 0, resume_command: str | None = None) -> dict:
    """Write a run's rows to ``out`` (refusing to overwrite without ``force``; ``append``
    adds to it) behind a progress bar; error and noisy rows are printed as they come,
    named by ``label(row)`` (the whole case); the machine's load goes into the sidecar at
    the start and the end, with a warning at the start when it leaves fewer free CPUs
    than the run's threads (runs with CPU rows). Ctrl-C at any moment stops with a summary of what was written
    (and ``resume_command``) and exit status 130; SIGTERM likewise, with 143.
    ``run(write, on_case, redraw)`` does the work (calling ``redraw()`` where nothing is
    timed, to keep the elapsed time moving) and returns the counts, to which ``noisy_rows``
    (descriptions of this run's noisy rows) and ``error_rows`` are added.

    ``out``'s lock is held throughout, taken before ``out`` is looked at (``--force``
    truncates it only under the lock): the one :func:`_check_resume` took (``append``), or a
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
                           completed=completed, resume_command=resume_command)
    finally:
        if lock is not None:
            lock.release()


def _run_locked(command: str, out: Path, lock: ResultsLock, total: int, grid: dict, reproduce: str, run: Callable,
                describe: Callable[[dict], str], label: Callable[[dict], str], *, append: bool, completed: int,
                resume_command: str | None) -> dict:
    """:func:`run_with_progress` once ``out``'s lock is held."""
    tally = {"ok": 0, "error": 0, "skipped": 0}
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
            writer = ResultWriter(out, environment(), grid, reproduce, append=append, lock=lock,
                                  libraries=library_versions(_required_modules(grid.get("impls") or [],
                                                                             grid.get("devices") or [])))
            writer.note("load", _load_note("start"))
            stop.attach(out, _forced_stop_summary(out, total, completed if append else 0, resume_command))
            # redrawn between rows only: rich's refresh thread would take the interpreter from
            # the timing loops several times a second (host-bound CUDA calls time that too)
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          TimeRemainingColumn(), console=console, transient=False, auto_refresh=False) as progress:
                task = progress.add_task("starting", total=total, completed=completed)
                progress.refresh()

                def on_case(row):
                    progress.update(task, advance=1, description=describe(row), refresh=True)
                    tally[row["status"]] += 1
                    if row["status"] == "error":
                        text = f"{label(row)}: {row['error']}"
                        error_rows.append(text)
                        progress.console.print(f"[red]error[/] {text}")
                    if row.get("noisy"):
                        reason = row.get("noise") or f"IQR {row['rel_spread']:.0%} of the median"
                        text = f"{label(row)}: {reason}" + (
                            f" (after {row['attempts']} timings)" if (row.get("attempts") or 1) > 1 else "")
                        noisy_rows.append(text)
                        progress.console.print(f"[yellow]noisy[/] {text}")

                counts = run(stop.guard(writer.write), on_case, progress.refresh)
            writer.note("load", _load_note("end"))
            if counts.get("host"):
                writer.note("host", counts["host"])  # the host's speed while timing (timing.HostGauge)
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
    return counts | {"noisy_rows": noisy_rows, "error_rows": error_rows}


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


class StoppableGroup(click.Group):
    """A click group whose commands stop on Ctrl-C or SIGTERM at any moment with status
    130 or 143 and one line (click's own handling prints ``Aborted!`` and exits 1). A run
    that has opened its results file says more, and how to resume (:func:`run_with_progress`)."""

    restore_signals: dict = {}  # handlers to set back when a command starts (see nmsbench.cli)

    def invoke(self, ctx):
        for signum, handler in self.restore_signals.items():
            signal.signal(signum, handler)
        self.restore_signals = {}
        try:
            with _sigterm_as_interrupt():
                return super().invoke(ctx)
        except KeyboardInterrupt as stop:
            terminated = isinstance(stop, Terminated)
            console.print(f"[yellow]{'terminated (SIGTERM)' if terminated else 'interrupted'}[/]")
            raise SystemExit(128 + signal.SIGTERM if terminated else 130) from None


class NothingToShow(click.ClickException):
    """The given files and selection hold nothing to show (no measured rows, no such
    benchmark or timer): bad input, so exit status 2 like click's usage errors, with the
    message alone."""

    exit_code = 2


__all__ = ["NOISY_SPREAD", "RESUME_SAME", "FileInUse", "NothingToShow", "StoppableGroup", "Terminated", "case_timeout_option", "check_resume_options",
           "console", "resume_option", "run_with_progress"]
