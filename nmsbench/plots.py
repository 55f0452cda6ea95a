"""Plotly figure builders: a results table in, a ``plotly.graph_objects.Figure`` out.

The dashboard (``app.py``) shows these figures and ``nmsbench plot`` writes them, styled
by :func:`style_for_print`, to PDF/PNG/SVG. They only read result tables (and, for the
suppression differences, arrays computed by :mod:`nmsbench.differences`).

    >>> rows = tables.select(tables.load_results(paths), timer=["wall"])
    >>> time_vs_n(rows)                 # median µs vs N, log-log, IQR band, one panel per scenario
    >>> speedup_vs_n(rows, "torchvision")
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import tables
from .tables import DEFAULT_BASELINE, aggregate, ok_rows

# Every built-in implementation has a fixed colour and marker, so a name looks the same in
# every figure and every selection. Colours are Okabe-Ito's colour-blind-safe set (black,
# vermillion, blue, bluish green, reddish purple, sky blue, orange) and Paul Tol's wine; the
# two headline kernels take the two strongest (hard_fused vermillion, matrix_recompute
# blue) and the baseline black; the later families take Tol's indigo and olive, a grey for
# the plain PyTorch Soft-NMS loop, maroon and a dark teal, a bright cyan for our GPU
# Soft-NMS (the one hue left that far from the rest), a slate for matrix_graph; the libraries' entries colours
# chosen to stay apart from all of those. tests/test_colors.py holds every pair apart by
# CIEDE2000.
IMPL_STYLES = {
    "torchvision": ("#000000", "circle"),
    "hard_fused": ("#D55E00", "diamond"),
    "matrix_recompute": ("#0072B2", "square"),
    "allpairs": ("#009E73", "triangle-up"),
    "bitmask_two_phase": ("#CC79A7", "x"),
    "bitmask_classic": ("#56B4E9", "cross"),
    "matrix_naive": ("#E69F00", "triangle-down"),
    "matrix_fused": ("#882255", "star"),
    "soft_nms": ("#332288", "triangle-right"),
    "soft_torch": ("#BBBBBB", "circle-x"),
    "diou_nms": ("#999933", "diamond-tall"),
    "weighted_nms": ("#800000", "square-x"),
    "cluster": ("#225555", "star-diamond"),
    "onnxruntime": ("#8465FF", "octagon"),
    "opencv": ("#FF004C", "triangle-ne"),
    "ensemble_boxes": ("#6B522D", "diamond-wide"),
    "ensemble_boxes_soft": ("#FFAD99", "square-cross"),
    "hard_graph": ("#00CC00", "triangle-sw"),
    "soft_rounds": ("#00DDDD", "hexagon-open"),
    "matrix_graph": ("#555566", "diamond-x"),
}
PINNED_COLORS = {name: style[0] for name, style in IMPL_STYLES.items()}
PINNED_SYMBOLS = {name: style[1] for name, style in IMPL_STYLES.items()}
# Names added later take a colour and a marker picked by a hash of the name: fixed per name
# whatever else is loaded. The colours (yellow, green, sand, umber, from Tol's and
# Okabe-Ito's sets) stay apart from the pinned ones; the markers are
# shapes no pinned name uses, so a later name never looks like a built-in one (two later
# names can share a colour, rarely also a marker).
EXTRA_COLORS = ["#F0E442", "#117733", "#DDCC77", "#8C564B"]
EXTRA_SYMBOLS = ["pentagon", "hexagon", "star-triangle-up", "hourglass", "bowtie", "star-square", "hexagram",
                 "triangle-left"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "star", "cross", "pentagon"]

# The four classes of a box in the differences view, drawn in this order (last on top).
BOX_CLASSES = ("suppressed by both", "kept by both", "only A", "only B")
BOX_COLORS = {
    "kept by both": "#009E73",        # bluish green
    "only A": "#0072B2",              # blue
    "only B": "#D55E00",              # vermillion
    "suppressed by both": "#A8A8A8",  # grey
}

N_AXIS = "boxes N"
TIME_AXIS = "median time (µs)"
PANEL_HEIGHT = 340


def _name_hash(name: str) -> int:
    return int(hashlib.sha1(name.encode()).hexdigest(), 16)


def impl_style(name: str) -> tuple[str, str]:
    """(colour, marker symbol) of an implementation: pinned for the built-in ones, else
    picked from the extra colours and shapes by a hash of the name (the same every time)."""
    if name in IMPL_STYLES:
        return IMPL_STYLES[name]
    h = _name_hash(name)
    return EXTRA_COLORS[h % len(EXTRA_COLORS)], EXTRA_SYMBOLS[(h // len(EXTRA_COLORS)) % len(EXTRA_SYMBOLS)]


def color_map(names: Sequence[str]) -> dict[str, str]:
    """A colour for each implementation name (:func:`impl_style`), whatever else is in ``names``."""
    return {name: impl_style(name)[0] for name in names}


def symbol_map(names: Sequence[str]) -> dict[str, str]:
    """A marker symbol for each implementation name (:func:`impl_style`)."""
    return {name: impl_style(name)[1] for name in names}


def empty_figure(message: str, height: int = 220) -> go.Figure:
    """A blank figure that says why it is blank."""
    fig = go.Figure()
    fig.add_annotation(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font=dict(size=14))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(height=height, meta={"empty": True, "message": message})
    return fig


def _rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    return f"rgba({int(h[0:2], 16)}, {int(h[2:4], 16)}, {int(h[4:6], 16)}, {alpha})"


PLOT_COLUMNS = list(dict.fromkeys([
    *tables.CASE_KEYS, *tables.SERIES_DIMS, "impl", "family", "status", "median_us", "iqr_us", "runs", "peak_mem_bytes",
    "mean_max_iou", "greedy_suppressed_frac", "baseline_us", "speedup", "source", "machine", "gpu",
    "span_us", "launches", "copies", "syncs",
]))


def _slim(frame: pd.DataFrame) -> pd.DataFrame:
    """Only the columns figures use: grouping tens of thousands of wide rows is what costs."""
    return frame[[c for c in PLOT_COLUMNS if c in frame.columns]]


def _series(ok: pd.DataFrame, facet: str | None, exclude: Sequence[str] = ()) -> pd.DataFrame:
    """``ok`` with ``series`` labels that tell apart everything not shown by the facet or axes."""
    dims = [d for d in tables.SERIES_DIMS + ["scenario"] if d != facet and d not in exclude]
    return tables.add_series(ok, tables.varying(ok, dims), shown_by=[facet] if facet else [])


def _styles(data: pd.DataFrame, colors: Mapping[str, str] | None) -> dict[str, tuple[str, str, str]]:
    """(colour, dash, marker) per series: colour and marker from the implementation, dash
    from the rest of the label (" · cuda", " · @commit": the most common is solid)."""
    colors = {**color_map(list(data["impl"].unique())), **(colors or {})}
    pairs = data[["series", "impl"]].drop_duplicates()
    rest = pd.Series([s[len(i):] for s, i in zip(data["series"], data["impl"])])
    counts = rest.value_counts()
    rests = sorted(counts.index, key=lambda r: (-counts[r], r))
    return {s: (colors[i], DASHES[rests.index(s[len(i):]) % len(DASHES)], impl_style(i)[1])
            for s, i in zip(pairs["series"], pairs["impl"])}


def _grid(titles: Sequence[str], rows_per_panel: int = 1, max_cols: int = 3, row_titles: Sequence[str] | None = None,
          vertical_spacing: float | None = None, horizontal_spacing: float | None = None):
    """A subplot grid with one panel per title (``rows_per_panel`` stacked kinds each)."""
    count = max(len(titles), 1)
    cols = min(count, max_cols)
    grid_rows = math.ceil(count / cols)
    rows = grid_rows * rows_per_panel
    subplot_titles = []
    for r in range(rows):
        for c in range(cols):
            index = (r // rows_per_panel) * cols + c
            subplot_titles.append(str(titles[index]) if r % rows_per_panel == 0 and index < len(titles) else "")
    # ~140 px between panel rows: rotated N ticks, the axis title, the next panel's title
    spacing = vertical_spacing if vertical_spacing is not None else min(0.3, 140 / (PANEL_HEIGHT * rows + 90)) if rows > 1 else 0.1
    across = horizontal_spacing if horizontal_spacing is not None else 0.07 if cols > 1 else 0.1
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=subplot_titles, horizontal_spacing=across,
                        vertical_spacing=spacing, row_titles=row_titles)
    positions = [((i // cols) * rows_per_panel + 1, i % cols + 1) for i in range(len(titles))]
    return fig, positions, rows


def _panels(frame: pd.DataFrame, facet: str | None) -> list[tuple[str, pd.DataFrame]]:
    if facet is None or facet not in frame.columns or frame[facet].nunique() <= 1:
        title = "" if facet is None or frame.empty or facet not in frame.columns else str(frame[facet].iloc[0])
        return [(title, frame)]
    return [(str(v), frame[frame[facet] == v]) for v in tables.options(frame, facet)]


def _n_ticks(fig: go.Figure, values) -> None:
    values = sorted({int(v) for v in values if pd.notna(v)})
    if 1 < len(values) <= 12:
        fig.update_xaxes(tickvals=values, ticktext=[str(v) for v in values])


def _tick_label(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def log_tick_values(values) -> list[float]:
    """Tick positions for a log axis over ``values``: decades over a wide range, 1-2-5
    steps over a narrow one (1-1.5-2-3-5-7 where that leaves fewer than two inside),
    always labelled in full (plotly's own minor labels read "5" for 0.05)."""
    values = np.asarray([v for v in values if pd.notna(v) and v > 0], dtype=float)
    if not len(values):
        return []
    lo, hi = math.floor(math.log10(values.min())), math.ceil(math.log10(values.max()))
    steps = (1,) if hi - lo > 3 else (1, 2, 5)
    ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in steps]
    if sum(values.min() <= t <= values.max() for t in ticks) < 2:  # a narrow range: finer steps, so two show
        ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in (1, 1.5, 2, 3, 5, 7)]
    below = [t for t in ticks if t <= values.min()]
    above = [t for t in ticks if t >= values.max()]
    first = below[-1] if below else ticks[0]
    last = above[0] if above else ticks[-1]
    return [float(f"{t:.6g}") for t in ticks if first <= t <= last]


def _log_ticks(fig: go.Figure, values, axis: str = "y", **selector) -> None:
    ticks = log_tick_values(values)
    if ticks:
        update = fig.update_yaxes if axis == "y" else fig.update_xaxes
        update(tickvals=ticks, ticktext=[_tick_label(t) for t in ticks], **selector)


def _add_lines(fig, data: pd.DataFrame, *, x: str, y: str, row: int, col: int, styles, shown: set,
               band: tuple[str, str] | None = None, hover: str = "", customdata: Sequence[str] = (),
               name_suffix: str = "", dash: str | None = None, mode: str = "lines+markers", group_suffix: str = "",
               meta: dict | None = None):
    """One line per series (and its band first, so the line draws on top; ``band`` names
    the columns of its lower and upper edge), added to the
    figure in one batch (plotly's per-trace add with row/col is what costs)."""
    traces = []
    for series, part in sorted(data.groupby("series", sort=False), key=lambda item: item[0]):
        part = part.sort_values(x)
        xs = part[x].to_numpy()
        color, series_dash, symbol = styles[series]
        group = series + group_suffix
        if band is not None:
            lo, hi = part[band[0]].to_numpy(float), part[band[1]].to_numpy(float)
            if np.isfinite(lo).any():  # one closed polygon: along the upper edge, back along the lower
                traces.append(go.Scatter(x=np.concatenate([xs, xs[::-1]]), y=np.concatenate([hi, lo[::-1]]), mode="lines",
                                         line=dict(width=0, color=color), hoverinfo="skip", fill="toself",
                                         fillcolor=_rgba(color, 0.18), showlegend=False, legendgroup=group,
                                         name=series + " IQR", meta={"role": "band", "series": series, "points": len(xs)}))
        traces.append(go.Scatter(
            x=xs, y=part[y].to_numpy(), mode=mode, name=series + name_suffix, legendgroup=group,
            showlegend=group not in shown, line=dict(color=color, dash=dash or series_dash, width=2),
            marker=dict(size=7, color=color, symbol=symbol),
            customdata=part[list(customdata)].to_numpy() if customdata else None,
            hovertemplate=f"<b>{series}{name_suffix}</b><br>{hover}<extra></extra>",
            meta={"role": "line", "series": series, "impl": str(part["impl"].iloc[0]), **(meta or {})},
        ))
        shown.add(group)
    if traces:
        fig.add_traces(traces, rows=[row] * len(traces), cols=[col] * len(traces))


def _finish(fig: go.Figure, rows: int, title: str | None, legend_title: str = "implementation") -> go.Figure:
    fig.update_layout(
        height=max(PANEL_HEIGHT * rows + 90, 300), title=title, legend_title_text=legend_title,
        hovermode="closest", margin=dict(l=60, r=20, t=80 if title else 50, b=50),
    )
    # The y title only left of the first column: elsewhere it would run into the panel beside.
    for name in fig.layout:
        if name.startswith("yaxis") and fig.layout[name].anchor:
            x_axis = "xaxis" + fig.layout[name].anchor[1:]
            if fig.layout[x_axis].domain and fig.layout[x_axis].domain[0] > 0.01:
                fig.layout[name].title.text = None
    return fig


def _iqr_band(agg: pd.DataFrame) -> pd.DataFrame:
    agg = agg.copy()
    half = agg["iqr_us"].fillna(0).clip(lower=0) / 2
    agg["band_hi"] = agg["median_us"] + half
    agg["band_lo"] = (agg["median_us"] - half).clip(lower=agg["median_us"] * 0.05)  # stays > 0 on a log axis
    return agg


def time_vs_n(frame: pd.DataFrame, *, facet: str | None = "scenario", colors=None, title: str | None = None,
              max_cols: int = 3) -> go.Figure:
    """Median time vs N on log-log axes, one line per implementation (per series when the
    selection mixes devices, timers, ...), the IQR as a band (median ± IQR/2), one panel
    per ``facet`` value. A point's hover names the results file it came from."""
    ok = ok_rows(_slim(frame))
    if ok.empty:
        return empty_figure("No measured rows in this selection.")
    if "source" not in ok.columns:
        ok = ok.assign(source="")
    ok = _series(ok, facet)
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
    return _finish(fig, rows, title)


def speedup_vs_n(frame: pd.DataFrame, baseline: str = DEFAULT_BASELINE, *, show: Sequence[str] | None = None,
                 facet: str | None = "scenario", colors=None, title: str | None = None, max_cols: int = 3) -> go.Figure:
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
    speed = _series(speed, facet)
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
    return _finish(fig, rows, title)


GPU_TIMER_DASH = {"device": "dash", "events": "dot"}  # the GPU timers' lines beside the solid wall line


def wall_vs_device(frame: pd.DataFrame, *, facet: str | None = "scenario", colors=None, title: str | None = None,
                   max_cols: int = 3) -> go.Figure | None:
    """Wall (solid) against GPU time vs N for the implementations that have rows of a GPU
    timer: device (dashed: what the GPU did, its hover giving the busy span and the kernel
    launches, copies and host syncs per call) and events (dotted: CUDA events around each
    call; older files' device rows). One legend entry per implementation shows and hides
    all its lines; its label adds the launches per call where the device timer counted
    them. None when the selection has no GPU-timer rows."""
    ok = ok_rows(_slim(frame))
    gpu = ok[ok["timer"].isin(list(GPU_TIMER_DASH))]
    if gpu.empty:
        return None
    impls = set(gpu["impl"])
    ok = ok[ok["impl"].isin(impls) & ok["timer"].isin(["wall", *GPU_TIMER_DASH]) & ok["device"].isin(set(gpu["device"]))]
    ok = _series(ok, facet, exclude=["timer"])
    styles = _styles(ok, colors)
    panels = _panels(ok, facet)
    fig, positions, rows = _grid([p[0] for p in panels], max_cols=max_cols)
    shown: set = set()
    labels = _launch_labels(ok)
    styles.update({label: styles[name] for name, label in labels.items()})
    for (_, part), (r, c) in zip(panels, positions):
        for timer, dash in (("wall", "solid"), *GPU_TIMER_DASH.items()):
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
    return _finish(fig, rows, title)


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
                max_cols: int = 3) -> go.Figure | None:
    """Peak device memory (MiB) vs N, log-log; None when no row has a peak (CPU rows don't)."""
    ok = ok_rows(_slim(frame))
    ok = ok[ok["peak_mem_bytes"].gt(0)] if "peak_mem_bytes" in ok.columns else ok.iloc[0:0]
    if ok.empty:
        return None
    ok = _series(ok, facet, exclude=["timer"]).assign(peak_mib=lambda d: d["peak_mem_bytes"] / 2**20)
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
    return _finish(fig, rows, title)


OVERLAP_AXES = {
    "mean_max_iou": "realized overlap: mean max IoU with a higher-scored box",
    "greedy_suppressed_frac": "realized overlap: fraction suppressed by greedy NMS",
}


def time_vs_overlap(frame: pd.DataFrame, n: int | None = None, *, x: str = "mean_max_iou", colors=None,
                    title: str | None = None) -> go.Figure:
    """Median time vs the box sets' realized overlap at one N (default: the largest), one
    line per implementation through its scenarios and knob values (marker = scenario)."""
    ok = ok_rows(_slim(frame))
    ok = ok[ok[x].notna()] if x in ok.columns else ok.iloc[0:0]
    if ok.empty:
        return empty_figure("No measured rows with a realized overlap in this selection.")
    n = int(ok["n"].max()) if n is None else int(n)
    ok = ok[ok["n"] == n]
    if ok.empty:
        return empty_figure(f"No measured rows at N = {n} in this selection.")
    ok = _series(ok, None, exclude=["scenario", "overlap"])
    styles = _styles(ok, colors)
    agg = aggregate(ok, ["series", "impl", "scenario", "overlap"])
    scenarios = tables.options(agg, "scenario")
    agg["symbol"] = agg["scenario"].map(lambda s: SYMBOLS[scenarios.index(s) % len(SYMBOLS)])
    fig = go.Figure()
    for series in sorted(agg["series"].unique()):
        part = agg[agg["series"] == series].sort_values(x)
        color, dash, _ = styles[series]
        fig.add_trace(go.Scatter(
            x=part[x], y=part["median_us"], mode="lines", name=series, legendgroup=series, hoverinfo="skip",
            line=dict(color=color, dash=dash, width=1.5), meta={"role": "line", "series": series, "impl": str(part["impl"].iloc[0])},
        ))
        fig.add_trace(go.Scatter(  # the points, shaped by scenario, carry the hover text
            x=part[x], y=part["median_us"], mode="markers", name=series, legendgroup=series, showlegend=False,
            marker=dict(size=9, color=color, symbol=part["symbol"].tolist()),
            customdata=part[["scenario", "overlap", "iqr_us"]].to_numpy(),
            hovertemplate=(f"<b>{series}</b><br>%{{customdata[0]}} (knob %{{customdata[1]}})<br>overlap %{{x:.3f}}"
                           "<br>median %{y:,.4g} µs<br>IQR %{customdata[2]:,.3g} µs<extra></extra>"),
            meta={"role": "points", "series": series},
        ))
    for scenario in scenarios:  # legend entries for the marker shapes
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=scenario, legendgroup="scenarios",
                                 legendgrouptitle_text="scenario", marker=dict(size=9, color="#555",
                                 symbol=SYMBOLS[scenarios.index(scenario) % len(SYMBOLS)]), meta={"role": "key"}))
    fig.update_xaxes(title_text=OVERLAP_AXES.get(x, x))
    fig.update_yaxes(type="log", title_text=TIME_AXIS)
    _log_ticks(fig, agg["median_us"])
    fig.update_layout(meta={"figure": "time_vs_overlap", "n": n})
    fig = _finish(fig, 1, title)
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
    fig.update_layout(height=640, legend_title_text="implementation", meta={"figure": "curves", "baseline": baseline})
    return fig


# --- the post-processing pipeline (`nmsbench pipeline` rows) ----------------------------

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
    implementation's pinned colour, the rest the free colours in sorted order."""
    colors = {}
    for name in names:
        if name == tables.PIPELINE_BASELINE:
            colors[name] = REFERENCE_COLOR
        elif name.startswith("torch+") and name[len("torch+"):] in PINNED_COLORS:
            colors[name] = PINNED_COLORS[name[len("torch+"):]]
    free = [c for c in EXTRA_COLORS if c not in colors.values()]
    for i, name in enumerate(sorted(n for n in set(names) if n not in colors)):
        colors[name] = free[i % len(free)]
    return colors


def _panel_label(dim: str, value) -> str:
    """A panel title's part: a pipeline's knob is its confidence threshold; N of accuracy rows counts candidates."""
    if dim == "overlap":
        return f"conf {value:g}"
    if dim == "n":
        return f"{value:,.0f} candidates"
    if dim in ("scenario", "device", "stage"):
        return str(value)
    return tables._fmt_dim(dim, value)


def _group_panels(rows: pd.DataFrame, dims: Sequence[str]) -> tuple[list[tuple[str, pd.DataFrame]], list[str]]:
    """One (title, rows) per combination of the ``dims`` that vary (what the ones before
    determine left out), and those dims."""
    used = tables.group_dims(rows, dims)
    if not used:
        return [("", rows)], used
    panels = []
    for values, part in rows.groupby(used, sort=True, dropna=False):
        values = values if isinstance(values, tuple) else (values,)
        panels.append((" · ".join(_panel_label(d, v) for d, v in zip(used, values)), part))
    return panels, used


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
        agg = (part.groupby(["series", "impl", "device", "batch"], sort=True)
               .agg(us_per_image=("us_per_image", "median"), iqr_us_per_image=("iqr_us_per_image", "median"),
                    median_us=("median_us", "median"), candidates=("candidates", "first"), noisy=("noisy", "first"),
                    rows=("us_per_image", "size")).reset_index())
        for series in sorted(agg["series"].unique(), key=lambda s: (pipeline_order(agg["impl"]).index(s.split(" · ")[0]), s)):
            line = agg[agg["series"] == series].sort_values("batch")
            color, dash, symbol = styles[series]
            noisy = line["noisy"].astype(str).str.lower().eq("true").map({True: " (noisy)", False: ""})
            fig.add_trace(go.Scatter(
                x=line["batch"], y=line["us_per_image"], mode="lines+markers", name=series, legendgroup=series,
                showlegend=series not in shown, line=dict(color=color, dash=dash, width=2),
                marker=dict(size=8, color=color, symbol=symbol),
                customdata=np.column_stack([line["median_us"], line["iqr_us_per_image"], line["candidates"], noisy]),
                hovertemplate=(f"<b>{series}</b><br>batch %{{x}}<br>%{{y:,.4g}} µs per image%{{customdata[3]}}"
                               "<br>IQR %{customdata[1]:,.3g} µs per image<br>%{customdata[0]:,.4g} µs per call"
                               "<br>%{customdata[2]:,.0f} candidates in the batch<extra></extra>"),
                meta={"role": "line", "series": series, "impl": str(line["impl"].iloc[0]), "device": str(line["device"].iloc[0])},
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

FRONT_COLOR = "#444444"
ACCURACY_TIME_AXIS = "median NMS time per image (µs)"


def _accuracy_text(point) -> str:
    """A point's hover line of every metric, in %, "–" where the row has none."""
    values = [f"{label} {'–' if pd.isna(point[m]) else f'{100 * point[m]:.1f}'}" for m, label in tables.ACCURACY_METRICS.items()]
    return " · ".join(values[:3]) + "<br>" + " · ".join(values[3:])


def pareto(frame: pd.DataFrame, metric: str = "ap", *, colors=None, title: str | None = None, max_cols: int = 3) -> go.Figure:
    """Accuracy against speed: ``metric`` (AP, AP50, AP75, AR100 or AR100-crowded, in %)
    against the median NMS time per image (log axis), one marker per implementation x
    setting (parameters, IoU threshold), coloured and shaped per implementation, and the
    Pareto front (the highest metric for the least time, :func:`nmsbench.tables.pareto_front`)
    as a step line: the best reachable at each time budget. One panel per source, device,
    machine, ... where the selection has several. Error and skipped rows, and settings
    without a value of the metric, are not drawn; the layout's meta counts them."""
    points = tables.accuracy_points(frame, metric)
    label = tables.ACCURACY_LONG_NAMES[metric]
    rows = tables.accuracy_rows(frame)
    unmeasured = len(rows) - len(ok_rows(rows))
    drawn = points[points[metric].notna()]
    missing = points[points[metric].isna()]
    groups = points.attrs["groups"]
    missing_in = sorted({" · ".join(_panel_label(d, v) for d, v in zip(groups, values))
                         for values in missing[groups].itertuples(index=False)}) if groups else []
    if drawn.empty:
        why = (f"no {label} value" if len(points) else "no measured (status ok) accuracy rows")
        return empty_figure(f"Nothing to draw: the selection has {why}.")
    drawn = drawn.assign(value=100 * drawn[metric], numbers=[_accuracy_text(p) for _, p in drawn.iterrows()],
                         on_front=drawn["front"].map({True: "on the Pareto front", False: "not on the front"}),
                         iou=drawn["iou_threshold"].map(lambda v: f"IoU {v:g}"))
    colors = {**color_map(list(drawn["impl"].unique())), **(colors or {})}
    panels, _ = _group_panels(drawn, groups)
    fig, positions, grid_rows = _grid([p[0] for p in panels], max_cols=max_cols)
    order = list(dict.fromkeys(drawn["impl"]))  # accuracy_points' order: the baseline first
    shown: set = set()
    for (_, part), (r, c) in zip(panels, positions):
        front = part[part["front"]].sort_values(["median_us", "value"])
        # the step runs on at the last front point's level to the slowest setting: the best within each budget
        xs = [*front["median_us"], part["median_us"].max()]
        ys = [*front["value"], front["value"].iloc[-1]]
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", name="Pareto front", legendgroup="front", showlegend="front" not in shown,
            line=dict(shape="hv", color=FRONT_COLOR, width=1.5, dash="dash"), hoverinfo="skip",
            meta={"role": "front", "points": len(front), "variants": front["variant"].tolist()},
        ), row=r, col=c)
        fig.add_trace(go.Scatter(  # a ring around each front point, whatever its marker's colour
            x=front["median_us"], y=front["value"], mode="markers", name="Pareto front", legendgroup="front", showlegend=False,
            marker=dict(symbol="circle-open", size=20, color=FRONT_COLOR, line=dict(width=1.5)), hoverinfo="skip",
            meta={"role": "front rings"},
        ), row=r, col=c)
        shown.add("front")
        for impl in sorted(part["impl"].unique(), key=order.index):
            mine = part[part["impl"] == impl]
            color, symbol = colors[impl], impl_style(impl)[1]
            fig.add_trace(go.Scatter(
                x=mine["median_us"], y=mine["value"], mode="markers", name=impl, legendgroup=impl,
                showlegend=impl not in shown,
                marker=dict(size=11, color=color, symbol=symbol, line=dict(width=0)),
                customdata=mine[["variant", "iou", "iqr_us", "numbers", "images", "on_front"]].to_numpy(),
                hovertemplate=(f"<b>%{{customdata[0]}}</b> · %{{customdata[1]}}<br>{label} %{{y:.1f}}"
                               "<br>%{x:,.4~g} µs per image (IQR %{customdata[2]:,.3~g})<br>%{customdata[3]}"
                               "<br>%{customdata[4]:,.0f} images · %{customdata[5]}<extra></extra>"),
                meta={"role": "points", "impl": impl, "variants": mine["variant"].tolist(),
                      "front": mine["front"].tolist()},
            ), row=r, col=c)
            shown.add(impl)
    fig.update_xaxes(type="log", title_text=ACCURACY_TIME_AXIS)
    _log_ticks(fig, drawn["median_us"], axis="x")
    fig.update_yaxes(title_text=f"{label} (%)")
    fig.update_layout(meta={"figure": "pareto", "metric": metric, "settings": len(drawn), "front": int(drawn["front"].sum()),
                            "without_metric": len(missing), "without_metric_in": missing_in, "not_measured": unmeasured})
    return _finish(fig, grid_rows, title)


def style_for_print(fig: go.Figure, *, width: int | None = None, height: int | None = None) -> go.Figure:
    """White background, black axes, a serif-free print font, legend below the panels."""
    fig = go.Figure(fig)
    fig.update_layout(
        template="simple_white", font=dict(family="Liberation Sans, Arial, Helvetica, sans-serif", size=12, color="black"),
        legend=dict(orientation="h", yanchor="top", y=-0.16, xanchor="center", x=0.5, title_text=""),
        margin=dict(l=70, r=20, t=50 if not fig.layout.title.text else 80, b=120), width=width, height=height,
        paper_bgcolor="white", plot_bgcolor="white",
    )
    fig.update_xaxes(showgrid=True, gridcolor="#e6e6e6", mirror=True, ticks="outside")
    fig.update_yaxes(showgrid=True, gridcolor="#e6e6e6", mirror=True, ticks="outside")
    fig.update_annotations(font_size=13)
    return fig


# --- the suppression differences view -------------------------------------------------

# Kept boxes of a variant that decays scores (Matrix NMS, Soft-NMS) are drawn fainter the
# less of their score is left: (lowest final / input score of the bin, opacity, label).
DECAY_BINS = ((0.75, 1.0, "75% or more"), (0.5, 0.6, "50-75%"), (0.25, 0.35, "25-50%"), (0.0, 0.15, "under 25%"))
MOVED_COLORS = ("#222222", "#7A5195")  # the moved boxes of A and of B (weighted NMS), dashed


def _decay_bin(remaining: np.ndarray) -> np.ndarray:
    """Index into DECAY_BINS per box; NaN (no decaying variant keeps it) is bin 0."""
    out = np.zeros(len(remaining), dtype=int)
    for i, (lowest, _, _) in enumerate(DECAY_BINS):
        out[np.nan_to_num(remaining, nan=1.0) < (DECAY_BINS[i - 1][0] if i else np.inf)] = i
    return out


def boxes_canvas(boxes: np.ndarray, classes: np.ndarray, names: tuple[str, str] = ("A", "B"), *,
                 scores: np.ndarray | None = None, remaining: np.ndarray | None = None, canvas: float | None = 1024.0,
                 title: str | None = None, height: int = 720, moved: dict | None = None) -> go.Figure:
    """The boxes drawn as outlines on an image-like canvas (y down), coloured by class:
    ``classes[i]`` is one of :data:`BOX_CLASSES` indices (0 suppressed by both, 1 kept by
    both, 2 only A, 3 only B). The legend names A and B and counts each class.
    ``remaining[i]`` (final / input score where a score-decaying variant keeps box i, NaN
    elsewhere; :func:`nmsbench.differences.remaining_score`) sets the box's opacity by
    :data:`DECAY_BINS`, with a legend of its own. ``moved`` (name -> (K, 4) boxes) draws
    where a box-moving variant (weighted NMS) put its kept boxes, dashed."""
    boxes = np.asarray(boxes, dtype=float).reshape(-1, 4)
    classes = np.asarray(classes, dtype=int)
    remaining = np.full(len(boxes), np.nan) if remaining is None else np.asarray(remaining, dtype=float)
    decays = bool(np.isfinite(remaining).any())
    bins = _decay_bin(remaining)
    fig = go.Figure()
    labels = {"only A": f"kept only by {names[0]}", "only B": f"kept only by {names[1]}"}
    widths = {"suppressed by both": 0.8, "kept by both": 1.6, "only A": 2.4, "only B": 2.4}
    for code, cls in enumerate(BOX_CLASSES):
        index_all = np.flatnonzero(classes == code)
        name = f"{labels.get(cls, cls)} ({len(index_all)})"
        color = BOX_COLORS[cls]
        parts = [(k, index_all[bins[index_all] == k]) for k in range(len(DECAY_BINS))]
        parts = [(k, index) for k, index in parts if len(index)] or [(0, index_all)]
        for first, (k, index) in zip([True] + [False] * len(parts), parts):
            alpha = DECAY_BINS[k][1]
            b = boxes[index]
            xs = np.column_stack([b[:, 0], b[:, 2], b[:, 2], b[:, 0], b[:, 0], np.full(len(b), np.nan)]).ravel()
            ys = np.column_stack([b[:, 1], b[:, 1], b[:, 3], b[:, 3], b[:, 1], np.full(len(b), np.nan)]).ravel()
            if not len(index):  # an empty class still gets its legend entry, with its count of 0
                xs = ys = np.array([np.nan])
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, legendgroup=cls, showlegend=first,
                                     connectgaps=False, hoverinfo="skip", line=dict(color=_rgba(color, alpha), width=widths[cls]),
                                     fill="toself", fillcolor=_rgba(color, (0.05 if code == 0 else 0.12) * alpha),
                                     meta={"role": "boxes", "class": cls, "count": int(len(index)), "opacity": alpha}))
            if len(index):  # box centres carry the hover text
                cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
                text = [f"box {i}" + (f", score {scores[i]:.3f}" if scores is not None else "")
                        + (f"<br>final score {remaining[i] * scores[i]:.3f} ({remaining[i]:.0%} of it)"
                           if scores is not None and np.isfinite(remaining[i]) else "")
                        + f"<br>{labels.get(cls, cls)}" for i in index]
                fig.add_trace(go.Scatter(x=cx, y=cy, mode="markers", marker=dict(size=5, color=color, opacity=0.35 * alpha),
                                         legendgroup=cls, showlegend=False, hovertext=text, hoverinfo="text",
                                         meta={"role": "centres", "class": cls}))
    for k, (name, where) in enumerate((moved or {}).items()):  # where a merging variant moved its kept boxes
        b = np.asarray(where, dtype=float).reshape(-1, 4)
        xs = np.column_stack([b[:, 0], b[:, 2], b[:, 2], b[:, 0], b[:, 0], np.full(len(b), np.nan)]).ravel()
        ys = np.column_stack([b[:, 1], b[:, 1], b[:, 3], b[:, 3], b[:, 1], np.full(len(b), np.nan)]).ravel()
        fig.add_trace(go.Scatter(x=xs if len(b) else [np.nan], y=ys if len(b) else [np.nan], mode="lines",
                                 name=f"{name}'s kept boxes, moved ({len(b)})", legendgroup=f"moved {name}",
                                 connectgaps=False, hoverinfo="skip",
                                 line=dict(color=MOVED_COLORS[k % len(MOVED_COLORS)], width=1.6, dash="dash"),
                                 meta={"role": "moved", "impl": name, "count": int(len(b))}))
    if decays:  # the opacity key: how much of its score a kept box has left
        for lowest, alpha, label in DECAY_BINS:
            count = int((np.isfinite(remaining) & (bins == DECAY_BINS.index((lowest, alpha, label)))).sum())
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"{label} ({count})", legendgroup="decay",
                                     legendgrouptitle_text="kept, final score left:",
                                     line=dict(color=_rgba("#333333", alpha), width=4),
                                     meta={"role": "decay key", "opacity": alpha, "count": count}))
    if canvas:
        extent = max(canvas, float(np.nanmax(boxes[:, 2:])) if len(boxes) else canvas)
        lo = min(0.0, float(np.nanmin(boxes[:, :2])) if len(boxes) else 0.0)
        fig.update_xaxes(range=[lo, extent])
        fig.update_yaxes(range=[extent, lo])
    else:
        fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="x (px)", showgrid=False, zeroline=False, constrain="domain")
    fig.update_yaxes(title_text="y (px)", showgrid=False, zeroline=False, scaleanchor="x", scaleratio=1, constrain="domain")
    fig.update_layout(height=height, title=title, legend=dict(orientation="h", yanchor="bottom", y=1.01, x=0),
                      margin=dict(l=60, r=20, t=110 if title else 80, b=50), plot_bgcolor="white",
                      meta={"figure": "boxes_canvas", "decayed": decays})
    return fig


ANNOTATED_MAX = 8  # implementations up to which the agreement heatmap writes each cell's value


def agreement_heatmap(matrix: pd.DataFrame, title: str | None = None) -> go.Figure:
    """Pairwise agreement (Jaccard index of the kept sets) as a heatmap, each cell's value
    written in it up to ANNOTATED_MAX implementations (beyond, the cells are too narrow for
    it to be read: hover gives it)."""
    if matrix.empty:
        return empty_figure("No implementation ran on this case.")
    z = matrix.to_numpy(dtype=float)
    annotated = len(matrix) <= ANNOTATED_MAX
    fig = go.Figure(go.Heatmap(
        z=z, x=list(matrix.columns), y=list(matrix.index), zmin=0, zmax=1, colorscale="Viridis",
        text=[[f"{v:.2f}" for v in row] for row in z] if annotated else None,
        texttemplate="%{text}" if annotated else None, textfont=dict(size=13 if len(matrix) <= 5 else 10),
        colorbar=dict(title=dict(text="Jaccard"), thickness=12),
        hovertemplate="%{y} vs %{x}<br>Jaccard of kept sets %{z:.3f}<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed")
    size = 110 + (60 if annotated else 32) * len(matrix)
    fig.update_layout(height=max(size, 300), title=title, margin=dict(l=130, r=10, t=60 if title else 30, b=130),
                      meta={"figure": "agreement"})
    return fig


IMAGE_FORMATS = (".pdf", ".png", ".svg")


def write_figure(fig: go.Figure, path, *, width: int = 1000, height: int | None = None, scale: float = 2.0) -> Path:
    """Write a figure as PDF, PNG or SVG with kaleido (which drives Chrome/Chromium)."""
    path = Path(path)
    if path.suffix.lower() not in IMAGE_FORMATS:
        raise ValueError(f"{path.name}: choose a .pdf, .png or .svg file name")
    _point_kaleido_at_chromium()
    fig.write_image(str(path), width=width, height=height or fig.layout.height or 600, scale=scale)
    return path


def _point_kaleido_at_chromium() -> None:
    """kaleido looks for Chrome on its own; Debian's chromium lives at /usr/bin/chromium."""
    import os
    import shutil

    if not os.environ.get("BROWSER_PATH"):
        for candidate in ("chromium", "chromium-browser", "google-chrome"):
            found = shutil.which(candidate)
            if found:
                os.environ["BROWSER_PATH"] = found
                break
