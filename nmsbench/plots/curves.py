"""The NMS sweep's figures: time, speedup, GPU time and memory against N, time against overlap."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .. import tables
from ..tables import DEFAULT_BASELINE, aggregate, ok_rows
from ..timers import TIMERS
from .layout import (
    N_AXIS,
    TIME_AXIS,
    _add_lines,
    _finish,
    _grid,
    _iqr_band,
    _log_ticks,
    _n_ticks,
    _panels,
    _series,
    _slim,
    _styles,
    context_title,
    drop_lone_points,
    empty_figure,
    hollow,
    noisy_markers,
)
from .style import SYMBOLS


def time_vs_n(frame: pd.DataFrame, *, facet: str | None = "scenario", colors=None, title: str | None = None,
              max_cols: int = 3, min_points: int = 1) -> go.Figure:
    """Median time vs N on log-log axes, one line per implementation (per series when the
    selection mixes devices, timers, ...), the IQR as a band (median ± IQR/2), one panel
    per ``facet`` value. A point's hover names the results file it came from. Lines of
    fewer than ``min_points`` N are left out (named in ``layout.meta["single_point"]``)."""
    ok = ok_rows(_slim(frame))
    if ok.empty:
        return empty_figure("No measured rows in this selection.")
    if "source" not in ok.columns:
        ok = ok.assign(source="")
    context = context_title(ok, facet)
    ok, left_out = drop_lone_points(_series(ok, facet), [facet or "", "series"], ["n"], min_points)
    styles = _styles(ok, colors)
    panels = _panels(ok, facet)
    fig, positions, rows = _grid([p[0] for p in panels], max_cols=max_cols)
    shown: set = set()
    for (_, part), (r, c) in zip(panels, positions):
        agg = _iqr_band(aggregate(part, ["series", "impl", "n"]))
        _add_lines(fig, agg, x="n", y="median_us", row=r, col=c, styles=styles, shown=shown, band=("band_lo", "band_hi"),
                   customdata=["iqr_us", "rows", "source"],
                   hover="N = %{x}<br>median %{y:,.4g} µs<br>IQR %{customdata[0]:,.3g} µs<br>from %{customdata[2]}")
    fig.update_xaxes(type="log", title_text=N_AXIS)
    fig.update_yaxes(type="log", title_text=TIME_AXIS)
    _n_ticks(fig, ok["n"])
    _log_ticks(fig, pd.concat([ok["median_us"], ok["median_us"] + ok["iqr_us"].fillna(0) / 2]))
    fig.update_layout(meta={"figure": "time_vs_n", "band": "median ± IQR/2"})
    return _finish(fig, rows, title, context=context, left_out=left_out)


def speedup_vs_n(frame: pd.DataFrame, baseline: str = DEFAULT_BASELINE, *, show: Sequence[str] | None = None,
                 facet: str | None = "scenario", colors=None, title: str | None = None, max_cols: int = 3,
                 min_points: int = 1) -> go.Figure:
    """Speedup vs ``baseline`` (its median / each median on the same case; > 1 is faster)
    against N, log-log, one line per implementation; the baseline itself is the line at 1.
    ``frame`` must hold the baseline's rows; ``show`` (default: all) picks the lines drawn."""
    speed = tables.with_speedup(_slim(frame), baseline)
    if show:  # the chosen lines, and the baseline's line at 1 where one of them is compared with it
        chosen = speed[speed["impl"].isin(show)]
        where = ["hardware", "device", "dtype", "timer"]
        compared = speed.set_index(where).index.isin(chosen.set_index(where).index)
        base = (speed["impl"] == baseline) & (compared | chosen.empty | (set(show) == {baseline}))
        speed = speed[speed["impl"].isin(show) | base]
    if speed.empty:
        have = ", ".join(tables.options(ok_rows(frame), "impl")) or "none"
        return empty_figure(f"No measured {baseline} rows to compare with in this selection (implementations: {have}).")
    context = context_title(speed, facet)
    speed, left_out = drop_lone_points(_series(speed, facet), [facet or "", "series"], ["n"], min_points)
    styles = _styles(speed, colors)
    panels = _panels(speed, facet)
    fig, positions, rows = _grid([p[0] for p in panels], max_cols=max_cols)
    shown: set = set()
    for (_, part), (r, c) in zip(panels, positions):
        agg = aggregate(part, ["series", "impl", "n"])
        agg["speedup"] = agg["baseline_us"] / agg["median_us"]
        _add_lines(fig, agg, x="n", y="speedup", row=r, col=c, styles=styles, shown=shown,
                   customdata=["median_us", "baseline_us"],
                   hover=f"N = %{{x}}<br>speedup %{{y:.3g}}×<br>%{{customdata[0]:,.4g}} µs vs {baseline} %{{customdata[1]:,.4g}} µs")
        fig.add_hline(y=1, line=dict(color="#777", width=1, dash="dot"), row=r, col=c)
    fig.update_xaxes(type="log", title_text=N_AXIS)
    fig.update_yaxes(type="log", title_text=f"speedup vs {baseline} (×)")
    _n_ticks(fig, speed["n"])
    _log_ticks(fig, speed["speedup"])
    fig.update_layout(meta={"figure": "speedup_vs_n", "baseline": baseline})
    return _finish(fig, rows, title, context=context, left_out=left_out)


def gpu_timer_dashes() -> dict[str, str]:
    """The timers drawn beside wall in :func:`wall_vs_device` and their lines' dash: those
    that registered a dash of their own (``Timer.dash``: device dashed, events dotted)."""
    return {name: timer.dash for name, timer in TIMERS.items() if name != "wall" and timer.dash != "solid"}


def wall_vs_device(frame: pd.DataFrame, *, facet: str | None = "scenario", colors=None, title: str | None = None,
                   max_cols: int = 3, min_points: int = 1) -> go.Figure | None:
    """Wall (solid) against GPU time vs N for the implementations that have rows of a GPU
    timer: device (dashed: what the GPU did, its hover giving the busy span and the kernel
    launches, copies and host syncs per call) and events (dotted: CUDA events around each
    call; older files' device rows). One legend entry per implementation shows and hides
    all its lines; its label adds the launches per call where the device timer counted
    them. None when the selection has no GPU-timer rows."""
    ok = ok_rows(_slim(frame))
    dashes = gpu_timer_dashes()
    gpu = ok[ok["timer"].isin(list(dashes))]
    if gpu.empty:
        return None
    impls = set(gpu["impl"])
    ok = ok[ok["impl"].isin(impls) & ok["timer"].isin(["wall", *dashes]) & ok["device"].isin(set(gpu["device"]))]
    ok = _series(ok, facet, exclude=["timer"])
    ok = ok[ok["series"].isin(set(ok.loc[ok["timer"].isin(list(dashes)), "series"]))]  # lines with a GPU time beside them
    context = context_title(ok, facet, exclude=["timer"])
    ok, left_out = drop_lone_points(_series(ok, facet, exclude=["timer"]), [facet or "", "series", "timer"], ["n"], min_points)
    styles = _styles(ok, colors)
    panels = _panels(ok, facet)
    fig, positions, rows = _grid([p[0] for p in panels], max_cols=max_cols)
    shown: set = set()
    labels = _launch_labels(ok)
    styles.update({label: styles[name] for name, label in labels.items()})
    for (_, part), (r, c) in zip(panels, positions):
        for timer, dash in (("wall", TIMERS["wall"].dash), *dashes.items()):
            agg = aggregate(part[part["timer"] == timer], ["series", "impl", "n"])
            if agg.empty:
                continue
            hover = f"{timer} timer<br>N = %{{x}}<br>median %{{y:,.4g}} µs"
            customdata: list[str] = []
            if timer == "device" and "launches" in agg.columns:
                agg = agg.assign(per_call=[_per_call_text(row) for row in agg.itertuples()])
                hover, customdata = hover + "<br>%{customdata[0]}", ["per_call"]
            agg = agg.assign(series=agg["series"].map(lambda name: labels.get(name, name)))
            # one legend entry per implementation: it shows and hides all its timers' lines together
            _add_lines(fig, agg, x="n", y="median_us", row=r, col=c, styles=styles, shown=shown, dash=dash,
                       hover=hover, customdata=customdata, meta={"timer": timer})
    fig.update_xaxes(type="log", title_text=N_AXIS)
    fig.update_yaxes(type="log", title_text=TIME_AXIS)
    _n_ticks(fig, ok["n"])
    _log_ticks(fig, ok["median_us"])
    fig.update_layout(meta={"figure": "wall_vs_device"})
    return _finish(fig, rows, title, context=context, left_out=left_out)


def _launch_labels(ok: pd.DataFrame) -> dict[str, str]:
    """series -> its label with the kernel launches per call its device rows counted
    ("hard_fused · 1 launch", "torchvision · 10–11 launches"); series without them keep theirs."""
    if "launches" not in ok.columns:
        return {}
    counted = ok[ok["timer"].eq("device")].dropna(subset=["launches"])
    labels = {}
    for series, part in counted.groupby("series"):
        lo, hi = int(part["launches"].min()), int(part["launches"].max())
        text = f"{lo}" if lo == hi else f"{lo}–{hi}"
        labels[series] = f"{series} · {text} launch{'' if hi == 1 else 'es'}"
    return labels


def _per_call_text(row) -> str:
    """A device point's hover line: busy span, launches, copies and host syncs per call."""
    def count(value, one: str, many: str) -> str:
        if value is None or not np.isfinite(value):
            return f"? {many}"
        return f"{value:g} {one if value == 1 else many}"

    span = getattr(row, "span_us", float("nan"))
    span_text = f"busy span {span:,.4g} µs · " if span is not None and np.isfinite(span) else ""
    return (f"{span_text}{count(getattr(row, 'launches', None), 'launch', 'launches')}, "
            f"{count(getattr(row, 'copies', None), 'copy', 'copies')}, "
            f"{count(getattr(row, 'syncs', None), 'host sync', 'host syncs')} per call")


def memory_vs_n(frame: pd.DataFrame, *, facet: str | None = "scenario", colors=None, title: str | None = None,
                max_cols: int = 3, min_points: int = 1) -> go.Figure | None:
    """Peak device memory (MiB) vs N, log-log; None when no row has a peak (CPU rows don't)."""
    ok = ok_rows(_slim(frame))
    ok = ok[ok["peak_mem_bytes"].gt(0)] if "peak_mem_bytes" in ok.columns else ok.iloc[0:0]
    if ok.empty:
        return None
    context = context_title(ok, facet, exclude=["timer"])
    ok, left_out = drop_lone_points(_series(ok, facet, exclude=["timer"]), [facet or "", "series"], ["n"], min_points)
    ok = ok.assign(peak_mib=lambda d: d["peak_mem_bytes"] / 2**20)
    styles = _styles(ok, colors)
    panels = _panels(ok, facet)
    fig, positions, rows = _grid([p[0] for p in panels], max_cols=max_cols)
    shown: set = set()
    for (_, part), (r, c) in zip(panels, positions):
        agg = aggregate(part, ["series", "impl", "n"])
        agg["peak_mib"] = agg["peak_mem_bytes"] / 2**20
        _add_lines(fig, agg, x="n", y="peak_mib", row=r, col=c, styles=styles, shown=shown,
                   hover="N = %{x}<br>peak %{y:,.4g} MiB")
    fig.update_xaxes(type="log", title_text=N_AXIS)
    fig.update_yaxes(type="log", title_text="peak device memory (MiB)")
    _n_ticks(fig, ok["n"])
    _log_ticks(fig, ok["peak_mib"])
    fig.update_layout(meta={"figure": "memory_vs_n"})
    return _finish(fig, rows, title, context=context, left_out=left_out)


OVERLAP_AXES = {
    "mean_max_iou": "realized overlap: mean max IoU with a higher-scored box",
    "greedy_suppressed_frac": "realized overlap: fraction suppressed by greedy NMS",
}


def time_vs_overlap(frame: pd.DataFrame, n: int | None = None, *, x: str = "mean_max_iou", colors=None,
                    title: str | None = None, min_points: int = 1) -> go.Figure:
    """Median time vs the box sets' realized overlap at one N (default: the largest), one
    line per implementation through its scenarios and knob values (marker = scenario);
    lines of fewer than ``min_points`` box sets are left out (``layout.meta["single_point"]``)."""
    ok = ok_rows(_slim(frame))
    ok = ok[ok[x].notna()] if x in ok.columns else ok.iloc[0:0]
    if ok.empty:
        return empty_figure("No measured rows with a realized overlap in this selection.")
    n = int(ok["n"].max()) if n is None else int(n)
    ok = ok[ok["n"] == n]
    if ok.empty:
        return empty_figure(f"No measured rows at N = {n} in this selection.")
    context = context_title(ok, None, exclude=["scenario", "overlap"])
    ok, left_out = drop_lone_points(_series(ok, None, exclude=["scenario", "overlap"]), ["series"], ["scenario", "overlap"],
                                    min_points)
    styles = _styles(ok, colors)
    agg = aggregate(ok, ["series", "impl", "scenario", "overlap"])
    scenarios = tables.options(agg, "scenario")
    agg["symbol"] = agg["scenario"].map(lambda s: SYMBOLS[scenarios.index(s) % len(SYMBOLS)])
    fig = go.Figure()
    for series in sorted(agg["series"].unique()):
        part = agg[agg["series"] == series].sort_values(x)
        color, dash, _ = styles[series]
        _, text, noisy = noisy_markers(part, "")
        symbols = [hollow(s) if n else s for s, n in zip(part["symbol"], tables.noisy_mask(part))]
        fig.add_trace(go.Scatter(
            x=part[x], y=part["median_us"], mode="lines", name=series, legendgroup=series, hoverinfo="skip",
            line=dict(color=color, dash=dash, width=1.5), meta={"role": "line", "series": series, "impl": str(part["impl"].iloc[0])},
        ))
        fig.add_trace(go.Scatter(  # the points, shaped by scenario, carry the hover text
            x=part[x], y=part["median_us"], mode="markers", name=series, legendgroup=series, showlegend=False,
            marker=dict(size=9, color=color, symbol=symbols, line=dict(color=color, width=1.5)),
            customdata=part[["scenario", "overlap", "iqr_us"]].to_numpy(), text=text,
            hovertemplate=(f"<b>{series}</b><br>%{{customdata[0]}} (knob %{{customdata[1]}})<br>overlap %{{x:.3f}}"
                           "<br>median %{y:,.4g} µs<br>IQR %{customdata[2]:,.3g} µs"
                           f"{'%{text}' if text else ''}<extra></extra>"),
            meta={"role": "points", "series": series, "noisy": noisy},
        ))
    for scenario in scenarios:  # legend entries for the marker shapes
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=scenario, legendgroup="scenarios",
                                 legendgrouptitle_text="scenario", marker=dict(size=9, color="#555",
                                 symbol=SYMBOLS[scenarios.index(scenario) % len(SYMBOLS)]), meta={"role": "key"}))
    fig.update_xaxes(title_text=OVERLAP_AXES.get(x, x))
    fig.update_yaxes(type="log", title_text=TIME_AXIS)
    _log_ticks(fig, agg["median_us"])
    fig.update_layout(meta={"figure": "time_vs_overlap", "n": n})
    fig = _finish(fig, 1, title, context=context, left_out=left_out)
    fig.update_layout(height=max(520, 24 * (agg["series"].nunique() + len(scenarios)) + 260))  # legend without scrolling
    return fig


def curves_for_print(frame: pd.DataFrame, baseline: str = DEFAULT_BASELINE, *, show: Sequence[str] | None = None,
                     colors=None) -> go.Figure:
    """The paper figure: median time (top row) and speedup vs ``baseline`` (bottom row)
    against N, one column per scenario, built from :func:`time_vs_n` and :func:`speedup_vs_n`."""
    top = time_vs_n(frame[frame["impl"].isin(show)] if show else frame, colors=colors, max_cols=99)
    bottom = speedup_vs_n(frame, baseline, show=show, colors=colors, max_cols=99)
    for part in (top, bottom):
        if (part.layout.meta or {}).get("empty"):
            return part
    titles = [a.text for a in top.layout.annotations]
    cols = max(len(titles), 1)
    fig = make_subplots(rows=2, cols=cols, subplot_titles=titles + [""] * cols, horizontal_spacing=0.05 if cols > 2 else 0.1,
                        vertical_spacing=0.12)
    in_legend = {t.legendgroup for t in top.data if t.showlegend}
    for row, part in ((1, top), (2, bottom)):
        for trace in part.data:
            axis = trace.xaxis or "x"
            index = int(axis[1:] or 1)
            trace = go.Scatter(trace)
            if row == 2:  # the top row's legend serves both rows; the baseline may only be in this one
                trace.showlegend = trace.showlegend is not False and trace.legendgroup not in in_legend
                in_legend.add(trace.legendgroup)
            fig.add_trace(trace, row=row, col=index)
        for c in range(1, cols + 1):
            if row == 2:
                fig.add_hline(y=1, line=dict(color="#777", width=1, dash="dot"), row=row, col=c)
    fig.update_xaxes(type="log", title_text=N_AXIS, row=2)
    fig.update_xaxes(type="log", row=1)
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text=TIME_AXIS, row=1, col=1)
    fig.update_yaxes(title_text=f"speedup vs {baseline} (×)", row=2, col=1)
    _n_ticks(fig, ok_rows(frame)["n"])
    for row, part in ((1, top), (2, bottom)):
        y = part.layout.yaxis
        fig.update_yaxes(tickvals=y.tickvals, ticktext=y.ticktext, row=row)
    fig.update_layout(height=640, legend_title_text="implementation", meta={"figure": "curves", "baseline": baseline},
                      title=top.layout.title, margin=dict(t=85 if top.layout.title.subtitle.text else 50))
    return fig
