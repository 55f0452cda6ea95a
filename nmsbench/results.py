"""The results schema, the run's environment, and the CSV writer.

One tidy row per case (implementation x device x dtype x timer x scenario x overlap x n
x iou_threshold), written as soon as the case finishes. The environment is repeated in
every row, so concatenated CSVs stay self-describing, and also written to a sidecar
``<name>.json`` together with the command that reproduces the run.

Crash safety: each row is one physical line (newlines inside values become spaces),
written with a single unbuffered ``write`` system call, so a killed run leaves at worst
one partial last line, never a broken row in the middle. Readers (``read_results``,
``open_for_resume``) drop such a partial last line with a warning, and refuse a file with
any other damage (a row of the wrong width, a fragment, an unknown status, a case measured
twice on one machine at one commit), naming its lines (:class:`MalformedResults`).

Raw samples: a row that carries ``_samples`` has them written first, as one line of
``<name>.samples.jsonl`` (:mod:`nmsbench.engine.samples`); the CSV's columns are unchanged.

Sharing: a writer holds the file's lock for the whole run (:mod:`nmsbench.results_lock`), so
a second run writing the same file is refused instead of interleaving its rows; the sidecar
is replaced whole (write, then rename), never left half-written.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import importlib.metadata
import io
import json
import os
import platform
import shlex
import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas

from .keys import KEY_COLUMNS, MACHINE_COLUMNS, RUN_COLUMNS, case_key  # noqa: F401  (this module's API too)
from .keys import key_value as _key_value
from .results_lock import ResultsFileBusy, ResultsLock, describe_holder, lock_path  # noqa: F401  (this module's API too)


SCHEMA_VERSION = 8

CASE_COLUMNS = [
    "impl", "family", "device", "dtype", "timer", "scenario", "overlap", "classes", "n",
    "iou_threshold", "seed", "params",
    # schema 2: which benchmark ("nms": `nmsbench sweep`; "pipeline": `nmsbench pipeline`; from
    # schema 8 "accuracy": `nmsbench accuracy`),
    # the recording (real scenario / real pipeline source), the real scenario's cap on n,
    # and the pipeline's batch size and stage (decode, nms, total)
    "benchmark", "image", "input_size", "n_cap", "batch", "stage",
    # schema 6: the synthetic scenarios' canvas: "fixed" (1024 px at every n) or "density"
    # (its side grows as sqrt(n)); "" for scenarios that do not generate boxes
    "canvas",
]
MEASURE_COLUMNS = [
    "status", "error", "median_us", "iqr_us", "runs", "rel_spread", "noisy", "threads",
    "host_sync", "graph_safe", "peak_mem_bytes",
    "kept", "ref_kept", "jaccard", "extra", "missing", "mean_max_iou", "greedy_suppressed_frac",
    # schema 2, pipeline rows: candidates that passed the confidence filter (whole batch),
    # and common detections whose box, score or label differ from the reference pipeline's
    "candidates", "mismatched",
    # schema 3: timings taken for the row (1, plus re-timings of a noisy measurement with
    # `sweep --repeat-noisy`; the least noisy is kept)
    "attempts",
    # schema 4: timing blocks of the row (all rounds), its interleaved rounds (`sweep
    # --rounds`), the spread of the round medians ((max - min) / median; blank with one
    # round), and why the row is noisy (every reason of the rule in nmsbench.timing)
    "blocks", "rounds", "round_spread", "noise",
    # schema 5, device-timer rows (what the GPU did per call, from CUPTI: median_us is the
    # summed duration of the call's kernels, copies and sets): the GPU's busy span (median
    # and IQR), and the kernel launches, memory copies and sets, and host synchronizations
    # per call. (The CUDA-event timer of schema 4's `device` rows is now `events`.)
    "span_us", "span_iqr_us", "launches", "copies", "syncs",
    # schema 7, families whose answer is not greedy's (soft, diou, weighted): the family's
    # exact CPU implementation on the same boxes (nmsbench.agreement.FAMILY_REFERENCES),
    # the Jaccard of the two kept sets, and the largest relative difference of the final
    # scores or moved boxes over the boxes both keep
    "family_ref", "family_jaccard", "family_max_diff",
    # schema 8, accuracy rows (`nmsbench accuracy`): COCO AP@[.5:.95], AP50, AP75 and AR@100 of
    # the detections (fractions 0..1), AR@100 over the crowded images only (see
    # nmsbench.accuracy.CROWDED_IOU), the images scored, the detections kept over all of them,
    # and the source's parameters (JSON: the noise model's, or the files of a COCO source)
    "ap", "ap50", "ap75", "ar100", "ar100_crowded", "images", "detections", "source_params",
]
# columns older files lack (read_results gives them blank, or SCHEMA_1_DEFAULTS' value)
ADDED_IN_SCHEMA_2 = ("benchmark", "image", "input_size", "n_cap", "batch", "stage", "candidates", "mismatched")
SCHEMA_1_DEFAULTS = {"benchmark": "nms"}  # a schema-1 file's rows are all sweeps
ADDED_IN_SCHEMA_6 = ("canvas",)
# the synthetic scenarios that schema-5 files can hold (a constant: reading results needs no torch)
SYNTHETIC_BEFORE_SCHEMA_6 = ("uniform", "clustered", "crowd", "chain", "degenerate")
ADDED_IN_SCHEMA_8 = ("ap", "ap50", "ap75", "ar100", "ar100_crowded", "images", "detections", "source_params")
TEXT_ADDED = ("family_ref", "source_params")  # added columns an older file's rows read as "" (the others as NaN)
EVENT_TIMER_RENAMED_IN = 5  # rows of older schemas with timer "device" timed CUDA events: read as "events"
ENV_COLUMNS = [
    "machine", "cpu", "gpu", "driver", "cuda", "torch", "torchvision", "cupy", "numba",
    "nmsbench", "git_commit", "python", "timestamp",
]
COLUMNS = ["schema_version", *CASE_COLUMNS, *MEASURE_COLUMNS, *ENV_COLUMNS]
STATUSES = ("ok", "error", "skipped")
class PartialRowWarning(UserWarning):
    """A results file ends in a partial row (a run was killed while writing it)."""


class MalformedResults(ValueError):
    """A results file holds rows that are not well formed, or one case in several rows;
    ``problems`` lists them as (line, what is wrong)."""

    LISTED = 5  # problems the message spells out

    def __init__(self, name: str, problems: list[tuple[int, str]], what: str, advice: str):
        self.name, self.problems = name, problems
        listed = "; ".join(f"{name}:{line}: {text}" for line, text in problems[:self.LISTED])
        more = f"; and {len(problems) - self.LISTED} more" if len(problems) > self.LISTED else ""
        super().__init__(f"{name}: {len(problems)} {what}: {listed}{more}. {advice}")


def _measurement_key(row) -> tuple:
    """The case and the machine and commit that measured it: what one file holds once."""
    return case_key(row) + tuple(_key_value(row.get(column, "")) for column in RUN_COLUMNS)


def _version(*distributions: str) -> str:
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> dict:
    """Import name -> distributions, read once a process (it scans every installed package)."""
    return importlib.metadata.packages_distributions()


def library_versions(modules) -> dict[str, str]:
    """For each import name (an implementation's ``requires``: cv2, onnxruntime, ...) the
    distribution that provides it and its version ("opencv-python-headless 4.10.0"), "" where
    it is not installed: the sidecar's record of the libraries a run's entries called."""
    provided_by = _packages_distributions()
    versions = {}
    for module in sorted(set(modules)):
        names = sorted(set(provided_by.get(module, [])))
        versions[module] = ", ".join(f"{name} {_version(name)}" for name in names)
    return versions


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _run(args: list[str], cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _git_commit() -> str:
    if os.environ.get("NMSBENCH_GIT_COMMIT"):  # for copies of the tree without .git (e.g. a GPU machine)
        return os.environ["NMSBENCH_GIT_COMMIT"]
    repo = Path(__file__).resolve().parent.parent
    commit = _run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo)
    if commit and _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo):
        commit += "-dirty"
    return commit


def environment() -> dict:
    """The machine and software versions of this run (the ENV_COLUMNS)."""
    from . import __version__

    import torch  # here, not at the top: the dashboard reads results without importing torch

    has_cuda = torch.cuda.is_available()
    gpu = torch.cuda.get_device_name(0) if has_cuda else ""
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
    return {
        "machine": platform.node(),
        "cpu": _cpu_model(),
        "gpu": gpu,
        "driver": driver[0] if driver else "",
        "cuda": torch.version.cuda or "",
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "cupy": _version("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"),
        "numba": _version("numba"),
        "nmsbench": __version__,
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


RUNS_DIRECTORY = Path("results") / "runs"  # user runs (git-ignored); results/ holds the committed reference runs


def default_output_path(devices: list[str], directory: Path = RUNS_DIRECTORY, kind: str = "sweep") -> Path:
    """``results/runs/<kind>-<time>-<devices>.csv`` (relative to the working directory)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return directory / f"{kind}-{stamp}-{'-'.join(devices)}.csv"


def folder_files(folder, name: str, include_archive: bool = False, archive_anywhere: bool = True) -> list[Path]:
    """The files called ``name`` (a glob) in a results folder: at its top and anywhere under
    ``runs/`` (a user's own runs), and under ``archive/`` when asked (anywhere in it, or
    only at its top), each once, sorted. What the dashboard's views read."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = {*folder.glob(name), *folder.glob(f"runs/**/{name}")}
    if include_archive:
        found |= set(folder.glob(f"archive/**/{name}" if archive_anywhere else f"archive/{name}"))
    return sorted(found)


def sidecar_path(csv_path: Path) -> Path:
    return csv_path.with_suffix(".json")


class ResultWriter:
    """Writes rows to a CSV as they come, one ``write`` system call per row, plus the
    sidecar JSON. ``append=True`` adds rows to an existing results file (``sweep
    --resume``; check it first with :func:`open_for_resume`) and notes the command in its
    sidecar instead of writing a new header and sidecar.

    The file's lock (:class:`~nmsbench.results_lock.ResultsLock`) is held from before the
    file is opened (and truncated) until :meth:`close`: ``lock``, one the caller took and
    releases, or else one taken here (:class:`ResultsFileBusy` when another process has it)."""

    def __init__(self, path: Path, env: dict, grid: dict, command: str = "", *, append: bool = False,
                 libraries: dict | None = None, lock: ResultsLock | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.env = env
        self.rows_written = 0
        self._samples = None
        command = command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
        if lock is not None and not (lock.held and lock.lock_file == lock_path(self.path)):
            raise ValueError(f"{self.path}: the lock given is not held, or not this file's")
        self._own_lock = None if lock is not None else ResultsLock(self.path, command)
        try:
            # unbuffered: each row reaches the file in the one write() that carries it
            self._file = open(self.path, "ab" if append else "wb", buffering=0)
            from .engine.samples import SamplesWriter  # here: the engine's samples module reads this one

            self._samples = SamplesWriter(self.path, env, append)
        except BaseException:
            if getattr(self, "_file", None) is not None:
                self._file.close()
            self._release()
            raise
        if append:
            _note_resume(sidecar_path(self.path), command, env)
            return
        meta = {
            "schema_version": SCHEMA_VERSION,
            "command": command,
            "grid": grid,
            "environment": env,
            "libraries": libraries or {},
            "columns": COLUMNS,
        }
        write_sidecar(sidecar_path(self.path), meta)  # first: a file with a header has its sidecar
        self._write_line(COLUMNS)

    def note(self, key: str, value) -> None:
        """Add ``value`` to the list ``key`` of the sidecar (e.g. the machine's load at the
        start and end of a run); left alone if the sidecar cannot be read."""
        sidecar = sidecar_path(self.path)
        try:
            meta = json.loads(sidecar.read_text())
        except (OSError, ValueError, RecursionError):
            return
        if isinstance(meta, dict):
            meta.setdefault(key, []).append(value)
            write_sidecar(sidecar, meta)

    def _write_line(self, values: list) -> None:
        text = io.StringIO()
        csv.writer(text).writerow(values)
        data = memoryview(text.getvalue().encode())
        while data:  # a regular file takes it whole; loop in case of a short write
            data = data[self._file.write(data):]

    def write(self, row: dict) -> None:
        """Write ``row``; its raw samples (``row["_samples"]``, a ``Samples``) go first, as
        one line of the samples file beside the CSV (:mod:`nmsbench.engine.samples`)."""
        row = dict(row)
        samples = row.pop("_samples", None)
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise ValueError(f"row has columns outside the schema: {sorted(unknown)}")
        full = {"schema_version": SCHEMA_VERSION, **self.env, **row}
        if samples is not None:
            self._samples.write(samples, full)
        values = [full.get(k, "") for k in COLUMNS]
        # one row, one line: a partial last line is then the only damage a kill can do
        values = [" ".join(v.splitlines()) if isinstance(v, str) else v for v in values]
        self._write_line(values)
        self.rows_written += 1

    def close(self) -> None:
        try:
            self._file.close()
            self._samples.close()
        finally:
            self._release()

    def _release(self) -> None:
        if self._own_lock is not None:
            self._own_lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _note_resume(sidecar: Path, command: str, env: dict) -> None:
    """Record a resumed run's command in the sidecar (left alone if it cannot be read)."""
    try:
        meta = json.loads(sidecar.read_text())
    except (OSError, ValueError, RecursionError):
        return
    if isinstance(meta, dict):
        meta.setdefault("resumed", []).append({"command": command, "git_commit": env.get("git_commit", ""),
                                               "timestamp": env.get("timestamp", "")})
        write_sidecar(sidecar, meta)


def write_sidecar(sidecar: Path, meta: dict) -> None:
    """Replace ``sidecar`` with ``meta`` as JSON whole: written beside it, then renamed over
    it, so a run stopped meanwhile leaves the old sidecar or the new one, never half of one."""
    temporary = sidecar.with_name(f".{sidecar.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(json.dumps(meta, indent=2, default=str) + "\n")
        os.replace(temporary, sidecar)
    finally:
        temporary.unlink(missing_ok=True)


def read_sidecar(csv_path: Path) -> tuple[dict | None, str]:
    """(the sidecar of ``csv_path``, "") or (None, what is wrong with it: missing, not
    readable JSON, no grid recorded)."""
    sidecar = sidecar_path(Path(csv_path))
    try:
        meta = json.loads(sidecar.read_text())
    except FileNotFoundError:
        return None, f"its sidecar {sidecar} is missing"
    except (OSError, ValueError, RecursionError) as e:
        return None, f"its sidecar {sidecar} is not readable JSON ({' '.join(str(e).split())}; cut short?)"
    if not isinstance(meta, dict) or not isinstance(meta.get("grid"), dict):
        return None, f"its sidecar {sidecar} records no grid"
    return meta, ""


def _complete_size(data: bytes) -> int:
    """How many bytes of ``data`` remain without a partial last line (one that lacks its line
    end: a run stopped while writing it); all of them when there is none, or when there is not
    even one whole line (the parser judges that)."""
    cut = data.rfind(b"\n") + 1
    return len(data) if cut == 0 else cut


def _warn_partial(name: str, dropped: int) -> None:
    if dropped:
        warnings.warn(f"{name}: dropped a partial last row ({dropped} bytes without a line end; "
                      "a run was stopped while writing it)", PartialRowWarning, stacklevel=3)


def _records(data: bytes, name: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header of CSV ``data`` and its other records with the line each starts on (blank
    lines skipped, as pandas skips them); ValueError naming the line where it is not CSV."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ValueError(f"{name}: not a readable CSV (line {line}: not UTF-8 text)") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header, rows, end = None, [], 0
    try:
        for record in reader:
            start, end = end + 1, reader.line_num
            if not record:
                continue
            if header is None:
                header = record
            else:
                rows.append((start, record))
    except csv.Error as e:
        raise ValueError(f"{name}: not a readable CSV (line {end + 1}: {e})") from None
    if header is None:
        raise ValueError(f"{name}: not a readable CSV (no header line: the file is empty)")
    return header, rows


def _refuse_malformed(name: str, header: list[str], rows) -> None:
    """MalformedResults for rows whose field count is not the header's, whose status is not
    one of STATUSES (a fragment of a row reads as one), or whose schema_version is not a number."""
    status, version = header.index("status"), header.index("schema_version")
    problems = []
    for line, record in rows:
        if len(record) != len(header):
            problems.append((line, f"{len(record)} fields where the header has {len(header)}"))
        elif record[status].strip().lower() not in STATUSES:
            problems.append((line, f"status {record[status][:40]!r} is not one of {', '.join(STATUSES)}"))
        elif not record[version].strip().isdigit():
            problems.append((line, f"schema_version {record[version][:40]!r} is not a schema number"))
    if problems:
        raise MalformedResults(name, problems, "rows that are not well-formed results rows",
                               "A run writes whole rows, one a line: these come from elsewhere (two runs writing one "
                               "file at once, an edit, a cut copy); fix or delete those lines")


def _refuse_repeats(name: str, keyed) -> None:
    """MalformedResults where (line, measurement key, description) triples give one case,
    machine and commit several lines."""
    lines: dict[tuple, list[int]] = {}
    described = {}
    for line, key, description in keyed:
        lines.setdefault(key, []).append(line)
        described.setdefault(key, description)
    problems = [(where[0], f"{described[key]} is on line{'s' if len(where) > 2 else ''} "
                           f"{', '.join(map(str, where[1:]))} too")
                for key, where in lines.items() if len(where) > 1]
    if problems:
        raise MalformedResults(name, sorted(problems), "case(s) measured in more than one row",
                               "A machine measures a case at a commit once (two runs writing one file at once?): keep "
                               "the row you trust and delete the others, or keep separate runs in separate files")


def _describe_case(header: list[str], record: list[str]) -> str:
    """A row's case, machine and commit in words: those columns that have a value."""
    at = {column: i for i, column in enumerate(header)}
    return " ".join(f"{c}={record[at[c]]}" for c in (*KEY_COLUMNS, "machine", "git_commit")
                    if c in at and record[at[c]].strip())


def _header_problem(header: list[str]) -> str:
    missing = [c for c in COLUMNS if c not in header]
    extra = [c for c in header if c not in COLUMNS]
    return (f"missing {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}" if missing else "") + \
        ("; " if missing and extra else "") + (f"extra {', '.join(extra[:8])}" if extra else "")


def resume_state(path, env: dict, benchmark: str = "nms", any_machine: bool = False) -> tuple[set, int]:
    """What :func:`open_for_resume` checks, reading ``path`` only: (the case keys it holds,
    the size it keeps once a partial last row is cut off). ``any_machine``: rows of other
    machines do not refuse it (a cluster run, whose workers name their own)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: {'is not a file' if path.exists() else 'no such file'}; --resume continues an existing results CSV")
    data = path.read_bytes()
    keep = _complete_size(data)
    complete = data[:keep]
    header = next(csv.reader(io.StringIO(complete.split(b"\n", 1)[0].decode("utf-8", "replace"))), [])
    if header != COLUMNS:
        raise ValueError(f"{path}: its header is not this nmsbench's results schema {SCHEMA_VERSION} "
                         f"({_header_problem(header) or 'same columns, another order'}); resume only into a file "
                         "written by `nmsbench sweep` of this version, or write a new --out")
    header, rows = _records(complete, str(path))
    _refuse_malformed(str(path), header, rows)
    frame = pd.read_csv(io.BytesIO(complete), dtype=str, keep_default_na=False)
    if len(frame) != len(rows):  # cannot happen once every row has the header's fields; never guess
        raise ValueError(f"{path}: not a readable CSV ({len(frame)} rows parsed of {len(rows)} lines)")
    versions = sorted(set(frame["schema_version"]) - {str(SCHEMA_VERSION)})
    if versions:
        raise ValueError(f"{path}: has rows of schema version {', '.join(versions)}, not {SCHEMA_VERSION}; write a new --out")
    others = sorted(set(frame["benchmark"]) - {benchmark})
    if others:
        command = "sweep" if benchmark == "nms" else benchmark
        raise ValueError(f"{path}: holds {', '.join(others)} rows; `nmsbench {command}` resumes only its own "
                         f"({benchmark}) files")
    recorded = {c: sorted(set(frame[c])) for c in MACHINE_COLUMNS}
    if frame.empty:  # header only: the sidecar names the machine
        try:
            meta = json.loads(sidecar_path(path).read_text())
            recorded = {c: [str(meta["environment"].get(c, ""))] for c in MACHINE_COLUMNS}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            recorded = {}
    for column, values in ({} if any_machine else recorded).items():
        if values != [str(env.get(column, ""))]:
            raise ValueError(f"{path}: was written on another machine ({column}: {', '.join(map(repr, values))}; here: "
                             f"{env.get(column, '')!r}); resume on that machine, or write a new --out here")
    records = frame.to_dict("records")
    _refuse_repeats(str(path), ((line, _measurement_key(row), _describe_case(header, record))
                                for row, (line, record) in zip(records, rows)))
    return {case_key(row) for row in records}, keep


def cut_partial_row(path, keep: int, size: int | None = None) -> None:
    """Cut ``path`` to its first ``keep`` bytes (dropping a partial last row, with a
    :class:`PartialRowWarning`); ``size``: the size it was read at, refusing if it has changed since."""
    path = Path(path)
    with open(path, "r+b") as f:
        now = os.fstat(f.fileno()).st_size
        if size is not None and now != size:
            raise ValueError(f"{path}: changed while it was checked ({size} bytes, now {now}); is another run writing it?")
        if keep < now:
            _warn_partial(str(path), now - keep)
            f.truncate(keep)


def open_for_resume(path, env: dict, benchmark: str = "nms") -> set:
    """Check that ``path`` can take more rows of this run and return the keys
    (:func:`case_key`) of the cases it holds. Only then is a partial last line cut off the
    file (with a warning): a file it refuses is left as it was. Raises ``ValueError`` when the
    file is not a results file of this schema, holds a row that is not well formed, a case
    measured twice at one commit, or other benchmarks' rows, or was written on another machine. Hold the file's lock
    (:class:`ResultsLock`) around it and the writing that follows."""
    size = Path(path).stat().st_size if Path(path).is_file() else None
    keys, keep = resume_state(path, env, benchmark)
    cut_partial_row(path, keep, size)
    return keys


# read as text: a CUDA version "12.10" is not the number 12.1
TEXT_COLUMNS = ["params", "error", "benchmark", "image", "stage", "noise", "canvas", "family_ref", "source_params",
                *ENV_COLUMNS]


def read_results(path, name: str | None = None) -> "pandas.DataFrame":
    """Load a results CSV (a path or a file-like object), or raise ValueError naming what
    makes it not one; ``name`` is what messages call it (default: ``path``).

    Older files (schema 1 to 7) gain the columns added since, empty (``benchmark`` = "nms";
    ``canvas`` = "fixed" for synthetic scenarios), and their ``device`` rows (schema 1 to 4),
    which timed CUDA events, are read as ``events`` rows.
    A partial last line (a run killed while writing it) is dropped with a
    :class:`PartialRowWarning`; any other damage (a row of the wrong width, an unknown status,
    one case measured twice on one machine and commit) is a :class:`MalformedResults` naming
    its lines.
    """
    import pandas as pd

    name = name or str(path)
    try:
        data = path.read() if hasattr(path, "read") else Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"{name}: not a readable CSV ({' '.join(str(e).split())})") from None
    data = data.encode() if isinstance(data, str) else data
    keep = _complete_size(data)
    header, rows = _records(data[:keep], name)
    required = ("schema_version", *(c for c in CASE_COLUMNS if c not in ADDED_IN_SCHEMA_2 + ADDED_IN_SCHEMA_6),
                "status", "median_us")
    missing = [c for c in required if c not in header]
    if missing:
        raise ValueError(f"{name}: not an nmsbench results file (missing columns: {', '.join(missing)})")
    _refuse_malformed(name, header, rows)
    try:
        frame = pd.read_csv(io.BytesIO(data[:keep]), dtype={c: str for c in TEXT_COLUMNS})
    except (ValueError, pd.errors.ParserError) as e:
        raise ValueError(f"{name}: not a readable CSV ({' '.join(str(e).split())})") from None
    if len(frame) != len(rows):  # cannot happen once every row has the header's fields; never guess
        raise ValueError(f"{name}: not a readable CSV ({len(frame)} rows parsed of {len(rows)} lines)")
    if "canvas" not in frame.columns:  # before schema 6, every synthetic scenario was on the fixed canvas
        frame["canvas"] = frame["scenario"].isin(SYNTHETIC_BEFORE_SCHEMA_6).map({True: "fixed", False: ""})
    added = {column: SCHEMA_1_DEFAULTS.get(column, "" if column in TEXT_ADDED else float("nan"))
             for column in COLUMNS if column not in frame.columns}
    if added:  # in one step: column by column costs most of reading an older file
        frame = pd.concat([frame, pd.DataFrame(added, index=frame.index)], axis=1)
    renamed = pd.to_numeric(frame["schema_version"], errors="coerce").lt(EVENT_TIMER_RENAMED_IN) & frame["timer"].eq("device")
    if renamed.any():
        frame.loc[renamed, "timer"] = "events"
    repeated = frame.duplicated(subset=[*KEY_COLUMNS, *RUN_COLUMNS], keep=False).to_numpy().nonzero()[0]
    _refuse_repeats(name, ((rows[i][0], _measurement_key(frame.iloc[i]), _describe_case(header, rows[i][1]))
                           for i in repeated))
    _warn_partial(name, len(data) - keep)
    return frame
