"""Raw samples: each timed row's round medians and block times, beside its results CSV.

``x.csv`` gets ``x.samples.jsonl``: one JSON line per timed row, written (by
:class:`nmsbench.results.ResultWriter`) just before the row itself, holding the row's case
key, its machine and commit, and the numbers its median and IQR were computed from, so that
a later comparison can test two runs' samples rather than two medians. A line without its
CSV row (a run stopped between the two writes) is ignored; a resumed run appends, and the
line written last for a case is the one read.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..keys import KEY_COLUMNS, case_key
from ..keys import key_value as _key_value


@dataclass(frozen=True)
class Samples:
    """One row's raw timing: the median of each round (µs) and each round's block times (µs)."""

    round_medians_us: tuple[float, ...]
    blocks_us: tuple[tuple[float, ...], ...]

    @classmethod
    def from_blocks(cls, rounds) -> "Samples":
        """From the rounds (``timing.Blocks``) a row's median was computed from."""
        blocks = tuple(tuple(float(v) for v in r.times_us) for r in rounds)
        return cls(tuple(float(np.median(b)) for b in blocks), blocks)

    def pooled(self) -> np.ndarray:
        """Every block time of every round."""
        return np.array([v for block in self.blocks_us for v in block], dtype=float)

    def record(self, row: dict, env: dict) -> dict:
        """The JSON line of ``row`` (its case key as the CSV's text, machine and commit)."""
        return {"key": {column: _key_value(row.get(column, "")) for column in KEY_COLUMNS},
                "machine": str(row.get("machine", env.get("machine", ""))),
                "git_commit": str(row.get("git_commit", env.get("git_commit", ""))),
                "round_medians_us": list(self.round_medians_us), "blocks_us": [list(b) for b in self.blocks_us]}


def samples_path(csv_path) -> Path:
    """``x.csv`` -> ``x.samples.jsonl``."""
    path = Path(csv_path)
    return path.with_name(f"{path.stem}.samples.jsonl")


def _runs_of(csv_path: Path) -> dict[tuple, set]:
    """case key -> {(machine, git_commit)} of the CSV's ok rows (complete lines only)."""
    data = csv_path.read_bytes()
    data = data[:data.rfind(b"\n") + 1]
    runs: dict[tuple, set] = {}
    for row in csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline="")):
        if row.get("status") == "ok":
            runs.setdefault(case_key(row), set()).add((row.get("machine", ""), row.get("git_commit", "")))
    return runs


def read_samples(csv_path) -> dict[tuple, Samples]:
    """The samples of ``csv_path``'s timed rows, keyed by :func:`~nmsbench.results.case_key`.
    Missing file: {}. A cut last line is ignored, as are lines of rows the CSV lacks (or
    holds from another machine or commit); the last line of a case wins. Any other damage is
    a ValueError naming the line."""
    csv_path = Path(csv_path)
    path = samples_path(csv_path)
    if not path.is_file() or not csv_path.is_file():
        return {}
    runs = _runs_of(csv_path)
    lines = path.read_bytes().split(b"\n")
    found: dict[tuple, Samples] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            key = tuple(record["key"].get(column, "") for column in KEY_COLUMNS)
            samples = Samples(tuple(float(v) for v in record["round_medians_us"]),
                              tuple(tuple(float(v) for v in b) for b in record["blocks_us"]))
            run = (record.get("machine", ""), record.get("git_commit", ""))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            if number == len(lines):  # no line end: a run stopped while writing it
                continue
            raise ValueError(f"{path}:{number}: not a samples line ({type(e).__name__}: {e})") from None
        if run in runs.get(key, ()):
            found[key] = samples
    return found


class SamplesWriter:
    """Appends sample lines to ``samples_path(csv_path)``, one ``write`` each. A new run
    (``append`` False) empties the file first; an appending one cuts a partial last line,
    so its first line does not join a fragment. The results file's lock covers it."""

    def __init__(self, csv_path, env: dict, append: bool):
        self.path, self.env, self._file = samples_path(csv_path), env, None
        if not append:
            self.path.unlink(missing_ok=True)

    def write(self, samples: Samples, row: dict) -> None:
        if self._file is None:
            self._file = open(self.path, "ab", buffering=0)
            size = self._file.seek(0, io.SEEK_END)
            if size:
                with open(self.path, "rb") as f:
                    f.seek(max(0, size - 1))
                    if f.read(1) != b"\n":  # a cut last line: drop it
                        f.seek(0)
                        self._file.truncate(f.read().rfind(b"\n") + 1)
        data = memoryview((json.dumps(samples.record(row, self.env)) + "\n").encode())
        while data:
            data = data[self._file.write(data):]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
