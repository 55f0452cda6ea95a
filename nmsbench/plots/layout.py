"""What every figure shares: panel grids, log ticks, lines with IQR bands, series styles."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .. import tables
from ..tables.core import _fmt_dim
from .style import DASHES, color_map, impl_style

N_AXIS = "boxes N"
TIME_AXIS = "median time (µs)"
PANEL_HEIGHT = 340


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
    "span_us", "launches", "copies", "syncs", "noisy", "noise",
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
        symbols, text, noisy = noisy_markers(part, symbol)
        traces.append(go.Scatter(
            x=xs, y=part[y].to_numpy(), mode=mode, name=series + name_suffix, legendgroup=group,
            showlegend=group not in shown, line=dict(color=color, dash=dash or series_dash, width=2),
            marker=dict(size=7, color=color, symbol=symbols, line=dict(color=color, width=1.5)),
            customdata=part[list(customdata)].to_numpy() if customdata else None, text=text,
            hovertemplate=f"<b>{series}{name_suffix}</b><br>{hover}{'%{text}' if text else ''}<extra></extra>",
            meta={"role": "line", "series": series, "impl": str(part["impl"].iloc[0]), "noisy": noisy, **(meta or {})},
        ))
        shown.add(group)
    if traces:
        fig.add_traces(traces, rows=[row] * len(traces), cols=[col] * len(traces))


def noisy_markers(points: pd.DataFrame, symbol: str) -> tuple:
    """(marker symbols, hover texts, how many are noisy) for the points of one trace: a
    noisy point's marker hollow (``symbol-open``), its hover text saying it is noisy and
    why; texts are None where no point is noisy (or the rows do not say)."""
    noisy = tables.noisy_mask(points).to_numpy() if len(points) else np.zeros(0, dtype=bool)
    if not noisy.any():
        return symbol, None, 0
    reasons = points["noise"] if "noise" in points.columns else pd.Series("", index=points.index)
    text = [f"<br><b>noisy</b>: {r or 'reasons not recorded'}" if n else "" for n, r in
            zip(noisy, reasons.astype(object).where(reasons.notna(), "").astype(str))]
    return [hollow(symbol) if n else symbol for n in noisy], text, int(noisy.sum())


def hollow(symbol: str) -> str:
    """A noisy point's marker: ``symbol``'s open (hollow) form; a symbol drawn open already
    (soft_rounds' hexagon-open) takes a dot in its middle instead."""
    return f"{symbol}-dot" if symbol.endswith("-open") else f"{symbol}-open"


def noisy_key(fig: go.Figure) -> None:
    """Where a trace has noisy (hollow) points, a legend entry saying what hollow means."""
    if not any((t.meta or {}).get("noisy") for t in fig.data if isinstance(t.meta, dict)):
        return
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=tables.HOLLOW_NOTE, legendgroup="noisy key", showlegend=True,
                             marker=dict(size=9, color="#555", symbol="circle-open", line=dict(width=1.5)),
                             hoverinfo="skip", meta={"role": "key", "noisy": 0}))


def _finish(fig: go.Figure, rows: int, title: str | None, legend_title: str = "implementation") -> go.Figure:
    noisy_key(fig)
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


def _panel_label(dim: str, value) -> str:
    """A panel title's part: a pipeline's knob is its confidence threshold; N of accuracy rows counts candidates."""
    if dim == "overlap":
        return f"conf {value:g}"
    if dim == "n":
        return f"{value:,.0f} candidates"
    if dim in ("scenario", "device", "stage"):
        return str(value)
    return _fmt_dim(dim, value)


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
