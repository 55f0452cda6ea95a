"""``nmsbench compare BASE NEW``: a verdict per case of two runs (:mod:`nmsbench.compare`).

Exit status 1 when a row has a verdict named by ``--fail-on`` (for CI), 2 on bad input.
``nmsbench.cli`` adds this command to its group.
"""

from __future__ import annotations

import sys

import click

from . import compare

COLOURS = {"changed": "bold red", "slower": "red", "faster": "green", "uncertain": "yellow", "not measured": "dim",
           "only in base": "magenta", "only in new": "cyan", "same": ""}


def _verdicts(ctx, param, value: str) -> set[str]:
    chosen = {v.strip() for v in value.split(",") if v.strip()}
    unknown = sorted(chosen - set(compare.VERDICTS))
    if unknown:
        raise click.BadParameter(f"unknown verdict {', '.join(unknown)}; known: {', '.join(compare.VERDICTS)}")
    return chosen


@click.command("compare")
@click.argument("base", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
@click.option("--threshold", default=compare.DEFAULT_THRESHOLD, show_default=True, type=click.FloatRange(0, 10),
              help="Smallest change called faster or slower: 0.05 = 5 % (ratio beyond 1.05 or 1/1.05).")
@click.option("--alpha", default=compare.DEFAULT_ALPHA, show_default=True, type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Significance level of the Mann–Whitney U test on the block times (the interval is at 1 - alpha).")
@click.option("--format", "fmt", default="table", show_default=True, type=click.Choice(["table", "markdown", "csv"]),
              help="table: a terminal table; markdown or csv: to stdout, for a file or a pull request.")
@click.option("--fail-on", default="", callback=_verdicts, metavar="VERDICTS",
              help=f"Exit 1 when a row has one of these verdicts (comma-separated: {', '.join(compare.VERDICTS)}).")
def compare_command(base: str, new: str, threshold: float, alpha: float, fmt: str, fail_on: set[str]):
    """Compare two results files case by case: faster, slower, same or uncertain (from the raw
    samples: a Mann–Whitney U test and a minimum effect), changed (status or agreement: kept,
    jaccard, ...), only in base / only in new. Rows pair by case key, on any machine or commit.
    The table ends with how closely the runs agree per timer: the median and 90th percentile of
    |NEW / BASE - 1| (two runs of one command: the machine's repeatability).

    \b
    nmsbench compare results/h200-host-cpu.csv run.csv --fail-on slower,changed
    """
    try:
        result = compare.compare_files(base, new, threshold=threshold, alpha=alpha)
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    if fmt == "csv":
        click.echo(result.to_csv(index=False), nl=False)
    elif fmt == "markdown":
        click.echo(compare.markdown(result), nl=False)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=", ".join(f"{n} {v}" for v, n in compare.counts(result).items()), title_justify="left")
        shown = compare.display(result)
        for column in shown.columns:
            table.add_column(column, justify="right" if column in ("n", "base µs", "new µs", "ratio", "p") else "left")
        for row in shown.itertuples(index=False):
            table.add_row(*map(str, row), style=COLOURS.get(row.verdict, ""))
        Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200).print(table)
        click.echo(f"NEW / BASE ratio (above 1: slower); threshold ±{threshold:.0%}, alpha {alpha:g}")
        line = compare.agreement_line(result)
        if line:
            click.echo(line)
    failed = sorted(set(result["verdict"]) & fail_on)
    if failed:
        click.echo(f"failing: {', '.join(failed)} rows (--fail-on)", err=True)
        sys.exit(1)
