"""Options that ``nmsbench sweep`` and ``nmsbench pipeline`` share: stopping and resuming.

A module of its own so that both command modules can import it at import time (the
command modules import each other's helpers only when a command runs)."""

from __future__ import annotations

from pathlib import Path

import click


def resume_option(what_is_a_row: str):
    """``--resume FILE``; ``what_is_a_row`` lists the columns that identify a row."""
    return click.option(
        "--resume", "resume", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
        help=f"Continue a stopped run: append to FILE the rows of this grid it lacks, never repeating one (a row is "
             f"{what_is_a_row}). Refused when FILE has another schema or other benchmarks' rows, came from another "
             "machine, or was timed with another --min-run-time or --threads. Give the same options as the stopped run.")


def case_timeout_option(what_is_a_case: str):
    """``--case-timeout SECONDS``; ``what_is_a_case`` says what one case covers."""
    return click.option(
        "--case-timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
        help=f"Stop a case ({what_is_a_case}) that runs longer than this: its rows become status=error rows naming "
             "the timeout, and the run goes on. Uses SIGALRM: stops Python-level hangs, and slow calls once they "
             "return; a native call that never returns (numba nopython, a hung CUDA kernel) cannot be stopped: kill "
             "the run and --resume it without what hangs.")


def check_resume_options(resume: Path | None, out: Path | None, force: bool) -> None:
    """--resume FILE writes to FILE: refuse another --out, and --force."""
    if resume and out and Path(out) != resume:
        raise click.BadParameter("--resume FILE writes to FILE; leave --out out", param_hint="--resume")
    if resume and force:
        raise click.BadParameter("--resume appends to FILE; --force (overwrite) contradicts it", param_hint="--force")
