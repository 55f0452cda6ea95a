"""What two NMS variants suppress differently, on one regenerated box set.

    >>> case = run_case("chain", 256, overlap=0.6, seed=0, iou_threshold=0.5)
    >>> classes, counts = classify(case.n, case.keeps["torchvision"], case.keeps["allpairs"])
    >>> agreement_matrix(case.keeps)      # Jaccard of kept sets, every pair
    >>> write_case(case, "results/runs/diff-chain-256.json"); read_case(...)   # `nmsbench diff`

Implementations that cannot run here (no backend for the device, a missing module, no
CUDA device) or that raise are reported with the reason in ``CaseRun.unavailable`` /
``CaseRun.errors``, never raised. The dashboard only reads files that ``nmsbench diff``
wrote (:func:`read_case`, :func:`diff_files`): it never runs an implementation itself.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from . import datasets
from .agreement import compare_keep
from .api import run_nms
from .engine.axes import Axis, GridError, check_axes, floats, ints, names, parse_param
from .engine.plugins import Benchmark, register_benchmark
from .registry import implementations

# Codes of classify(): indices into nmsbench.plots.BOX_CLASSES.
DEFAULT_N = 512  # boxes of a synthetic set when --n is not given
SUPPRESSED_BY_BOTH, KEPT_BY_BOTH, ONLY_A, ONLY_B = range(4)
CLASS_NAMES = ("suppressed by both", "kept by both", "only A", "only B")


@dataclass
class CaseRun:
    """One regenerated box set and what each implementation kept on it."""

    scenario: str
    n: int
    overlap: float
    seed: int
    iou_threshold: float
    classes: int
    device: str
    boxes: np.ndarray
    scores: np.ndarray
    keeps: dict[str, np.ndarray] = field(default_factory=dict)  # name -> kept input indices
    seconds: dict[str, float] = field(default_factory=dict)     # name -> one warm call's wall time (not a benchmark)
    unavailable: dict[str, str] = field(default_factory=dict)   # name -> why it cannot run here
    errors: dict[str, str] = field(default_factory=dict)        # name -> what it raised
    finals: dict[str, np.ndarray] = field(default_factory=dict)  # name -> final scores of its kept boxes (matrix, soft)
    moved: dict[str, np.ndarray] = field(default_factory=dict)   # name -> its kept boxes as it moved them (weighted)
    families: dict[str, str] = field(default_factory=dict)      # name -> its family
    params: dict[str, dict] = field(default_factory=dict)       # name -> the parameters it ran with
    labels: np.ndarray | None = None
    meta: dict = field(default_factory=dict)                    # the command, the environment, the time written
    canvas: str = "fixed"                                       # the synthetic scenarios' canvas (datasets.synthetic)
    file: str = ""                                              # the boxes file of the file scenario


def default_diff_path(directory: Path = Path("results") / "runs") -> Path:
    """Where ``nmsbench diff`` writes without --out: ``results/runs/diff-<time>.json``."""
    return directory / f"diff-{time.strftime('%Y%m%d-%H%M%S')}.json"


def devices() -> list[str]:
    """Where the differences can run on this machine."""
    return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]


def availability(device: str) -> dict[str, str]:
    """name -> "" when the implementation can run on ``device`` here, else the reason."""
    out = {}
    for name, impl in sorted(implementations().items()):
        if device not in impl.backends:
            out[name] = f"no {device} backend (has: {', '.join(impl.devices)})"
            continue
        ok, reason = impl.backends[device].availability()
        out[name] = "" if ok else reason
    return out


def run_case(scenario: str, n: int, overlap: float | None = None, seed: int = 0, iou_threshold: float = 0.5,
             classes: int = 1, impls: Sequence[str] | None = None, device: str = "cpu", path=None,
             params: dict | None = None, canvas: str = "fixed") -> CaseRun:
    """Regenerate the box set (on the CPU, deterministic from ``seed``, as a sweep does),
    move it to ``device`` and run each implementation (default: all registered) on it
    once; ``params`` go to the implementations that take them (as ``sweep --param``)."""
    box_set = datasets.generate(scenario, n, overlap=overlap, seed=seed, classes=classes, path=path,
                                canvas=canvas if scenario in datasets.SYNTHETIC else None)
    run = CaseRun(scenario, len(box_set), box_set.meta["overlap"], seed, float(iou_threshold),
                  int(box_set.meta.get("classes", classes)), device,  # the file scenario: the labels its boxes hold
                  box_set.boxes.numpy().astype(float), box_set.scores.numpy().astype(float),
                  labels=None if box_set.labels is None else box_set.labels.numpy().astype(np.int64),
                  canvas=box_set.meta.get("canvas", ""), file="" if path is None else str(path))
    registry = implementations()
    names = list(impls) if impls is not None else sorted(implementations())
    ready = availability(device)
    if any(ready.get(name) == "" for name in names):
        try:
            data = box_set.to(device)
        except Exception as exc:  # e.g. a CUDA build of torch on a machine without a driver
            ready = {name: f"cannot move the boxes to {device}: {type(exc).__name__}: {exc}" for name in ready}
    for name in names:
        if name not in ready:
            run.errors[name] = f"unknown implementation {name!r}"
            continue
        if ready[name]:
            run.unavailable[name] = ready[name]
            continue
        try:
            impl = registry[name]
            given = impl.resolve_params(impl.accepted_params(params or {}))
            call = dict(iou_threshold=iou_threshold, labels=data.labels, **given)
            run_nms(name, data.boxes, data.scores, **call)  # warm-up (numba, NVRTC)
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            result = run_nms(name, data.boxes, data.scores, **call)
            if device == "cuda":
                torch.cuda.synchronize()
            run.seconds[name] = time.perf_counter() - start
            run.keeps[name] = result.keep.cpu().numpy().astype(np.int64)
            run.families[name] = impl.family
            run.params[name] = given
            if result.scores is not None:
                run.finals[name] = result.scores.cpu().numpy().astype(float)
            if result.boxes is not None:
                run.moved[name] = result.boxes.cpu().numpy().astype(float).reshape(-1, 4)
        except Exception as exc:  # a variant that breaks is shown as broken, not a crashed page
            run.errors[name] = f"{type(exc).__name__}: {exc}"
    return run


# --- the results file of `nmsbench diff` ------------------------------------------------

FORMAT = "nmsbench-diff"
FORMAT_VERSION = 1


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    return value


def case_to_dict(case: CaseRun) -> dict:
    """The case as plain JSON data: the case's knobs, the boxes, scores and labels, and for
    every implementation that ran its family, parameters, kept indices and (for variants
    that change scores) the final scores of the kept boxes, (for variants that move boxes)
    the kept boxes where they moved them."""
    return _jsonable({
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "case": {"scenario": case.scenario, "overlap": case.overlap, "n": case.n, "seed": case.seed,
                 "iou_threshold": case.iou_threshold, "classes": case.classes, "device": case.device,
                 "canvas": case.canvas, **({"file": case.file} if case.file else {})},
        "boxes": case.boxes.tolist(), "scores": case.scores.tolist(),
        "labels": None if case.labels is None else case.labels.tolist(),
        "implementations": {
            name: {"family": case.families.get(name, ""), "params": case.params.get(name, {}),
                   "keep": case.keeps[name].tolist(),
                   "final_scores": case.finals[name].tolist() if name in case.finals else None,
                   "moved_boxes": case.moved[name].tolist() if name in case.moved else None,
                   "one_call_s": case.seconds.get(name)}
            for name in case.keeps},
        "unavailable": case.unavailable, "errors": case.errors, **case.meta,
    })


def write_case(case: CaseRun, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(case_to_dict(case), separators=(",", ":")) + "\n")
    return path


def case_from_dict(data: dict, name: str = "the file") -> CaseRun:
    """A :class:`CaseRun` from :func:`case_to_dict`'s data; ValueError naming what is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{name}: not an `nmsbench diff` file (no \"format\": \"{FORMAT}\")")
    try:
        c = data["case"]
        run = CaseRun(str(c["scenario"]), int(c["n"]), float(c["overlap"]), int(c["seed"]), float(c["iou_threshold"]),
                      int(c.get("classes", 1)), str(c.get("device", "")),
                      np.asarray(data["boxes"], dtype=float).reshape(-1, 4), np.asarray(data["scores"], dtype=float),
                      labels=None if data.get("labels") is None else np.asarray(data["labels"], dtype=np.int64),
                      unavailable=dict(data.get("unavailable") or {}), errors=dict(data.get("errors") or {}),
                      canvas=str(c.get("canvas", "fixed")), file=str(c.get("file") or ""),
                      meta={k: v for k, v in data.items() if k not in ("case", "boxes", "scores", "labels", "implementations",
                                                                      "unavailable", "errors")})
        for impl, entry in data["implementations"].items():
            keep = np.asarray(entry["keep"], dtype=np.int64)
            if len(keep) and (keep.min() < 0 or keep.max() >= run.n):
                raise ValueError(f"{impl} keeps an index outside 0..{run.n - 1}")
            run.keeps[impl] = keep
            run.families[impl] = str(entry.get("family", ""))
            run.params[impl] = dict(entry.get("params") or {})
            if entry.get("one_call_s") is not None:
                run.seconds[impl] = float(entry["one_call_s"])
            if entry.get("final_scores") is not None:
                run.finals[impl] = np.asarray(entry["final_scores"], dtype=float)
                if len(run.finals[impl]) != len(keep):
                    raise ValueError(f"{impl} has {len(run.finals[impl])} final scores for {len(keep)} kept boxes")
            if entry.get("moved_boxes") is not None:
                moved = np.asarray(entry["moved_boxes"], dtype=float)
                if moved.shape != (len(keep), 4) and not (moved.size == 0 and len(keep) == 0):
                    raise ValueError(f"{impl} has moved boxes of shape {moved.shape} for {len(keep)} kept boxes")
                run.moved[impl] = moved.reshape(-1, 4)
    except (KeyError, TypeError) as e:
        raise ValueError(f"{name}: an `nmsbench diff` file without {e}") from None
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    if len(run.boxes) != run.n or len(run.scores) != run.n:
        raise ValueError(f"{name}: {len(run.boxes)} boxes and {len(run.scores)} scores for n = {run.n}")
    return run


def read_case(path) -> CaseRun:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f"{path.name}: not readable JSON ({e})") from None
    return case_from_dict(data, path.name)


def diff_files(folder, include_archive: bool = False) -> list[Path]:
    """The ``nmsbench diff`` files of a results folder: diff-*.json at its top and anywhere
    under runs/ (and archive/ when asked), in name order."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [*folder.glob("diff-*.json"), *folder.glob("runs/**/diff-*.json")]
    if include_archive:
        found += folder.glob("archive/**/diff-*.json")
    return sorted(set(found))


def remaining_score(case: CaseRun, names: Sequence[str]) -> np.ndarray:
    """Per box, the smallest final score / input score among ``names`` that keep it and
    change scores (Matrix NMS, Soft-NMS); NaN where none of them does. 1 means untouched,
    0.1 that a box is kept with a tenth of its score."""
    out = np.full(case.n, np.nan)
    for name in names:
        if name not in case.finals:
            continue
        keep = case.keeps[name]
        ratio = np.divide(case.finals[name], case.scores[keep], out=np.ones(len(keep)), where=case.scores[keep] > 0)
        current = out[keep]
        out[keep] = np.where(np.isnan(current), ratio, np.minimum(current, ratio))
    return out


def classify(n: int, keep_a, keep_b) -> tuple[np.ndarray, dict[str, int]]:
    """Per box: kept by both, only by A, only by B, or suppressed by both (codes above),
    and the count of each class by name."""
    a = np.zeros(n, dtype=bool)
    b = np.zeros(n, dtype=bool)
    a[np.asarray(keep_a, dtype=np.int64)] = True
    b[np.asarray(keep_b, dtype=np.int64)] = True
    codes = np.full(n, SUPPRESSED_BY_BOTH, dtype=np.int64)
    codes[a & b] = KEPT_BY_BOTH
    codes[a & ~b] = ONLY_A
    codes[~a & b] = ONLY_B
    counts = {name: int((codes == code).sum()) for code, name in enumerate(CLASS_NAMES)}
    return codes, counts


def jaccard(keep_a, keep_b) -> float:
    """Jaccard index of two kept sets (1.0 when both are empty), as in the results' column."""
    return compare_keep(torch.as_tensor(np.asarray(keep_a, dtype=np.int64)),
                        torch.as_tensor(np.asarray(keep_b, dtype=np.int64)))["jaccard"]


def agreement_matrix(keeps: dict[str, np.ndarray]) -> pd.DataFrame:
    """Jaccard of kept sets for every pair of implementations (symmetric, 1 on the diagonal)."""
    names = list(keeps)
    matrix = pd.DataFrame(np.ones((len(names), len(names))), index=names, columns=names)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            matrix.loc[a, b] = matrix.loc[b, a] = jaccard(keeps[a], keeps[b])
    return matrix


# --- `nmsbench diff` as a plug-in: its axes, its grid, its run (the command writes the case)

def _knob(scenario: str) -> tuple[float, float]:
    lo, hi = datasets.SCENARIOS[scenario].knob_range
    return float(lo), float(hi)


AXES = (
    Axis("scenario", "--scenario", names("scenarios", lambda: (*datasets.SYNTHETIC, "file")), "clustered",
         "Box-set scenario (as in `nmsbench sweep --scenario`); file: your own boxes (--file PATH).", many=False),
    Axis("file", "--file", lambda text: [text], None, "Boxes file (.npz, .pt, .csv: x1,y1,x2,y2,score[,label]) for "
         "--scenario file (as `nmsbench sweep --file`).", many=False, metavar="PATH"),
    Axis("overlap", "--overlap", floats("the overlap knob"), None, "The scenario's overlap knob. Default: the scenario's own.",
         many=False),
    Axis("n", "--n", ints("the number of boxes"), None, "Number of boxes. [default: 512; with --scenario file, every box "
         "in the file]", many=False),
    Axis("seed", "--seed", ints("the seed", 0), 0, "Seed of the generated box set.", many=False),
    Axis("iou", "--iou", floats("the IoU threshold", 0, 1), 0.5, "IoU threshold.", many=False),
    Axis("classes", "--classes", ints("classes"), 1, "Number of labels; above 1 the NMS is class-aware.", many=False),
    Axis("impls", "--impl", names("implementations"), None,
         "Implementations (repeat or comma-separate). Default: every one that runs on --device here."),
    Axis("device", "--device", names("devices", lambda: ("cpu", "cuda")), "cpu", "Where to run them.", many=False),
    Axis("params", "--param", parse_param, None, "Implementation parameter KEY=VALUE, given to those that take it.",
         combine=dict, metavar="KEY=VALUE"),
    Axis("canvas", "--canvas", names("canvases", lambda: ("fixed", "density")), "fixed",
         "fixed: the 1024-px canvas; density: its side grows as sqrt(N) (1024 px at N = 1024), as `sweep --canvas`.", many=False),
)


@dataclass
class DiffGrid:
    """One box set and the implementations to run on it; checks itself when made."""

    scenario: str = "clustered"
    n: int | None = None  # None: 512, or every box of the file scenario's file
    overlap: float | None = None
    seed: int = 0
    iou: float = 0.5
    classes: int = 1
    impls: list[str] | None = None  # None: every one that runs on the device here
    device: str = "cpu"
    params: dict = field(default_factory=dict)
    canvas: str = "fixed"
    file: str | None = None  # the file scenario's boxes file

    def __post_init__(self):
        if self.n is None and self.scenario != "file":
            self.n = DEFAULT_N
        self.validate()

    def validate(self) -> None:
        """Raise :class:`GridError` (naming the field) for a value that cannot run."""
        check_axes(self, AXES)
        for name in ("scenario", "device", "canvas"):
            axis = next(a for a in AXES if a.name == name)
            axis.value(str(getattr(self, name)))  # a known name
        for name, low in (("n", 1), ("seed", 0), ("classes", 1)):
            value = getattr(self, name)
            if name == "n" and value is None and self.scenario == "file":
                continue  # every box of the file
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise GridError(name, f"{name} must be a whole number >= {low}, got {value!r}")
        if not 0.0 <= float(self.iou) <= 1.0:
            raise GridError("iou", f"the IoU threshold must lie in [0, 1], got {self.iou!r}")
        if (self.scenario == "file") != bool(self.file):
            raise GridError("file", "the file scenario needs a boxes file (--file PATH)" if not self.file else
                            f"a boxes file ({self.file}) is only read by the file scenario; add --scenario file or leave "
                            "the file out")
        if self.canvas != "fixed" and self.scenario not in datasets.SYNTHETIC:
            raise GridError("canvas", f"a canvas is for the synthetic scenarios ({', '.join(datasets.SYNTHETIC)})")
        lo, hi = _knob(self.scenario)
        if self.overlap is not None and not lo <= self.overlap <= hi:
            raise GridError("overlap", f"{self.scenario}'s knob ({datasets.SCENARIOS[self.scenario].knob}) runs from "
                            f"{lo:g} to {hi:g}, got {self.overlap:g}")
        registry = implementations()
        unknown = [name for name in self.impls or () if name not in registry]
        if unknown:
            raise GridError("impls", f"unknown implementation(s) {', '.join(unknown)}; known: {', '.join(sorted(registry))}")
        for name in self.impls or ():  # a bad parameter is one clear message, not an error in the file
            try:
                registry[name].resolve_params(registry[name].accepted_params(self.params))
            except ValueError as e:
                raise GridError("params", str(e)) from None
        unused = sorted(set(self.params) - {p.name for name in self.impls or registry for p in registry[name].params})
        if unused:
            raise GridError("params", f"no chosen implementation takes {', '.join(unused)}")

    def names(self) -> list[str]:
        """The implementations to run: the chosen ones, or every one that runs on the device here."""
        return list(self.impls) if self.impls else [name for name, why in availability(self.device).items() if not why]


def check_inputs(grid: DiffGrid) -> DiffGrid:
    """What ``nmsbench diff`` checks before it runs, beyond the grid's own checks: the file
    scenario's boxes file reads and holds --n boxes (no --n: all of them), a synthetic set fits
    in memory. Returns the grid with its box count (a :class:`GridError` says what is wrong)."""
    if grid.scenario == "file":
        try:
            recorded = len(datasets.load_boxes_file(grid.file, rows=grid.n))  # a CSV: its first rows only
        except ValueError as e:
            raise GridError("file", str(e)) from None
        if grid.n is None:
            return dataclasses.replace(grid, n=recorded)
        if grid.n > recorded:
            raise GridError("n", f"{grid.file} holds {recorded} boxes; --n asks for {grid.n}")
    else:
        try:
            datasets.check_fits(grid.n)
        except ValueError as e:
            raise GridError("n", str(e)) from None
    return grid


def run_grid(grid: DiffGrid, write=None, **_) -> CaseRun:
    """Run the grid's one case (what ``nmsbench diff`` writes to its file)."""
    grid = check_inputs(grid) if grid.n is None else grid
    return run_case(grid.scenario, grid.n, grid.overlap, grid.seed, grid.iou, classes=grid.classes, impls=grid.names(),
                    device=grid.device, path=grid.file, params=grid.params, canvas=grid.canvas)


register_benchmark(Benchmark("diff", "diff", DiffGrid, AXES, run_grid, total=lambda grid: 1, prepare=check_inputs))
