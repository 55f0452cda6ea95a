"""``nmsbench pipeline``: time detector post-processing (raw output -> detections) by stage.

``nmsbench.cli`` adds this command to its group; the helpers shared with ``sweep`` live in
``nmsbench.cli_options``, which both import (this module does not import ``nmsbench.cli``).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click
from rich.table import Table

from . import datasets
from .cli_options import (_check_resume, _console, _floats, _split, case_timeout_option, check_resume_options, console,
                          parse_devices, resume_option, run_with_progress)
from .pipeline import STAGES, pipelines
from .pipeline_bench import DEFAULT_BATCHES, SOURCES, PipelineGrid, run_pipeline_bench
from .results import default_output_path
from .timing import DEFAULT_TIMERS

TIMERS = ("wall", "device", "events")  # the api and graph timers are for NMS ops only


def _positive_ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in _split((text,))]
    except ValueError:
        raise click.BadParameter(f"{what} must be whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"{what} must be positive whole numbers, got {text!r}")
    return values


@click.command("pipeline")
@click.option("--batch", "batches", default=",".join(map(str, DEFAULT_BATCHES)), show_default=True, help="Batch sizes (comma-separated).")
@click.option("--device", "devices", multiple=True, default=("cpu",), show_default=True, help="cpu and/or cuda (repeat or comma-separate).")
@click.option("--source", "sources", multiple=True, default=SOURCES, show_default=True,
              help="real: the recorded YOLOv3-tiny raw rows (images cycle through the recordings that keep them); "
                   "synthetic: a YOLOv5-shaped [B, 25200, 85] tensor.")
@click.option("--pipeline", "names", multiple=True, help="Pipelines to run (repeat or comma-separate). Default: all; see --list.")
@click.option("--conf", "confs", multiple=True, default=("0.25",), show_default=True, help="Confidence thresholds (repeat or comma-separate).")
@click.option("--iou", default=0.45, show_default=True, type=click.FloatRange(0, 1), help="IoU threshold of the class-aware NMS.")
@click.option("--max-det", default=300, show_default=True, type=click.IntRange(min=1), help="Detections kept per image.")
@click.option("--max-candidates", default=4096, show_default=True, type=click.IntRange(min=1),
              help="The torch front end's fixed candidate buffer per image (the seed's MAX_FILTERED); more candidates is an error row, never a silent drop.")
@click.option("--recording", "recordings", multiple=True, help="Real source: recordings with raw rows to cycle through (default: all of them).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the synthetic source.")
@click.option("--stage", "stages", multiple=True, default=STAGES, show_default=True, help="Stages to time: decode, nms, total.")
@click.option("--timer", "timers", multiple=True, default=DEFAULT_TIMERS, show_default=True,
              help="wall, device (what the GPU did per call: kernel, copy and set durations from CUPTI via torch.profiler, "
                   "with launches, copies and host syncs per call) and/or events (CUDA events around each call, the host's "
                   "gaps included). device and events give cuda rows only.")
@click.option("--min-run-time", default=0.2, show_default=True, type=click.FloatRange(min=0.001), help="Seconds of timing per row.")
@click.option("--threads", default=os.cpu_count() or 1, show_default=True, type=click.IntRange(min=1), help="CPU threads for torch and numba.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="CSV to write (a sidecar .json goes next to it). Default: results/runs/pipeline-<time>-<device>.csv.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@resume_option("pipeline, device, source, images, batch, conf, IoU, params, stage and timer")
@case_timeout_option("one pipeline on one device, batch and conf: all its stages")
@click.option("--list", "show_list", is_flag=True, help="List the pipelines and whether they run here, then exit.")
def pipeline_command(batches, devices, sources, names, confs, iou, max_det, max_candidates, recordings, seed, stages,
                     timers, min_run_time, threads, out, force, resume, case_timeout, show_list):
    """Time post-processing from raw detector output to final detections, stage by stage.

    \b
    nmsbench pipeline                                   batches 1, 8, 32 on the CPU, real and synthetic input
    nmsbench pipeline --device cpu,cuda --conf 0.25,0.001
    nmsbench pipeline --source synthetic --pipeline numpy,torch_batched_nms --batch 32

    Each pipeline decodes (score = objectness x best class >= --conf, boxes clipped to the
    input), runs class-aware NMS at --iou and keeps --max-det per image. Pipelines: numpy
    (the CPU reference), torch_batched_nms, and torch+<impl> for each registered hard or
    all-pairs NMS. Rows (stage decode, nms, total) go to the sweep's CSV schema with
    benchmark=pipeline, batch, stage, candidates, and agreement with the numpy reference.
    """
    known = pipelines()
    if show_list:
        table = Table(title="nmsbench pipelines")
        for column in ("name", "nms family", "device", "available", "summary"):
            table.add_column(column, overflow="fold")
        for name, p in known.items():
            for device in p.devices:
                available, reason = p.availability(device)
                table.add_row(name, p.nms_family, device, "[green]yes[/]" if available else f"[red]no[/]: {reason}", p.summary)
        _console().print(table)
        return
    check_resume_options(resume, out, force)
    batch_list = _positive_ints(batches, "--batch")
    _check_fits(max(batch_list), max_candidates)
    device_list = parse_devices(devices)
    source_list = _split(sources)
    bad = [s for s in source_list if s not in SOURCES]
    if bad:
        raise click.BadParameter(f"unknown {', '.join(bad)}; choose from {', '.join(SOURCES)}", param_hint="--source")
    name_list = _split(names) or list(known)
    unknown = [n for n in name_list if n not in known]
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; known: {', '.join(known)}", param_hint="--pipeline")
    conf_list = _floats(confs, "--conf values")
    if not conf_list or any(not 0.0 <= c <= 1.0 for c in conf_list):
        raise click.BadParameter("confidence thresholds must lie in [0, 1]", param_hint="--conf")
    recording_list = _split(recordings) or None
    if recording_list:
        real = datasets.real.load_real()
        bad = [r for r in recording_list if r not in real.recordings or not real.recordings[r].has_raw]
        if bad:
            with_raw = [k for k, r in real.recordings.items() if r.has_raw]
            raise click.BadParameter(f"{', '.join(bad)}: recordings with raw rows are {', '.join(with_raw)}", param_hint="--recording")
        if len({real.recordings[r].input_size for r in recording_list}) > 1:
            raise click.BadParameter("recordings of one batch must share an input size", param_hint="--recording")
    stage_list = _split(stages)
    bad = [s for s in stage_list if s not in STAGES]
    if bad or not stage_list:
        raise click.BadParameter(f"choose from {', '.join(STAGES)}", param_hint="--stage")
    timer_list = _split(timers)
    bad = [t for t in timer_list if t not in TIMERS]
    if bad or not timer_list:
        raise click.BadParameter(f"choose from {', '.join(TIMERS)}, got {', '.join(timers)}", param_hint="--timer")

    grid = PipelineGrid(
        pipelines=name_list, devices=device_list, sources=source_list, batches=batch_list, confs=conf_list, iou=iou,
        max_det=max_det, max_candidates=max_candidates, seed=seed, recordings=recording_list, stages=stage_list,
        timers=timer_list, min_run_time=min_run_time, threads=threads, case_timeout=case_timeout,
    )
    done = _check_resume(resume, grid, benchmark="pipeline") if resume else set()
    out = resume or out or default_output_path(device_list, kind="pipeline")
    counts = run_with_progress(
        "pipeline", out, force, grid.count(), grid.__dict__, reproduce_pipeline_command(grid, out, resume=bool(resume)),
        lambda write, on_case, redraw: run_pipeline_bench(grid, write, on_case, done),  # a row after each timing
        describe=lambda row: f"{row['scenario']:>9} B={row['batch']:<3} {row['impl']:<24} {row['device']}",
        label=lambda row: (f"{row['impl']} {row['device']} {row['timer']} {row['stage']} {row['scenario']} "
                           f"B={row['batch']} conf={row['overlap']} iou={row['iou_threshold']}"),
        append=bool(resume), completed=min(len(done), grid.count()),
        resume_command=reproduce_pipeline_command(grid, out, resume=True),
    )
    _print_pipeline_summary(out, counts)


def _check_fits(batch: int, max_candidates: int) -> None:
    """Refuse, before anything is allocated, a batch whose input and candidate buffer cannot fit in memory."""
    from .datasets import available_memory, synthetic_raw

    # raw float32 rows, held about four times (generated, host copy, tensor, decode temporaries),
    # plus the candidate buffer (box, score, label, row: ~64 bytes per slot, again with copies)
    need = batch * (synthetic_raw.ROWS * (5 + synthetic_raw.NUM_CLASSES) * 4 * 4 + max_candidates * 64)
    have = available_memory()
    if have is not None and need > have:
        raise click.BadParameter(f"a batch of {batch:,} images with {max_candidates:,} candidate slots each needs about "
                                 f"{need / 2**30:,.1f} GiB; this machine has {have / 2**30:,.1f} GiB available",
                                 param_hint="--batch/--max-candidates")


def reproduce_pipeline_command(grid: PipelineGrid, out: Path, resume: bool = False) -> str:
    """The pipeline command that reproduces this grid (``resume``: continues ``out``)."""
    args = ["nmsbench", "pipeline", "--batch", ",".join(map(str, grid.batches)), "--device", ",".join(grid.devices),
            "--source", ",".join(grid.sources), "--pipeline", ",".join(grid.pipelines),
            "--conf", ",".join(map(str, grid.confs)), "--iou", str(grid.iou), "--max-det", str(grid.max_det),
            "--max-candidates", str(grid.max_candidates), "--seed", str(grid.seed), "--stage", ",".join(grid.stages),
            "--timer", ",".join(grid.timers), "--min-run-time", str(grid.min_run_time), "--threads", str(grid.threads)]
    if grid.recordings:
        args += ["--recording", ",".join(grid.recordings)]
    if grid.case_timeout:
        args += ["--case-timeout", str(grid.case_timeout)]
    return shlex.join(args + ["--resume" if resume else "--out", str(out)])


def _print_pipeline_summary(out: Path, counts: dict) -> None:
    import pandas as pd

    from .pipeline_bench import per_image_table

    frame = pd.read_csv(out)
    table_rows = per_image_table(frame)
    for (source, device, timer, conf), group in table_rows.groupby(["scenario", "device", "timer", "overlap"], sort=False):
        pivot = group.pivot_table(index=["impl", "stage"], columns="batch", values="us_per_image", aggfunc="median")
        table = Table(title=f"µs per image ({timer} timer) · {source} · {device} · conf {conf:g}")
        table.add_column("pipeline")
        table.add_column("stage")
        for batch in pivot.columns:
            table.add_column(f"B={batch}", justify="right")
        for (impl, stage), values in pivot.iterrows():
            table.add_row(str(impl), str(stage), *("" if pd.isna(v) else f"{v:,.1f}" for v in values))
        console.print(table)
    console.print(
        f"wrote {len(frame)} rows to {out}: {counts['ok']} ok, {counts['error']} error, "
        f"{counts['skipped']} skipped, {counts['noisy']} noisy"
    )


__all__ = ["pipeline_command", "reproduce_pipeline_command"]
