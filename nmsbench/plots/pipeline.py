"""The post-processing pipeline's figures (`nmsbench pipeline` rows)."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .. import tables
from .layout import _finish, _grid, _group_panels, _log_ticks, empty_figure, noisy_markers
from .style import DASHES, EXTRA_COLORS, PINNED_COLORS

STAGE_COLORS = {"decode": "#56B4E9", "nms": "#D55E00"}  # sky blue, vermillion (Okabe-Ito)
TOTAL_COLOR = "#000000"
REFERENCE_COLOR = "#4D4D4D"  # the numpy reference pipeline
DEVICE_SYMBOLS = {"cpu": "circle", "cuda": "diamond"}
BATCH_AXIS = "batch size (images per call)"
PER_IMAGE_AXIS = "time per image (µs)"
STAGE_NOTE = ("decode and nms are each timed on their own; the black mark is the whole pipeline timed end to end, "
              "so it need not equal their sum")


def pipeline_color_map(names: Sequence[str]) -> dict[str, str]:
    """A colour per pipeline name: numpy (the reference) dark grey, ``torch+<impl>`` its
    implementation's pinned colour, the rest in sorted order the colours no other pipeline
    drawn has: the extra colours, then the implementations' (a figure draws pipelines,
    not implementations, so two pipelines share a colour only past all of them)."""
    colors = {}
    for name in names:
        if name == tables.PIPELINE_BASELINE:
            colors[name] = REFERENCE_COLOR
        elif name.startswith("torch+") and name[len("torch+"):] in PINNED_COLORS:
            colors[name] = PINNED_COLORS[name[len("torch+"):]]
    pool = dict.fromkeys([*EXTRA_COLORS, *sorted(set(PINNED_COLORS.values()))])
    free = [c for c in pool if c not in colors.values() and c != REFERENCE_COLOR]
    for i, name in enumerate(sorted(n for n in set(names) if n not in colors)):
        colors[name] = free[i % len(free)]
    return colors


def pipeline_order(names: Sequence[str]) -> list[str]:
    """The reference first, then the rest by name."""
    names = sorted(set(names))
    return [n for n in names if n == tables.PIPELINE_BASELINE] + [n for n in names if n != tables.PIPELINE_BASELINE]


def _pipeline_styles(data: pd.DataFrame, colors: Mapping[str, str] | None) -> dict[str, tuple[str, str, str]]:
    """(colour, dash, marker symbol) per series: colour from the pipeline, dash from the rest
    of the label (cpu rows solid, cuda dashed), the symbol from the device."""
    colors = {**pipeline_color_map(list(data["impl"].unique())), **(colors or {})}
    pairs = data[["series", "impl", "device"]].drop_duplicates("series")
    rests = sorted({s[len(i):] for s, i in zip(pairs["series"], pairs["impl"])}, key=lambda r: ("cuda" in r, "device" in r, r))
    return {s: (colors[i], DASHES[rests.index(s[len(i):]) % len(DASHES)], DEVICE_SYMBOLS.get(d, "square"))
            for s, i, d in zip(pairs["series"], pairs["impl"], pairs["device"])}


def _pipeline_cols(panels: int, max_cols: int) -> int:
    return min(2, max_cols) if panels == 4 else max_cols  # 2 x 2 rather than 3 + 1


def _batch_axis(fig: go.Figure, batches, **selector) -> None:
    values = sorted({int(b) for b in batches if pd.notna(b)})
    fig.update_xaxes(type="log", title_text=BATCH_AXIS, tickvals=values, ticktext=[str(v) for v in values], **selector)


def pipeline_time_per_image(frame: pd.DataFrame, *, stage: str = "total", colors=None, title: str | None = None,
                            max_cols: int = 3) -> go.Figure:
    """Time per image (a call's median over the whole batch / batch size) vs batch size on
    log-log axes, one line per pipeline (per pipeline and device when the selection has
    CPU and GPU rows: cpu solid, cuda dashed), one panel per source (and confidence
    threshold, where several are selected). ``stage``: total (end to end), decode or nms."""
    rows = tables.per_image(frame)
    rows = rows[rows["stage"] == stage]
    if rows.empty:
        return empty_figure(f"No measured pipeline rows (stage {stage}) in this selection.")
    panels, used = _group_panels(rows, ["scenario", "overlap"])
    rows = tables.add_series(rows, [d for d in tables.PIPELINE_DIMS if d not in ("scenario", "overlap", "stage")], shown_by=used)
    panels = [(t, rows.loc[part.index]) for t, part in panels]
    styles = _pipeline_styles(rows, colors)
    fig, positions, grid_rows = _grid([p[0] for p in panels], max_cols=_pipeline_cols(len(panels), max_cols))
    shown: set = set()
    for (_, part), (r, c) in zip(panels, positions):
        _log_ticks(fig, part["us_per_image"], row=r, col=c)
        agg = (tables.with_noise(part).groupby(["series", "impl", "device", "batch"], sort=True)
               .agg(us_per_image=("us_per_image", "median"), iqr_us_per_image=("iqr_us_per_image", "median"),
                    median_us=("median_us", "median"), candidates=("candidates", "first"), noisy=("noisy", "max"),
                    noise=("noise", tables.joined_reasons), rows=("us_per_image", "size")).reset_index())
        for series in sorted(agg["series"].unique(), key=lambda s: (pipeline_order(agg["impl"]).index(s.split(" · ")[0]), s)):
            line = agg[agg["series"] == series].sort_values("batch")
            color, dash, symbol = styles[series]
            symbols, text, noisy = noisy_markers(line, symbol)
            fig.add_trace(go.Scatter(
                x=line["batch"], y=line["us_per_image"], mode="lines+markers", name=series, legendgroup=series,
                showlegend=series not in shown, line=dict(color=color, dash=dash, width=2),
                marker=dict(size=8, color=color, symbol=symbols, line=dict(color=color, width=1.5)),
                customdata=np.column_stack([line["median_us"], line["iqr_us_per_image"], line["candidates"]]), text=text,
                hovertemplate=(f"<b>{series}</b><br>batch %{{x}}<br>%{{y:,.4g}} µs per image"
                               "<br>IQR %{customdata[1]:,.3g} µs per image<br>%{customdata[0]:,.4g} µs per call"
                               f"<br>%{{customdata[2]:,.0f}} candidates in the batch{'%{text}' if text else ''}<extra></extra>"),
                meta={"role": "line", "series": series, "impl": str(line["impl"].iloc[0]), "device": str(line["device"].iloc[0]),
                      "noisy": noisy},
            ), row=r, col=c)
            shown.add(series)
    _batch_axis(fig, rows["batch"])
    fig.update_yaxes(type="log", title_text=PER_IMAGE_AXIS)
    fig.update_layout(meta={"figure": "pipeline_time_per_image", "stage": stage,
                            "per_image": "median_us of one call on the whole batch / batch"})
    return _finish(fig, grid_rows, title, legend_title="pipeline")


def pipeline_stage_bars(frame: pd.DataFrame, *, title: str | None = None, max_cols: int = 2) -> go.Figure:
    """Which stage costs what: per pipeline and batch size, the time per image of decode and
    of nms as stacked horizontal bars, and the end-to-end total as a black mark (the stages
    are timed on their own, so the total need not equal their sum), one panel per source
    (and device, confidence threshold, timer, machine where several are selected)."""
    rows = tables.per_image(frame)
    rows = rows[rows["stage"].isin(tables.PIPELINE_STAGES)]
    if rows.empty:
        return empty_figure("No measured pipeline rows in this selection.")
    panels, _ = _group_panels(rows, ["scenario", "overlap", "device", "timer", "hardware", "threads", "input_size",
                                        "iou_threshold", "params", "git_commit"])
    cols = _pipeline_cols(len(panels), max_cols)
    grid_rows = math.ceil(len(panels) / cols)
    most = max(part.groupby(["impl", "batch"]).ngroups for _, part in panels)  # bars in the fullest panel
    height = max(340, grid_rows * (26 * most + 120) + 60)
    fig, positions, grid_rows = _grid([p[0] for p in panels], max_cols=cols, horizontal_spacing=0.17,  # room for names
                                      vertical_spacing=min(0.3, 120 / height))  # and for an axis title above a panel title
    shown: set = set()
    for (_, part), (r, c) in zip(panels, positions):
        agg = part.groupby(["impl", "batch", "stage"], sort=True)["us_per_image"].median().unstack("stage")
        order = pipeline_order(agg.index.get_level_values("impl"))
        cases = sorted(agg.index, key=lambda k: (-order.index(k[0]), -k[1]))  # bottom to top: reference on top
        y = [[k[0] for k in cases], [f"B={int(k[1])}" for k in cases]]
        total = agg["total"].reindex(cases).to_numpy(float) if "total" in agg else np.full(len(cases), np.nan)
        for stage in ("decode", "nms"):
            if stage not in agg:
                continue
            values = agg[stage].reindex(cases).to_numpy(float)
            share = np.where(total > 0, values / total * 100, np.nan)
            fig.add_trace(go.Bar(
                y=y, x=values, orientation="h", name=f"{stage} (timed alone)", legendgroup=stage,
                showlegend=stage not in shown, marker=dict(color=STAGE_COLORS[stage], line=dict(width=0)),
                customdata=share, hovertemplate=(f"<b>%{{y}}</b><br>{stage}: %{{x:,.4g}} µs per image"
                                                 "<br>%{customdata:.0f}% of the end-to-end total<extra></extra>"),
                meta={"role": "stage", "stage": stage},
            ), row=r, col=c)
            shown.add(stage)
        stacked = sum(agg[st].reindex(cases).fillna(0).to_numpy(float) for st in ("decode", "nms") if st in agg)
        right = np.nanmax(np.concatenate([np.atleast_1d(stacked), total, [0.0]]))
        fig.update_xaxes(range=[0, right * 1.06 if right > 0 else 1], row=r, col=c)  # the total marks too, not only the bars
        if np.isfinite(total).any():
            fig.add_trace(go.Scatter(
                y=y, x=total, mode="markers", name="total (end to end)", legendgroup="total", showlegend="total" not in shown,
                marker=dict(symbol="line-ns", size=16, line=dict(width=3, color=TOTAL_COLOR), color=TOTAL_COLOR),
                hovertemplate="<b>%{y}</b><br>total, end to end: %{x:,.4g} µs per image<extra></extra>",
                meta={"role": "total"},
            ), row=r, col=c)
            shown.add("total")
    fig.update_layout(barmode="stack", bargap=0.25)
    fig.update_xaxes(title_text=PER_IMAGE_AXIS)
    fig.update_yaxes(tickfont=dict(size=11))
    fig.update_layout(meta={"figure": "pipeline_stages", "note": STAGE_NOTE})
    fig = _finish(fig, grid_rows, title, legend_title="stage")
    fig.update_layout(height=height, hovermode="closest")
    return fig


def pipeline_cpu_vs_gpu(frame: pd.DataFrame, *, colors=None, title: str | None = None, max_cols: int = 3) -> go.Figure | None:
    """How much faster each pipeline runs on the GPU: its CPU time per image / its GPU time
    per image (wall timer, end to end, same machine, source, threshold and batch) vs batch
    size, log-log, one line per pipeline; None when no pipeline has rows of both devices."""
    rows = tables.per_image(frame)
    rows = rows[(rows["stage"] == "total") & (rows["timer"] == "wall")]
    keys = [k for k in tables.PIPELINE_CASE_KEYS if k in rows.columns] + ["impl", "git_commit"]
    if rows.empty or not {"cpu", "cuda"} <= set(rows["device"]):
        return None
    cpu = rows[rows["device"] == "cpu"].groupby(keys, dropna=False)["us_per_image"].median().rename("cpu_us")
    gpu = rows[rows["device"] == "cuda"].groupby(keys, dropna=False)["us_per_image"].median().rename("cuda_us")
    pairs = pd.concat([cpu, gpu], axis=1, join="inner").reset_index()
    if pairs.empty:
        return None
    pairs["ratio"] = pairs["cpu_us"] / pairs["cuda_us"]
    pairs["device"] = "cuda"
    panels, used = _group_panels(pairs, ["scenario", "overlap"])
    pairs = tables.add_series(pairs, ["machine", "threads", "input_size", "iou_threshold", "params", "git_commit"], shown_by=used)
    panels = [(t, pairs.loc[part.index]) for t, part in panels]
    styles = _pipeline_styles(pairs, colors)
    fig, positions, grid_rows = _grid([p[0] for p in panels], max_cols=_pipeline_cols(len(panels), max_cols))
    shown: set = set()
    for (_, part), (r, c) in zip(panels, positions):
        _log_ticks(fig, pd.concat([part["ratio"], pd.Series([1.0])]), row=r, col=c)
        for series in sorted(part["series"].unique()):
            line = part[part["series"] == series].groupby("batch", sort=True)[["ratio", "cpu_us", "cuda_us"]].median().reset_index()
            color, dash, _ = styles[series]
            fig.add_trace(go.Scatter(
                x=line["batch"], y=line["ratio"], mode="lines+markers", name=series, legendgroup=series,
                showlegend=series not in shown, line=dict(color=color, dash=dash, width=2), marker=dict(size=8, color=color),
                customdata=line[["cpu_us", "cuda_us"]].to_numpy(),
                hovertemplate=(f"<b>{series}</b><br>batch %{{x}}<br>GPU %{{y:.3g}}× faster than CPU"
                               "<br>cpu %{customdata[0]:,.4g} µs vs cuda %{customdata[1]:,.4g} µs per image<extra></extra>"),
                meta={"role": "line", "series": series, "impl": series.split(" · ")[0]},
            ), row=r, col=c)
            shown.add(series)
        fig.add_hline(y=1, line=dict(color="#777", width=1, dash="dot"), row=r, col=c)
    _batch_axis(fig, pairs["batch"])
    fig.update_yaxes(type="log", title_text="CPU time / GPU time (×)")
    fig.update_layout(meta={"figure": "pipeline_cpu_vs_gpu"})
    return _finish(fig, grid_rows, title, legend_title="pipeline")


# --- accuracy beside speed (`nmsbench accuracy` rows) ----------------------------------
