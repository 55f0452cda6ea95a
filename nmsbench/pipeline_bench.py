"""The post-processing benchmark: raw detector output -> final detections, per stage.

The grid is source x batch x confidence threshold x device x pipeline, and each case
gives one row per stage (decode, nms, total) and timer, in the results schema of
``nmsbench sweep`` (``benchmark = "pipeline"``). For each source the raw batch is made
once for the largest batch size (smaller batches are its first images) and validated
once; for each (batch, threshold) the numpy reference runs once, and every pipeline's
detections are compared with it detection by detection (``kept, ref_kept, jaccard,
extra, missing, mismatched``). A pipeline is built outside the timed region (tensor
moves, buffers), called once (warm-up: numba compilation; its output is the one
compared), and each of its stages is a contender of the engine (:mod:`nmsbench.engine.rounds`):
``decode`` on the raw batch, ``nms`` on the candidates that decode produced, ``total``
end to end. Every stage of every pipeline of one (source, batch, threshold, device) is
timed together in rotated rounds, under the host gauge and the noise rule, like the
sweep's implementations of one box set. After the timing each pipeline runs once more:
detections other than its warm-up call's make its rows error rows (the timed calls did not
compute what was checked: a CUDA graph reading freed memory, state left by a call).

A stage is part of its total, so a stage timed above its total beyond the noise is an
impossible measurement (:func:`impossible`); the case group is re-timed once, and where
it persists both rows are flagged noisy and say why. A candidate-buffer overflow, or any
exception, is an error row with the message; an unavailable pipeline a skipped row.

A pipeline that is one call (the batched op, eager or replayed in a CUDA graph) has only
the ``total`` stage (``Pipeline.stages``): no decode or nms rows are written for it. A
pipeline that cannot read a source's layout gives skipped rows saying so.

Sources, each in one raw layout (``PipelineConfig.layout``; the rows' ``params`` say it):
``real`` replays the recorded YOLOv3-tiny raw rows (yolov5 layout; ``nmsbench.datasets.real``;
images cycle through the recordings that keep raw rows); ``synthetic`` is a YOLOv5-shaped
[B, 25200, 85] tensor and ``synthetic_yolov8`` the same detections in YOLOv8's layout
[B, 84, 25200] (``nmsbench.datasets.synthetic_raw``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from . import cluster, datasets  # cluster imports no dask: a run that asks for one does
from .engine.axes import Axis, GridError, check_axes, floats, ints, names, parse_devices
from .engine.plugins import Benchmark, register_benchmark
from .engine.retries import SlowHostRetries, default_slow_retries, slow_retries_axis
from .engine.settings import DEFAULT_RUN_TIME
from .engine.rounds import (SETTINGS_AXES, Contender, Outcome, Settings, error_rows, error_text,
                            is_real, is_whole, prepare, finish_run, start_run, time_in_rounds)
from .pipeline import (LAYOUT_FIELDS, REFERENCE_PIPELINE, STAGES, Pipeline, PipelineConfig, compare_detections, pipelines, run_pipeline,
                       validate_raw)
from .results import case_key
from .timers import TIMERS, Callables, timer_passes
from .timing import DEFAULT_ROUNDS, HostGauge, Timing

SOURCES = ("real", "synthetic", "synthetic_yolov8")
SOURCE_LAYOUTS = {"real": "yolov5", "synthetic": "yolov5", "synthetic_yolov8": "yolov8"}
DEFAULT_BATCHES = (1, 8, 32, 64)
DEFAULT_TIMERS = ("wall", "device")


def pipeline_timers() -> list[str]:
    """The registered timers a pipeline stage can be timed with: every one that does not
    need a ``graph_safe`` backend (a pipeline has no padded form to capture)."""
    return [name for name, timer in TIMERS.items() if not timer.needs_graph_safe]


def _check(ok: Callable[[object], bool], message: str) -> Callable[[object], str]:
    return lambda value: "" if ok(value) else f"{message}, got {value!r}"


def _every(ok: Callable[[object], bool], message: str) -> Callable[[list], str]:
    return lambda values: "" if all(ok(v) for v in values) else f"{message}, got {values!r}"


def _among(what: str, choices: Callable[[], object]) -> Callable[[list], str]:
    def check(values: list) -> str:
        known = list(choices())
        bad = [v for v in values if v not in known]
        return f"unknown {what} {', '.join(map(str, bad))}; choose from {', '.join(map(str, known))}" if bad else ""
    return check


def _one(parse: Callable[[str], list]) -> Callable[[str], list]:
    def one(text: str) -> list:
        values = parse(text)
        if len(values) != 1:
            raise ValueError(f"one value, got {text!r}")
        return values
    return one


# the pipeline benchmark's axes: the command line's options and PipelineGrid.validate's per-axis checks (the
# measurement settings, engine.rounds.SETTINGS_AXES, are every benchmark's shared options, checked too)
AXES = (
    Axis("batches", "--batch", ints("batch sizes"), list(DEFAULT_BATCHES), help="Batch sizes (comma-separated).",
         check=_every(lambda b: is_whole(b) and b >= 1, "batch sizes must be positive whole numbers")),
    Axis("devices", "--device", parse_devices, ["cpu"], help="cpu and/or cuda (repeat or comma-separate).",
         check=_among("device", lambda: ("cpu", "cuda"))),
    Axis("sources", "--source", names("sources"), list(SOURCES), check=_among("source", lambda: SOURCES),
         help="The input and its raw layout. real: the recorded YOLOv3-tiny raw rows (yolov5 layout; images cycle "
              "through the recordings that keep them); synthetic: a YOLOv5-shaped [B, 25200, 85] tensor; "
              "synthetic_yolov8: the same detections in YOLOv8's layout [B, 84, 25200] (channels first, no "
              "objectness, class score = objectness x class)."),
    Axis("pipelines", "--pipeline", names("pipelines"), check=_among("pipeline", lambda: pipelines()),
         help="Pipelines to run (repeat or comma-separate). Default: all; see --list."),
    Axis("confs", "--conf", floats("confidence thresholds"), [0.25], help="Confidence thresholds (repeat or comma-separate).",
         check=_every(lambda c: is_real(c) and 0.0 <= c <= 1.0, "confidence thresholds must lie in [0, 1]")),
    Axis("iou", "--iou", _one(floats("the IoU threshold")), 0.45, many=False, help="IoU threshold of the class-aware NMS.",
         check=_check(lambda v: is_real(v) and 0.0 <= v <= 1.0, "the IoU threshold must lie in [0, 1]")),
    Axis("max_det", "--max-det", ints("--max-det"), 300, many=False, help="Detections kept per image.",
         check=_check(lambda v: is_whole(v) and v >= 1, "max_det must be a whole number >= 1")),
    Axis("max_candidates", "--max-candidates", ints("--max-candidates"), 4096, many=False,
         check=_check(lambda v: is_whole(v) and v >= 1, "max_candidates must be a whole number >= 1"),
         help="The torch front end's fixed candidate buffer per image (the seed's MAX_FILTERED); more candidates is an "
              "error row, never a silent drop."),
    Axis("seed", "--seed", ints("the seed", 0), 0, many=False, help="Seed of the synthetic source.",
         check=_check(lambda v: is_whole(v) and v >= 0, "seed must be a whole number >= 0")),
    Axis("recordings", "--recording", names("recordings"),
         help="Real source: recordings with raw rows to cycle through (default: all of them)."),
    Axis("stages", "--stage", names("stages"), list(STAGES), check=_among("stage", lambda: STAGES),
         help="Stages to time: decode, nms, total."),
    Axis("timers", "--timer", names("timers"), list(DEFAULT_TIMERS), check=_among("timer", pipeline_timers),
         help="Timers of the stages (every registered timer but those needing a graph-safe backend; those of the GPU "
              "give cuda rows only; api times the public run_pipeline, for the total stage)."),
    slow_retries_axis("case group (a source, batch and threshold on one device)"),
    cluster.cluster_axis("Run the case groups (a source, batch and threshold on one device) on Dask workers: local:K or a "
                         "scheduler's address (tcp://host:8786)."),
)


@dataclass
class PipelineGrid:
    """The pipeline benchmark's axes; their product (times stages and timers) is the set of
    rows. It checks itself when made (:meth:`validate`): a bad value is a GridError."""

    pipelines: Optional[list[str]] = None  # None: every pipeline
    devices: list[str] = field(default_factory=lambda: ["cpu"])
    sources: list[str] = field(default_factory=lambda: list(SOURCES))
    batches: list[int] = field(default_factory=lambda: list(DEFAULT_BATCHES))
    confs: list[float] = field(default_factory=lambda: [0.25])
    iou: float = 0.45
    max_det: int = 300
    max_candidates: int = 4096
    seed: int = 0  # of the synthetic source
    recordings: Optional[list[str]] = None  # of the real source; None: every recording with raw rows
    stages: list[str] = field(default_factory=lambda: list(STAGES))
    timers: list[str] = field(default_factory=lambda: list(DEFAULT_TIMERS))
    rounds: int = DEFAULT_ROUNDS  # the measurement settings (nmsbench.engine.rounds.Settings)
    min_run_time: float = DEFAULT_RUN_TIME
    threads: int = 1
    repeat_noisy: int = 0
    case_timeout: Optional[float] = None  # seconds a stage may take, its pipeline's build and warm-up included
    host_wait: float = 0.0
    cluster: Optional[str] = None  # local:K or a Dask scheduler's address (nmsbench.cluster_pipeline)
    slow_retries: Optional[int] = None  # re-timings at the end of a pass of rows flagged for a slow host; None: default_slow_retries

    def __post_init__(self):
        if self.pipelines is None:
            self.pipelines = list(pipelines())
        if self.slow_retries is None:
            self.slow_retries = default_slow_retries(self.devices)
        self.validate()

    def validate(self) -> None:
        """Raise GridError for anything that cannot be run: each axis's checks (:data:`AXES`),
        then those across axes."""
        check_axes(self, AXES + SETTINGS_AXES)
        idle = [d for d in self.devices if not self.timers_for(d)]
        if idle:
            raise GridError("timers", f"{', '.join(self.timers)} give{'s' if len(self.timers) == 1 else ''} no "
                            f"{' or '.join(idle)} rows; add wall")

    @property
    def settings(self) -> Settings:
        return Settings.of(self)

    def timers_for(self, device: str) -> list[str]:
        return [t for t in self.timers if t in TIMERS and device in TIMERS[t].devices]

    def count(self) -> int:
        known = pipelines()
        stages = sum(len([s for s in self.stages if name not in known or s in known[name].stages]) for name in self.pipelines)
        per_case = sum(len(self.timers_for(d)) for d in self.devices) * stages
        return len(self.sources) * len(self.batches) * len(self.confs) * per_case


def load_source(source: str, batch: int, seed: int = 0, recordings: Optional[list[str]] = None):
    """(raw float32 in the source's layout (:data:`SOURCE_LAYOUTS`), the image of each batch
    entry, input size) for a source."""
    if source == "real":
        return datasets.real.real_raw(batch, recordings)
    if source in ("synthetic", "synthetic_yolov8"):
        from .datasets.synthetic_raw import INPUT_SIZE, synthetic_raw

        raw = synthetic_raw(batch, seed, SOURCE_LAYOUTS[source])
        return raw, [f"synthetic:{seed}:{b}" for b in range(batch)], INPUT_SIZE
    raise ValueError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")


def _load_checked(source: str, batch: int, seed: int = 0, recordings: Optional[list[str]] = None):
    """:func:`load_source`, its raw rows checked for the source's layout (a cluster worker's loader)."""
    loaded = load_source(source, batch, seed, recordings)
    validate_raw(loaded[0], SOURCE_LAYOUTS[source])
    return loaded


def _images_column(source: str, images: list[str], seed: int) -> str:
    if source.startswith("synthetic"):
        return f"{source}(seed={seed})"
    return ",".join(dict.fromkeys(key.rpartition("@")[0] for key in images))


def run_pipeline_bench(grid: PipelineGrid, write: Callable[[dict], None],
                       on_case: Callable[[dict], None] = lambda row: None, done: frozenset | set = frozenset(),
                       between_turns: Callable[[], None] = lambda: None, gauge: Optional[HostGauge] = None) -> dict:
    """Run every case of ``grid``; ``write`` gets each row as soon as it exists. Rows whose
    :func:`~nmsbench.results.case_key` is in ``done`` (already written) are not run again.
    ``between_turns()`` runs after each contender's turn; ``gauge`` reads the host's speed
    (default: a new ``HostGauge``); the counts returned carry its summary under ``host``."""
    if grid.cluster:
        from .cluster_pipeline import run_pipeline

        return run_pipeline(grid, write, on_case, done, between_turns, gauge, (_pipeline_pass, _load_checked, timer_passes))
    emit, counts, gauge = start_run(grid, write, on_case, gauge)
    loaded: dict = {}  # the sources, made once for every timer pass (64 synthetic images take seconds)
    for part in timer_passes(grid):
        _pipeline_pass(part, emit, done, between_turns, gauge, loaded)
    return finish_run(counts, gauge)


def _pipeline_pass(grid: PipelineGrid, emit: Callable[[dict], None], done, between_turns: Callable[[], None] = lambda: None,
                   gauge: Optional[HostGauge] = None, loaded: Optional[dict] = None) -> None:
    """Every case of ``grid`` (one pass of :func:`run_pipeline_bench`), its rows to ``emit``;
    ``loaded`` keeps the sources read by an earlier pass."""
    known = pipelines()
    gauge = gauge or HostGauge()
    loaded = {} if loaded is None else loaded
    with SlowHostRetries(grid.slow_retries, emit) as later:  # a stopped pass writes the held rows as they are
        _cases_of_pass(grid, emit, done, between_turns, gauge, loaded, known, later)


def _cases_of_pass(grid: PipelineGrid, emit: Callable[[dict], None], done, between_turns: Callable[[], None],
                   gauge: HostGauge, loaded: dict, known: dict, later: SlowHostRetries) -> None:
    """The body of :func:`_pipeline_pass`: each source, batch and threshold's case groups,
    then ``later``'s re-timings."""

    def rows_of(base: dict, name: str, device: str) -> list[dict]:
        pipeline = known.get(name)
        common = base | {"impl": name, "family": pipeline.nms_family if pipeline else "", "device": device}
        stages = [s for s in grid.stages if pipeline is None or s in pipeline.stages]
        rows = [common | {"stage": s, "timer": t} for s in stages for t in grid.timers_for(device)]
        return [row for row in rows if case_key(row) not in done]

    for source in grid.sources:
        layout = SOURCE_LAYOUTS[source]
        params = {"max_det": grid.max_det, "max_candidates": grid.max_candidates}
        if layout != "yolov5":  # yolov5 rows keep the params of files written before the layout was a choice
            params["layout"] = layout
        params = json.dumps(params, sort_keys=True)
        try:
            key = (source, max(grid.batches), grid.seed, tuple(grid.recordings or ()))
            if key not in loaded:
                raw_all, images, size = load_source(*key[:3], grid.recordings)
                validate_raw(raw_all, layout)
                loaded[key] = raw_all, images, size
            raw_all, images, size = loaded[key]
            failure = None
        except Exception as exc:
            raw_all, images, size, failure = None, [], "", f"loading source {source}: {error_text(exc)}"
        for batch in grid.batches:
            for conf in grid.confs:
                base = {"benchmark": "pipeline", "scenario": source, "overlap": conf, "iou_threshold": grid.iou,
                        "seed": grid.seed if source != "real" else "", "classes": 80, "dtype": "float32",
                        "batch": batch, "params": params, "threads": grid.threads, "input_size": size}
                if failure:
                    for device in grid.devices:
                        for name in grid.pipelines:
                            for row in rows_of(base, name, device):
                                emit(row | {"status": "error", "error": failure})
                    continue
                raw = raw_all[:batch]
                rows_axis, fields = (2, 1) if layout == "yolov8" else (1, 2)
                base |= {"n": raw.shape[rows_axis], "classes": raw.shape[fields] - LAYOUT_FIELDS[layout],
                         "image": _images_column(source, images[:batch], grid.seed)}
                cases = [(device, name) for device in grid.devices for name in grid.pipelines if rows_of(base, name, device)]
                if not cases:  # all written already (--resume)
                    continue
                try:
                    config = PipelineConfig(conf, grid.iou, grid.max_det, grid.max_candidates, (size, size), layout)
                    reference_pipeline = known[REFERENCE_PIPELINE].build(raw, config, "cpu")
                    reference = reference_pipeline.nms(candidates := reference_pipeline.decode())
                    base["candidates"] = sum(len(c.rows) for c in candidates)
                    failure_case = None
                except Exception as exc:
                    config, reference, failure_case = None, None, f"reference pipeline: {error_text(exc)}"
                for device in dict.fromkeys(device for device, _ in cases):  # one case group per device
                    members = [(name, rows_of(base, name, device)) for d, name in cases if d == device]
                    if failure_case:
                        for _, rows in members:
                            for row in rows:
                                emit(row | {"status": "error", "error": failure_case})
                        continue
                    def run(members, device=device, raw=raw, config=config, reference=reference):
                        """The rows of ``members`` (all of the group's, or a retry's flagged ones)."""
                        return _run_group(known, members, device, raw, config, reference, grid, between_turns, gauge)

                    for row in run(members):
                        if not later.hold(row, members, run):
                            emit(row)
    later.finish()


@dataclass(eq=False)
class _Stage(Contender):
    """One stage of one pipeline in a case group: its rows, and the pipeline's warm-up results."""

    name: str = ""
    stage: str = ""
    rows: list = field(default_factory=list)
    built: dict = field(default_factory=dict)  # the pipeline's: agreement, peak, its first error


def _run_group(known: dict, members: list, device: str, raw: np.ndarray, config: PipelineConfig, reference,
               grid: PipelineGrid, between_turns: Callable[[], None], gauge: HostGauge):
    """The rows of every pipeline of one case group (a source, batch, threshold and device):
    each pipeline built and checked, then all its stages timed together in rotated rounds."""
    settings = grid.settings
    contenders: list[_Stage] = []
    for name, rows in members:
        pipeline = known.get(name)
        skip = f"no pipeline named {name}" if pipeline is None else None
        if pipeline is not None:
            available, reason = pipeline.availability(device)
            if available:
                available, reason = pipeline.reads(config.layout)
            skip = None if available else reason
        if skip:
            yield from (row | {"status": "skipped", "error": skip} for row in rows)
            continue
        stages = [_Stage(label=f"{name}:{stage}", cpu=device == "cpu", name=name, stage=stage,
                         rows=[row for row in rows if row["stage"] == stage]) for stage in grid.stages]
        stages = [s for s in stages if s.rows]
        built: dict = {}
        try:
            prepare(stages[0], settings, lambda: _build(pipeline, name, device, raw, config, reference, stages, built))
        except Exception as exc:
            yield from error_rows(rows, exc)
            continue
        for stage in stages:
            stage.built = built
            for timer, why in stage.built.get("skipped", {}).get(stage.stage, {}).items():
                yield from (row | {"status": "skipped", "error": why} for row in stage.rows if row["timer"] == timer)
            if stage.calls:
                contenders.append(stage)
    if not contenders:
        return
    outcomes = time_in_rounds(contenders, settings, gauge, between_turns)
    retimed = bool(_impossible_pairs(contenders, outcomes))
    if retimed:  # a stage above its total beyond the noise: once more, all of the group
        outcomes = time_in_rounds(contenders, settings, gauge, between_turns)
    flags = _impossible_pairs(contenders, outcomes)
    changed = {name: _rechecked(stage.built) for name, stage in {c.name: c for c in contenders}.items()}
    for contender, outcome in zip(contenders, outcomes):
        if changed[contender.name]:
            yield from error_rows(contender.rows, RuntimeError(changed[contender.name]))
        else:
            yield from _rows(contender, outcome, device, retimed, flags)


def _difference(detections: list, checked: list) -> str:
    """How ``detections`` differ from the ``checked`` ones ("" where they are identical)."""
    agreement = compare_detections(detections, checked)
    if agreement["jaccard"] == 1.0 and not agreement["mismatched"]:
        return ""
    return (f"Jaccard {agreement['jaccard']:.4f}, {agreement['extra']} extra, {agreement['missing']} missing, "
            f"{agreement['mismatched']} changed")


def _rechecked(built: dict) -> str:
    """Runs a pipeline once more after its timing: why its times cannot be reported ("" where
    its detections are still its checked warm-up call's)."""
    try:
        difference = built["recheck"]()
    except Exception as exc:
        return f"its call after timing failed: {error_text(exc)}"
    return difference and (f"its detections after timing differ from its checked warm-up call's ({difference}): the "
                           "timed calls did not compute what was checked, so their times are not reported")


def _build(pipeline: Pipeline, name: str, device: str, raw: np.ndarray, config: PipelineConfig, reference,
           stages: list[_Stage], built: dict) -> None:
    """The pipeline built on the batch, its warm-up call (its output checked against the
    reference), its peak memory, and each stage's call for each of its timers."""
    peak = ""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    prepared = pipeline.build(raw, config, device)
    detections = prepared.detections()  # warm-up, and the output that is checked
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    built |= {"agreement": compare_detections(detections, reference), "peak": peak, "skipped": {},
              "recheck": lambda: _difference(prepared.detections(), detections)}
    ops = {"total": prepared.run}
    if "decode" in prepared.stages:
        candidates = prepared.decode()
        ops |= {"decode": prepared.decode, "nms": lambda: prepared.nms(candidates)}

    def same_detections(timer: str, output) -> None:
        output = output if isinstance(output, list) else prepared.finish(output)  # api: run_pipeline's detections
        difference = _difference(output, detections)
        if difference:
            raise RuntimeError(f"the {timer} timer's call gives other detections than the pipeline's ({difference})")

    for stage in stages:
        public = (lambda: run_pipeline(name, raw, config, device)) if stage.stage == "total" else None
        offered = Callables(op=ops[stage.stage], public=public, check=same_detections)
        for timer in dict.fromkeys(row["timer"] for row in stage.rows):
            try:
                stage.calls[timer] = TIMERS[timer].build(offered)
            except ValueError as exc:  # this timer cannot time this stage (api: no public call of a stage alone)
                why = f"the {timer} timer does not time the {stage.stage} stage: {exc}"
                built["skipped"].setdefault(stage.stage, {})[timer] = why


def impossible(stage: Timing, total: Timing) -> bool:
    """Whether a stage's timing lies above its total's beyond the noise: its median less half
    its IQR above the total's median plus half the total's IQR. With ``median ± IQR / 2``
    standing for each row's middle half of blocks, the stage's middle half lies wholly
    above the total's, which the spread of neither explains; a stage is part of its total."""
    return stage.median_us - stage.iqr_us / 2 > total.median_us + total.iqr_us / 2


def _impossible_pairs(contenders: list[_Stage], outcomes: list[Outcome]) -> dict:
    """{(pipeline, timer): [stages timed above its total beyond the noise]}."""
    measured = {(c.name, c.stage): o.measured for c, o in zip(contenders, outcomes) if o.error is None}
    found: dict = {}
    for (name, stage), by_timer in measured.items():
        totals = measured.get((name, "total"), {}) if stage != "total" else {}
        for timer, m in by_timer.items():
            if timer in totals and impossible(m.timing, totals[timer].timing):
                found.setdefault((name, timer), []).append(stage)
    return found


def _rows(contender: _Stage, outcome: Outcome, device: str, retimed: bool, flags: dict):
    if outcome.error is not None:
        yield from error_rows(contender.rows, outcome.error)
        return
    for row in contender.rows:
        timer = row["timer"]
        if timer in outcome.skipped:
            yield row | {"status": "skipped", "error": outcome.skipped[timer]}
            continue
        if timer not in outcome.measured:  # skipped when its call was built
            continue
        columns = outcome.measured[timer].columns()
        columns["attempts"] += retimed
        above = flags.get((contender.name, timer), [])
        why = ""
        if contender.stage in above:
            why = (f"the {contender.stage} stage timed above its total beyond both IQRs (impossible: a stage is part of "
                   "the total), again when its case was re-timed")
        elif contender.stage == "total" and above:
            why = f"the {' and '.join(above)} stage timed above this total beyond both IQRs, again when re-timed"
        if why:
            columns |= {"noisy": True, "noise": "; ".join(filter(None, [columns["noise"], why]))}
        yield row | contender.built["agreement"] | columns | {
            "status": "ok", "error": "", "peak_mem_bytes": contender.built["peak"],
            "host_sync": device == "cuda" and contender.name != REFERENCE_PIPELINE}


def per_image_table(frame):
    """Pipeline rows of a results frame as time per image: one row per (source, device, pipeline,
    batch, stage, timer, conf) with ``us_per_image`` = median_us / batch (ok rows only)."""
    rows = frame[(frame["benchmark"] == "pipeline") & (frame["status"] == "ok")].copy()
    rows["us_per_image"] = rows["median_us"] / rows["batch"].astype(float)
    keys = ["scenario", "device", "impl", "batch", "stage", "timer", "overlap"]
    return rows[keys + ["us_per_image", "median_us", "candidates", "kept", "ref_kept", "jaccard"]].sort_values(keys)


# --- the command line's part: checks before a run, --list


def check_inputs(grid: PipelineGrid) -> PipelineGrid:
    """What the command checks before anything runs: the largest batch fits in memory, the
    recordings have raw rows and share one input size."""
    from .datasets import available_memory, synthetic_raw

    batch = max(grid.batches)
    # raw float32 rows, held about four times (generated, host copy, tensor, decode temporaries),
    # plus the candidate buffer (box, score, label, row: ~64 bytes per slot, again with copies)
    need = batch * (synthetic_raw.ROWS * (5 + synthetic_raw.NUM_CLASSES) * 4 * 4 + grid.max_candidates * 64)
    have = available_memory()
    if have is not None and need > have:
        raise GridError("batches", f"a batch of {batch:,} images with {grid.max_candidates:,} candidate slots each needs "
                        f"about {need / 2**30:,.1f} GiB; this machine has {have / 2**30:,.1f} GiB available")
    if grid.recordings:
        real = datasets.real.load_real()
        bad = [r for r in grid.recordings if r not in real.recordings or not real.recordings[r].has_raw]
        if bad:
            with_raw = [k for k, r in real.recordings.items() if r.has_raw]
            raise GridError("recordings", f"{', '.join(bad)}: recordings with raw rows are {', '.join(with_raw)}")
        if len({real.recordings[r].input_size for r in grid.recordings}) > 1:
            raise GridError("recordings", "recordings of one batch must share an input size")
    if grid.cluster:
        cluster.check_grid(grid)
    return grid


def _list_pipelines(ctx, param, value):
    """``--list``: the pipelines and whether they run here, then exit."""
    if not value or ctx.resilient_parsing:
        return
    from rich.table import Table

    from .progress import make_console

    table = Table(title="nmsbench pipelines")
    for column in ("name", "nms family", "device", "layouts", "available", "summary"):
        table.add_column(column, overflow="fold")
    for name, p in pipelines().items():
        for device in p.devices:
            available, reason = p.availability(device)
            table.add_row(name, p.nms_family, device, ",".join(p.layouts),
                          "[green]yes[/]" if available else f"[red]no[/]: {reason}", p.summary)
    make_console().print(table)
    ctx.exit()


HELP = """Time post-processing from raw detector output to final detections, stage by stage.

    \b
    nmsbench pipeline                                   batches 1, 8, 32, 64 on the CPU, every source
    nmsbench pipeline --device cpu,cuda --conf 0.25,0.001
    nmsbench pipeline --source synthetic_yolov8 --pipeline numpy,batched_op --batch 32

    Sources: real (recorded YOLOv3-tiny rows), synthetic (YOLOv5 layout [B, 25200, 85])
    and synthetic_yolov8 (the same detections channels first, [B, 84, 25200]). Every
    pipeline decodes (a candidate's score, objectness x class or the class score, strictly
    above --conf; boxes not clipped), runs class-aware NMS at --iou and keeps --max-det per
    image. Pipelines (--list): numpy (the CPU reference), ultralytics_loop (per image, class
    offsets, torchvision nms), torchvision_batched_nms (one call a batch), onnxruntime_nms
    (CPU), cupy_seed_kernels (CUDA, yolov5 only), batched_op (the batched op, eager),
    batched_op_graph (replayed in a CUDA graph), torch_batched_nms and torch+<impl> for
    each registered hard or all-pairs NMS. Rows (stage decode, nms, total; a one-call
    pipeline has total only) go to the sweep's CSV schema with benchmark=pipeline, batch,
    stage, candidates, and agreement with the numpy reference. The stages of one source,
    batch, threshold and device are timed together in rotated rounds (--rounds); a stage
    timed above its total beyond the noise is re-timed once, then flagged noisy. Each
    pipeline runs once more after its timing: other detections than its checked warm-up
    call's make its rows error rows (no time is reported for work that was not checked).
    """


def _options() -> tuple:
    import click

    return (click.option("--list", "show_list", is_flag=True, expose_value=False, is_eager=True, callback=_list_pipelines,
                         help="List the pipelines and whether they run here, then exit."),)


register_benchmark(Benchmark(
    name="pipeline", command="pipeline", grid=PipelineGrid, axes=AXES, run=run_pipeline_bench, total=PipelineGrid.count,
    help=HELP, prepare=check_inputs, options=_options(),
    describe=lambda row: f"{row['scenario']:>9} B={row['batch']:<3} {row['impl']:<24} {row['device']}",
    label=lambda row: (f"{row['impl']} {row['device']} {row['timer']} {row['stage']} {row['scenario']} "
                       f"B={row['batch']} conf={row['overlap']} iou={row['iou_threshold']}")))
