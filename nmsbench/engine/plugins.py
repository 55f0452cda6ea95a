"""Benchmarks as plug-ins: each module declares its axes and how it runs, and registers a
:class:`Benchmark`; the command line makes one command of each.

Adding a benchmark: its module (``AXES``, a grid, ``run``, ``total`` and one
``register_benchmark(...)`` call) and one line in :data:`PLUGIN_MODULES`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from .axes import Axis

# the modules whose import registers a benchmark (the sweep, pipeline, accuracy and diff)
PLUGIN_MODULES = (
    "nmsbench.runner",
    "nmsbench.pipeline_bench",
    "nmsbench.accuracy_bench",
    "nmsbench.differences",
)


@dataclass(frozen=True)
class Benchmark:
    """A plug-in: ``grid`` is a dataclass whose ``validate()`` calls
    ``check_axes(self, axes)`` and the cross-axis checks; ``run(grid, write, on_case=...,
    done=..., between_turns=..., gauge=...)`` writes its rows and returns the counts;
    ``total(grid)`` is how many rows it will write (the progress bar).

    Optional: ``help`` (the command's help text; default: ``run``'s docstring),
    ``describe(row)`` and ``label(row)`` (progress line and warning label of a row),
    ``options`` (extra click decorators of command-only options, e.g. ``--list``) and
    ``prepare(grid, options)`` (checks and work before the run that only a command line
    needs; returns the grid to run, or None when the command is done, e.g. after ``--list``)."""

    name: str
    command: str
    grid: type
    axes: tuple[Axis, ...]
    run: Callable
    total: Callable
    help: str = ""
    describe: Callable[[dict], str] | None = None
    label: Callable[[dict], str] | None = None
    options: tuple = ()
    prepare: Callable | None = None


BENCHMARKS: dict[str, Benchmark] = {}


def register_benchmark(benchmark: Benchmark) -> Benchmark:
    """Add ``benchmark`` under its name (a second one of a name replaces the first: a module
    imported again re-registers)."""
    BENCHMARKS[benchmark.name] = benchmark
    return benchmark


def load_benchmarks() -> dict[str, Benchmark]:
    """Import every plug-in module (registering its benchmark) and return the registry."""
    for module in PLUGIN_MODULES:
        importlib.import_module(module)
    return BENCHMARKS


__all__ = ["BENCHMARKS", "PLUGIN_MODULES", "Benchmark", "load_benchmarks", "register_benchmark"]
