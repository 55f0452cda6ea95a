"""Accuracy beside speed (`nmsbench accuracy` rows): the Pareto figure."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .. import tables
from ..tables import ok_rows
from .layout import _finish, _grid, _group_panels, _log_ticks, _panel_label, empty_figure
from .style import color_map, impl_style

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
