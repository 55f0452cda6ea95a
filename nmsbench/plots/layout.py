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


# What a line was measured on: named once in the figure's title when every line shares it;
# where lines differ, a line's label names only where it differs from the figure's most
# common value ("hard_fused · density canvas" beside "hard_fused", the fixed canvas).
SETUP_DIMS = ["device", "hardware", "threads", "canvas", "dtype"]


def _fmt(dim: str, value) -> str:
    if dim == "canvas":
        return f"{value} canvas"
    if dim == "git_commit" and value:
        return f"@{str(value)[:7]}"  # a short hash, as git prints it
    return _fmt_dim(dim, value)


def _label_plan(ok: pd.DataFrame, facet: str | None, exclude: Sequence[str] = ()) -> tuple[list[str], dict]:
    """(the dimensions a line's label may name, {setup dimension: its most common value}):
    in ``LABEL_ORDER``, the setup dimensions (:data:`SETUP_DIMS`) that vary among the
    lines and the others that tell one implementation's lines apart, leaving out those
    the ones before determine, and what the facet shows."""
    dims = [d for d in tables.SERIES_DIMS + ["scenario"] if d != facet and d not in exclude]
    dims = sorted(tables.varying(ok, dims), key=lambda d: tables.LABEL_ORDER.index(d) if d in tables.LABEL_ORDER else 99)
    known = [facet] if facet and facet in ok.columns else []
    kept: list[str] = []
    for dim in dims:
        within = [*known, *kept] if dim in SETUP_DIMS else ["impl", *known, *kept]  # a machine's lines: all of them
        if not within:
            kept.append(dim)
        elif ok.groupby(within, dropna=False)[dim].nunique(dropna=False).max() > 1:
            kept.append(dim)
    lines = ok.drop_duplicates(["impl", *known, *kept])
    modes = {}
    for dim in (d for d in kept if d in SETUP_DIMS):
        counts = lines[dim].astype(str).value_counts()
        modes[dim] = sorted(counts.index, key=lambda v: (-counts[v], v))[0]
    return kept, modes


def _series(ok: pd.DataFrame, facet: str | None, exclude: Sequence[str] = ()) -> pd.DataFrame:
    """``ok`` with ``series`` labels: the implementation's name, and what tells its lines
    apart where the figure's lines differ (:data:`SETUP_DIMS` only where a line differs
    from the most common value; :func:`context_title` names that value)."""
    kept, modes = _label_plan(ok, facet, exclude)
    label = ok["impl"].astype(str)
    variants = tables.variant_labels(ok) if "params" in kept else None
    for dim in kept:
        if dim == "params":  # only where an implementation has several: the parameters that differ
            suffix = [v[len(i):].strip() for v, i in zip(variants, ok["impl"].astype(str))]
            part = pd.Series([" · " + text if text else "" for text in suffix], index=ok.index)
        else:
            part = " · " + ok[dim].map(lambda v, d=dim: _fmt(d, v))
            if dim in modes:
                part = part.where(ok[dim].astype(str).ne(modes[dim]), "")
        if dim == "threads" and "device" in ok.columns:  # host threads say nothing about a GPU kernel's line
            part = part.where(ok["device"].ne("cuda"), "")
        label = label + part
    return ok.assign(series=label)


def context_title(ok: pd.DataFrame, facet: str | None, exclude: Sequence[str] = ()) -> str:
    """What every line of the figure shares ("cuda · vm: <GPU name> · 16 threads · fixed
    canvas"; the scenario too where there is one panel), and the most common value of what
    lines differ in ("fixed canvas unless labelled")."""
    if ok.empty:
        return ""
    kept, modes = _label_plan(ok, facet, exclude)
    shared, usual = [], []
    dims = (["scenario"] if facet != "scenario" and "scenario" not in exclude else []) + SETUP_DIMS[:4]
    for dim in dims:
        if dim not in ok.columns:
            continue
        values = ok[dim].dropna().unique()
        if dim in modes:
            usual.append(_fmt(dim, _typed(ok[dim], modes[dim])))
        elif len(values) == 1 and values[0] != "" and not (dim == "threads" and values[0] <= 0):
            shared.append(_fmt(dim, values[0]))
    return " · ".join(shared + ([", ".join(usual) + " unless labelled"] if usual else []))


def _typed(column: pd.Series, text: str):
    """The value of ``column`` whose text is ``text`` (a mode is kept as text)."""
    return next((v for v in column.unique() if str(v) == text), text)


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


N_TICKS_MAX = 8  # labels on an N axis: more pile up in a panel a third of the page wide


def n_tick_values(values, most: int = N_TICKS_MAX) -> list[int]:
    """The swept N values to label on a log N axis: all of them where they fit, else every
    other one (or fewer), evenly spread on the log scale, the smallest always labelled."""
    values = sorted({int(v) for v in values if pd.notna(v) and v > 0})
    if len(values) <= most:
        return values
    gap = 0.9 * math.log10(values[-1] / values[0]) / (most - 1)
    chosen = [values[0]]
    for v in values[1:]:
        if math.log10(v / chosen[-1]) >= gap:
            chosen.append(v)
    return chosen


def n_label(value: int) -> str:
    """A short N tick label: 512, 1k (1024 or 1000), 64k, 128k, 1M (2**20 or 10**6)."""
    for size, unit in ((2**20, "M"), (10**6, "M"), (1024, "k"), (1000, "k")):
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return f"{value / 1000:g}k" if value >= 1000 and value % 100 == 0 else str(value)


def _n_ticks(fig: go.Figure, values) -> None:
    ticks = n_tick_values(values)
    if len(ticks) > 1:
        fig.update_xaxes(tickvals=ticks, ticktext=[n_label(v) for v in ticks], tickangle=0)


def _tick_label(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def log_tick_values(values) -> list[float]:
    """Tick positions for a log axis over ``values``: one per decade where at least two
    decades fall inside, 1-2-5 steps over a narrower range (1-1.5-2-3-5-7 where that leaves
    fewer than two inside), always labelled in full (plotly's own minor labels read "5"
    for 0.05 and pile up)."""
    values = np.asarray([v for v in values if pd.notna(v) and v > 0], dtype=float)
    if not len(values):
        return []
    lo, hi = math.floor(math.log10(values.min())), math.ceil(math.log10(values.max()))
    ticks: list[float] = []
    for steps in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
        ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in steps]
        if sum(values.min() <= t <= values.max() for t in ticks) >= 2:
            break
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


def drop_lone_points(data: pd.DataFrame, by: Sequence[str], x: Sequence[str], min_points: int = 2) -> tuple[pd.DataFrame, list[str]]:
    """``data`` without the lines (its rows grouped ``by``: facet, series, ...) that have
    fewer than ``min_points`` distinct ``x`` (a line of one point is a dot beside curves),
    and what was left out, as "series (panel)"; all of it where no line has more."""
    by = [c for c in by if c in data.columns]
    if min_points <= 1 or data.empty:
        return data, []
    points = data.drop_duplicates([*by, *x]).groupby(by, dropna=False).size()
    few = points[points < min_points]
    if few.empty or len(few) == len(points):
        return data, []
    keys = pd.MultiIndex.from_frame(data[by]) if len(by) > 1 else pd.Index(data[by[0]])
    left = [k if isinstance(k, tuple) else (k,) for k in few.index]
    names = [f"{k[by.index('series')]}" + (f" ({', '.join(str(v) for c, v in zip(by, k) if c != 'series')})"
                                            if len(by) > 1 else "") for k in left]
    return data[~keys.isin(few.index)], sorted(names)


def _finish(fig: go.Figure, rows: int, title: str | None, legend_title: str = "implementation", context: str = "",
            left_out: Sequence[str] = ()) -> go.Figure:
    """The layout every figure shares; ``context`` (what all its lines share) is the title's
    subtitle, ``left_out`` (lines of one point not drawn) goes in ``layout.meta``."""
    noisy_key(fig)
    top = 80 if title else 70 if context else 50
    fig.update_layout(
        height=max(PANEL_HEIGHT * rows + 90 + (top - 50), 300), legend_title_text=legend_title,
        title=dict(text=title or "", subtitle=dict(text=context, font=dict(size=13, color="#444")), x=0.0, xref="paper",
                   xanchor="left", yref="container", y=0.99, yanchor="top"),
        hovermode="closest", margin=dict(l=60, r=20, t=top, b=50),
    )
    if left_out:
        fig.update_layout(meta={**(fig.layout.meta or {}), "single_point": list(left_out)})
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
