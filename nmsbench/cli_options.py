"""Commands made from benchmark plug-ins: an option per axis (``Axis.flag``), the shared
measurement and output options (declared once here), and one body that makes the grid,
runs it behind a progress bar and prints its summary."""

from __future__ import annotations

import dataclasses
import functools
import shlex
from pathlib import Path

import click

from . import progress, summary
from .engine.axes import Axis, GridError
from .engine.plugins import Benchmark
from .engine.rounds import SETTINGS_AXES, Settings
from .keys import keys_of_grid
from .results import default_output_path
from .timing import DEFAULT_ROUNDS, NOISY_RULE, ROUND_SPREAD, round_spread_limit

# more than their axes' one line, for --help (the settings themselves: engine.rounds.SETTINGS_AXES)
MEASUREMENT_HELP = {
    "rounds": "Interleaved rounds: the contenders of a case are timed K times in rotated order (round r starts at the r-th), "
              "each turn --min-run-time / K seconds. median_us is the median of the round medians, round_spread their "
              "(max - min) / median, iqr_us the IQR of all rounds' timing blocks pooled. The noisy rule allows more rounds "
              f"a wider spread ({ROUND_SPREAD:.0%} at {DEFAULT_ROUNDS} rounds, {round_spread_limit(10):.0%} at 10).",
    "threads": "CPU threads for torch and numba. More threads than free cores makes parallel CPU backends wait for cores: "
               "the run warns at the start, and flags the rows it sees it in.",
    "host_wait": "Before each turn, wait up to SECONDS for the host to run at its usual speed (its gauge: a fixed Python loop "
                 "against its usual speed). Rounds timed while it is slow are left out of the median anyway; waiting leaves "
                 "more rounds to keep, at the cost of time. A wait that runs out ends the waiting for the rest of that case. "
                 "0: never wait.",
    "repeat_noisy": "Re-time a noisy measurement up to K more times and keep the least noisy; the attempts column says how "
                    f"many timings the row took. Noisy: {NOISY_RULE}; the noise column names the reasons.",
    "case_timeout": "Stop a case (one box set or batch with all its contenders and timers) that runs longer than this: its rows "
                    "become status=error rows naming the timeout, and the run goes on. Uses SIGALRM, which Python sees between "
                    "bytecodes: it stops a case looping in Python at once, and one inside a long native call (a torch op, a "
                    "numba kernel, a CUDA wait) only when that call returns; a native call that never returns is not stopped "
                    "by it. Ctrl-C or SIGTERM stop the whole run within 2 s even then, keeping every row written: --resume "
                    "it without what hangs.",
}
OUTPUT_OPTIONS = [
    click.Option(["--out"], type=click.Path(dir_okay=False, path_type=Path), help="CSV to write (a sidecar .json goes next to "
                 "it, the raw samples beside them). Default: a new file under results/runs/."),
    click.Option(["--force"], is_flag=True, help="Overwrite --out if it exists."),
    click.Option(["--resume"], type=click.Path(dir_okay=False, path_type=Path), metavar="FILE", help=(
        "Continue a stopped run: append to FILE the rows of this grid it lacks, never repeating one. Refused, leaving FILE "
        "as it was, when FILE has another schema, a damaged row, a case measured twice or other benchmarks' rows, came from "
        "another machine, was timed with other --min-run-time, --threads or --rounds, has no readable sidecar (FILE's "
        ".json), or another run is writing it. Give the same options as the stopped run.")),
    click.Option(["--resume-without-metadata"], is_flag=True, help="With --resume: resume even though FILE's sidecar is "
                 "missing or unreadable (it records how FILE's rows were timed, which this run's settings are checked against)."),
]
VERBOSE_OPTION = click.Option(["--verbose"], is_flag=True, help="Print each noisy row as it comes, with its reasons "
                              "(without it: a count beside the progress bar; the summary marks noisy cells † either way).")


def timer_help(already: str = "") -> str:
    """Every registered timer's one line (nmsbench.timers.TIMERS), for ``--timer``; none where ``already`` lists them."""
    from .timers import TIMERS

    if all(timer.help in already for timer in TIMERS.values()):
        return ""
    return " Timers: " + "; ".join(f"{name}: {timer.help}" for name, timer in TIMERS.items()) + "."


def axis_option(axis: Axis) -> click.Option:
    """The option of one axis: its texts reach :meth:`Axis.value` (repeatable where ``many``)."""
    text = MEASUREMENT_HELP.get(axis.name, axis.help) + (timer_help(axis.help) if axis.name == "timers" else "")
    if axis.default is not None:
        text += f" [default: {' '.join(axis.texts(axis.default))}]"
    return click.Option([axis.flag, axis.name], multiple=axis.many, metavar=axis.metavar, help=text)


def option_hint(axes, field: str) -> str:
    """The option that sets grid field ``field``."""
    flags = {a.name: a.flag for a in (*axes, *SETTINGS_AXES)}
    return flags.get(field, field)


def make_grid(benchmark: Benchmark, values: dict):
    """The benchmark's grid from the command line's ``values`` (by parameter name), or the
    BadParameter of the option behind the field it refuses (the grid's own GridError)."""
    fields = {}
    try:
        for axis in benchmark.axes:
            given = values.get(axis.name)
            if given not in (None, ()):
                fields[axis.name] = axis.value(given)
            elif axis.default is not None:
                fields[axis.name] = axis.default
        fields |= _measurement_fields(benchmark, values)
        require_cuda_if_asked(fields.get("devices") or [fields.get("device")])  # before a grid picks what runs there
        return benchmark.grid(**fields)
    except ValueError as e:
        raise usage_error(benchmark, e) from None


def usage_error(benchmark: Benchmark, error: ValueError) -> click.UsageError:
    """A grid's ValueError as the command line's usage error, naming the option at fault (a GridError's field)."""
    field = getattr(error, "field", None)
    return click.BadParameter(str(error), param_hint=option_hint(benchmark.axes, field)) if field else click.UsageError(str(error))


def _measurement_fields(benchmark: Benchmark, values: dict) -> dict:
    """The measurement settings (engine.rounds.SETTINGS_AXES) as the grid takes them: its own
    fields, or ``settings=Settings(...)``; one the grid does not use is refused where given."""
    grid_type = getattr(benchmark.grid, "dataclass", benchmark.grid)
    fields = {f.name for f in dataclasses.fields(grid_type)}
    given = {}
    for axis in SETTINGS_AXES:
        if values.get(axis.name) is not None:
            if axis.name not in fields and "settings" not in fields:
                raise GridError(axis.name, f"not used by nmsbench {benchmark.command}")
            given[axis.name] = axis.value(values[axis.name])
        elif axis.default is not None:
            given[axis.name] = axis.default
    if "settings" in fields:
        return {"settings": Settings(**given)}
    return {name: value for name, value in given.items() if name in fields}


def reproduce(benchmark: Benchmark, grid, out: Path, resume: bool = False) -> str:
    """The command that runs ``grid`` again (every axis it sets, the measurement settings),
    writing ``out`` (``resume``: continuing it)."""
    args = ["nmsbench", benchmark.command]
    for axis in benchmark.axes:
        value = getattr(grid, axis.name, None)
        if value is None or (axis.name == "impls" and getattr(grid, "cap_slow", False)):  # every one, capped
            continue
        for text in axis.texts(value):
            args += [axis.flag, text]
    record = progress.grid_record(grid)
    for axis in SETTINGS_AXES:  # those that differ from their default, and the three every row shares
        value = record.get(axis.name)
        if value is not None and (axis.name in ("rounds", "min_run_time", "threads") or value != axis.default):
            args += [axis.flag, *axis.texts(value)]
    return shlex.join(args + ["--resume" if resume else "--out", str(out)])


def check_output_options(resume: Path | None, out: Path | None, force: bool, without_metadata: bool) -> None:
    """--resume FILE writes to FILE: refuse another --out, and --force."""
    if resume and out and Path(out) != resume:
        raise click.BadParameter("--resume FILE writes to FILE; leave --out out", param_hint="--resume")
    if resume and force:
        raise click.BadParameter("--resume appends to FILE; --force (overwrite) contradicts it", param_hint="--force")
    if without_metadata and not resume:
        raise click.BadParameter("it goes with --resume FILE", param_hint="--resume-without-metadata")


def require_cuda_if_asked(devices) -> None:
    """A UsageError where cuda is among ``devices`` and this machine has no CUDA device."""
    import torch

    if "cuda" in (devices or ()) and not torch.cuda.is_available():
        raise click.UsageError("--device cuda was asked for, but no CUDA device is available here "
                               "(torch.cuda.is_available() is False)")


def run_benchmark(benchmark: Benchmark, values: dict) -> None:
    """The body of every benchmark command: grid, resume checks, the run, its summary."""
    out, force, resume, without = (values.pop(k) for k in ("out", "force", "resume", "resume_without_metadata"))
    verbose = values.pop("verbose", False)
    check_output_options(resume, out, force, without)
    grid = make_grid(benchmark, values)
    require_cuda_if_asked(getattr(grid, "devices", None))
    if benchmark.prepare is not None:  # what only a command line checks (files, memory) before anything runs
        try:
            grid = benchmark.prepare(grid)
        except ValueError as e:
            raise usage_error(benchmark, e) from None
    done = progress.check_resume(resume, grid, benchmark.name, without) if resume else set()
    out = resume or out or default_output_path(list(getattr(grid, "devices", ["cpu"])), kind=benchmark.command)
    total = benchmark.total(grid)
    counts = progress.run_with_progress(
        benchmark.command, out, force, total, progress.grid_record(grid), reproduce(benchmark, grid, out, resume=bool(resume)),
        lambda write, on_case, redraw: benchmark.run(grid, write, on_case=on_case, done=done, between_turns=redraw),
        describe=benchmark.describe or _describe, label=benchmark.label or _describe, append=bool(resume),
        completed=min(keys_of_grid(done, grid), total), resume_command=reproduce(benchmark, grid, out, resume=True), verbose=verbose)
    summary.show(benchmark.name, counts["rows"], counts, out)


def _describe(row: dict) -> str:
    return " ".join(str(row.get(k, "")) for k in ("impl", "device", "timer", "scenario", "n"))


def benchmark_command(benchmark: Benchmark, callback=None, measured: bool = True, help: str | None = None) -> click.Command:
    """The command of a registered benchmark: its axes' options, then the shared measurement
    (where ``measured``) and output options; ``callback(values)`` (default: :func:`run_benchmark`)."""
    params = [axis_option(axis) for axis in benchmark.axes]
    for decorator in benchmark.options:  # command-only options (e.g. an eager --list)
        params += getattr(decorator(lambda: None), "__click_params__", [])
    params += ([axis_option(axis) for axis in SETTINGS_AXES] + OUTPUT_OPTIONS + [VERBOSE_OPTION]) if measured else OUTPUT_OPTIONS[:2]
    run = callback or functools.partial(run_benchmark, benchmark)
    return click.Command(benchmark.command, params=params, callback=lambda **values: run(values),
                         help=help or benchmark.help or benchmark.run.__doc__)
