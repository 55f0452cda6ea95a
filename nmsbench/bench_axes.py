"""The sweep's, the pipeline benchmark's and the accuracy benchmark's axes, for as long as
their modules do not declare them (``AXES``) and register themselves: :func:`ensure`
registers what is missing, from the grids and run functions those modules have.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from . import datasets
from .engine.axes import (Axis, GridError, check_axes, floats, ints, merge_param_lists, names, parse_devices, parse_param,
                          parse_param_list, parse_sizes)
from .engine.plugins import BENCHMARKS, Benchmark, register_benchmark
from .registry import implementations


def _one(parse):
    return lambda text: parse(text)[:1] if parse(text) else []


def _path(text: str) -> list[str]:
    if not Path(text).is_file():
        raise ValueError(f"{text}: no such file")
    return [text]


def _check_params(grid, impls, given: dict, per_set=None) -> None:
    """Every parameter taken by one of ``impls`` and valid for each that takes it."""
    known = implementations()
    for name in impls:
        for params in (per_set(known[name]) if per_set else [known[name].accepted_params(given)]):
            try:
                known[name].resolve_params(params)
            except ValueError as e:
                raise GridError("params", str(e)) from None
    unused = set(given) - {p.name for name in impls for p in known[name].params}
    if unused:
        raise GridError("params", f"no selected implementation takes {', '.join(sorted(unused))}")


# --- the sweep

SCENARIO_HELP = "; ".join(f"{name} (knob: {s.knob})" for name, s in datasets.SCENARIOS.items())
SWEEP_AXES = (
    Axis("ns", "--n", parse_sizes, parse_sizes("64..1024"), "Box counts (positive): 64..8192 doubles from 64 and always ends "
         "at the upper bound (100..1000 is 100, 200, 400, 800, 1000); or a list 100,1000; or both."),
    Axis("impls", "--impl", names("implementations"), None, "Implementations (repeat or comma-separate). Default: all, each "
         "up to its sweep limit (soft_torch to N = 1024; naming it here lifts that); see `nmsbench list`."),
    Axis("devices", "--device", parse_devices, ["cpu"], "cpu and/or cuda (repeat or comma-separate)."),
    Axis("dtypes", "--dtype", names("dtypes"), ["float32"], "Box dtypes: float32, float64, float16."),
    Axis("scenarios", "--scenario", names("scenarios"), list(datasets.SYNTHETIC), f"Box-set scenarios. Known: {SCENARIO_HELP}."),
    Axis("ious", "--iou", floats("IoU thresholds"), [0.5], "IoU thresholds (repeat or comma-separate)."),
    Axis("seed", "--seed", ints("the seed", 0), 0, "Seed of the generated box sets.", many=False),
    Axis("classes", "--classes", ints("classes", 1), 1, "Number of labels; above 1 the NMS is class-aware.", many=False),
    Axis("timers", "--timer", names("timers"), ["wall", "device"], "Timers (repeat or comma-separate); device, events and "
         "graph give cuda rows only."),
    Axis("overlaps", "--overlap", floats("overlap values"), None, "Values of each scenario's overlap knob. Default: each "
         "scenario's own."),
    Axis("params", "--param", parse_param, None, "Implementation parameter KEY=VALUE, given to those that take it (e.g. "
         "sigma=0.5, kernel=linear, score_threshold=0.1).", combine=dict, metavar="KEY=VALUE"),
    Axis("file", "--file", _path, None, "Boxes file (.npz, .pt, .csv) for the `file` scenario.", many=False),
    Axis("recordings", "--recording", names("recordings"), None, "For the `real` scenario: recordings photo@size to replay "
         "(`all`); its knob (--overlap) is the confidence threshold, which sets N; --n caps N at the n best candidates."),
    Axis("canvases", "--canvas", names("canvases"), ["fixed"], "Canvas of the synthetic scenarios: fixed (1024 px at every "
         "N) and/or density (its side grows as sqrt(N), so each box keeps as many neighbours at any N)."),
)


def _sweep_grid(**fields):
    from .runner import Grid

    if "impls" not in fields:  # every implementation, each up to its sweep limit
        fields |= {"impls": sorted(implementations()), "cap_slow": True}
    return Grid(**fields)


def _sweep_prepare(grid):
    """What the sweep checks before it runs: the file's boxes, memory, recordings, parameters."""
    if "file" in grid.scenarios:
        try:
            recorded = len(datasets.load_boxes_file(grid.file, rows=max(grid.ns)))
        except ValueError as e:
            raise GridError("file", str(e)) from None
        if max(grid.ns) > recorded:
            raise GridError("ns", f"{grid.file} holds {recorded} boxes; --n asks for up to {max(grid.ns)}")
    if any(s in datasets.SYNTHETIC for s in grid.scenarios):
        try:
            datasets.check_fits(max(grid.ns))
        except ValueError as e:
            raise GridError("ns", str(e)) from None
    if grid.recordings:
        try:
            known = datasets.real.recording_keys()
        except ValueError as e:
            raise GridError("recordings", str(e)) from None
        chosen = known if "all" in grid.recordings else grid.recordings
        bad = [r for r in chosen if r not in known]
        if bad:
            raise GridError("recordings", f"unknown {', '.join(bad)}; known: {', '.join(known)}")
        grid = dataclasses.replace(grid, recordings=chosen)
    _check_params(grid, grid.impls, grid.params)
    return grid


def _sweep_label(row: dict) -> str:
    """The whole case of a sweep row, for warnings."""
    parts = [str(row[k]) for k in ("impl", "device", "dtype", "timer", "scenario")]
    if row.get("image"):
        parts.append(f"{row['image']}@{row.get('input_size', '')}")
    cap = row.get("n_cap")
    parts += [f"overlap={float(row['overlap']):g}",
              f"n={row['n']}" + (f" (cap {cap})" if cap not in (None, "") and str(cap) != str(row["n"]) else ""),
              f"iou={float(row['iou_threshold']):g}"]
    if int(row.get("classes") or 1) > 1:
        parts.append(f"classes={row['classes']}")
    if row.get("params") not in (None, "", "{}"):
        parts.append(f"params={row['params']}")
    return " ".join(parts)


# --- the pipeline benchmark

def _pipeline_axes():
    from .pipeline import STAGES, pipelines
    from .pipeline_bench import DEFAULT_BATCHES, SOURCES

    return (
        Axis("batches", "--batch", ints("batch sizes"), list(DEFAULT_BATCHES), "Batch sizes (comma-separated)."),
        Axis("devices", "--device", parse_devices, ["cpu"], "cpu and/or cuda (repeat or comma-separate)."),
        Axis("sources", "--source", names("sources", lambda: SOURCES), list(SOURCES), "real: the recorded YOLOv3-tiny raw "
             "rows; synthetic: a YOLOv5-shaped [B, 25200, 85] tensor."),
        Axis("pipelines", "--pipeline", names("pipelines", lambda: pipelines()), None, "Pipelines (repeat or "
             "comma-separate). Default: all; see --list."),
        Axis("confs", "--conf", floats("confidence thresholds", 0, 1), [0.25], "Confidence thresholds."),
        Axis("iou", "--iou", _one(floats("the IoU threshold", 0, 1)), 0.45, "IoU threshold of the class-aware NMS.", many=False),
        Axis("max_det", "--max-det", ints("--max-det"), 300, "Detections kept per image.", many=False),
        Axis("max_candidates", "--max-candidates", ints("--max-candidates"), 4096, "The torch front end's candidate buffer "
             "per image; more candidates is an error row, never a silent drop.", many=False),
        Axis("seed", "--seed", ints("the seed", 0), 0, "Seed of the synthetic source.", many=False),
        Axis("recordings", "--recording", names("recordings"), None, "Real source: recordings with raw rows (default: all)."),
        Axis("stages", "--stage", names("stages", lambda: STAGES), list(STAGES), "Stages to time: decode, nms, total."),
        Axis("timers", "--timer", names("timers", lambda: ("wall", "device", "events")), ["wall", "device"],
             "wall, device and/or events (the api and graph timers are for NMS ops only)."),
    )


def _pipeline_grid(**fields):
    from .pipeline import pipelines
    from .pipeline_bench import PipelineGrid

    grid = PipelineGrid(**{"pipelines": list(pipelines())} | fields)
    check_axes(grid, PIPELINE_AXES)
    return grid


def _pipeline_prepare(grid):
    from .datasets import available_memory, synthetic_raw

    batch = max(grid.batches)
    need = batch * (synthetic_raw.ROWS * (5 + synthetic_raw.NUM_CLASSES) * 4 * 4 + grid.max_candidates * 64)
    have = available_memory()
    if have is not None and need > have:
        raise GridError("batches", f"a batch of {batch:,} images with {grid.max_candidates:,} candidate slots each needs about "
                        f"{need / 2**30:,.1f} GiB; this machine has {have / 2**30:,.1f} GiB available")
    if grid.recordings:
        real = datasets.real.load_real()
        bad = [r for r in grid.recordings if r not in real.recordings or not real.recordings[r].has_raw]
        if bad:
            with_raw = [k for k, r in real.recordings.items() if r.has_raw]
            raise GridError("recordings", f"{', '.join(bad)}: recordings with raw rows are {', '.join(with_raw)}")
        if len({real.recordings[r].input_size for r in grid.recordings}) > 1:
            raise GridError("recordings", "recordings of one batch must share an input size")
    return grid


def _list_pipelines(ctx, param, value):
    if not value or ctx.resilient_parsing:
        return
    from rich.table import Table

    from .pipeline import pipelines
    from .progress import make_console

    table = Table(title="nmsbench pipelines")
    for column in ("name", "nms family", "device", "available", "summary"):
        table.add_column(column, overflow="fold")
    for name, p in pipelines().items():
        for device in p.devices:
            available, reason = p.availability(device)
            table.add_row(name, p.nms_family, device, "[green]yes[/]" if available else f"[red]no[/]: {reason}", p.summary)
    make_console().print(table)
    ctx.exit()


# --- the accuracy benchmark

def _accuracy_axes():
    from .accuracy_bench import DEFAULT_IMAGES, SYNTHETIC_SOURCES

    return (
        Axis("impls", "--impl", names("implementations"), None, "Implementations (repeat or comma-separate). Default: every "
             "one that runs on --device here."),
        Axis("devices", "--device", parse_devices, ["cpu"], "cpu and/or cuda (repeat or comma-separate)."),
        Axis("sources", "--source", names("sources"), None, f"Synthetic scene sets with ground truth: "
             f"{', '.join(SYNTHETIC_SOURCES)} (default: all three)."),
        Axis("images", "--images", ints("--images"), DEFAULT_IMAGES, "Images per synthetic scene set.", many=False),
        Axis("seed", "--seed", ints("the seed", 0), 0, "Seed of the synthetic scenes.", many=False),
        Axis("ious", "--iou", floats("IoU thresholds", 0, 1), [0.5], "IoU thresholds (Matrix NMS and gaussian Soft-NMS do "
             "not use it)."),
        Axis("params", "--param", parse_param_list, None, "Implementation parameter KEY=VALUE[,VALUE...]; several values run "
             "each.", combine=merge_param_lists, metavar="KEY=VALUE[,VALUE...]"),
        Axis("candidates", "--candidates", _path, None, "Your detector's pre-NMS candidates, COCO results format (JSON list of "
             "{image_id, category_id, bbox, score}); needs --annotations; replaces the synthetic sources.", many=False),
        Axis("annotations", "--annotations", _path, None, "Ground truth for --candidates: a COCO instances JSON.", many=False),
        Axis("image_ids", "--image-ids", ints("image ids", None), None, "With --candidates: score only these images.",
             metavar="ID,ID,..."),
    )


def _accuracy_grid(**fields):
    from .accuracy_bench import COCO_SOURCE, SYNTHETIC_SOURCES, AccuracyGrid

    coco = fields.get("candidates") is not None
    if coco != (fields.get("annotations") is not None):
        raise GridError("candidates", "--candidates and --annotations go together: the candidates and their ground truth")
    if fields.get("image_ids") and not coco:
        raise GridError("image_ids", "picks images of --candidates/--annotations; give those too")
    if coco and fields.get("sources"):
        raise GridError("sources", "--source picks synthetic scene sets; with --candidates the source is your files")
    sources = [COCO_SOURCE] if coco else fields.get("sources") or list(SYNTHETIC_SOURCES)
    bad = [s for s in sources if s not in SYNTHETIC_SOURCES + (COCO_SOURCE,)]
    if bad or (COCO_SOURCE in sources and not coco):
        raise GridError("sources", f"unknown {', '.join(bad or [COCO_SOURCE])}; choose from {', '.join(SYNTHETIC_SOURCES)} "
                        "(your own data: --candidates and --annotations)")
    known = implementations()
    devices = fields.get("devices", ["cpu"])
    impls = fields.get("impls") or sorted(name for name, impl in known.items()
                                          if any(d in impl.backends and impl.backends[d].availability()[0] for d in devices))
    unknown = [name for name in impls if name not in known]
    if unknown:
        raise GridError("impls", f"unknown {', '.join(unknown)}; see `nmsbench list`")
    grid = AccuracyGrid(**fields | {"sources": sources, "impls": impls, "params": fields.get("params") or {}})
    check_axes(grid, ACCURACY_AXES)
    return grid


def _accuracy_prepare(grid):
    from .accuracy import evaluator_name
    from .accuracy_bench import COCO_SOURCE, load_source

    _check_params(grid, grid.impls, grid.params, per_set=grid.param_sets)
    try:
        evaluator_name()
    except RuntimeError as e:
        raise ValueError(str(e)) from None
    if grid.candidates:  # bad files are refused before anything is written, naming the file, entry and field
        try:
            load_source(grid, COCO_SOURCE)
        except ValueError as e:
            raise GridError("candidates", str(e)) from None
    return grid


def ensure() -> None:
    """Register the benchmarks whose modules do not register themselves yet."""
    global PIPELINE_AXES, ACCURACY_AXES
    import click

    from . import accuracy_bench, pipeline_bench, runner

    _sweep_grid.dataclass, _pipeline_grid.dataclass = runner.Grid, pipeline_bench.PipelineGrid
    _accuracy_grid.dataclass = accuracy_bench.AccuracyGrid
    if "nms" not in BENCHMARKS:
        register_benchmark(Benchmark(
            "nms", "sweep", _sweep_grid, getattr(runner, "AXES", SWEEP_AXES),
            lambda grid, write, on_case, done, between_turns: runner.run_sweep(grid, write, on_case, done=done,
                                                                               between_turns=between_turns),
            lambda grid: grid.count(), help=SWEEP_HELP, prepare=_sweep_prepare, label=_sweep_label,
            describe=lambda row: f"{row['scenario']:>10} n={row['n']:<6} {row['impl']:<18} {row['device']}"))
    if "pipeline" not in BENCHMARKS:
        PIPELINE_AXES = getattr(pipeline_bench, "AXES", None) or _pipeline_axes()
        register_benchmark(Benchmark(
            "pipeline", "pipeline", _pipeline_grid, PIPELINE_AXES,
            lambda grid, write, on_case, done, between_turns: pipeline_bench.run_pipeline_bench(grid, write, on_case, done),
            lambda grid: grid.count(), help=PIPELINE_HELP, prepare=_pipeline_prepare,
            describe=lambda row: f"{row['scenario']:>9} B={row['batch']:<3} {row['impl']:<24} {row['device']}",
            label=lambda row: (f"{row['impl']} {row['device']} {row['timer']} {row['stage']} {row['scenario']} "
                               f"B={row['batch']} conf={row['overlap']} iou={row['iou_threshold']}"),
            options=(click.option("--list", "show_list", is_flag=True, expose_value=False, is_eager=True,
                                  callback=_list_pipelines, help="List the pipelines and whether they run here, then exit."),)))
    if "accuracy" not in BENCHMARKS:
        ACCURACY_AXES = getattr(accuracy_bench, "AXES", None) or _accuracy_axes()
        register_benchmark(Benchmark(
            "accuracy", "accuracy", _accuracy_grid, ACCURACY_AXES,
            lambda grid, write, on_case, done, between_turns: accuracy_bench.run_accuracy_bench(grid, write, on_case, done),
            lambda grid: grid.count(), help=ACCURACY_HELP, prepare=_accuracy_prepare,
            describe=lambda row: f"{row['scenario']:>16} {row['impl']:<20} {row['device']} iou={row['iou_threshold']:g}",
            label=lambda row: f"{row['impl']} {row['device']} {row['scenario']} iou={row['iou_threshold']:g} "
                              f"params={row['params']}"))


PIPELINE_AXES: tuple = ()
ACCURACY_AXES: tuple = ()

SWEEP_HELP = """Time implementations over the grid impl x device x dtype x scenario x overlap x n x IoU.

    \b
    nmsbench sweep --n 64..8192 --device cuda
    nmsbench sweep --n 100,1000 --impl torchvision,allpairs --scenario chain --iou 0.5,0.7
    nmsbench sweep --scenario clustered --overlap 0.3,0.6,0.9 --classes 3
    nmsbench sweep --scenario file --file boxes.npz --n 500 --param score_threshold=0.1
    nmsbench sweep --scenario real --overlap 0.25,0.01,0.001 --n 8192 --recording all

    Every case becomes one CSV row per timer. The implementations of one box set, device,
    dtype and IoU are timed together (--rounds). A variant that raises, runs out of memory or
    passes --case-timeout gives a row with status=error; a cell it cannot run a status=skipped
    row. Ctrl-C (or SIGTERM) stops with what was written and the command that resumes it.
    """
PIPELINE_HELP = """Time post-processing from raw detector output to final detections, stage by stage.

    \b
    nmsbench pipeline                                   batches 1, 8, 32 on the CPU, real and synthetic input
    nmsbench pipeline --device cpu,cuda --conf 0.25,0.001
    nmsbench pipeline --source synthetic --pipeline numpy,torch_batched_nms --batch 32

    Each pipeline decodes (score = objectness x best class >= --conf), runs class-aware NMS at
    --iou and keeps --max-det per image. Rows (stage decode, nms, total) have benchmark=pipeline.
    """
ACCURACY_HELP = """Score each NMS with COCO AP/AR on candidates with ground truth, and time it per image.

    \b
    nmsbench accuracy                                      every CPU implementation, the three scene sets
    nmsbench accuracy --images 50 --impl torchvision,soft_nms,matrix_recompute --iou 0.5,0.6
    nmsbench accuracy --impl soft_nms --param kernel=linear,gaussian --source scenes-crowd
    nmsbench accuracy --candidates preds.json --annotations instances_val2017.json --device cuda

    One row per implementation x IoU threshold x parameter set x source (benchmark=accuracy):
    COCO AP@[.5:.95], AP50, AP75, AR@100, AR@100 over crowded images and the time per image. README, Accuracy, says what the
    synthetic scenes stand for.
    """
