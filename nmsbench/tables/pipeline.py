"""Tables of the post-processing pipeline (`nmsbench pipeline` rows, benchmark = "pipeline")."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .core import (_impl_order, _is_true, _render_cells, format_speedup, format_us, group_dims, machine_label,
                   ok_rows, options)
from .noise import NOISY_MARK, joined_reasons, noisy_footnote, with_noise

PIPELINE_BASELINE = "numpy"  # the CPU reference pipeline (nmsbench.pipeline.REFERENCE_PIPELINE)
PIPELINE_STAGES = ("decode", "nms", "total")
# What identifies one pipeline case apart from the pipeline and its device: rows that agree
# on these ran on the same machine (``pipeline_machine``: host name and GPU) and input, so
# their times per image compare.
PIPELINE_CASE_KEYS = ["pipeline_machine", "timer", "threads", "scenario", "image", "input_size", "overlap",
                      "iou_threshold", "seed", "params", "batch", "stage"]
# Dimensions that split pipeline rows into groups (tables, panels) or lines when they vary;
# not ``image``: a real batch names every recording in it, so it changes with the batch.
PIPELINE_DIMS = ["device", "timer", "scenario", "overlap", "stage", "hardware", "threads", "input_size", "iou_threshold",
                 "params", "git_commit"]


def pipeline_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``nmsbench pipeline`` (benchmark = pipeline), whatever their status, with
    their ``pipeline_machine``."""
    if "benchmark" not in frame.columns:
        return frame.iloc[0:0]
    rows = frame[frame["benchmark"].eq("pipeline")]
    return rows if "pipeline_machine" in rows.columns else rows.assign(pipeline_machine=pipeline_machine(rows))


def pipeline_machine(frame: pd.DataFrame) -> pd.Series:
    """Each row's machine: the host name and the GPU (a GPU machine's CPU rows name its GPU
    too), or the host name and the CPU on a machine without one. GPU machines share host
    names, so the name alone does not tell them apart."""
    return machine_label(frame, frame["gpu"].where(frame["gpu"].ne(""), frame["cpu"]))


def per_image(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured pipeline rows with their time per image. A pipeline row's ``median_us`` and
    ``iqr_us`` time one call on the whole batch, so ``us_per_image`` = median_us / batch
    and ``iqr_us_per_image`` = iqr_us / batch (the numbers ``nmsbench pipeline`` prints,
    ``nmsbench.pipeline_bench.per_image_table``)."""
    ok = ok_rows(pipeline_rows(frame))
    ok = ok[ok["batch"].gt(0)]
    return ok.assign(us_per_image=ok["median_us"] / ok["batch"], iqr_us_per_image=ok["iqr_us"] / ok["batch"])


def with_pipeline_speedup(frame: pd.DataFrame, baseline: str = PIPELINE_BASELINE) -> pd.DataFrame:
    """``per_image`` rows with ``baseline_us_per_image``, ``baseline_device`` and
    ``speedup`` = the baseline's time per image / this row's (above 1 is faster), NaN
    where the case has no baseline row. The baseline's row is the same case (machine,
    source, confidence threshold, batch, stage, timer, ...) on the same device where the
    baseline runs there, else on that machine's CPU: the numpy reference runs on the CPU
    only, so a cuda row compares with it across devices (wall timer; a device-timer row
    has no CPU twin)."""
    rows = per_image(frame).reset_index(drop=True)
    keys = [k for k in PIPELINE_CASE_KEYS if k in rows.columns]
    base = rows[rows["impl"] == baseline]
    base = base.groupby([*keys, "device"], dropna=False)["us_per_image"].median().rename("_same").reset_index()
    cpu = base[base["device"] == "cpu"].drop(columns="device").rename(columns={"_same": "_cpu"})
    out = rows.merge(base, on=[*keys, "device"], how="left").merge(cpu, on=keys, how="left")
    out["baseline_us_per_image"] = out["_same"].fillna(out["_cpu"])
    out["baseline_device"] = np.where(out["_same"].notna(), out["device"], np.where(out["_cpu"].notna(), "cpu", ""))
    out["speedup"] = out["baseline_us_per_image"] / out["us_per_image"]
    return out.drop(columns=["_same", "_cpu"])


def pipeline_table(frame: pd.DataFrame, baseline: str = PIPELINE_BASELINE, impls: Sequence[str] | None = None,
                   stages: Sequence[str] | None = ("total",), devices: Sequence[str] | None = None) -> pd.DataFrame:
    """The pipeline export table, long form: one row per group x pipeline x batch with the
    median µs per image, its IQR and the speedup vs ``baseline`` (see
    :func:`with_pipeline_speedup`). Group columns are the dimensions that vary in the
    selection (device, source, confidence threshold, stage, ...); ``stages`` picks the
    stages (default: total, end to end; None: all). ``impls`` and ``devices`` pick the
    rows shown after the speedups are computed on all of ``frame``, so a cuda row still
    finds the CPU reference when only cuda rows are shown."""
    rows = with_pipeline_speedup(frame, baseline)
    if stages:
        rows = rows[rows["stage"].isin(list(stages))]
    if impls:
        rows = rows[rows["impl"].isin(list(impls))]
    if devices:
        rows = rows[rows["device"].isin(list(devices))]
    if rows.empty:
        raise ValueError("no measured (status ok) pipeline rows in the selection")
    groups = group_dims(rows, PIPELINE_DIMS)
    keys = [*groups, "impl", "batch"]
    noisy = "noisy" in rows.columns  # a cell is noisy where any row folded into it is; its reasons are all of theirs
    rows = with_noise(rows) if noisy else rows
    grouped = rows.groupby(keys, dropna=False, sort=True)
    table = grouped.agg(us_per_image=("us_per_image", "median"), iqr_us_per_image=("iqr_us_per_image", "median"),
                        speedup=("speedup", "median"), baseline_device=("baseline_device", "first"),
                        rows=("us_per_image", "size"),
                        **({"noisy": ("noisy", "max"), "noise": ("noise", joined_reasons)} if noisy else {})).reset_index()
    if noisy:
        table["noisy"] = table["noisy"].astype(bool)
    order = _impl_order(table["impl"].unique(), baseline)
    if "stage" in groups:
        table = table.assign(_stage=table["stage"].map(lambda v: PIPELINE_STAGES.index(v) if v in PIPELINE_STAGES else 9))
        groups_sort = [g if g != "stage" else "_stage" for g in groups]
    else:
        groups_sort = groups
    table = table.assign(_impl=table["impl"].map(order.index)).sort_values([*groups_sort, "_impl", "batch"])
    table = table.drop(columns=[c for c in ("_impl", "_stage") if c in table.columns]).reset_index(drop=True)
    table["batch"] = table["batch"].astype(int)
    table.attrs.update(groups=groups, baseline=baseline, impls=order, batches=sorted(table["batch"].unique().tolist()),
                       timers=options(rows, "timer"), stages=options(rows, "stage"))
    return table


def wide_pipeline_table(table: pd.DataFrame) -> pd.DataFrame:
    """``pipeline_table`` as pipeline x batch: one row per group and pipeline, for each
    batch the columns ``B=<b> us_per_image``, ``B=<b> noisy`` (where the rows say: True
    where the time is a noisy measurement's) and ``B=<b> speedup``."""
    groups = table.attrs.get("groups", [])
    impls = table.attrs.get("impls") or sorted(table["impl"].unique())
    batches = table.attrs.get("batches") or sorted(table["batch"].unique())
    index = [*groups, "impl"]
    values = ["us_per_image", *(["noisy"] if "noisy" in table.columns else []), "speedup"]
    wide = table.assign(**({"noisy": table["noisy"].astype(object)} if "noisy" in table.columns else {})).pivot_table(
        index=index, columns="batch", values=values, aggfunc="first", dropna=False)
    data = {}
    for b in batches:
        for value in values:
            data[f"B={b} {value}"] = wide[(value, b)] if (value, b) in wide.columns else float("nan")
    out = pd.DataFrame(data, index=wide.index).reset_index()
    out = out[out[[f"B={b} us_per_image" for b in batches]].notna().any(axis=1)]
    order = {i: n for n, i in enumerate(impls)}
    sort = [*groups, "_impl"]
    if "stage" in groups:
        out["_stage"] = out["stage"].map(lambda v: PIPELINE_STAGES.index(v) if v in PIPELINE_STAGES else 9)
        sort = [g if g != "stage" else "_stage" for g in groups] + ["_impl"]
    out = out.assign(_impl=out["impl"].map(order)).sort_values(sort).drop(columns=["_impl", "_stage"], errors="ignore")
    out = out.rename(columns={"impl": "pipeline"}).reset_index(drop=True)
    out.attrs.update(table.attrs)
    return out


PIPELINE_GROUP_LABELS = {"scenario": "source", "overlap": "conf", "iou_threshold": "IoU", "hardware": "machine",
                         "git_commit": "commit", "input_size": "input px"}


def pipeline_caption(table: pd.DataFrame) -> str:
    baseline = table.attrs.get("baseline", PIPELINE_BASELINE)
    timers = ", ".join(table.attrs.get("timers", [])) or "wall"
    stages = table.attrs.get("stages", [])
    what = f"stage {stages[0]}" if len(stages) == 1 else "by stage"
    cross = ("; cuda rows compare with it on the CPU" if baseline == PIPELINE_BASELINE else "")
    noisy = table[table["noisy"].astype(bool)]["noise"] if "noisy" in table.columns else []
    footnote = " " + noisy_footnote(noisy) if len(noisy) else ""
    return (f"Median time per image in µs ({what}, {timers} timer; one call on the whole batch divided by the batch size), "
            f"in brackets the speedup vs {baseline} on the same machine, input and batch (above 1 is faster{cross})."
            f"{footnote}")


def render_pipeline_table(table: pd.DataFrame, fmt: str) -> str:
    """``pipeline_table`` as ``markdown``, ``latex`` or ``csv`` (pipeline x batch; csv has
    full-precision numbers, one µs-per-image, one noisy and one speedup column per batch;
    markdown and LaTeX mark a noisy cell with a dagger, its reasons in the caption)."""
    wide = wide_pipeline_table(table)
    if fmt == "csv":
        return wide.rename(columns=PIPELINE_GROUP_LABELS).to_csv(index=False)
    groups = table.attrs.get("groups", [])
    batches = table.attrs.get("batches") or sorted(table["batch"].unique())
    header = [PIPELINE_GROUP_LABELS.get(g, g) for g in groups] + ["pipeline"] + [f"B={b}" for b in batches]
    body = []
    for _, row in wide.iterrows():
        cells = [f"{row[g]:g}" if isinstance(row[g], float) else str(row[g]) for g in groups] + [str(row["pipeline"])]
        for b in batches:
            us, speed = row[f"B={b} us_per_image"], row[f"B={b} speedup"]
            time = format_us(us) + (NOISY_MARK if _is_true(row.get(f"B={b} noisy")) else "")
            cells.append("" if pd.isna(us) else time if pd.isna(speed) else f"{time} ({format_speedup(speed)}×)")
        body.append(cells)
    align = ["l"] * (len(groups) + 1) + ["r"] * len(batches)
    return _render_cells(header, body, align, pipeline_caption(table), fmt)


def pipeline_agreement(frame: pd.DataFrame) -> pd.DataFrame:
    """Each measured pipeline case's agreement with the numpy reference, once per case
    (the columns are repeated on every stage and timer row): candidates that passed the
    confidence filter and detections kept (whole batch), the Jaccard index, extra, missing
    and mismatched (same detection, different box, score or label)."""
    rows = ok_rows(pipeline_rows(frame))
    keys = ["scenario", "overlap", "batch", "impl", "device"] + [d for d in ("hardware", "git_commit") if rows[d].nunique() > 1]
    columns = ["candidates", "kept", "ref_kept", "jaccard", "extra", "missing", "mismatched"]
    if rows.empty:
        return pd.DataFrame(columns=keys + columns)
    out = rows.groupby(keys, dropna=False, sort=True)[columns].first().reset_index()
    for column in ("batch", "candidates", "kept", "ref_kept", "extra", "missing", "mismatched"):
        out[column] = out[column].astype("Int64")
    return out.rename(columns={"scenario": "source", "overlap": "conf", "impl": "pipeline"})
