"""The results schema, the run's environment, and the CSV writer.

One tidy row per case (implementation x device x dtype x timer x scenario x overlap x n
x iou_threshold), written and flushed as soon as the case finishes. The environment is
repeated in every row, so concatenated CSVs stay self-describing, and also written to a
sidecar ``<name>.json`` together with the command that reproduces the run.
"""

from __future__ import annotations

import csv
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import torch

SCHEMA_VERSION = 2

CASE_COLUMNS = [
    "impl", "family", "device", "dtype", "timer", "scenario", "overlap", "classes", "n",
    "iou_threshold", "seed", "params",
    # schema 2: which benchmark ("nms": `nmsbench sweep`; "pipeline": `nmsbench pipeline`),
    # the recording (real scenario / real pipeline source), the real scenario's cap on n,
    # and the pipeline's batch size and stage (decode, nms, total)
    "benchmark", "image", "input_size", "n_cap", "batch", "stage",
]
MEASURE_COLUMNS = [
    "status", "error", "median_us", "iqr_us", "runs", "rel_spread", "noisy", "threads",
    "host_sync", "graph_safe", "peak_mem_bytes",
    "kept", "ref_kept", "jaccard", "extra", "missing", "mean_max_iou", "greedy_suppressed_frac",
    # schema 2, pipeline rows: candidates that passed the confidence filter (whole batch),
    # and common detections whose box, score or label differ from the reference pipeline's
    "candidates", "mismatched",
]
# columns a schema-1 file lacks, and their value for its rows (all of which are sweeps)
ADDED_IN_SCHEMA_2 = ("benchmark", "image", "input_size", "n_cap", "batch", "stage", "candidates", "mismatched")
SCHEMA_1_DEFAULTS = {"benchmark": "nms"}
ENV_COLUMNS = [
    "machine", "cpu", "gpu", "driver", "cuda", "torch", "torchvision", "cupy", "numba",
    "nmsbench", "git_commit", "python", "timestamp",
]
COLUMNS = ["schema_version", *CASE_COLUMNS, *MEASURE_COLUMNS, *ENV_COLUMNS]
STATUSES = ("ok", "error", "skipped")


def _version(*distributions: str) -> str:
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


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


def default_output_path(devices: list[str], directory: Path = Path("results"), kind: str = "sweep") -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return directory / f"{kind}-{stamp}-{'-'.join(devices)}.csv"


def sidecar_path(csv_path: Path) -> Path:
    return csv_path.with_suffix(".json")


class ResultWriter:
    """Writes rows to a CSV as they come (flushed each time) plus the sidecar JSON."""

    def __init__(self, path: Path, env: dict, grid: dict, command: str = ""):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.env = env
        self.rows_written = 0
        self._file = open(self.path, "w", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=COLUMNS)
        self._csv.writeheader()
        self._file.flush()
        meta = {
            "schema_version": SCHEMA_VERSION,
            "command": command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "grid": grid,
            "environment": env,
            "columns": COLUMNS,
        }
        sidecar_path(self.path).write_text(json.dumps(meta, indent=2, default=str) + "\n")

    def write(self, row: dict) -> None:
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise ValueError(f"row has columns outside the schema: {sorted(unknown)}")
        full = {"schema_version": SCHEMA_VERSION, **self.env, **row}
        self._csv.writerow({k: full.get(k, "") for k in COLUMNS})
        self._file.flush()
        self.rows_written += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# read as text: a CUDA version "12.10" is not the number 12.1
TEXT_COLUMNS = ["params", "error", "benchmark", "image", "stage", *ENV_COLUMNS]


def read_results(path, name: str | None = None) -> "pandas.DataFrame":
    """Load a results CSV (a path or a file-like object), or raise ValueError naming what
    makes it not one; ``name`` is what messages call it (default: ``path``).

    Older files (schema 1) gain the columns added since, empty (``benchmark`` = "nms").
    """
    import pandas as pd

    name = name or str(path)
    try:
        frame = pd.read_csv(path, dtype={c: str for c in TEXT_COLUMNS})
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise ValueError(f"{name}: not a readable CSV ({' '.join(str(e).split())})") from None
    required = ("schema_version", *(c for c in CASE_COLUMNS if c not in ADDED_IN_SCHEMA_2), "status", "median_us")
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: not an nmsbench results file (missing columns: {', '.join(missing)})")
    for column in COLUMNS:
        if column not in frame.columns:
            frame[column] = SCHEMA_1_DEFAULTS.get(column, float("nan"))
    return frame
