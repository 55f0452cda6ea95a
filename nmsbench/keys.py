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
