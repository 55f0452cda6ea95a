"""``nmsbench conformance``: where NMS implementations disagree with their family's
definition, and the named rule that explains each difference.

Runs :func:`nmsbench.conformance.run` and prints the matrix of implementations x case
families (``--format table``), or writes it as CSV (one row per cell, the dashboard's
Conformance view reads ``*conformance*.csv``) or Markdown. A difference that no rule
explains (``unexplained``) makes the command exit 1, after the output is written.

``nmsbench.cli`` adds this command to its group.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

FORMATS = ("table", "csv", "markdown")


def _devices(values: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(devices to run, notes): cuda asked for without a CUDA device is a usage error (exit 2)."""
    import torch

    from .engine.axes import split_all as _split

    asked = _split(values) or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    bad = [d for d in asked if d not in ("cpu", "cuda")]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: choose cpu and/or cuda", param_hint="--device")
    from .cli_options import require_cuda_if_asked

    require_cuda_if_asked(asked)  # exit 2, as every command
    return asked, []


@click.command("conformance")
@click.option("--device", "devices", multiple=True,
              help="cpu and/or cuda (repeat or comma-separate). Default: every device here. cuda without a CUDA "
                   "device is refused (exit 2), as by every command.")
@click.option("--impl", "impls", multiple=True,
              help="Implementations to judge (registered names, or batched_nms[float32], batched_nms[float16], "
                   "cv2.NMSBoxesBatched, onnx.NonMaxSuppression). Default: all that run here.")
@click.option("--family", "families", multiple=True, help="Case families to run (default: all; see --list).")
@click.option("--examples", default=None, type=click.IntRange(min=1), metavar="K",
              help="Cases per case family (default 12).")
@click.option("--max-n", "max_n", type=click.IntRange(min=1), metavar="N",
              help="Largest N of the large-N ladder (default: 4,096 on cpu, 262,144 on cuda).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the generated cases.")
@click.option("--format", "fmt", default="table", show_default=True, type=click.Choice(FORMATS),
              help="table: the matrix in the terminal; csv: one row per cell with its example; markdown: for papers.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the output here instead of stdout.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option("--list", "show_list", is_flag=True, help="List the case families and the named rules, and exit.")
def conformance_command(devices, impls, families, examples, max_n, seed, fmt, out, force, show_list):
    """Judge every implementation against its family's definition on edge-case families, and
    name the rule behind each difference (exit 1 where a difference has no rule).

    \b
    nmsbench conformance                                     the matrix, every device here
    nmsbench conformance --device cpu --format csv --out results/runs/cpu-conformance.csv
    nmsbench conformance --impl opencv,ensemble_boxes --family tied_scores,iou_at_threshold --format markdown
    """
    from .engine.axes import split_all as _split
    from .progress import console
    from .conformance_cases import CASE_FAMILIES

    if show_list:
        from .conformance_rules import NUMBERS, RULES

        click.echo("case families:")
        for key, family in CASE_FAMILIES.items():
            click.echo(f"  {key:20s} {family.title}")
        click.echo("rules:")
        for rule in RULES:
            click.echo(f"  R{NUMBERS[rule.key]:<3d}{rule.name} ({rule.who})")
        return
    chosen = _split(families)
    unknown = [k for k in chosen if k not in CASE_FAMILIES]
    if unknown:
        raise click.BadParameter(f"unknown case famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
                                 f"known: {', '.join(CASE_FAMILIES)}", param_hint="--family")
    if out is not None and out.exists() and not force:
        raise click.UsageError(f"{out} exists; give --force to overwrite it, or another --out")
    run_on, notes = _devices(devices)
    for note in notes:
        console.print(note)
    if not run_on:
        console.print("nothing to run: no device left")
        return

    from rich.markup import escape

    from . import conformance, conformance_report
    from .conformance_subjects import EXTRA_NAMES
    from .registry import implementations
    from .results import environment

    names = _split(impls)
    known = set(implementations()) | set(EXTRA_NAMES)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise click.BadParameter(f"unknown implementation(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
                                 param_hint="--impl")
    report = conformance.run(run_on, names or None, chosen or None, examples or conformance.DEFAULT_EXAMPLES, seed,
                             max_n, progress=lambda label: console.print(f"[dim]judging {escape(label)}[/]"))
    if not report.cells:
        reasons = "; ".join(f"{k}: {v}" for k, v in report.skipped.items()) or "none selected"
        raise click.UsageError(f"no implementation ran on {', '.join(run_on)} ({reasons})")
    for label, reason in report.skipped.items():
        console.print(f"[dim]not run: {escape(label)}: {escape(reason)}[/]")
    command = "nmsbench conformance " + shlex.join([
        "--device", ",".join(run_on), *(["--impl", ",".join(names)] if names else []),
        *(["--family", ",".join(chosen)] if chosen else []), "--examples", str(examples or conformance.DEFAULT_EXAMPLES),
        *(["--max-n", str(max_n)] if max_n else []), "--seed", str(seed), "--format", fmt,
        *(["--out", str(out)] if out else [])])
    frame = conformance_report.to_frame(report, environment(), command)
    if fmt == "table":
        _print_table(frame, out)
    else:
        text = conformance_report.to_csv(frame) if fmt == "csv" else conformance_report.to_markdown(frame)
        if out:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
        else:
            click.echo(text, nl=False)
    if out:
        console.print(f"wrote {out}: {conformance_report.summary(frame)}")
    console.print(f"[dim]{report.seconds:.1f} s[/]")
    if report.unexplained:
        cells = ", ".join(f"{c.impl} @ {c.device} ({c.case_family})" for c in report.unexplained)
        console.print(f"[bold red]unexplained differences[/] (no named rule reproduces them): {escape(cells)}")
        click.get_current_context().exit(1)


def _print_table(frame, out: Path | None) -> None:
    from rich.console import Console

    from . import conformance_report
    from .progress import make_console as _console

    table, legend = conformance_report.rich_table(frame)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w") as handle:
            printer = Console(file=handle, width=240, no_color=True, soft_wrap=True)
            printer.print(table)
            for line in legend:
                printer.print(line)
        return
    printer = _console()
    printer.print(table)
    for line in legend:
        printer.print(line)
