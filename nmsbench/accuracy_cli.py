"""``nmsbench accuracy``: COCO AP and AR of each NMS beside its time per image.

``nmsbench.cli`` adds this command to its group; the helpers shared with ``sweep`` live in
``nmsbench.cli_options``, which both import (this module does not import ``nmsbench.cli``).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click
from rich.table import Table

from .accuracy import CROWDED_IOU, MAX_DETECTIONS, evaluator_name
from .accuracy_bench import COCO_SOURCE, DEFAULT_IMAGES, SYNTHETIC_SOURCES, AccuracyGrid, load_source, run_accuracy_bench
from .cli_options import (_check_resume, _floats, _param_value, _split, check_resume_options, console, parse_devices,
                          resume_option, run_with_progress)
from .registry import implementations
from .results import default_output_path


def parse_param_lists(items: tuple[str, ...]) -> dict[str, list]:
    """``--param KEY=V1,V2`` options as {key: [values]} (int, float or text), or a BadParameter."""
    params: dict[str, list] = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE[,VALUE...]", param_hint="--param")
        params.setdefault(key.strip(), [])
        for value in values.split(","):
            if value.strip() and _param_value(value.strip()) not in params[key.strip()]:
                params[key.strip()].append(_param_value(value.strip()))
    return params


def _image_ids(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        ids = [int(v) for v in _split((text,))]
    except ValueError:
        raise click.BadParameter(f"image ids must be whole numbers, got {text!r}", param_hint="--image-ids") from None
    if not ids:
        raise click.BadParameter("no image ids given", param_hint="--image-ids")
    return ids


@click.command("accuracy")
@click.option("--impl", "impls", multiple=True,
              help="Implementations (repeat or comma-separate). Default: every one that runs on --device here; see "
                   "`nmsbench list`.")
@click.option("--device", "devices", multiple=True, default=("cpu",), show_default=True,
              help="cpu and/or cuda (repeat or comma-separate).")
@click.option("--source", "sources", multiple=True,
              help=f"Synthetic scene sets with ground truth: {', '.join(SYNTHETIC_SOURCES)} (default: all three). "
                   "sparse: a few objects apart; clustered: groups of objects of mixed classes; crowd: rows of "
                   "overlapping objects of one class, where greedy NMS removes true objects.")
@click.option("--images", default=DEFAULT_IMAGES, show_default=True, type=click.IntRange(min=1), metavar="K",
              help="Images per synthetic scene set.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the synthetic scenes.")
@click.option("--iou", "ious", multiple=True, default=("0.5",), show_default=True,
              help="IoU thresholds (repeat or comma-separate). Matrix NMS and gaussian Soft-NMS do not use it.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE[,VALUE...]",
              help="Implementation parameter, given to those that take it; several values run each (e.g. "
                   "kernel=linear,gaussian sigma=0.5 score_threshold=0.05). Without it: each one's defaults.")
@click.option("--candidates", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Your detector's pre-NMS candidates, COCO results format: a JSON list of {image_id, category_id, "
                   "bbox [x, y, width, height], score}. Needs --annotations; replaces the synthetic sources "
                   "(rows: scenario=coco, image=this file's name).")
@click.option("--annotations", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Ground truth for --candidates: a COCO instances JSON (images, annotations, categories). Ids are "
                   "whole numbers within +-2**53, annotation ids from 1; a bad entry is refused naming its field.")
@click.option("--image-ids", "image_ids", metavar="ID,ID,...",
              help="With --candidates: score only these images of --annotations.")
@click.option("--threads", default=os.cpu_count() or 1, show_default=True, type=click.IntRange(min=1),
              help="CPU threads for torch and numba.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="CSV to write (a sidecar .json goes next to it). Default: results/runs/accuracy-<time>-<device>.csv.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@resume_option("impl, device, source, its images and candidates (n), IoU, seed and params")
def accuracy_command(impls, devices, sources, images, seed, ious, params, candidates, annotations, image_ids, threads,
                     out, force, resume):
    """Score each NMS with COCO AP/AR on candidates with ground truth, and time it per image.

    \b
    nmsbench accuracy                                      every CPU implementation, the three scene sets
    nmsbench accuracy --images 50 --impl torchvision,soft_nms,matrix_recompute --iou 0.5,0.6
    nmsbench accuracy --impl soft_nms --param kernel=linear,gaussian --source scenes-crowd
    nmsbench accuracy --candidates preds.json --annotations instances_val2017.json --device cuda

    For each implementation x IoU threshold x parameter set, NMS runs once per image on its
    candidates (class-aware: only candidates of one category suppress each other) through
    nmsbench.run_nms, each call timed (CUDA synchronized around it); each image keeps its
    100 best detections by final score (Soft-NMS and Matrix NMS: decayed scores; weighted
    NMS: moved boxes), and a COCO evaluator (faster-coco-eval, else pycocotools) scores them.
    One row per case (benchmark=accuracy): ap (AP@[.5:.95]), ap50, ap75, ar100 (AR@100),
    ar100_crowded (AR@100 over the images where two ground-truth objects of one category
    overlap with IoU > 0.3), median_us and iqr_us per image, runs (calls timed), images, n
    (candidates), kept, detections, source_params. The synthetic scenes imitate a detector
    (README, Accuracy, says what they do and do not stand for). A case that raises is an
    error row and the run goes on; one that cannot run here a skipped row.
    """
    check_resume_options(resume, out, force)
    known = implementations()
    device_list = parse_devices(devices)
    if bool(candidates) != bool(annotations):
        raise click.UsageError("--candidates and --annotations go together: the candidates and their ground truth")
    if image_ids and not candidates:
        raise click.BadParameter("picks images of --candidates/--annotations; give those too", param_hint="--image-ids")
    if candidates and sources:
        raise click.BadParameter("--source picks synthetic scene sets; with --candidates the source is your files",
                                 param_hint="--source")
    source_list = [COCO_SOURCE] if candidates else (_split(sources) or list(SYNTHETIC_SOURCES))
    bad = [s for s in source_list if s not in SYNTHETIC_SOURCES + (COCO_SOURCE,)]
    if bad or (COCO_SOURCE in source_list and not candidates):
        raise click.BadParameter(f"unknown {', '.join(bad or [COCO_SOURCE])}; choose from {', '.join(SYNTHETIC_SOURCES)} "
                                 "(your own data: --candidates and --annotations)", param_hint="--source")
    impl_list = _split(impls) or sorted(
        name for name, impl in known.items()
        if any(d in impl.backends and impl.backends[d].availability()[0] for d in device_list))
    unknown = [name for name in impl_list if name not in known]
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; see `nmsbench list`", param_hint="--impl")
    iou_list = _floats(ious, "--iou values")
    if not iou_list or any(not 0.0 <= v <= 1.0 for v in iou_list):
        raise click.BadParameter("IoU thresholds must lie in [0, 1]", param_hint="--iou")
    param_lists = parse_param_lists(params)
    accepted = {p.name for name in impl_list for p in known[name].params}
    if set(param_lists) - accepted:
        raise click.BadParameter(f"no selected implementation takes {', '.join(sorted(set(param_lists) - accepted))}",
                                 param_hint="--param")
    try:
        evaluator_name()
    except RuntimeError as e:
        raise click.UsageError(str(e)) from None

    grid = AccuracyGrid(impls=impl_list, devices=device_list, sources=source_list, ious=iou_list, params=param_lists,
                        images=images, seed=seed, candidates=str(candidates) if candidates else None,
                        annotations=str(annotations) if annotations else None, image_ids=_image_ids(image_ids),
                        threads=threads)
    for name in impl_list:  # check every parameter set now, not once per case
        for given in grid.param_sets(known[name]):
            try:
                known[name].resolve_params(given)
            except ValueError as e:
                raise click.BadParameter(str(e), param_hint="--param") from None
    if candidates:  # bad files are refused before anything is written, naming the file, entry and field
        try:
            load_source(grid, COCO_SOURCE)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--candidates/--annotations/--image-ids") from None

    done = _check_resume(resume, grid, benchmark="accuracy") if resume else set()
    out = resume or out or default_output_path(device_list, kind="accuracy")
    counts = run_with_progress(
        "accuracy", out, force, grid.count(), grid.__dict__, reproduce_accuracy_command(grid, out, resume=bool(resume)),
        lambda write, on_case, redraw: run_accuracy_bench(grid, write, on_case, done),
        describe=lambda row: f"{row['scenario']:>16} {row['impl']:<20} {row['device']} iou={row['iou_threshold']:g}",
        label=lambda row: f"{row['impl']} {row['device']} {row['scenario']} iou={row['iou_threshold']:g} params={row['params']}",
        append=bool(resume), completed=min(len(done), grid.count()),
        resume_command=reproduce_accuracy_command(grid, out, resume=True),
    )
    _print_accuracy_summary(out, counts)


def reproduce_accuracy_command(grid: AccuracyGrid, out: Path, resume: bool = False) -> str:
    """The accuracy command that reproduces this grid (``resume``: continues ``out``)."""
    args = ["nmsbench", "accuracy", "--impl", ",".join(grid.impls), "--device", ",".join(grid.devices),
            "--iou", ",".join(map(str, grid.ious)), "--threads", str(grid.threads)]
    if grid.candidates:
        args += ["--candidates", grid.candidates, "--annotations", grid.annotations]
        if grid.image_ids:
            args += ["--image-ids", ",".join(map(str, grid.image_ids))]
    else:
        args += ["--source", ",".join(grid.sources), "--images", str(grid.images), "--seed", str(grid.seed)]
    for key, values in grid.params.items():
        args += ["--param", f"{key}={','.join(map(str, values))}"]
    return shlex.join(args + ["--resume" if resume else "--out", str(out)])


def _print_accuracy_summary(out: Path, counts: dict) -> None:
    from .results import read_results

    frame = read_results(out)
    rows = frame[(frame["benchmark"] == "accuracy") & (frame["status"] == "ok")]
    for (source, device), group in rows.groupby(["scenario", "device"], sort=False):
        several = group.groupby("impl")["params"].nunique().gt(1).any()
        table = Table(title=f"accuracy · {source} · {device} · {int(group['images'].iloc[0])} images, "
                            f"{int(group['n'].iloc[0]):,} candidates")
        for column in ("implementation", *(["params"] if several else []), "IoU", "AP", "AP50", "AR@100",
                       "AR@100 crowded", "µs / image"):
            table.add_column(column, justify="left" if column in ("implementation", "params") else "right")
        for _, r in group.sort_values(["ap", "median_us"], ascending=[False, True]).iterrows():
            table.add_row(str(r["impl"]), *([_short_params(r["params"])] if several else []), f"{r['iou_threshold']:g}",
                          *(_fraction(r[c]) for c in ("ap", "ap50", "ar100", "ar100_crowded")), f"{r['median_us']:,.1f}")
        console.print(table)
    console.print(f"AP, AR: COCO bbox metrics ({evaluator_name()}), at most {MAX_DETECTIONS} detections per image; "
                  f"crowded: images with two objects of one category at IoU > {CROWDED_IOU:g}; µs / image: median of "
                  "one timed call per image")
    console.print(f"wrote {len(frame)} rows to {out}: {counts['ok']} ok, {counts['error']} error, "
                  f"{counts['skipped']} skipped")


def _fraction(value) -> str:
    try:
        return "" if value != value else f"{float(value):.3f}"
    except (TypeError, ValueError):
        return ""


def _short_params(text: str) -> str:
    import json

    try:
        return " ".join(f"{k}={v}" for k, v in json.loads(text).items())
    except (ValueError, AttributeError, TypeError, RecursionError):
        return str(text)


__all__ = ["accuracy_command", "parse_param_lists", "reproduce_accuracy_command"]
