"""What identifies a case in a results file: its key columns, and the normalized key that
a row dict from a benchmark and the same row read back from the CSV share."""

from __future__ import annotations

import math

# What identifies a case: a resumed sweep runs the cases whose key is not in the file yet.
# Recorded scenarios (real) give the N they used in ``n`` and the requested cap in ``n_cap``;
# pipelines add batch and stage. Measurement settings (threads, --min-run-time) and the
# environment are not part of it: `sweep --resume` checks those separately.
KEY_COLUMNS = ("benchmark", "impl", "device", "dtype", "timer", "scenario", "canvas", "image", "input_size", "overlap",
               "classes", "n", "n_cap", "iou_threshold", "seed", "params", "batch", "stage")
# a file is resumed only on the machine that wrote it
MACHINE_COLUMNS = ("machine", "cpu", "gpu")
# one run's measurement of a case: a file may hold a case once per machine and commit
# (concatenated runs, a case re-measured at another commit), never twice for one
RUN_COLUMNS = (*MACHINE_COLUMNS, "git_commit")


def key_value(value) -> str:
    """One key column's value as text: numbers by their float repr, blanks and NaN as ""."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return str(value)
    text = str(value).strip()
    try:
        return repr(float(text)) if text else ""
    except ValueError:
        return text


def case_key(row) -> tuple:
    """The case a row measures (``KEY_COLUMNS``), normalized so that a row dict from the
    runner and the same row read back from the CSV (as text) give equal keys."""
    return tuple(key_value(row.get(column, "")) for column in KEY_COLUMNS)


# a grid's field that lists the values a key column may take (the first a grid has)
GRID_FIELDS = {"impl": ("impls",), "device": ("devices",), "dtype": ("dtypes",), "timer": ("timers",),
               "scenario": ("scenarios", "sources"), "canvas": ("canvases",), "n": ("ns",), "iou_threshold": ("ious",),
               "batch": ("batches",), "stage": ("stages",)}


def keys_of_grid(keys, grid) -> int:
    """How many of ``keys`` (a resumed file's) are cases ``grid`` asks for: each key column
    whose values the grid lists must hold one of them (a recorded scenario's requested N is
    its ``n_cap``). A file may hold other grids' cases too; they do not count."""
    index = {column: i for i, column in enumerate(KEY_COLUMNS)}
    checks = []
    for column, fields in GRID_FIELDS.items():
        values = next((getattr(grid, f) for f in fields if isinstance(getattr(grid, f, None), (list, tuple))), None)
        if values:
            checks.append((column, index[column], {key_value(v) for v in values}))
    cap = index["n_cap"]

    def asked(key) -> bool:
        return all((key[cap] or key[i]) in allowed if column == "n" else key[i] in allowed for column, i, allowed in checks)

    return sum(1 for key in keys if asked(key))
