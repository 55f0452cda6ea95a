"""The accuracy benchmark: COCO metrics and per-image time of each NMS on pre-NMS candidates.

The grid is source x device x implementation x IoU threshold x parameter set; each case
gives one row in the results schema (``benchmark = "accuracy"``, ``timer = "wall"``):
``ap``, ``ap50``, ``ap75``, ``ar100``, ``ar100_crowded`` from the COCO evaluator, ``images``,
``detections`` (kept after the cap of 100 per image), ``kept`` (kept by NMS), ``n`` (the
candidates over all images), ``source_params``, and the time per image with its certainty.

Each case is prepared outside the timed region: :func:`nmsbench.accuracy.detect` runs it
on every image (its warm-up, and the detections the COCO evaluator scores, once). Then
every case of one source and device is a contender of the engine
(:mod:`nmsbench.engine.rounds`): its timed call is one pass of NMS over all the images
(:func:`nmsbench.accuracy.nms_pass`), and the cases take turns in rotated rounds under
the host gauge and the noise rule, like the sweep's implementations of one box set. A row's
``median_us``, ``iqr_us`` and raw samples are per image (a pass's time / images, so every
image counts as often as it occurs), ``runs`` the NMS calls timed (passes x images).

A source is loaded once and moved to each device once; a case that raises is an error
row, an unavailable backend a skipped row, and rows already in a resumed file are not run
again.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .accuracy import MAX_DETECTIONS, AccuracySource, coco_metrics, coco_source, detect, nms_pass, synthetic_source
from . import cluster  # it imports no dask: a run that asks for one does
from .engine.axes import (Axis, GridError, check_axes, floats, ints, merge_param_lists, names, parse_devices,
                          parse_param_list)
from .engine.plugins import Benchmark, register_benchmark
from .engine.settings import DEFAULT_RUN_TIME
from .engine.rounds import (SETTINGS_AXES, Contender, Measured, Settings, error_rows, error_text,
                            is_real, is_whole, prepare, finish_run, start_run, time_in_rounds)
from .engine.samples import Samples
from .registry import Implementation, implementations
from .results import case_key
from .timers import TIMERS, Callables
from .timing import DEFAULT_ROUNDS, HostGauge

SYNTHETIC_SOURCES = ("scenes-sparse", "scenes-clustered", "scenes-crowd")
COCO_SOURCE = "coco"
DEFAULT_IMAGES = 200
TIMER = "wall"  # what a detector waits for per image


def _check(ok: Callable[[object], bool], message: str) -> Callable[[object], str]:
    return lambda value: "" if ok(value) else f"{message}, got {value!r}"


def _among(what: str, choices: Callable[[], object]) -> Callable[[list], str]:
    def check(values: list) -> str:
        known = list(choices())
        bad = [v for v in values if v not in known]
        return f"unknown {what} {', '.join(map(str, bad))}; choose from {', '.join(map(str, known))}" if bad else ""
    return check


def _file(text: str) -> list[str]:
    from pathlib import Path

    if not Path(text).is_file():
        raise ValueError(f"{text}: no such file")
    return [text]


# the accuracy benchmark's axes: the command line's options and AccuracyGrid.validate's per-axis checks (the
# measurement settings, engine.rounds.SETTINGS_AXES, are every benchmark's shared options, checked too)
AXES = (
    Axis("impls", "--impl", names("implementations"), check=_among("implementation", lambda: sorted(implementations())),
         help="Implementations (repeat or comma-separate). Default: every one that runs on --device here; see "
              "`nmsbench list`."),
    Axis("devices", "--device", parse_devices, ["cpu"], help="cpu and/or cuda (repeat or comma-separate).",
         check=_among("device", lambda: ("cpu", "cuda"))),
    Axis("sources", "--source", names("sources"), check=_among("source", lambda: SYNTHETIC_SOURCES + (COCO_SOURCE,)),
         help=f"Synthetic scene sets with ground truth: {', '.join(SYNTHETIC_SOURCES)} (default: all three). sparse: a "
              "few objects apart; clustered: groups of objects of mixed classes; crowd: rows of overlapping objects of "
              "one class, where greedy NMS removes true objects."),
    Axis("images", "--images", ints("--images"), DEFAULT_IMAGES, many=False, metavar="K",
         check=_check(lambda v: is_whole(v) and v >= 1, "images must be a whole number >= 1"),
         help="Images per synthetic scene set."),
    Axis("seed", "--seed", ints("the seed", 0), 0, many=False, help="Seed of the synthetic scenes.",
         check=_check(lambda v: is_whole(v) and v >= 0, "seed must be a whole number >= 0")),
    Axis("ious", "--iou", floats("IoU thresholds"), [0.5],
         check=lambda values: "" if all(is_real(v) and 0.0 <= v <= 1.0 for v in values) else
         f"IoU thresholds must lie in [0, 1], got {values!r}",
         help="IoU thresholds (repeat or comma-separate). Matrix NMS and gaussian Soft-NMS do not use it."),
    Axis("params", "--param", parse_param_list, combine=merge_param_lists, metavar="KEY=VALUE[,VALUE...]",
         check=_check(lambda v: isinstance(v, dict), "params must be a dict of value lists"),
         help="Implementation parameter, given to those that take it; several values run each (e.g. "
              "kernel=linear,gaussian sigma=0.5 score_threshold=0.05). Without it: each one's defaults."),
    Axis("candidates", "--candidates", _file, many=False,
         help="Your detector's pre-NMS candidates, COCO results format: a JSON list of {image_id, category_id, bbox "
              "[x, y, width, height], score}. Needs --annotations; replaces the synthetic sources (rows: scenario=coco, "
              "image=this file's name)."),
    Axis("annotations", "--annotations", _file, many=False,
         help="Ground truth for --candidates: a COCO instances JSON (images, annotations, categories). Ids are whole "
              "numbers within +-2**53, annotation ids from 1; a bad entry is refused naming its field."),
    Axis("image_ids", "--image-ids", ints("image ids", None), metavar="ID,ID,...",
         check=lambda values: "" if all(is_whole(v) for v in values) else f"image ids must be whole numbers, got {values!r}",
         help="With --candidates: score only these images of --annotations."),
    cluster.cluster_axis("Spread the images over Dask workers: local:K (K worker processes here) or a scheduler's address "
                         "(tcp://host:8786); the COCO scores are the same as one process's."),
)


@dataclass
class AccuracyGrid:
    """The accuracy benchmark's axes; their product is the set of rows. It checks itself
    when made (:meth:`validate`): a bad value is a GridError."""

    impls: Optional[list[str]] = None  # None: every implementation that runs on one of the devices here
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    sources: Optional[list[str]] = None  # None: coco with candidates, else every synthetic source
    ious: list[float] = field(default_factory=lambda: [0.5])
    # parameter name -> the values to run; an implementation runs every combination of the
    # names it takes (none: its defaults)
    params: dict = field(default_factory=dict)
    images: int = DEFAULT_IMAGES  # per synthetic source
    seed: int = 0  # of the synthetic sources
    candidates: Optional[str] = None  # the coco source's files
    annotations: Optional[str] = None
    image_ids: Optional[list[int]] = None
    max_det: int = MAX_DETECTIONS
    rounds: int = DEFAULT_ROUNDS  # the measurement settings (nmsbench.engine.rounds.Settings)
    min_run_time: float = DEFAULT_RUN_TIME
    threads: int = 1
    repeat_noisy: int = 0
    case_timeout: Optional[float] = None  # seconds a case may take, its detections and scoring included
    host_wait: float = 0.0
    cluster: Optional[str] = None  # local:K or a Dask scheduler's address (nmsbench.cluster_accuracy); None: this process

    def __post_init__(self):
        if self.params is None:
            self.params = {}
        if self.sources is None:
            self.sources = [COCO_SOURCE] if self.candidates else list(SYNTHETIC_SOURCES)
        if self.impls is None:
            known = implementations()
            self.impls = sorted(name for name, impl in known.items() if any(
                d in impl.backends and impl.backends[d].availability()[0] for d in self.devices or ()))
        self.validate()

    def validate(self) -> None:
        """Raise GridError for anything that cannot be run: each axis's checks (:data:`AXES`),
        then those across axes (files and sources, parameters)."""
        check_axes(self, AXES + SETTINGS_AXES)
        if bool(self.candidates) != bool(self.annotations):
            raise GridError("candidates", "--candidates and --annotations go together: the candidates and their ground truth")
        if self.image_ids and not self.candidates:
            raise GridError("image_ids", "picks images of --candidates/--annotations; give those too")
        if self.candidates and self.sources != [COCO_SOURCE]:
            raise GridError("sources", "--source picks synthetic scene sets; with --candidates the source is your files")
        if COCO_SOURCE in self.sources and not self.candidates:
            raise GridError("sources", f"unknown {COCO_SOURCE}; choose from {', '.join(SYNTHETIC_SOURCES)} "
                            "(your own data: --candidates and --annotations)")
        known = implementations()
        for name in self.impls:
            for given in self.param_sets(known[name]):
                try:
                    known[name].resolve_params(given)
                except ValueError as e:
                    raise GridError("params", str(e)) from None
        unused = set(self.params) - {p.name for name in self.impls for p in known[name].params}
        if unused:
            raise GridError("params", f"no selected implementation takes {', '.join(sorted(unused))}")

    @property
    def settings(self) -> Settings:
        return Settings.of(self)

    def param_sets(self, impl: Implementation) -> list[dict]:
        """The parameter sets ``impl`` runs with: each combination of the values of the
        names it takes (as given, not yet checked)."""
        taken = {name: values for name, values in self.params.items() if name in {p.name for p in impl.params}}
        return [dict(zip(taken, combo)) for combo in itertools.product(*taken.values())] or [{}]

    def count(self) -> int:
        known = implementations()
        per_source = sum(len(self.param_sets(known[name])) if name in known else 1 for name in self.impls)
        return len(self.sources) * len(self.devices) * len(self.ious) * per_source


def load_source(grid: AccuracyGrid, name: str) -> AccuracySource:
    """The source ``name`` of ``grid`` (a synthetic kind, or coco: the grid's files)."""
    if name == COCO_SOURCE:
        return coco_source(grid.candidates, grid.annotations, grid.image_ids)
    if name in SYNTHETIC_SOURCES:
        return synthetic_source(name, grid.images, grid.seed)
    raise ValueError(f"unknown source {name!r}; known: {', '.join(SYNTHETIC_SOURCES + (COCO_SOURCE,))}")


@dataclass(eq=False)
class _Case(Contender):
    """One case of a source and device while it is timed: its row and scored detections."""

    row: dict = field(default_factory=dict)
    scored: dict = field(default_factory=dict)


def run_accuracy_bench(grid: AccuracyGrid, write: Callable[[dict], None],
                       on_case: Callable[[dict], None] = lambda row: None, done: frozenset | set = frozenset(),
                       between_turns: Callable[[], None] = lambda: None, gauge: Optional[HostGauge] = None) -> dict:
    """Run every case of ``grid``; ``write`` gets each row as soon as it exists. Rows whose
    :func:`~nmsbench.results.case_key` is in ``done`` (already written) are not run again.
    ``between_turns()`` runs after each case's turn; ``gauge`` reads the host's speed
    (default: a new ``HostGauge``); the counts returned carry its summary under ``host``.
    ``grid.cluster``: on Dask workers (:mod:`nmsbench.cluster_accuracy`)."""
    if grid.cluster:
        from .cluster_accuracy import run_accuracy

        return run_accuracy(grid, write, on_case, done, between_turns, gauge, cluster_parts())
    emit, counts, gauge = start_run(grid, write, on_case, gauge)
    known = implementations()
    for source_name in grid.sources:
        try:
            source, failure = load_source(grid, source_name), None
        except Exception as exc:
            source, failure = None, f"loading source {source_name}: {error_text(exc)}"
        base = {"benchmark": "accuracy", "scenario": source_name, "dtype": "float32", "timer": TIMER,
                "threads": grid.threads, "seed": grid.seed if source_name in SYNTHETIC_SOURCES else ""}
        if source is not None:
            base |= {"image": source.image, "n": source.n, "classes": source.classes, "images": len(source.images),
                     "source_params": source.source_params}
        for device in grid.devices:
            rows = []
            for name in grid.impls:
                impl = known.get(name)
                for given in (grid.param_sets(impl) if impl else [{}]):
                    rows += [_case_row(base, impl, name, device, iou, given) for iou in grid.ious]
            rows = [row for row in rows if case_key(row) not in done]
            if failure:
                for row in rows:
                    emit(row | {"status": "error", "error": failure})
                continue
            for row in _run_group(rows, known, source, device, grid, between_turns, gauge):
                emit(row)
    return finish_run(counts, gauge)


def _run_group(rows: list[dict], known: dict, source: AccuracySource, device: str, grid: AccuracyGrid,
               between_turns: Callable[[], None], gauge: HostGauge):
    """The rows of every case of one source and device: each case run and scored once,
    then all timed together in rotated rounds (rows in the order of ``rows``)."""
    settings = grid.settings
    results: dict[int, dict] = {}  # row index -> its finished row (skipped, error)
    contenders: list[tuple[int, _Case]] = []
    on_device = None
    for k, row in enumerate(rows):
        impl = known.get(row["impl"])
        skip = _unrunnable(impl, row["impl"], device)
        if skip:
            results[k] = row | {"status": "skipped", "error": skip}
            continue
        case = _Case(label=f"{row['impl']} {row['params']} iou={row['iou_threshold']:g}", cpu=device == "cpu", row=row)
        try:
            if on_device is None:
                on_device = source.to(device)
            prepare(case, settings, lambda: _prepare(case, on_device, grid.max_det))
        except Exception as exc:
            results[k] = next(error_rows([row], exc))
            continue
        contenders.append((k, case))
    outcomes = time_in_rounds([case for _, case in contenders], settings, gauge, between_turns) if contenders else []
    images = len(source.images)
    for (k, case), outcome in zip(contenders, outcomes):
        if outcome.error is not None:
            results[k] = next(error_rows([case.row], outcome.error))
        elif TIMER in outcome.skipped:
            results[k] = case.row | {"status": "skipped", "error": outcome.skipped[TIMER]}
        else:
            results[k] = case.row | case.scored | per_image(outcome.measured[TIMER], images) | {"status": "ok", "error": ""}
    for k in range(len(rows)):
        yield results[k]


def _prepare(case: _Case, source: AccuracySource, max_det: int) -> None:
    """The case run once on every image (warm-up) and its detections scored, outside the
    timed region; its timed call: one pass over the images."""
    row = case.row
    params = json.loads(row["params"])
    iou = row["iou_threshold"]
    result = detect(row["impl"], source, iou, params, max_det)
    metrics = coco_metrics(source.ground_truth, result.rows, source.crowded)
    case.scored = {"kept": result.kept, "detections": len(result.rows),
                   **{k: "" if math.isnan(v) else v for k, v in metrics.items()}}
    case.calls[TIMER] = TIMERS[TIMER].build(Callables(op=nms_pass(row["impl"], source, iou, params)))


def per_image(measured: Measured, images: int) -> dict:
    """A row's measurement columns per image: a pass's times (and raw samples) / ``images``;
    ``runs``: the NMS calls timed (passes x images). Relative spreads stay as they are."""
    columns = measured.columns()
    if images <= 1:
        return columns
    s: Samples = columns["_samples"]
    return columns | {
        "median_us": columns["median_us"] / images, "iqr_us": columns["iqr_us"] / images, "runs": columns["runs"] * images,
        "_samples": Samples(tuple(v / images for v in s.round_medians_us),
                            tuple(tuple(v / images for v in block) for block in s.blocks_us))}


def _case_row(base: dict, impl: Optional[Implementation], name: str, device: str, iou: float, given: dict) -> dict:
    """The identifying columns of one case's row (params: resolved where they check out, so
    that a resumed run finds the rows it wrote)."""
    backend = impl.backends.get(device) if impl else None
    try:
        params = impl.resolve_params(given) if impl else given
    except ValueError:
        params = given
    return base | {"impl": name, "family": impl.family if impl else "", "device": device, "iou_threshold": iou,
                   "params": json.dumps(params, sort_keys=True),
                   "host_sync": backend.host_sync if backend else "", "graph_safe": backend.graph_safe if backend else ""}


def _unrunnable(impl: Optional[Implementation], name: str, device: str) -> Optional[str]:
    """Why a case cannot run here (a skipped row), or None."""
    if impl is None:
        return f"no implementation named {name}"
    backend = impl.backends.get(device)
    if backend is None:
        return f"{name} has no {device} backend"
    available, reason = backend.availability()
    if not available:
        return reason
    if torch.float32 not in backend.dtypes:
        return f"float32 not supported on {device}"
    return None


def cluster_parts():
    """What :mod:`nmsbench.cluster_accuracy` (which this module imports) needs of this one;
    its functions travel to the workers by reference."""
    from types import SimpleNamespace

    return SimpleNamespace(SYNTHETIC_SOURCES=SYNTHETIC_SOURCES, TIMER=TIMER, case_row=_case_row, unrunnable=_unrunnable,
                           load_source=load_source, per_image=per_image)


# --- the command line's part: checks before a run


def check_inputs(grid: AccuracyGrid) -> AccuracyGrid:
    """What the command checks before anything runs: a COCO evaluator is installed, and
    the coco source's files load (refused naming the file, entry and field)."""
    from .accuracy import evaluator_name

    try:
        evaluator_name()
    except RuntimeError as e:
        raise ValueError(str(e)) from None
    if grid.candidates:
        try:
            load_source(grid, COCO_SOURCE)
        except ValueError as e:
            raise GridError("candidates", str(e)) from None
    if grid.cluster:
        cluster.check_grid(grid)
    return grid


HELP = """Score each NMS with COCO AP/AR on candidates with ground truth, and time it per image.

    \b
    nmsbench accuracy                                      every CPU implementation, the three scene sets
    nmsbench accuracy --images 50 --impl torchvision,soft_nms,matrix_recompute --iou 0.5,0.6
    nmsbench accuracy --impl soft_nms --param kernel=linear,gaussian --source scenes-crowd
    nmsbench accuracy --candidates preds.json --annotations instances_val2017.json --device cuda

    For each implementation x IoU threshold x parameter set, NMS runs on each image's
    candidates (class-aware) through nmsbench.run_nms; each image keeps its 100 best
    detections by final score, and a COCO evaluator (faster-coco-eval, else pycocotools)
    scores them. One row per case (benchmark=accuracy): ap, ap50, ap75, ar100,
    ar100_crowded (fractions 0..1 in the CSV, as the evaluator gives them; the summary,
    export tables, plots and dashboard show them in %, one decimal), and median_us /
    iqr_us per image: the cases of one source and device
    take turns timing a pass over the images in rotated rounds (--rounds), with the noisy
    flag of the sweep. README, Accuracy, says what the synthetic scenes stand for.
    """

register_benchmark(Benchmark(
    name="accuracy", command="accuracy", grid=AccuracyGrid, axes=AXES, run=run_accuracy_bench, total=AccuracyGrid.count,
    help=HELP, prepare=check_inputs,
    describe=lambda row: f"{row['scenario']:>16} {row['impl']:<20} {row['device']} iou={row['iou_threshold']:g}",
    label=lambda row: f"{row['impl']} {row['device']} {row['scenario']} iou={row['iou_threshold']:g} params={row['params']}"))

__all__ = ["AXES", "AccuracyGrid", "COCO_SOURCE", "DEFAULT_IMAGES", "SYNTHETIC_SOURCES", "load_source", "per_image",
           "run_accuracy_bench"]
