"""The command line: one command per benchmark plug-in (``sweep``, ``pipeline``, ``accuracy``,
``diff``; their options come from the plug-ins' axes, nmsbench.cli_options), and ``list``,
``plot``, ``export``, ``conformance``. Only command declarations live here."""

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

import dataclasses  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import click  # noqa: E402
from rich.table import Table  # noqa: E402

from . import paper, summary  # noqa: E402
from .cli_options import benchmark_command, make_grid, reproduce, usage_error  # noqa: E402
from .engine.axes import parse_sizes  # noqa: E402,F401  (nmsbench.cli.parse_sizes, as before)
from .engine.plugins import BENCHMARKS, load_benchmarks  # noqa: E402
from .progress import Terminated, _sigterm_as_interrupt, console, make_console  # noqa: E402
from .registry import describe  # noqa: E402
from .tables import ACCURACY_METRICS  # noqa: E402


class StoppableGroup(click.Group):
    """A click group whose commands stop on Ctrl-C or SIGTERM at any moment with status
    130 or 143 and one line (click's own handling prints ``Aborted!`` and exits 1). A run
    that has opened its results file says more, and how to resume (nmsbench.progress)."""

    restore_signals: dict = {}  # handlers to set back when a command starts

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
        table.add_row(row["name"], row["family"], f"exact ({row['family']})" if row["exact"] else "approx", row["device"],
                      "yes" if row["host_sync"] else "no", "yes" if row["graph_safe"] else "no", available, row["summary"])
    make_console().print(table)


# --- the benchmarks: one command each, its options from its axes (nmsbench.cli_options)

load_benchmarks()
for _benchmark in BENCHMARKS.values():
    if _benchmark.command != "diff":
        main.add_command(benchmark_command(_benchmark))


def _diff(values: dict) -> None:
    from . import differences
    from .results import environment

    benchmark = BENCHMARKS["diff"]
    out, force = values.pop("out"), values.pop("force")
    grid = make_grid(benchmark, values)
    try:
        grid = benchmark.prepare(grid)  # the boxes file, the box count
    except ValueError as e:
        raise usage_error(benchmark, e) from None
    names = grid.names()
    if not names:
        raise click.ClickException(f"no implementation runs on {grid.device} here")
    path = out or differences.default_diff_path()
    if path.exists() and not force:
        raise click.UsageError(f"{path} exists; give --force to overwrite it, or another --out")
    case = benchmark.run(grid)
    env = environment()
    command = reproduce(benchmark, dataclasses.replace(grid, impls=names, overlap=case.overlap), path)
    case.meta = {"command": command, "environment": env, "created": env["timestamp"]}
    if not case.keeps:  # nothing to show: no file, and why
        reasons = "; ".join(f"{name}: {why}" for name, why in {**case.unavailable, **case.errors}.items())
        raise click.ClickException(f"no implementation ran on {grid.device} ({reasons}); nothing written")
    differences.write_case(case, path)
    summary.show_diff(case, names, path)


diff_command = benchmark_command(BENCHMARKS["diff"], callback=_diff, measured=False, help="""Run implementations on one
    regenerated box set and write what each keeps (for the dashboard's suppression differences view).

    \b
    nmsbench diff                                            clustered, N = 512, every CPU implementation
    nmsbench diff --scenario chain --n 256 --impl torchvision,allpairs
    nmsbench diff --device cuda --impl hard_fused,matrix_recompute,torchvision
    nmsbench diff --scenario file --file my-boxes.csv --impl torchvision,soft_nms
    """)
main.add_command(diff_command)


# --- paper exports: figures and tables from results CSVs (nmsbench.paper)

def _refusals(command):
    """A :class:`paper.Refused` as a usage error (exit 2), an export failure as an error (exit 1)."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except paper.Refused as e:
            if e.param_hint is None:
                raise _NothingToShow(str(e)) from None
            raise click.BadParameter(str(e), param_hint=e.param_hint) from None
        except paper.ExportFailed as e:
            raise click.ClickException(str(e)) from None
    return wrapper


class _NothingToShow(click.ClickException):
    exit_code = 2  # bad input, like click's usage errors


def _selection_options(fn):
    for option in reversed([
        click.option("--scenario", "scenarios", multiple=True, help="Scenarios to show (repeat or comma-separate). Default: all."),
        click.option("--impl", "impls", multiple=True, help="Implementations to show (repeat or comma-separate). Default: all."),
        click.option("--device", "devices", multiple=True, help="cpu and/or cuda. Default: all in the file."),
        click.option("--timer", "timers", multiple=True, default=("wall",), show_default=True, help="wall and/or device rows."),
        click.option("--baseline", help="Implementation (or pipeline) the speedups are relative to. "
                                        "Default: torchvision; numpy, the reference, for pipeline rows."),
        click.option("--benchmark", "benchmarks", multiple=True, help="nms (`nmsbench sweep` rows), pipeline or accuracy. "
                                                                     "Default: nms where the files have any."),
        click.option("--stage", "stages", multiple=True, help="Pipeline rows: decode, nms and/or total (the default)."),
        click.option("--metric", type=click.Choice(list(ACCURACY_METRICS)),
                     help="Accuracy rows: the metric against time (plot) or whose Pareto front the table marks (export): "
                          "ap (COCO AP@[.5:.95], the default), ap50, ap75, ar100 or ar100_crowded."),
    ]):
        fn = option(fn)
    return click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))(fn)


@main.command()
@_selection_options
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Figure file: .pdf, .png or .svg.")
@click.option("--kind", type=click.Choice(paper.PLOT_KINDS), default="curves", show_default=True,
              help="curves: time and speedup vs N per scenario; time; speedup; timers: wall vs device; memory; overlap: time "
                   "vs realized overlap at --at-n. Pipeline rows: pipeline: time per image vs batch size (--stage); "
                   "pipeline-stages: what decode and nms cost; pipeline-devices: CPU time / GPU time. Accuracy rows: "
                   "pareto: --metric against time per image, the Pareto front drawn.")
@click.option("--at-n", type=click.IntRange(min=1), help="Box count for --kind overlap. Default: the largest in the selection.")
@click.option("--width", type=click.IntRange(min=200), help="Width in CSS pixels (PDF/SVG scale with it). Default: by panels.")
@click.option("--height", type=click.IntRange(min=200), help="Height in CSS pixels. Default: by panels.")
@click.option("--scale", default=2.0, show_default=True, type=click.FloatRange(min=0.5, max=8), help="PNG pixel density.")
@_refusals
def plot(**options):
    """Draw the dashboard's curves from RESULTS CSV(s) into a print-styled PDF, PNG or SVG.

    \b
    nmsbench plot results/h200-host-cpu.csv -o fig.pdf
    nmsbench plot run.csv -o clustered.png --scenario clustered --impl torchvision,allpairs
    nmsbench plot gpu.csv cpu.csv -o speed.svg --kind speedup --baseline torchvision
    nmsbench plot run.csv -o overlap.pdf --kind overlap --at-n 1024
    nmsbench plot pipeline.csv -o per-image.pdf --kind pipeline --scenario real
    nmsbench plot accuracy.csv -o pareto.pdf --kind pareto --metric ar100_crowded --scenario scenes-crowd
    """
    paper.plot(**options)


@main.command()
@_selection_options
@click.option("--format", "fmt", type=click.Choice(["markdown", "latex", "csv"]), default="markdown", show_default=True)
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the table here instead of to stdout.")
@_refusals
def export(**options):
    """A compact table (N x implementation: median µs and speedup vs --baseline) from RESULTS CSV(s).

    \b
    nmsbench export results/h200-host-cpu.csv --scenario clustered
    nmsbench export run.csv --format latex --impl torchvision,allpairs -o table.tex
    nmsbench export pipeline.csv --benchmark pipeline --stage decode,nms,total
    nmsbench export accuracy.csv --benchmark accuracy --format latex --scenario scenes-crowd

    Rows are grouped by whatever else varies in the selection. Pipeline rows give a pipeline x
    batch size table of µs per image and the speedup vs --baseline (default numpy, the CPU
    reference); accuracy rows one row per implementation, parameters and IoU threshold (COCO
    AP, AP50, AP75, AR@100, AR@100 crowded, µs per image, on the Pareto front of --metric).
    """
    paper.export(**options)


from .conformance_cli import conformance_command  # noqa: E402

main.add_command(conformance_command)
from .compare_cli import compare_command  # noqa: E402

main.add_command(compare_command)
main.restore_signals = _previous  # given back when the command starts

if __name__ == "__main__":
    main()
