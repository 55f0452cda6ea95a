"""What two NMS variants suppress differently, on one regenerated box set.

    >>> case = run_case("chain", 256, overlap=0.6, seed=0, iou_threshold=0.5)
    >>> classes, counts = classify(case.n, case.keeps["torchvision"], case.keeps["allpairs"])
    >>> agreement_matrix(case.keeps)      # Jaccard of kept sets, every pair
    >>> write_case(case, "results/runs/diff-chain-256.json"); read_case(...)   # `nmsbench diff`

Implementations that cannot run here (no backend for the device, a missing module, no
CUDA device) or that raise are reported with the reason in ``CaseRun.unavailable`` /
``CaseRun.errors``, never raised. The case, its file format and the comparisons live in
:mod:`nmsbench.diff_cases` (re-exported here), which the dashboard reads files with: it
never runs an implementation, nor imports torch.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from . import datasets
from .api import run_nms
from .engine.axes import Axis, GridError, check_axes, floats, ints, names, parse_param
from .engine.plugins import Benchmark, register_benchmark
from .diff_cases import (  # noqa: F401 (re-exported: the file format and comparisons live there, torch-free)
    CLASS_NAMES, FORMAT, FORMAT_VERSION, KEPT_BY_BOTH, ONLY_A, ONLY_B, SUPPRESSED_BY_BOTH, CaseRun, agreement_matrix,
    case_from_dict, case_to_dict, classify, default_diff_path, diff_files, jaccard, read_case, remaining_score, write_case,
)
from .registry import implementations

DEFAULT_N = 512  # boxes of a synthetic set when --n is not given


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
