"""The command line: ``nmsbench list``, ``nmsbench sweep``, ``nmsbench pipeline`` and ``nmsbench accuracy``."""

from __future__ import annotations

import os
import signal
import sys
import threading


def _stop_while_starting(signum, frame):
    """Ctrl-C or SIGTERM while the command line's modules (torch...) are imported: nothing
    has been written yet; one line and the usual status, no traceback."""
    sys.stderr.write(f"{'terminated (SIGTERM)' if signum == signal.SIGTERM else 'interrupted'} while starting: "
                     "no rows written\n")
    sys.stderr.flush()
    os._exit(128 + signum)


# only when this process is the `nmsbench` program: the handlers are set before anything
# else is imported and given back when a command starts (StoppableGroup.invoke, which
# handles both signals from then on); a library import leaves the handlers alone
_STARTING = (threading.current_thread() is threading.main_thread()
             and (__name__ == "__main__" or os.path.basename(sys.argv[0]) == "nmsbench")
             and signal.getsignal(signal.SIGINT) is signal.default_int_handler
             and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
_previous = {s: signal.signal(s, _stop_while_starting) for s in (signal.SIGINT, signal.SIGTERM)} if _STARTING else {}

import json  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
from pathlib import Path  # noqa: E402

import click  # noqa: E402
from rich.table import Table  # noqa: E402

from . import datasets  # noqa: E402
from .cli_options import (_check_resume, _console, _floats, _split, StoppableGroup, case_timeout_option,  # noqa: F401,E402
                          check_resume_options, console, parse_params, require_cuda_if_asked, resume_option,
                          run_with_progress, NothingToShow)
from .registry import describe, implementations  # noqa: E402
from .results import default_output_path  # noqa: E402
from .runner import DTYPES, Grid, GridError, run_sweep  # noqa: E402
from .tables import ACCURACY_METRICS  # noqa: E402
from .timing import DEFAULT_ROUNDS, DEFAULT_TIMERS, NOISY_RULE, ROUND_SPREAD, round_spread_limit  # noqa: E402


def parse_sizes(text: str) -> list[int]:
    """``64..8192`` is 64, 128, ..., 8192 (doubling from the lower bound; the upper bound
    always ends the range, on the doubling grid or not: ``100..1000`` is 100, 200, 400,
    800, 1000); ``100,1000`` a list; both mix. Every size must be positive."""
    sizes: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)\s*\.\.\s*(\d+)", part)
        if match:
            lo, hi = int(match[1]), int(match[2])
            if lo < 1 or hi < lo:
                raise ValueError(f"range {part!r} must go from a positive size up to a size at least as large")
            value = lo
            while value < hi:
                sizes.append(value)
                value *= 2
            sizes.append(hi)
        elif part.isdigit():
            if int(part) < 1:
                raise ValueError(f"{part!r}: box counts must be positive")
            sizes.append(int(part))
        else:
            raise ValueError(f"{part!r} is not a box count or a range like 64..8192")
    if not sizes:
        raise ValueError("no box counts given")
    return list(dict.fromkeys(sizes))


@click.group(cls=StoppableGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nmsbench")
def main():
    """nmsbench: benchmark and compare non-maximum suppression (NMS) variants.

    \b
    nmsbench list                                 what is registered, and what runs here
    nmsbench sweep --n 64..1024 --device cpu      time every variant, write a tidy CSV
    nmsbench pipeline --batch 1,8,32              time post-processing, raw detector output -> detections
    nmsbench accuracy --images 200                COCO AP/AR of each NMS beside its time per image
    """
    _show_partial_row_warnings()


def _show_partial_row_warnings() -> None:
    """A results file's dropped partial row as one ``warning:`` line, not Python's warning format."""
    import warnings

    from .results import PartialRowWarning

    show = warnings.showwarning
    if getattr(show, "nmsbench", False):
        return

    def showwarning(message, category, *args, **kwargs):
        if issubclass(category, PartialRowWarning):
            console.print(f"[yellow]warning[/]: {message}")
        else:
            show(message, category, *args, **kwargs)

    showwarning.nmsbench = True
    warnings.showwarning = showwarning


EXACT_CAPTION = ("exact (hard): keep equals torchvision's index for index; exact (allpairs): keep equals the "
                 "allpairs definition index for index (it over-suppresses chains, so it is not greedy NMS); approx: "
                 "follows its family's definition up to floating-point rounding (see README, Families). "
                 "host_sync: the op waits for the device inside the call; graph_safe: it has a padded, sync-free form "
                 "that a CUDA graph can capture (--timer graph).")


def exactness(row: dict) -> str:
    """What ``nmsbench list`` says of an implementation's agreement with its definition."""
    return f"exact ({row['family']})" if row["exact"] else "approx"


@main.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of a table.")
def list_command(as_json: bool):
    """List every registered implementation and backend, and whether it runs here."""
    rows = describe()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="nmsbench implementations", caption=EXACT_CAPTION, caption_justify="left")
    for column in ("name", "family", "exact", "device", "host_sync", "graph_safe"):
        table.add_column(column, no_wrap=True)
    table.add_column("available", overflow="fold")
    table.add_column("summary", overflow="fold")
    for row in rows:
        available = "[green]yes[/]" if row["available"] else f"[red]no[/]: {row['reason']}"
        table.add_row(row["name"], row["family"], exactness(row), row["device"], "yes" if row["host_sync"] else "no",
                      "yes" if row["graph_safe"] else "no", available, row["summary"])
    _console().print(table)


SCENARIO_HELP = "; ".join(f"{name} (knob: {s.knob})" for name, s in datasets.SCENARIOS.items())


# the Grid field a GridError names -> the sweep option that sets it
GRID_OPTIONS = {"impls": "--impl", "devices": "--device", "dtypes": "--dtype", "scenarios": "--scenario", "ns": "--n",
                "ious": "--iou", "overlaps": "--overlap", "seed": "--seed", "classes": "--classes", "params": "--param",
                "timers": "--timer", "min_run_time": "--min-run-time", "threads": "--threads", "file": "--file",
                "recordings": "--recording", "case_timeout": "--case-timeout", "repeat_noisy": "--repeat-noisy",
                "rounds": "--rounds", "host_wait": "--host-wait", "canvases": "--canvas"}


def _grid(**fields) -> Grid:
    """A Grid, or the BadParameter of the option behind the field it refuses."""
    try:
        return Grid(**fields)
    except GridError as e:
        raise click.BadParameter(str(e), param_hint=GRID_OPTIONS.get(e.field, e.field)) from None


@main.command()
@click.option("--n", "sizes", default="64..1024", show_default=True,
              help="Box counts (positive): 64..8192 doubles from 64 and always ends at the upper bound (100..1000 is "
                   "100, 200, 400, 800, 1000); or a list 100,1000; or both.")
@click.option("--impl", "impls", multiple=True,
              help="Implementations to run (repeat or comma-separate). Default: all, each up to its sweep limit (the "
                   "plain Soft-NMS loop soft_torch to N = 1024: its calls take a second or more beyond; naming it here lifts "
                   "that); see `nmsbench list`.")
@click.option("--device", "devices", multiple=True, default=("cpu",), show_default=True, help="cpu and/or cuda (repeat or comma-separate).")
@click.option("--scenario", "scenarios", multiple=True, help=f"Box-set scenarios. Default: {', '.join(datasets.SYNTHETIC)}. Known: {SCENARIO_HELP}.")
@click.option("--overlap", "overlaps", multiple=True, help="Values of each scenario's overlap knob to sweep. Default: each scenario's own default.")
@click.option("--iou", "ious", multiple=True, default=("0.5",), show_default=True, help="IoU thresholds (repeat or comma-separate).")
@click.option("--dtype", "dtypes", multiple=True, default=("float32",), show_default=True, help=f"Box dtypes: {', '.join(DTYPES)}.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the generated box sets.")
@click.option("--classes", default=1, show_default=True, type=click.IntRange(min=1), help="Number of labels; above 1 the NMS is class-aware.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="Implementation parameter, given to those that take it (e.g. sigma=0.5, kernel=linear, score_threshold=0.1).")
@click.option("--file", "file_path", type=click.Path(exists=True, dir_okay=False), help="Boxes file (.npz, .pt, .csv) for the `file` scenario (refused without --scenario file).")
@click.option("--canvas", "canvases", multiple=True, default=("fixed",), show_default=True,
              help="Canvas of the synthetic scenarios: fixed (1024 px at every N) and/or density (its side grows as "
                   "sqrt(N), 1024 px at N = 1024, so each box keeps as many neighbours at any N: the workload of large "
                   "images, for N far beyond the fixed canvas). Rows record it in the canvas column.")
@click.option("--recording", "recordings", multiple=True,
              help=f"For the `real` scenario: recordings photo@size to replay (repeat or comma-separate; `all`). "
                   f"Default: {datasets.real.DEFAULT_RECORDING}. Its knob (--overlap) is the confidence threshold, which "
                   "sets N; --n caps N at the n best candidates by score (a detector's pre-NMS top-k), and rows record "
                   "the N used (n), the cap (n_cap), image and input_size.")
@click.option("--timer", "timers", multiple=True, default=DEFAULT_TIMERS, show_default=True,
              help="wall (the backend call: what a caller waits for), api (nmsbench.run_nms exactly as a user calls it, "
                   "validation included), device (what the GPU did per call, from CUPTI via torch.profiler in passes of "
                   "its own: median_us is the summed kernel, copy and set durations; span_us the GPU's busy span; "
                   "launches, copies and syncs per call), events (CUDA events around each call: the GPU's clock, the "
                   "host's gaps inside a call included) and/or graph (the op's padded, sync-free form captured "
                   "once in a CUDA graph, replays timed; graph-safe CUDA backends only). device, events and graph give "
                   "cuda rows only.")
@click.option("--rounds", default=DEFAULT_ROUNDS, show_default=True, type=click.IntRange(min=1), metavar="K",
              help="Interleaved rounds: the implementations of a case (one box set, device, dtype and IoU) are timed K "
                   "times in rotated order (round r starts at the r-th), each turn --min-run-time / K seconds. median_us "
                   "is the median of the round medians, round_spread their (max - min) / median, iqr_us the IQR of all "
                   "rounds' timing blocks pooled. More rounds interleave finer; the noisy rule allows their wider "
                   f"spread ({ROUND_SPREAD:.0%} at {DEFAULT_ROUNDS} rounds, {round_spread_limit(10):.0%} at 10), asking "
                   "the same certainty of the median.")
@click.option("--min-run-time", default=0.2, show_default=True, type=click.FloatRange(min=0.001),
              help="Seconds of timing per row, shared by its --rounds.")
@click.option("--host-wait", default=0.0, show_default=True, type=click.FloatRange(min=0), metavar="SECONDS",
              help="Before each turn, wait up to SECONDS for the host to run at its usual speed (its gauge: a fixed "
                   "Python loop against its usual speed, a low quantile of its readings). For a shared machine whose host slows down in stretches: rounds "
                   "timed while it is slow are left out of the median anyway, and waiting leaves more rounds to keep, "
                   "at the cost of time. A wait that runs out ends the waiting for the rest of that case. 0: never wait.")
@click.option("--threads", default=os.cpu_count() or 1, show_default=True, type=click.IntRange(min=1),
              help="CPU threads for torch and numba during the sweep. More threads than free cores makes parallel CPU "
                   "backends wait for cores: the sweep warns at the start, and flags the rows it sees it in.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="CSV to write (a sidecar .json goes next to it). Default: a new file under results/runs/.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@resume_option("impl, device, dtype, timer, scenario, recording, overlap, classes, n (n_cap), IoU, seed and params")
@case_timeout_option("one implementation on one box set, device, dtype and IoU: its warm-up and all its timers' rounds")
@click.option("--repeat-noisy", default=0, show_default=True, type=click.IntRange(min=0), metavar="K",
              help=f"Re-time a noisy measurement up to K more times and keep the least noisy; the attempts column says "
                   f"how many timings the row took. Noisy: {NOISY_RULE}; the noise column names the reasons.")
def sweep(sizes, impls, devices, scenarios, overlaps, ious, dtypes, seed, classes, params, file_path, recordings, timers,
          rounds, min_run_time, host_wait, threads, out, force, resume, case_timeout, repeat_noisy, canvases):
    """Time implementations over the grid impl x device x dtype x scenario x overlap x n x IoU.

    \b
    nmsbench sweep --n 64..8192 --device cuda
    nmsbench sweep --n 100,1000 --impl torchvision,allpairs --scenario chain --iou 0.5,0.7
    nmsbench sweep --scenario clustered --overlap 0.3,0.6,0.9 --classes 3
    nmsbench sweep --scenario file --file boxes.npz --n 500 --param score_threshold=0.1
    nmsbench sweep --scenario real --overlap 0.25,0.01,0.001 --n 8192 --recording all

    nmsbench sweep --n 64..8192 --device cuda --resume results/runs/sweep-20261129-120000-cuda.csv

    Every case becomes one CSV row per timer. The implementations of one box set,
    device, dtype and IoU are timed together (--rounds) and their rows written when the
    last round ends. A variant that raises, runs out of memory or passes --case-timeout
    gives a row with status=error and the message; a cell it cannot run (no backend,
    unavailable, dtype) a row with status=skipped. Ctrl-C (or SIGTERM) at any moment stops
    with what was written (status 130, or 143) and the command that resumes it.
    """
    try:
        ns = parse_sizes(sizes)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--n") from None
    check_resume_options(resume, out, force)
    known = implementations()
    param_dict = parse_params(params)
    fields = dict(
        impls=_split(impls) or sorted(known), devices=_split(devices), dtypes=_split(dtypes),
        scenarios=_split(scenarios) or list(datasets.SYNTHETIC), ns=ns, ious=_floats(ious, "--iou values"),
        overlaps=_floats(overlaps, "--overlap values") or None, seed=seed, classes=classes, params=param_dict,
        timers=_split(timers), min_run_time=min_run_time, threads=threads, file=file_path,
        recordings=_split(recordings) or None, case_timeout=case_timeout, repeat_noisy=repeat_noisy, rounds=rounds,
        host_wait=host_wait, canvases=_split(canvases), cap_slow=not _split(impls),
    )
    grid = _grid(**fields)  # every check of the core first, then what only a command line needs
    require_cuda_if_asked(grid.devices)
    if "file" in grid.scenarios:
        try:
            recorded = len(datasets.load_boxes_file(file_path, rows=max(ns)))  # a CSV: its first rows only
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--file") from None
        if max(ns) > recorded:
            raise click.BadParameter(f"{file_path} holds {recorded} boxes; --n asks for up to {max(ns)}", param_hint="--n")
    if any(s in datasets.SYNTHETIC for s in grid.scenarios):
        try:
            datasets.check_fits(max(ns))
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--n") from None
    if grid.recordings:
        try:
            known_recordings = datasets.real.recording_keys()
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--recording") from None
        recording_list = known_recordings if "all" in grid.recordings else grid.recordings
        bad = [r for r in recording_list if r not in known_recordings]
        if bad:
            raise click.BadParameter(f"unknown {', '.join(bad)}; known: {', '.join(known_recordings)}", param_hint="--recording")
        grid = _grid(**fields | {"recordings": recording_list})
    for name in grid.impls:  # check values now, not once per case
        try:
            known[name].resolve_params(known[name].accepted_params(param_dict))
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--param") from None
    accepted = {p.name for i in grid.impls for p in known[i].params}
    if set(param_dict) - accepted:
        raise click.BadParameter(f"no selected implementation takes {', '.join(sorted(set(param_dict) - accepted))}", param_hint="--param")

    done: set = set()
    if resume:
        done = _check_resume(resume, grid)
    out = resume or out or default_output_path(grid.devices)
    counts = run_with_progress(
        "sweep", out, force, grid.count(), grid.__dict__, reproduce_command(grid, out, resume=bool(resume)),
        lambda write, on_case, redraw: run_sweep(grid, write, on_case, done=done, between_turns=redraw),
        describe=lambda row: f"{row['scenario']:>10} n={row['n']:<6} {row['impl']:<18} {row['device']}",
        label=lambda row: case_label(row, given_params=bool(grid.params)),
        append=bool(resume), completed=min(len(done), grid.count()), resume_command=reproduce_command(grid, out, resume=True),
    )
    _print_summary(out, counts)


def case_label(row: dict, given_params: bool = False) -> str:
    """The whole case of a sweep row, for warnings: impl, device, dtype, timer, scenario,
    recording, overlap, n (and its cap), IoU, classes, and the parameters when given."""
    parts = [str(row["impl"]), str(row["device"]), str(row["dtype"]), str(row["timer"]), str(row["scenario"])]
    if row.get("image"):
        parts.append(f"{row['image']}@{row.get('input_size', '')}")
    parts.append(f"overlap={float(row['overlap']):g}")
    cap = row.get("n_cap")
    parts.append(f"n={row['n']}" + (f" (cap {cap})" if cap not in (None, "") and str(cap) != str(row["n"]) else ""))
    parts.append(f"iou={float(row['iou_threshold']):g}")
    if int(row.get("classes") or 1) > 1:
        parts.append(f"classes={row['classes']}")
    if given_params and row.get("params") not in (None, "", "{}"):
        parts.append(f"params={row['params']}")
    return " ".join(parts)


def reproduce_command(grid: Grid, out: Path, resume: bool = False) -> str:
    """The sweep command that reproduces this grid, every default spelled out."""
    # without --impl (cap_slow) the command says so: naming every implementation would lift the caps
    impls = [] if grid.cap_slow else ["--impl", ",".join(grid.impls)]
    args = ["nmsbench", "sweep", "--n", ",".join(map(str, grid.ns)), *impls, "--device", ",".join(grid.devices), "--dtype", ",".join(grid.dtypes),
            "--scenario", ",".join(grid.scenarios), "--iou", ",".join(map(str, grid.ious)),
            "--seed", str(grid.seed), "--classes", str(grid.classes), "--timer", ",".join(grid.timers),
            "--rounds", str(grid.rounds), "--min-run-time", str(grid.min_run_time), "--threads", str(grid.threads)]
    if grid.overlaps:
        args += ["--overlap", ",".join(map(str, grid.overlaps))]
    for key, value in grid.params.items():
        args += ["--param", f"{key}={value}"]
    if grid.file:
        args += ["--file", str(grid.file)]
    if grid.recordings:
        args += ["--recording", ",".join(grid.recordings)]
    if grid.case_timeout:
        args += ["--case-timeout", str(grid.case_timeout)]
    if grid.repeat_noisy:
        args += ["--repeat-noisy", str(grid.repeat_noisy)]
    if grid.host_wait:
        args += ["--host-wait", str(grid.host_wait)]
    if grid.canvases != ["fixed"]:
        args += ["--canvas", ",".join(grid.canvases)]
    return shlex.join(args + ["--resume" if resume else "--out", str(out)])


# the grid dimensions a summary never pools over: one table per combination of their values,
# each table impl x n. A recorded scenario's tables (real: n is the N a recording gave under
# the cap n_cap) have a row per recording and implementation and a column per cap, each cell
# naming its N.
SUMMARY_BLOCKS = ("device", "timer", "scenario", "canvas", "overlap", "dtype", "iou_threshold", "classes")
SUMMARY_COLUMNS = 12  # columns per table; more are split over several tables, never cut


def _summary_title(key: dict, varying: set) -> str:
    parts = [f"median µs ({key['timer']} timer)", str(key["scenario"])]
    if "canvas" in varying and key.get("canvas"):
        parts.append(f"{key['canvas']} canvas")
    if "overlap" in varying:
        parts.append(f"overlap {float(key['overlap']):g}")
    if "dtype" in varying:
        parts.append(str(key["dtype"]))
    if "iou_threshold" in varying:
        parts.append(f"IoU {float(key['iou_threshold']):g}")
    if "classes" in varying:
        parts.append(f"{int(key['classes'])} classes")
    parts.append(str(key["device"]))
    return " · ".join(parts)


def _summary_tables(group, title: str) -> list[Table]:
    """One block of the summary (rows never pooled), split every SUMMARY_COLUMNS columns."""
    import pandas as pd

    recorded = group["n_cap"].notna().any() and group["image"].notna().any()
    if recorded:
        group = group.assign(recording=group["image"].astype(str) + "@" + group["input_size"].map(lambda s: f"{int(float(s))}"),
                             cell=[f"{m:,.1f} (N={int(n)})" for m, n in zip(group["median_us"], group["n"])])
        pivot = group.pivot_table(index=["recording", "impl"], columns="n_cap", values="cell", aggfunc="first", sort=False)
        index, header = ("recording", "impl"), [f"cap {int(c)}" for c in pivot.columns]
    else:
        pivot = group.pivot_table(index="impl", columns="n", values="median_us", aggfunc="first")
        pivot = pivot.apply(lambda column: column.map(lambda v: "" if pd.isna(v) else f"{v:,.1f}"))
        index, header = ("impl",), [str(int(n)) for n in pivot.columns]
    tables = []
    for start in range(0, len(header), SUMMARY_COLUMNS):
        table = Table(title=title)
        for name in index:
            table.add_column(name, no_wrap=True)
        for name in header[start:start + SUMMARY_COLUMNS]:
            table.add_column(name, justify="right", no_wrap=True)
        for labels, row in pivot.iloc[:, start:start + SUMMARY_COLUMNS].iterrows():
            labels = labels if isinstance(labels, tuple) else (labels,)
            table.add_row(*map(str, labels), *("" if pd.isna(v) else str(v) for v in row))
        tables.append(table)
    return tables


def _print_summary(out: Path, counts: dict) -> None:
    from .results import read_results

    frame = read_results(out)
    ok = frame[frame.status == "ok"]
    varying = {c for c in SUMMARY_BLOCKS if ok[c].nunique(dropna=False) > 1}
    for values, group in ok.groupby(list(SUMMARY_BLOCKS), sort=False, dropna=False):
        for table in _summary_tables(group, _summary_title(dict(zip(SUMMARY_BLOCKS, values)), varying)):
            console.print(table)
    written = counts["ok"] + counts["error"] + counts["skipped"]
    noisy = counts.get("noisy_rows", [])
    if noisy:
        console.print(f"[yellow]warning[/]: {len(noisy)} noisy row(s); their times are less certain (a busy machine? "
                      "fewer --threads, --repeat-noisy K or a longer --min-run-time):")
        for text in noisy[:20]:
            console.print(f"  {text}")
        if len(noisy) > 20:
            console.print(f"  ... and {len(noisy) - 20} more (the noisy and noise columns mark them)")
    host = counts.get("host") or {}
    if host.get("slow"):
        waited = f"; {host['waited_s']:g} s went to waiting for its usual speed (--host-wait)" if host.get("waited_s") else ""
        console.print(f"note: the host ran slow (its gauge over {host['slow_limit']:g}x its usual speed) in {host['slow']} of "
                      f"{host['measurements']} measurements; those were left out of their rows' medians, and rows "
                      f"left with fewer than half their rounds are flagged noisy{waited}")
    errors = counts.get("error_rows", [])
    if errors:
        console.print(f"[red]errors[/]: {len(errors)} row(s):")
        for text in errors[:20]:
            console.print(f"  {text}")
        if len(errors) > 20:
            console.print(f"  ... and {len(errors) - 20} more (the error column holds each message)")
    console.print(
        f"wrote {written} rows to {out}" + (f" (now {len(frame)} rows)" if len(frame) != written else "")
        + f": {counts['ok']} ok, {counts['error']} error, {counts['skipped']} skipped, {counts['noisy']} noisy"
    )


# --- paper exports: `nmsbench plot` and `nmsbench export` (the dashboard's builders) ---

def _selected_results(paths, scenarios, impls, devices, timers, baseline=None, benchmarks=(), *, wants_baseline=False,
                      default_benchmark=None, apply_devices=True):
    """Load RESULTS CSVs and keep the asked-for rows: (rows, baseline); every problem is
    one clear message. Rows of `nmsbench pipeline` (benchmark=pipeline) are left out
    unless asked for (or ``default_benchmark`` is pipeline), or unless the files hold
    nothing else. With ``wants_baseline`` and no ``baseline``, the baseline is numpy (the
    reference pipeline) for pipeline rows and torchvision for sweeps (for a sweep of one
    family without it, the family's exact CPU reference: soft_nms, ...). ``apply_devices``
    False checks --device but keeps every device's rows (the caller picks them later)."""
    from . import tables

    try:
        frame = tables.load_results(paths)
    except ValueError as e:  # not a results file: bad input, exit status 2 like every other
        raise click.BadParameter(str(e), param_hint="RESULTS") from None
    files = ", ".join(Path(p).name for p in paths)
    checks = (("--benchmark", "benchmark", benchmarks), ("--scenario", "scenario", scenarios), ("--impl", "impl", impls),
              ("--device", "device", devices), ("--timer", "timer", timers))
    for hint, column, values in checks:
        known = tables.options(frame, column)
        unknown = [v for v in _split(values) if v not in known]
        if unknown:
            raise click.BadParameter(f"{', '.join(unknown)} not in {files}; it has: {', '.join(map(str, known)) or 'nothing'}",
                                     param_hint=hint)
    if baseline is not None and baseline not in tables.options(frame, "impl"):
        raise click.BadParameter(f"{baseline} not in {files}; it has: {', '.join(tables.options(frame, 'impl'))}",
                                 param_hint="--baseline")
    have = tables.options(frame, "benchmark")
    if default_benchmark and default_benchmark not in have:
        raise NothingToShow(f"no {default_benchmark} rows in {files} (benchmark: {', '.join(have) or 'none'}); "
                                   f"`nmsbench {default_benchmark} --out results/<name>.csv` makes them")
    benchmark = _split(benchmarks) or ([default_benchmark] if default_benchmark else ["nms"] if "nms" in have else [])
    frame = tables.select(frame, benchmark=benchmark)
    rows = tables.select(frame, scenario=_split(scenarios), device=_split(devices) if apply_devices else [], timer=_split(timers))
    _check_measured(rows, files)
    if wants_baseline and baseline is None and set(rows["benchmark"]) != {"accuracy"}:  # accuracy tables have no baseline
        baseline = tables.PIPELINE_BASELINE if set(rows["benchmark"]) == {"pipeline"} else tables.DEFAULT_BASELINE
        have_impls = tables.options(frame, "impl")
        families = set(tables.ok_rows(rows)["family"]) if "family" in rows.columns else set()
        if baseline not in have_impls and len(families) == 1:
            # one family without torchvision (a Soft-NMS run): its exact CPU reference, where the files have it
            from .agreement import FAMILY_REFERENCES

            baseline = FAMILY_REFERENCES.get(next(iter(families)), baseline)
        if baseline not in have_impls:
            raise click.BadParameter(f"{baseline} not in {files}; it has: {', '.join(have_impls)}; "
                                     "name one with --baseline", param_hint="--baseline")
    _check_measured(rows, files, baseline)
    return rows, baseline


def _check_measured(rows, files: str, baseline: str | None = None) -> None:
    """A clear message where the selection (or its baseline) measured nothing."""
    from . import tables

    if tables.ok_rows(rows).empty:
        counts = ", ".join(f"{n} {s}" for s, n in rows["status"].value_counts().items()) or "no rows"
        raise NothingToShow(f"no measured (status ok) rows in {files} match the selection ({counts})")
    if baseline is not None and tables.ok_rows(rows[rows["impl"] == baseline]).empty:
        raise NothingToShow(f"the baseline {baseline} has no measured rows in the selection; pick another with --baseline")


def _restrict_impls(rows, impls):
    """Rows of the chosen implementations (speedups are computed before this, on all rows)."""
    chosen = _split(impls)
    return rows[rows["impl"].isin(chosen)] if chosen else rows


SELECTION_OPTIONS = [
    click.option("--scenario", "scenarios", multiple=True, help="Scenarios to show (repeat or comma-separate). Default: all in the file."),
    click.option("--impl", "impls", multiple=True, help="Implementations to show (repeat or comma-separate). Default: all in the file."),
    click.option("--device", "devices", multiple=True, help="cpu and/or cuda. Default: all in the file."),
    click.option("--timer", "timers", multiple=True, default=("wall",), show_default=True, help="wall and/or device rows."),
    click.option("--baseline", help="Implementation (or pipeline) the speedups are relative to. "
                                    "Default: torchvision; numpy, the reference, for pipeline rows."),
    click.option("--benchmark", "benchmarks", multiple=True,
                 help="nms (`nmsbench sweep` rows), pipeline (`nmsbench pipeline` rows) or accuracy (`nmsbench accuracy` rows). "
                      "Default: nms where the files have any."),
    click.option("--stage", "stages", multiple=True,
                 help="Pipeline rows: decode, nms and/or total (end to end; the default)."),
]


def _selection_options(fn):
    for option in reversed(SELECTION_OPTIONS):
        fn = option(fn)
    return fn


METRIC_OPTION = click.option(
    "--metric", type=click.Choice(list(ACCURACY_METRICS)),
    help="Accuracy rows: the metric against time (plot) or whose Pareto front the table marks (export): COCO AP@[.5:.95] "
         "(ap, the default), AP50, AP75, AR@100 or AR@100 over crowded images.")


PLOT_KINDS = ("curves", "time", "speedup", "timers", "memory", "overlap", "pipeline", "pipeline-stages", "pipeline-devices",
              "pareto")
PIPELINE_KINDS = ("pipeline", "pipeline-stages", "pipeline-devices")


def _stages(stages, *, one: bool = False) -> list[str]:
    from .tables import PIPELINE_STAGES

    chosen = _split(stages)
    bad = [s for s in chosen if s not in PIPELINE_STAGES]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: choose from {', '.join(PIPELINE_STAGES)}", param_hint="--stage")
    if one and len(chosen) > 1:
        raise click.BadParameter("--kind pipeline draws one stage; --kind pipeline-stages draws them all", param_hint="--stage")
    return chosen or ["total"]


@main.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Figure file: .pdf, .png or .svg.")
@_selection_options
@click.option("--kind", type=click.Choice(PLOT_KINDS), default="curves", show_default=True,
              help="curves: time and speedup vs N per scenario; time; speedup; timers: wall vs device; memory; overlap: time vs realized overlap at --at-n. "
                   "Pipeline rows: pipeline: time per image vs batch size (--stage, default total); pipeline-stages: what decode and nms cost; "
                   "pipeline-devices: CPU time / GPU time. Accuracy rows: pareto: --metric against time per image, the Pareto front drawn.")
@METRIC_OPTION
@click.option("--at-n", type=click.IntRange(min=1), help="Box count for --kind overlap. Default: the largest in the selection.")
@click.option("--width", type=click.IntRange(min=200), help="Width in CSS pixels (PDF/SVG scale with it). Default: by panels.")
@click.option("--height", type=click.IntRange(min=200), help="Height in CSS pixels. Default: by panels.")
@click.option("--scale", default=2.0, show_default=True, type=click.FloatRange(min=0.5, max=8), help="PNG pixel density.")
def plot(results, out, scenarios, impls, devices, timers, baseline, benchmarks, stages, kind, metric, at_n, width, height, scale):
    """Draw the dashboard's curves from RESULTS CSV(s) into a print-styled PDF, PNG or SVG.

    \b
    nmsbench plot results/sweep-20261129-h200-host-cpu.csv -o fig.pdf
    nmsbench plot run.csv -o clustered.png --scenario clustered --impl torchvision,allpairs
    nmsbench plot gpu.csv cpu.csv -o speed.svg --kind speedup --baseline torchvision
    nmsbench plot run.csv -o overlap.pdf --kind overlap --at-n 1024
    nmsbench plot pipeline.csv -o per-image.pdf --kind pipeline --scenario real
    nmsbench plot pipeline.csv -o stages.png --kind pipeline-stages
    nmsbench plot accuracy.csv -o pareto.pdf --kind pareto --metric ar100_crowded --scenario scenes-crowd
    """
    from . import plots, tables

    if out.suffix.lower() not in plots.IMAGE_FORMATS:
        raise click.BadParameter(f"{out.name}: choose a .pdf, .png or .svg file name", param_hint="--out")
    if stages and kind not in PIPELINE_KINDS:
        raise click.BadParameter(f"--stage is for the pipeline kinds ({', '.join(PIPELINE_KINDS)})", param_hint="--stage")
    if metric and kind != "pareto":
        raise click.BadParameter("--metric is for --kind pareto (accuracy rows)", param_hint="--metric")
    if kind == "pareto":
        _plot_pareto(results, out, scenarios, impls, devices, timers, baseline, benchmarks, stages, metric or "ap", width,
                     height, scale)
        return
    if kind in PIPELINE_KINDS:
        _plot_pipeline(results, out, scenarios, impls, devices, timers, benchmarks, stages, kind, width, height, scale)
        return
    rows, baseline = _selected_results(results, scenarios, impls, devices, timers, baseline if kind in ("curves", "speedup") else None,
                                       benchmarks, wants_baseline=kind in ("curves", "speedup"))
    colors = plots.color_map(tables.options(rows, "impl"))
    show = _split(impls) or None
    shown = _restrict_impls(rows, impls)  # speedups need the baseline's rows even when it is not shown
    if tables.ok_rows(shown).empty:
        raise NothingToShow("no measured rows of the chosen implementations in the selection")
    if kind == "overlap" and at_n is not None and at_n not in set(tables.ok_rows(shown)["n"]):
        raise click.BadParameter(f"no measured rows at N = {at_n}; the selection has N = "
                                 f"{', '.join(str(int(n)) for n in tables.options(tables.ok_rows(shown), 'n'))}", param_hint="--at-n")
    panels = max(tables.ok_rows(shown)["scenario"].nunique(), 1)
    if kind == "curves":
        fig, size = plots.curves_for_print(rows, baseline, show=show, colors=colors), (max(360 * panels, 700), 720)
    elif kind == "time":
        fig, size = plots.time_vs_n(shown, colors=colors), (1100, None)
    elif kind == "speedup":
        fig, size = plots.speedup_vs_n(rows, baseline, show=show, colors=colors), (1100, None)
    elif kind == "timers":
        try:
            both = _restrict_impls(_selected_results(results, scenarios, impls, devices, ("wall", "device", "events"), None,
                                                     benchmarks)[0], impls)
        except click.BadParameter:  # the files have no device timer at all
            both = shown.iloc[0:0]
        fig, size = plots.wall_vs_device(both, colors=colors), (1100, None)
    elif kind == "memory":
        fig, size = plots.memory_vs_n(shown, colors=colors), (1100, None)
    else:
        fig, size = plots.time_vs_overlap(shown, at_n, colors=colors), (900, 560)
    if fig is None:
        raise NothingToShow({
            "timers": "the selection has no GPU-timer rows to plot (CUDA runs record them with --timer device or events)",
            "memory": "the selection has no peak-memory values to plot (CUDA runs record them)",
        }[kind])
    titles = {"time": "Median time vs N (band: median ± IQR/2)", "speedup": f"Speedup vs {baseline} (above 1 = faster)",
              "timers": "Wall time (solid) vs GPU time (dashed: kernels, copies and sets; dotted: CUDA events)",
              "memory": "Peak device memory per call",
              "overlap": f"Time vs realized overlap at N = {(fig.layout.meta or {}).get('n', '')}"}
    if kind in titles:
        fig.update_layout(title_text=titles[kind])
    _write_print(fig, out, width or size[0], height or size[1] or int(fig.layout.height or 600) + 60, scale)
    console.print(f"wrote {out} ({out.stat().st_size:,} bytes): {kind}, {tables.ok_rows(shown)['impl'].nunique()} implementations, "
                  f"{panels} scenario(s)")


def _write_print(fig, out: Path, width: int, height: int, scale: float) -> None:
    from . import plots

    fig = plots.style_for_print(fig, width=width, height=height)
    try:
        plots.write_figure(fig, out, width=width, height=height, scale=scale)
    except Exception as e:  # kaleido needs Chrome/Chromium; say so instead of a traceback
        raise click.ClickException(
            f"could not write {out} ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else 'no message'}); "
            "static export uses kaleido, which needs Chromium (Debian: apt-get install chromium)") from None


def _plot_pipeline(results, out, scenarios, impls, devices, timers, benchmarks, stages, kind, width, height, scale):
    """`nmsbench plot --kind pipeline*`: the dashboard's Pipeline tab figures, for print."""
    from . import plots, tables

    if _split(benchmarks) not in ([], ["pipeline"]):
        raise click.BadParameter(f"--kind {kind} draws `nmsbench pipeline` rows; leave --benchmark out", param_hint="--benchmark")
    stage = _stages(stages, one=True)[0]
    rows, _ = _selected_results(results, scenarios, impls, devices, timers, None, (), default_benchmark="pipeline")
    rows = _restrict_impls(rows, impls)
    measured = tables.per_image(rows)
    if measured.empty:
        raise NothingToShow("no measured rows of the chosen pipelines in the selection")
    colors = plots.pipeline_color_map(tables.options(measured, "impl"))
    if kind == "pipeline":
        if measured[measured["stage"] == stage].empty:
            raise click.BadParameter(f"no measured {stage} rows; the selection has stages {', '.join(tables.options(measured, 'stage'))}",
                                     param_hint="--stage")
        fig = plots.pipeline_time_per_image(rows, stage=stage, colors=colors)
        fig.update_layout(title_text=f"Time per image vs batch size ({stage}; one call on the batch / batch size)")
    elif kind == "pipeline-stages":
        fig = plots.pipeline_stage_bars(rows)
        fig.update_layout(title_text="Time per image by stage (bars: decode and nms timed alone; mark: total, end to end)")
    else:
        fig = plots.pipeline_cpu_vs_gpu(rows, colors=colors)
        if fig is None:
            raise NothingToShow("the selection has no pipeline with wall-timer total rows on both cpu and cuda of one "
                                       "machine; `nmsbench pipeline --device cpu,cuda` on a GPU machine makes them")
        fig.update_layout(title_text="CPU time / GPU time per image, end to end (above 1: the GPU is faster)")
    _write_print(fig, out, width or 1100, height or int(fig.layout.height or 600) + 80, scale)
    console.print(f"wrote {out} ({out.stat().st_size:,} bytes): {kind}, {measured['impl'].nunique()} pipelines, "
                  f"{measured['scenario'].nunique()} source(s), batch sizes {', '.join(str(int(b)) for b in tables.options(measured, 'batch'))}")


def _refuse_unused(what: str, **given) -> None:
    """A usage error for an option (``--name``) that ``what`` has no use for, where given."""
    for name, value in given.items():
        if value:
            raise click.BadParameter(f"not used by {what}", param_hint=f"--{name}")


def _plot_pareto(results, out, scenarios, impls, devices, timers, baseline, benchmarks, stages, metric, width, height, scale):
    """`nmsbench plot --kind pareto`: the dashboard's Accuracy tab figure, for print."""
    from . import plots, tables

    _refuse_unused("--kind pareto", baseline=baseline, stage=stages)
    if _split(benchmarks) not in ([], ["accuracy"]):
        raise click.BadParameter("--kind pareto draws `nmsbench accuracy` rows; leave --benchmark out", param_hint="--benchmark")
    rows, _ = _selected_results(results, scenarios, impls, devices, timers, None, (), default_benchmark="accuracy")
    rows = _restrict_impls(rows, impls)
    label = tables.ACCURACY_LONG_NAMES[metric]
    fig = plots.pareto(rows, metric, colors=plots.color_map(tables.options(rows, "impl")))
    meta = fig.layout.meta or {}
    if meta.get("empty"):
        raise NothingToShow(meta["message"])
    fig.update_layout(title_text=f"{label} vs NMS time per image (dashed: the Pareto front, ringed: its settings)")
    panels = sum(1 for name in fig.layout if name.startswith("xaxis"))
    _write_print(fig, out, width or (1000 if panels == 1 else 1400), height or int(fig.layout.height or 600) + 120, scale)
    console.print(f"wrote {out} ({out.stat().st_size:,} bytes): pareto of {label}, {meta['settings']} settings, "
                  f"{meta['front']} on the front, {panels} panel(s)")
    if meta["without_metric"]:
        where = f" ({', '.join(meta['without_metric_in'])})" if meta["without_metric_in"] else ""
        console.print(f"not drawn: {meta['without_metric']} settings without a value of {label}{where}")
    if meta["not_measured"]:
        console.print(f"not drawn: {meta['not_measured']} error or skipped rows")


@main.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["markdown", "latex", "csv"]), default="markdown", show_default=True)
@_selection_options
@METRIC_OPTION
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the table here instead of to stdout.")
def export(results, fmt, scenarios, impls, devices, timers, baseline, benchmarks, stages, metric, out):
    """A compact table (N x implementation: median µs and speedup vs --baseline) from RESULTS CSV(s).

    \b
    nmsbench export results/sweep-20261129-h200-host-cpu.csv --scenario clustered
    nmsbench export run.csv --format latex --impl torchvision,allpairs -o table.tex
    nmsbench export run.csv --format csv --device cuda --timer device
    nmsbench export pipeline.csv --benchmark pipeline --stage decode,nms,total
    nmsbench export accuracy.csv --benchmark accuracy --format latex --scenario scenes-crowd

    Rows are grouped by whatever else varies in the selection (device, scenario, ...).
    Pipeline rows give a pipeline x batch size table of µs per image (one call on the
    whole batch / batch size) and the speedup vs --baseline (default numpy, the CPU
    reference: cuda rows compare with it on the CPU of the same machine).
    Accuracy rows give one row per implementation, parameters and IoU threshold: COCO
    AP, AP50, AP75, AR@100, AR@100 over crowded images, µs per image and whether it is
    on the Pareto front of --metric (default ap) against time.
    """
    from . import tables

    # every device's rows first: a cuda pipeline row is compared with the numpy reference on the CPU
    rows, baseline = _selected_results(results, scenarios, impls, devices, timers, baseline, benchmarks, wants_baseline=True,
                                       apply_devices=False)
    if "accuracy" in set(rows["benchmark"]):
        _export_accuracy(rows, fmt, impls, devices, baseline, stages, metric, out)
        return
    if metric:
        raise click.BadParameter("--metric is for accuracy rows (--benchmark accuracy)", param_hint="--metric")
    if set(rows["benchmark"]) == {"pipeline"}:
        try:
            table = tables.pipeline_table(rows, baseline, impls=_split(impls) or None, stages=_stages(stages),
                                          devices=_split(devices) or None)
        except ValueError:
            raise NothingToShow("no measured rows of the chosen pipelines, devices and stages in the selection") from None
        _write_or_echo(tables.render_pipeline_table(table, fmt), out,
                       f"{table['impl'].nunique()} pipelines x {table['batch'].nunique()} batch sizes")
        return
    if stages:
        raise click.BadParameter("--stage picks stages of pipeline rows; this selection has sweep rows", param_hint="--stage")
    rows = tables.select(rows, device=_split(devices))
    _check_measured(rows, ", ".join(Path(p).name for p in results), baseline)
    table = tables.speedup_table(rows, baseline, impls=_split(impls) or None)
    if table.empty:
        raise NothingToShow("no measured rows of the chosen implementations in the selection")
    _write_or_echo(tables.render_table(table, fmt), out,
                   f"{table['n'].nunique()} box counts x {table['impl'].nunique()} implementations")


def _export_accuracy(rows, fmt, impls, devices, baseline, stages, metric, out) -> None:
    """`nmsbench export` of accuracy rows: one row per group and setting (tables.accuracy_points)."""
    from . import tables

    if set(rows["benchmark"]) != {"accuracy"}:
        raise click.BadParameter("accuracy rows make a table of their own: --benchmark accuracy", param_hint="--benchmark")
    _refuse_unused("an accuracy table", baseline=baseline, stage=stages)
    rows = _restrict_impls(tables.select(rows, device=_split(devices)), impls)
    points = tables.accuracy_points(rows, metric or "ap")
    if points.empty:
        raise NothingToShow("no measured accuracy rows of the chosen implementations and devices in the selection")
    _write_or_echo(tables.render_accuracy_table(points, fmt), out,
                   f"{len(points)} settings of {points['impl'].nunique()} implementations, {int(points['front'].sum())} on the front")


def _write_or_echo(text: str, out: Path | None, summary: str) -> None:
    """An exported table to ``out`` (saying what it holds) or to stdout."""
    if out:
        out.write_text(text)
        console.print(f"wrote {out}: {summary}")
    else:
        click.echo(text, nl=False)


# --- subcommands defined in their own modules, registered here (none of them imports this one)

from .accuracy_cli import accuracy_command  # noqa: E402
from .conformance_cli import conformance_command  # noqa: E402
from .diff_cli import diff_command  # noqa: E402
from .pipeline_cli import pipeline_command  # noqa: E402

main.add_command(pipeline_command)
main.add_command(accuracy_command)
main.add_command(diff_command)
main.add_command(conformance_command)
main.restore_signals = _previous  # given back when the command starts

if __name__ == "__main__":
    main()
