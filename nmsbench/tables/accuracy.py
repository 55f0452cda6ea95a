"""Accuracy beside speed (`nmsbench accuracy` rows, benchmark = "accuracy")."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .core import (
    ACCURACY_METRICS,
    DEFAULT_BASELINE,
    _group_label,
    _impl_order,
    _is_true,
    _render_cells,
    aggregate,
    format_us,
    group_dims,
    ok_rows,
    options,
    variant_labels,
)
from .noise import NOISY_MARK, noisy_footnote

ACCURACY_LONG_NAMES = {"ap": "AP@[.5:.95]", "ap50": "AP50", "ap75": "AP75", "ar100": "AR@100",
                       "ar100_crowded": "AR@100 on crowded images"}
ACCURACY_NUMERIC = [*ACCURACY_METRICS, "images", "detections"]
# What keeps accuracy rows on separate fronts (panels, table groups) where it varies: times
# and metrics compare only on the same images, machine, device and timer.
ACCURACY_DIMS = ["scenario", "image", "source_params", "seed", "n", "device", "hardware", "dtype", "timer", "threads",
                 "git_commit"]
# One point of a front: an implementation with one parameter set and IoU threshold.
ACCURACY_SETTING = ["impl", "params", "iou_threshold"]
ACCURACY_GROUP_LABELS = {"scenario": "source", "image": "candidates", "source_params": "noise model"}


def accuracy_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``nmsbench accuracy`` (benchmark = accuracy), whatever their status, with
    every metric column present and numeric (NaN where a row lacks it)."""
    if "benchmark" not in frame.columns:
        return frame.iloc[0:0]
    rows = frame[frame["benchmark"].eq("accuracy")]
    return rows.assign(**{c: pd.to_numeric(rows[c], errors="coerce") if c in rows.columns else float("nan")
                          for c in ACCURACY_NUMERIC})


def pareto_front(time: Sequence[float], metric: Sequence[float]) -> np.ndarray:
    """Which points are on the Pareto front of the highest metric for the least time: True
    where no other point has at most its time and at least its metric, better in one. Equal
    points are both on it; a point with a NaN time or metric is on no front."""
    time, metric = np.asarray(time, dtype=float), np.asarray(metric, dtype=float)
    front = np.zeros(len(time), dtype=bool)
    valid = np.flatnonzero(np.isfinite(time) & np.isfinite(metric))
    best = -np.inf  # the highest metric of the points strictly faster than the current time
    for t in np.unique(time[valid]):
        same = valid[time[valid] == t]
        top = metric[same].max()
        if top > best:  # the best of these beats every faster point
            front[same[metric[same] == top]] = True
            best = top
    return front


def accuracy_points(frame: pd.DataFrame, metric: str = "ap") -> pd.DataFrame:
    """One row per group x setting (implementation, parameters, IoU threshold) of the
    measured accuracy rows: the medians of its rows' metrics and per-image times, its
    ``variant`` label and ``front``: on the Pareto front of ``metric`` against time per image
    within its group. Groups are the :data:`ACCURACY_DIMS` that vary (source, device, ...);
    the shared data of :func:`nmsbench.plots.pareto` and :func:`render_accuracy_table`."""
    if metric not in ACCURACY_METRICS:
        raise ValueError(f"unknown accuracy metric {metric!r}; choose {', '.join(ACCURACY_METRICS)}")
    rows = ok_rows(accuracy_rows(frame))
    groups = group_dims(rows, ACCURACY_DIMS)
    keys = [*groups, *ACCURACY_SETTING]
    if rows.empty:
        points = pd.DataFrame(columns=[*keys, "family", "variant", *ACCURACY_NUMERIC, "median_us", "iqr_us", "rows", "front"])
    else:
        points = aggregate(rows.assign(variant=variant_labels(rows)), keys)
        points["front"] = False
        for _, part in points.groupby(groups, dropna=False, sort=False) if groups else [(None, points)]:
            points.loc[part.index, "front"] = pareto_front(part["median_us"], part[metric])
        order = _impl_order(points["impl"].unique(), DEFAULT_BASELINE)
        points = points.assign(_impl=points["impl"].map(order.index)).sort_values([*groups, "_impl", "params", "iou_threshold"])
        points = points.drop(columns="_impl").reset_index(drop=True)
    points.attrs.update(groups=groups, metric=metric, timers=options(rows, "timer"))
    return points


def accuracy_caption(points: pd.DataFrame) -> str:
    metric = points.attrs.get("metric", "ap")
    timers = ", ".join(points.attrs.get("timers", [])) or "wall"
    return (f"COCO {ACCURACY_LONG_NAMES['ap']}, AP50, AP75, AR@100 and AR@100 over crowded images (%), and the median "
            f"NMS time per image in µs ({timers} timer). front: on the Pareto front of {ACCURACY_METRICS[metric]} against "
            "time per image (no other setting of its group has more of it in less time). A blank metric: the rows have "
            f"none (AR100-crowded: no crowded image in the source).{_noisy_note(points)}")


def _noisy_note(points: pd.DataFrame) -> str:
    """The caption's footnote on the noisy times (a dagger after the µs), "" when none is."""
    if "noisy" not in points.columns:
        return ""
    noise = points[points["noisy"].astype(bool)]["noise"]
    return " " + noisy_footnote(noise, "settings") if len(noise) else ""


def accuracy_table(points: pd.DataFrame) -> pd.DataFrame:
    """``accuracy_points`` for people: the group columns by their labels (source, device,
    ...), implementation, IoU, the metrics in %, µs per image (median and IQR), images and
    front (the dashboard's table; markdown and LaTeX print it)."""
    groups = points.attrs.get("groups", [])
    out = points[groups].rename(columns={g: ACCURACY_GROUP_LABELS.get(g, _group_label(g)) for g in groups})
    out = out.assign(implementation=points["variant"], IoU=points["iou_threshold"],
                     **{label: 100 * points[m] for m, label in ACCURACY_METRICS.items()},
                     **{"µs/image": points["median_us"], "IQR µs": points["iqr_us"], "images": points["images"],
                        "front": points["front"].astype(bool)})
    out.attrs.update(points.attrs)
    return out


def render_accuracy_table(points: pd.DataFrame, fmt: str) -> str:
    """``accuracy_points`` as ``markdown``, ``latex`` or ``csv``: one row per group and
    setting. Markdown and LaTeX give the metrics in % with one decimal and mark a noisy
    time with a dagger (its reasons in the caption); csv the same percentages at full
    precision in columns named for the unit (``ap_pct``, ...), the times, and ``noisy``
    and ``noise`` where the rows say."""
    groups = points.attrs.get("groups", [])
    table = accuracy_table(points)
    labels = list(table.columns[:len(groups)])
    if fmt == "csv":
        noise = {"noisy": "noisy", "noise": "noise"} if "noisy" in points.columns else {}
        columns = {**dict(zip(groups, labels)), "variant": "implementation", "params": "params", "iou_threshold": "iou_threshold",
                   **{m: f"{m}_pct" for m in ACCURACY_METRICS}, "median_us": "us_per_image", "iqr_us": "iqr_us_per_image",
                   **noise, "images": "images", "detections": "detections", "front": "front"}
        percent = points.assign(**{m: 100 * points[m] for m in ACCURACY_METRICS})
        return percent[list(columns)].rename(columns=columns).to_csv(index=False)
    noisy = points["noisy"] if "noisy" in points.columns else pd.Series(False, index=points.index)
    shown = [*labels, "implementation", "IoU", *ACCURACY_METRICS.values(), "µs/image", "front"]
    body = []
    for (_, row), marked in zip(table[shown].iterrows(), noisy):
        cells = [f"{row[c]:g}" if isinstance(row[c], float) else str(row[c]) for c in [*labels, "implementation", "IoU"]]
        cells += ["" if pd.isna(row[m]) else f"{row[m]:.1f}" for m in ACCURACY_METRICS.values()]
        cells += [format_us(row["µs/image"]) + (NOISY_MARK if _is_true(marked) else ""), "yes" if row["front"] else ""]
        body.append(cells)
    align = ["l"] * (len(groups) + 1) + ["r"] * (len(ACCURACY_METRICS) + 2) + ["l"]
    return _render_cells(shown, body, align, accuracy_caption(points), fmt)
