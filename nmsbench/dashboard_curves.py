"""The dashboard's Curves view: time, speedup, GPU time and memory against N, and time
against the realized overlap, built by :mod:`nmsbench.plots` from the rows the sidebar
chose. A line of one point (a case measured at one N) is a dot, not a curve: the charts
leave it out and the caption under them names it.
"""

from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from . import plots, tables
from .dashboard_defaults import multi_point_scenarios

MIN_POINTS = 2  # points of a drawn line
CHARTS = ["Time vs N", "Speedup", "Wall vs GPU time", "Peak memory", "Time vs overlap"]


@st.cache_data(show_spinner="Drawing…", max_entries=64)
def curve_figure(kind: str, data_key: tuple, choices_key: tuple, scenario: str | None, baseline: str, at_n: int,
                 _rows: pd.DataFrame, _all_timers: pd.DataFrame, _without_impl: pd.DataFrame, _colors: dict):
    """One figure of the curves view (built one at a time, so the first is on the page
    while the rest are drawn); the arguments without ``_`` say which data and choices it
    shows (the frames themselves are not hashed: tens of thousands of rows)."""
    facet = None if scenario else "scenario"
    rows, all_timers, without_impl = _rows, _all_timers, _without_impl
    if scenario:
        rows, all_timers, without_impl = (tables.select(f, scenario=[scenario]) for f in (rows, all_timers, without_impl))
    if kind == "time":
        return plots.time_vs_n(rows, facet=facet, colors=_colors, min_points=MIN_POINTS)
    if kind == "speedup":
        shown = tables.options(tables.ok_rows(rows), "impl")
        return plots.speedup_vs_n(without_impl, baseline, show=shown, facet=facet, colors=_colors, min_points=MIN_POINTS)
    if kind == "timers":
        return plots.wall_vs_device(all_timers, facet=facet, colors=_colors, min_points=MIN_POINTS)
    if kind == "memory":
        return plots.memory_vs_n(rows, facet=facet, colors=_colors, min_points=MIN_POINTS)
    return plots.time_vs_overlap(rows, at_n, colors=_colors, min_points=MIN_POINTS)


def left_out(fig, what: str = "one N") -> str:
    """The caption's sentence naming the lines a figure left out for having one point."""
    names = ((fig.layout.meta or {}).get("single_point") or []) if fig is not None else []
    return f" Measured at {what} only, so not drawn: {', '.join(names)}." if names else ""


def curves_view(rows: pd.DataFrame, all_timers: pd.DataFrame, without_impl: pd.DataFrame, colors: dict,
                data_key: tuple, choices_key: tuple, family_note: str = "") -> None:
    measured = tables.ok_rows(rows)
    if measured.empty:
        st.info("No measured (status ok) rows in this selection: widen the filters in the sidebar, "
                "or run `nmsbench sweep --n 64..1024 --device cpu` to make results.")
        skipped = tables.not_measured(rows)
        if not skipped.empty:
            st.dataframe(skipped, hide_index=True, width="stretch")
        return
    if set(measured["benchmark"]) == {"accuracy"}:
        st.info("These are `nmsbench accuracy` rows: the Accuracy tab draws them, AP or AR against time per image.")
        return
    if set(measured["benchmark"]) == {"pipeline"}:
        st.info("These are `nmsbench pipeline` rows, drawn here against N (raw rows per image): the Pipeline tab "
                "shows them as time per image vs batch size and by stage.")
    if family_note:
        st.caption(family_note)
    scenarios = tables.options(measured, "scenario")
    impls = tables.options(tables.ok_rows(without_impl), "impl")
    c1, c2 = st.columns([1.3, 3])
    layout = c1.radio("Scenarios", ["one panel each", "one at a time"], horizontal=True, key="layout")
    scenario = None
    if layout == "one at a time":
        scenario = c2.selectbox("Scenario", scenarios, key="one_scenario")
        measured = tables.select(measured, scenario=[scenario])
    several, single = [], []
    if layout == "one panel each":  # a scenario measured at one N is a panel of dots: left to "one at a time"
        several, single = multi_point_scenarios(measured)
        if several and single:
            measured = tables.select(measured, scenario=several)
            rows, all_timers, without_impl = (tables.select(f, scenario=several) for f in (rows, all_timers, without_impl))

    def chart(title: str, kind: str, key: str, caption, empty: str = "", baseline: str = "", at_n: int = 0) -> None:
        """One chart under its title; ``empty`` in its place where the selection gives no
        figure; ``caption(fig)`` under it where there is one."""
        st.subheader(title)
        fig = curve_figure(kind, data_key, choices_key, scenario, baseline, at_n, rows, all_timers, without_impl, colors)
        if fig is None and empty:
            st.info(empty)
            return
        st.plotly_chart(fig, key=key)
        text = caption(fig).strip()
        if text:
            st.caption(text)

    # one chart at a time: only the open tab's figure is built and drawn (five at once took
    # seconds of a small machine before the first appeared)
    time_tab, speedup_tab, timers_tab, memory_tab, overlap_tab = st.tabs(CHARTS, key="curve_chart", on_change="rerun")
    if time_tab.open:
        with time_tab:
            chart("Median time vs N", "time", "chart_time", lambda fig: (
                "Log-log axes; the band is the median ± IQR/2 of the timed runs. Timer(s): "
                f"{', '.join(tables.options(measured, 'timer'))}. Hover a point for its numbers; click a legend entry to hide a "
                "line. Hollow markers: noisy measurements (hover one for why; the sidebar's Hide noisy points leaves them out)."
                + (f" Measured at one N only, so not drawn here: {', '.join(single)} (Scenarios: one at a time shows it)."
                   if single and several else "") + left_out(fig)))
    if speedup_tab.open:
        with speedup_tab:
            baseline = st.selectbox("Speedup baseline", impls, key="baseline",
                                    index=impls.index(tables.DEFAULT_BASELINE) if tables.DEFAULT_BASELINE in impls else 0)
            chart(f"Speedup vs {baseline}", "speedup", "chart_speedup", lambda fig: (
                f"{baseline}'s median divided by each implementation's median on the same case (hardware, device, "
                "dtype, timer, scenario, knob, N, IoU, and parameters where it ran several); above 1 is faster. A "
                "baseline that never runs on CUDA is compared there on the same machine's CPU."
                + left_out(fig, f"one N shared with {baseline}")), baseline=baseline)
    if timers_tab.open:
        with timers_tab:
            chart("Wall vs GPU time", "timers", "chart_timers", lambda fig: (
                "Solid: wall time (what a caller waits for, launch and host work included); dashed: device time "
                "(what the GPU did: the call's kernels, copies and sets, from CUPTI; its hover gives the busy span "
                "and the launches, copies and host syncs per call; the legend, launches per call); dotted: events "
                "(CUDA events around each call, the host's gaps included; older files' device rows). A legend "
                "entry shows or hides all lines of an implementation." + left_out(fig)),
                  empty="No GPU-timer rows in this selection: device and events times are recorded for CUDA runs only.")
    if memory_tab.open:
        with memory_tab:
            chart("Peak memory vs N", "memory", "chart_memory", left_out,
                  empty="No peak-memory values in this selection: peak device memory is recorded for CUDA rows only.")
    if overlap_tab.open:
        with overlap_tab:
            sizes = [int(n) for n in tables.options(measured, "n")]
            widest = tables.widest_n(measured)
            default = widest if widest in sizes else sizes[-1]
            if st.session_state.get("overlap_n") == st.session_state.get("auto_overlap_n") != default:
                st.session_state.pop("overlap_n", None)  # still the default of another selection, not the user's choice
            st.session_state["auto_overlap_n"] = default
            at_n = st.selectbox("N for time vs overlap", sizes, index=sizes.index(default), key="overlap_n",
                                help="Default: the largest N at which every implementation of the selection has rows")
            absent = tables.lines_without(measured, at_n)
            chart(f"Time vs realized overlap at N = {at_n}", "overlap", "chart_overlap",
                  lambda fig: left_out(fig, "one box set at this N")
                  + (f" Not measured at N = {at_n}: {', '.join(absent)}." if absent else ""), at_n=at_n)

    skipped = tables.not_measured(rows)
    if not skipped.empty:
        with st.expander(f"{int(skipped['rows'].sum())} rows of this selection are not plotted (error or skipped)"):
            st.markdown(not_plotted(skipped))


def not_plotted(skipped: pd.DataFrame) -> str:
    """The rows a selection leaves out (:func:`tables.not_measured`), one markdown line per
    implementation, device and reason: text, where a table would have the browser load
    its table component (a megabyte of script) before it draws the first chart."""
    def plain(text) -> str:
        return re.sub(r"([\\`*_\[\]<>#|~])", r"\\\1", str(text))

    return "\n".join(f"- `{row.impl}` on {row.device}, {row.status}: {plain(row.error) or 'no reason recorded'} "
                     f"({row.rows} row{'s' if row.rows != 1 else ''})" for row in skipped.itertuples())
