"""nmsbench dashboard: ``streamlit run app.py``.

A thin page over :mod:`nmsbench.tables`, :mod:`nmsbench.plots` and
:mod:`nmsbench.differences` (the same builders ``nmsbench plot`` and ``nmsbench export``
use). It reads results only, never runs NMS: the reference runs at the top of
``results/`` (or ``$NMSBENCH_RESULTS_DIR``), the user's own runs under ``results/runs/``,
``results/archive/`` when asked, and CSVs uploaded in the sidebar. By default each case
shows its newest measurement per machine (one line per implementation, not per commit);
a sidebar toggle shows every run; the view opens on one machine and device, and on the exact
greedy family where more implementations would crowd the legends (:mod:`nmsbench.dashboard_defaults`).
The views: curves (:mod:`nmsbench.dashboard_curves`), the post-processing pipeline (time
per image vs batch, stage costs, CPU vs GPU, agreement), accuracy beside speed (COCO AP
or AR against time per image, the Pareto front, from ``nmsbench accuracy``), suppression
differences (files written by ``nmsbench diff``), conformance (``nmsbench conformance``
reports, *conformance*.csv), two runs compared case by case (the verdicts of ``nmsbench compare``,
:mod:`nmsbench.dashboard_compare`), and the runs' environment with a CSV download.
"""

from __future__ import annotations

import streamlit as st


def open_page():
    """The page's settings, title and, on a session's first run, a small chart saying the
    results are loading, sent before the imports below (most of a second on a fresh
    server) and the reading of the files: the browser fetches and compiles plotly.js (its
    largest script, seconds on a small machine) meanwhile, not after them. Returns the
    chart's slot, for main() to clear; None on later runs (plotly.js is loaded)."""
    st.set_page_config(page_title="nmsbench", layout="wide")
    st.title("nmsbench: which NMS, how fast, and what it suppresses")
    if st.session_state.get("plotly_loaded"):
        return None
    st.session_state["plotly_loaded"] = True
    import plotly.graph_objects as go  # imported by streamlit already

    slot = st.empty()
    blank = {"visible": False}
    slot.plotly_chart(go.Figure(layout={
        "height": 120, "xaxis": blank, "yaxis": blank, "meta": {"empty": True},
        "annotations": [{"text": "Reading the results…", "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper",
                         "showarrow": False, "font": {"size": 14}}]}), key="chart_loading", config={"staticPlot": True})
    return slot


LOADING = open_page()

import hashlib
import io
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from nmsbench import diff_cases, plots, tables
from nmsbench.conformance_report import is_conformance_file
from nmsbench.dashboard_curves import curves_view
from nmsbench.dashboard_defaults import default_families, default_filters, family_caption, hidden_families
from nmsbench.results import PartialRowWarning, folder_files, read_results

APP_DIR = Path(__file__).resolve().parent
VIEWS = ["Curves", "Pipeline", "Accuracy", "Suppression differences", "Conformance", "Compare runs", "Environment & data"]
DIFF_COMMAND = "nmsbench diff --scenario clustered --n 512"


def results_dir() -> Path:
    return Path(os.environ.get("NMSBENCH_RESULTS_DIR") or APP_DIR / "results")


def result_files(folder: Path, include_archive: bool = False) -> list[Path]:
    """The results CSVs the dashboard loads: the reference shelf at the top of ``folder``,
    everything under ``runs/`` (the user's own sweeps) and, when asked, the CSVs at the top
    of ``archive/`` (older runs; its gpu-check-* folders hold logs, not runs)."""
    return [p for p in folder_files(folder, "*.csv", include_archive, archive_anywhere=False)
            if not is_conformance_file(p)]  # the Conformance view reads those


# --- cached loading ---------------------------------------------------------------------

def _load(source, name: str):
    """(raw frame, None, notes) or (None, what is wrong, []): the file as read, with its
    ``source`` (:func:`tables.prepare_many` makes all of them uniform in one pass); notes
    say what was dropped from a file that loaded (a partial last row of a run stopped while
    writing it). What is wrong names the file, and the lines of damaged rows or of a case
    measured twice."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PartialRowWarning)
        try:
            frame, error = read_results(source, name=name).assign(source=name), None
        except ValueError as e:
            return None, str(e), []
    return frame, error, [str(w.message) for w in caught if issubclass(w.category, PartialRowWarning)]


@st.cache_data(show_spinner=False, max_entries=256)
def load_csv(path: str, name: str, mtime_ns: int, size: int):
    """``_load`` of a file of the folder (``name``: its path in the folder); mtime and size
    make an edited file reload."""
    return _load(path, name)


@st.cache_data(show_spinner=False, max_entries=64)
def load_upload(name: str, data: bytes):
    return _load(io.BytesIO(data), name)


@st.cache_data(show_spinner=False, max_entries=16)
def prepared(data_key: tuple, _frames: list) -> pd.DataFrame:
    """The loaded files' rows made uniform (:func:`tables.prepare_many`); ``data_key`` names
    the files' versions, so the frames themselves are not hashed."""
    return tables.prepare_many(_frames)


@st.cache_data(show_spinner=False, max_entries=256)
def sidecar_command(path: str, mtime_ns: int) -> str:
    try:
        return str(json.loads(Path(path).read_text()).get("command", ""))
    except (OSError, ValueError, AttributeError):
        return ""


@st.cache_data(show_spinner=False, max_entries=64)
def load_diff(path: str, mtime_ns: int, size: int):
    """(case, None) or (None, what is wrong) for an ``nmsbench diff`` file."""
    try:
        return diff_cases.read_case(path), None
    except ValueError as e:
        return None, str(e)


@st.cache_data(show_spinner=False)
def implementation_table() -> pd.DataFrame:
    from nmsbench.registry import describe  # imports every implementation (numba, ...): only when asked

    rows = pd.DataFrame(describe())
    rows["available here"] = rows.apply(lambda r: "yes" if r["available"] else f"no: {r['reason']}", axis=1)
    return rows[["name", "family", "device", "available here", "summary"]]


def load_all(uploads, include_archive: bool = False) -> tuple[pd.DataFrame, list[str], dict[str, str], tuple, list[str]]:
    """The results files of the folder (:func:`result_files`) plus the uploads: (rows,
    problems, commands, data key, notes); the key names the loaded files' versions, for
    caching what is computed from them; notes are warnings about files that did load."""
    frames, problems, commands, sources, notes = [], [], {}, [], []
    folder = results_dir()
    for path in result_files(folder, include_archive):
        stat = path.stat()
        name = str(path.relative_to(folder))
        frame, error, dropped = load_csv(str(path), name, stat.st_mtime_ns, stat.st_size)
        notes += dropped
        if error:
            problems.append(error)
            continue
        frames.append(frame)
        sources.append((str(path), stat.st_mtime_ns, stat.st_size))
        sidecar = path.with_suffix(".json")
        if sidecar.exists():
            commands[name] = sidecar_command(str(sidecar), sidecar.stat().st_mtime_ns)
    for upload in uploads or []:
        data = upload.getvalue()
        frame, error, dropped = load_upload(upload.name, data)
        notes += [f"upload {note}" for note in dropped]
        if error:
            problems.append(f"upload {error}")
            continue
        frames.append(frame.assign(source=f"{upload.name} (uploaded)"))
        sources.append((upload.name, hashlib.sha1(data).hexdigest()))
    return prepared(tuple(sources), frames), problems, commands, tuple(sources), notes


@st.cache_data(show_spinner="Drawing…", max_entries=32)
def pipeline_figures(data_key: tuple, choices_key: tuple, stage: str, devices: tuple, impls: tuple, _rows: pd.DataFrame,
                     _all_devices: pd.DataFrame) -> dict:
    """The pipeline view's figures and tables: ``_rows`` are the chosen pipeline rows,
    ``_all_devices`` the same without the device and pipeline choice (the speedup of a cuda
    row is against the numpy reference on the CPU); ``data_key`` and ``choices_key`` name them."""
    colors = plots.pipeline_color_map(tables.options(_rows, "impl"))
    try:
        table = tables.wide_pipeline_table(tables.pipeline_table(_all_devices, devices=list(devices), impls=list(impls)))
    except ValueError:  # no measured total rows
        table = None
    return {
        "time": plots.pipeline_time_per_image(_rows, stage=stage, colors=colors),
        "stages": plots.pipeline_stage_bars(_rows),
        "devices": plots.pipeline_cpu_vs_gpu(_rows, colors=colors),
        "table": table,
        "agreement": tables.pipeline_agreement(_rows),
    }


@st.cache_data(show_spinner="Drawing…", max_entries=32)
def accuracy_figures(data_key: tuple, choices_key: tuple, metric: str, _rows: pd.DataFrame, _colors: dict) -> dict:
    """The Accuracy view's figure and table from the chosen accuracy rows ``_rows``
    (``data_key`` and ``choices_key`` name them)."""
    points = tables.accuracy_points(_rows, metric)
    return {"pareto": plots.pareto(_rows, metric, colors=_colors), "table": tables.accuracy_table(points)}


# --- the page ---------------------------------------------------------------------------

def number_label(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def sidebar_filters(frame: pd.DataFrame) -> dict:
    """One multiselect per filter column; nothing chosen means every value. Machine and
    device start on one of each (:func:`default_filters`), family on the exact greedy one
    where the lines would not fit a legend (:func:`default_families`), until the user chooses."""
    choices = {}
    defaults = default_filters(frame)
    for column, label in tables.FILTERS:
        values = tables.options(frame, column)
        key = f"filter_{column}"
        if column == "family":  # from the choices above it: a machine's implementations, not all of them
            defaults[column] = default_families(frame, {**choices, "timer": st.session_state.get("filter_timer")})
        fresh = column in defaults and set(defaults[column]) <= set(values)
        if fresh and st.session_state.get(key) == st.session_state.get(f"auto_{key}") != defaults[column]:
            st.session_state.pop(key, None)  # still on the old default (not the user's choice): new files, new default
        if key in st.session_state:  # a value whose file went away must not break the widget
            st.session_state[key] = [v for v in st.session_state[key] if v in values]
        elif fresh:  # one machine and device at a time; the user widens them in the sidebar
            st.session_state[key] = st.session_state[f"auto_{key}"] = list(defaults[column])
        elif column == "timer" and "wall" in values:
            st.session_state[key] = ["wall"]
        elif column == "benchmark" and "nms" in values and len(values) > 1:
            st.session_state[key] = ["nms"]  # pipeline rows time other things than NMS vs N
        if not values or (column in tables.OPTIONAL_FILTERS and len(values) < 2):
            continue
        choices[column] = st.multiselect(label, values, key=key, placeholder="all", format_func=number_label)
    return choices


def pipeline_view(frame: pd.DataFrame, data_key: tuple) -> None:
    rows = tables.pipeline_rows(frame)
    if rows.empty:
        st.info("No pipeline rows loaded. Time the post-processing (raw detector output to detections) with "
                "`nmsbench pipeline --out results/pipeline-<machine>.csv` (add `--device cpu,cuda` on a GPU machine) "
                "and reload, or upload such a CSV in the sidebar.")
        return
    measured = tables.ok_rows(rows)
    st.caption("`nmsbench pipeline` rows: decode and confidence filter, class-aware NMS, the best detections per image. "
               "This view reads every loaded pipeline row with its own filters; the sidebar's apply to the other views.")
    if measured.empty:
        st.info("None of the loaded pipeline rows measured anything (all are errors or skipped):")
        st.dataframe(tables.not_measured(rows), hide_index=True, width="stretch")
        return
    c1, c2, c3, c4, c5 = st.columns([1.2, 1, 1, 2.4, 0.9])
    sources = c1.multiselect("Source", tables.options(measured, "scenario"), key="pipe_source", placeholder="all")
    confs = tables.options(measured, "overlap")
    conf = c2.selectbox("Confidence threshold", confs, index=confs.index(0.25) if 0.25 in confs else 0, key="pipe_conf",
                        format_func=number_label)
    devices = c3.multiselect("Devices", tables.options(measured, "device"), key="pipe_devices", placeholder="all")
    names = plots.pipeline_order(tables.options(measured, "impl"))
    chosen = c4.multiselect("Pipelines", names, key="pipe_impls", placeholder="all")
    timers = tables.options(measured, "timer")
    timer = c5.selectbox("Timer", timers, index=timers.index("wall") if "wall" in timers else 0, key="pipe_timer",
                         help="wall: what a caller waits for; device: what the GPU did (CUPTI); events: CUDA events (cuda rows only)")
    machines = tables.options(measured, "pipeline_machine")
    machine = []
    if len(machines) > 1:  # opens on the machine of the newest run, as the other views open on one machine
        newest = measured.loc[measured["timestamp"].astype(str).sort_values().index[-1], "pipeline_machine"]
        machine = st.multiselect("Machine", machines, default=[newest], key="pipe_machine", placeholder="all",
                                 help="the host name and the GPU (a GPU machine's CPU rows name its GPU)")
    choices = {"scenario": sources, "overlap": [conf], "device": devices, "impl": chosen, "timer": [timer],
               "pipeline_machine": machine}
    selected = tables.select(rows, **choices)
    if tables.ok_rows(selected).empty:
        st.info("No measured pipeline rows in this selection: widen the filters above.")
        return
    choices_key = tuple(sorted((k, tuple(map(str, v))) for k, v in choices.items()))

    st.subheader("Time per image vs batch size")
    stage = st.radio("Stage", list(tables.PIPELINE_STAGES)[::-1], horizontal=True, key="pipe_stage",
                     help="total: the whole pipeline, end to end; decode and nms: each stage timed on its own")
    all_devices = tables.select(rows, **{k: v for k, v in choices.items() if k not in ("device", "impl")})
    figures = pipeline_figures(data_key, choices_key, stage, tuple(devices), tuple(chosen), selected, all_devices)
    st.plotly_chart(figures["time"], key="chart_pipe_time")
    st.caption(f"Log-log axes. Time per image = the median of one call on the whole batch (the CSV's `median_us`) "
               f"÷ the batch size; {timer} timer, confidence threshold {conf:g}. cpu lines are solid, cuda lines dashed. "
               "Hover a point for the per-call time, its IQR and the candidates that passed the threshold.")

    st.subheader("Which stage costs what")
    st.plotly_chart(figures["stages"], key="chart_pipe_stages")
    st.caption(f"Time per image of each stage, per pipeline and batch size: {plots.STAGE_NOTE}.")

    st.subheader("CPU vs GPU")
    if figures["devices"] is None:
        st.info("No pipeline in this selection has rows on both cpu and cuda from one machine: "
                "`nmsbench pipeline --device cpu,cuda` on a GPU machine makes them.")
    else:
        st.plotly_chart(figures["devices"], key="chart_pipe_devices")
        st.caption("Each pipeline's CPU time per image over its GPU time per image (wall timer, end to end, same "
                   "machine, source, threshold and batch); above 1 the GPU is faster.")

    st.subheader(f"µs per image and speedup vs {tables.PIPELINE_BASELINE}")
    table = figures["table"]
    if table is None:
        st.info("No measured total (end-to-end) rows in this selection.")
    else:
        table = table.rename(columns={**tables.PIPELINE_GROUP_LABELS,
                                      **{c: c.replace("us_per_image", "µs per image") for c in table.columns if "us_per_image" in c}})
        config = {c: st.column_config.NumberColumn(c, format="%.1f" if c.endswith("image") else "%.2f×")
                  for c in table.columns if c.startswith("B=")}
        st.dataframe(table, hide_index=True, width="stretch", column_config=config, key="pipe_table")
        st.caption(f"End to end (stage total). Speedup = {tables.PIPELINE_BASELINE}'s time per image ÷ the pipeline's on "
                   f"the same machine, input and batch (above 1 is faster); {tables.PIPELINE_BASELINE} is the CPU reference, "
                   "so cuda rows compare with it on the CPU. `nmsbench export --benchmark pipeline` prints this table.")

    st.subheader(f"Agreement with the {tables.PIPELINE_BASELINE} reference")
    st.dataframe(figures["agreement"], hide_index=True, width="stretch", key="pipe_agreement",
                 column_config={"jaccard": st.column_config.NumberColumn("jaccard", format="%.3f")})
    st.caption("Per batch: candidates that passed the confidence threshold and detections kept (pipeline, reference); "
               "extra and missing detections (an image and a raw row), their Jaccard index, and mismatched: the same "
               "detection with a different box, score or label. All-pairs NMS suppresses more than greedy by definition.")

    skipped = tables.not_measured(selected)
    if not skipped.empty:
        with st.expander(f"{int(skipped['rows'].sum())} pipeline rows of this selection are not plotted (error or skipped)"):
            st.dataframe(skipped, hide_index=True, width="stretch")


def accuracy_view(frame: pd.DataFrame, data_key: tuple, colors: dict) -> None:
    rows = tables.accuracy_rows(frame)
    if rows.empty:
        st.info("No accuracy rows loaded. Score each NMS on images with ground truth (COCO AP and AR beside the time per "
                "image) with `nmsbench accuracy --out results/accuracy-<machine>.csv` and reload, or upload such a CSV "
                "in the sidebar.")
        return
    measured = tables.ok_rows(rows)
    st.caption("`nmsbench accuracy` rows: each implementation, parameter set and IoU threshold run per image on a "
               "source's pre-NMS candidates and scored against its ground truth. This view reads every loaded accuracy "
               "row with its own filters; the sidebar's apply to the other views.")
    if measured.empty:
        st.info("None of the loaded accuracy rows measured anything (all are errors or skipped):")
        st.dataframe(tables.not_measured(rows), hide_index=True, width="stretch")
        return
    c1, c2, c3, c4 = st.columns([1.3, 1.1, 0.9, 2.2])
    sources = c1.multiselect("Source", tables.options(measured, "scenario"), key="acc_source", placeholder="all")
    metric = c2.selectbox("Metric", list(tables.ACCURACY_METRICS), key="acc_metric",
                          format_func=tables.ACCURACY_LONG_NAMES.get)
    devices = c3.multiselect("Devices", tables.options(measured, "device"), key="acc_devices", placeholder="all")
    impls = c4.multiselect("Implementations", tables.options(measured, "impl"), key="acc_impls", placeholder="all")
    selected = tables.select(rows, scenario=sources, device=devices, impl=impls)
    choices_key = (tuple(sources), tuple(devices), tuple(impls))
    figures = accuracy_figures(data_key, choices_key, metric, selected, colors)
    label = tables.ACCURACY_LONG_NAMES[metric]
    fig = figures["pareto"]
    meta = fig.layout.meta or {}

    st.subheader(f"{label} vs NMS time per image")
    st.plotly_chart(fig, key="chart_pareto")
    st.caption(f"One marker per implementation, parameter set and IoU threshold: {label} of its detections against its "
               "median NMS time per image (log axis). The dashed step line is the Pareto front: the best "
               f"{tables.ACCURACY_METRICS[metric]} within each time budget; its settings are ringed (none has more in less "
               "time). One panel per source and device. Hover a marker for all its numbers.")
    if meta.get("without_metric"):
        where = f" ({', '.join(meta['without_metric_in'])})" if meta.get("without_metric_in") else ""
        st.info(f"{meta['without_metric']} settings have no {label} value and are not drawn{where}"
                + (": the source has no crowded image." if metric == "ar100_crowded" else "."))

    st.subheader("AP and AR per variant")
    table = figures["table"]
    if table.empty:
        st.info("No measured accuracy rows in this selection.")
    else:
        config = {m: st.column_config.NumberColumn(m, format="%.1f") for m in tables.ACCURACY_METRICS.values()}
        config.update({"µs/image": st.column_config.NumberColumn("µs/image", format="%.4g"),
                       "IQR µs": st.column_config.NumberColumn("IQR µs", format="%.3g"),
                       "front": st.column_config.CheckboxColumn(f"front ({tables.ACCURACY_METRICS[metric]})")})
        st.dataframe(table, hide_index=True, width="stretch", column_config=config, key="acc_table")
        no_crowd = " AR100-crowded None: the source has no crowded image." if table[
            tables.ACCURACY_METRICS["ar100_crowded"]].isna().any() else ""
        st.caption(f"Metrics in %, time per image in µs (median and IQR); front: on the Pareto front of "
                   f"{tables.ACCURACY_METRICS[metric]} against time.{no_crowd} `nmsbench export --benchmark accuracy` "
                   "prints this table (--format latex, markdown or csv); `nmsbench plot --kind pareto` draws the chart "
                   "for print.")

    skipped = tables.not_measured(selected)
    if not skipped.empty:
        with st.expander(f"{int(skipped['rows'].sum())} accuracy rows of this selection are not plotted (error or skipped)"):
            st.dataframe(skipped, hide_index=True, width="stretch", key="acc_not_measured")


def _diff_label(where: str, case) -> str:
    return (f"{case.scenario}, N = {case.n}, knob {case.overlap:g}, IoU {case.iou_threshold:g}, seed {case.seed}, "
            f"{case.device} · {where}")


@st.cache_data(show_spinner=False, max_entries=16)
def load_diff_upload(name: str, data: bytes):
    try:
        return diff_cases.case_from_dict(json.loads(data), name), None
    except ValueError as e:  # json's errors are ValueErrors too
        return None, f"upload {e}" if str(e).startswith(f"{name}: ") else f"upload {name}: not readable JSON ({e})"


def differences_view(include_archive: bool) -> None:
    folder = results_dir()
    st.caption("What two implementations keep on one box set, read from a file `nmsbench diff` wrote: it regenerates "
               "the box set exactly as a sweep does and runs each implementation on it once. To look at another case, "
               f"run e.g. `{DIFF_COMMAND.replace('clustered', 'chain').replace('512', '256')} --impl torchvision,allpairs` "
               "(it writes results/runs/diff-<time>.json) and reload, or add the file here.")
    loaded = {}  # where (path in the folder, or the upload's name) -> (case, error)
    for path in diff_cases.diff_files(folder, include_archive):
        stat = path.stat()
        loaded[str(path.relative_to(folder))] = load_diff(str(path), stat.st_mtime_ns, stat.st_size)
    with st.expander("Add an `nmsbench diff` file"):
        uploads = st.file_uploader("nmsbench diff JSON", type=["json"], accept_multiple_files=True, key="diff_uploads",
                                   label_visibility="collapsed")
    uploaded = []
    for upload in uploads or []:
        where = f"{upload.name} (uploaded)"
        loaded[where] = load_diff_upload(upload.name, upload.getvalue())
        uploaded.append(where)
    if not loaded:
        st.info(f"No `nmsbench diff` file in `{folder}` (diff-*.json at the top or under runs/). Make one with "
                f"`{DIFF_COMMAND}` and reload.")
        return
    for _, error in loaded.values():
        if error:
            st.error(error)
    readable = [w for w, (case, _) in loaded.items() if case is not None and case.keeps]
    if not readable:
        return
    # default: the newest upload, else the newest file by the time it was written
    newest = next((w for w in reversed(uploaded) if w in readable), None) or max(
        readable, key=lambda w: str(loaded[w][0].meta.get("created", "")))
    if st.session_state.get("diff_file") not in readable:
        st.session_state.pop("diff_file", None)
    fresh = [w for w in uploaded if w in readable and w not in st.session_state.get("diff_seen", [])]
    st.session_state["diff_seen"] = uploaded
    if fresh:  # a file just added is the one to look at
        st.session_state["diff_file"] = fresh[-1]
    c1, c2, c3 = st.columns([2.4, 1, 1])
    chosen = {} if "diff_file" in st.session_state else {"index": readable.index(newest)}  # one default, not two
    path = c1.selectbox("Case (an `nmsbench diff` file)", readable, **chosen, key="diff_file",
                        format_func=lambda w: _diff_label(w, loaded[w][0]), help="Default: the newest file")
    case = loaded[path][0]
    names = list(case.keeps)
    default_a = "torchvision" if "torchvision" in names else names[0]
    others = [n for n in names if n != default_a] or names
    default_b = "allpairs" if "allpairs" in others else others[0]
    name_a = c2.selectbox("Implementation A", names, index=names.index(default_a), key="diff_a")
    name_b = c3.selectbox("Implementation B", names, index=names.index(default_b), key="diff_b")
    for name, reason in {**case.unavailable, **case.errors}.items():
        st.caption(f"{name} did not run for this file: {reason}")

    codes, counts = diff_cases.classify(case.n, case.keeps[name_a], case.keeps[name_b])
    jac = diff_cases.jaccard(case.keeps[name_a], case.keeps[name_b])
    remaining = diff_cases.remaining_score(case, [name_a, name_b])
    m = st.columns(5)
    m[0].metric("kept by both", counts["kept by both"])
    m[1].metric(f"kept only by A ({name_a})", counts["only A"])
    m[2].metric(f"kept only by B ({name_b})", counts["only B"])
    m[3].metric("suppressed by both", counts["suppressed by both"])
    m[4].metric("Jaccard of kept sets", f"{jac:.3f}")
    for name in dict.fromkeys((name_a, name_b)):
        if name in case.finals:
            family = case.families.get(name) or "this family"
            params = case.params.get(name, {})
            left = diff_cases.remaining_score(case, [name])[case.keeps[name]]
            what = "Matrix NMS" if family == "matrix" else "Soft-NMS" if family == "soft" else name
            st.info(f"**{what} decays scores rather than removing boxes.** {name} keeps every box whose final "
                    f"(decayed) score is at least score_threshold = {params.get('score_threshold', '?')}: "
                    f"{len(case.keeps[name])} of {case.n} here, {int((left < 0.5).sum())} of them with less than half their "
                    "score left. A kept box is drawn fainter the less of its score is left (the legend's last group); "
                    "hover a box's centre for its final score.")
    for name in dict.fromkeys((name_a, name_b)):
        if name in case.moved and len(case.keeps[name]):
            shift = np.abs(case.moved[name] - case.boxes[case.keeps[name]]).max(axis=1)
            st.info(f"**{name} moves boxes.** It keeps what greedy NMS keeps and moves each kept box to the "
                    "score-weighted mean of the boxes overlapping it above the IoU threshold: dashed outlines show "
                    f"where; {int((shift > 0).sum())} of its {len(shift)} kept boxes moved, the furthest corner by "
                    f"{shift.max():.1f} px.")
    left_col, right_col = st.columns([1.7, 1])
    left_col.markdown(f"**{case.scenario}, knob {case.overlap:g}, N = {case.n}, seed {case.seed}, IoU {case.iou_threshold:g}:** "
                      f"A = {name_a} keeps {len(case.keeps[name_a])}, B = {name_b} keeps {len(case.keeps[name_b])}")
    moved = {name: case.moved[name] for name in dict.fromkeys((name_a, name_b)) if name in case.moved}
    left_col.plotly_chart(plots.boxes_canvas(case.boxes, codes, (name_a, name_b), scores=case.scores, remaining=remaining,
                                             height=900, moved=moved), key="chart_boxes")
    right_col.markdown("**Pairwise agreement on this box set** (Jaccard of the kept sets)")
    matrix = diff_cases.agreement_matrix(case.keeps)
    right_col.plotly_chart(plots.agreement_heatmap(matrix), key="chart_agreement")
    kept = pd.DataFrame({
        "implementation": names,
        "family": [case.families.get(n, "") for n in names],
        "kept": [len(case.keeps[n]) for n in names],
        "one warm call (ms)": [round(case.seconds[n] * 1e3, 3) if n in case.seconds else None for n in names],
    })
    right_col.dataframe(kept, hide_index=True, width="stretch")
    right_col.caption(f"Times of one call on {case.device or 'the device'}, for orientation only, not a benchmark.")
    if case.meta.get("command"):
        with right_col.expander("The command that wrote this file"):
            st.code(case.meta["command"], language="bash", wrap_lines=True)


def environment_view(selected: pd.DataFrame, commands: dict) -> None:
    st.subheader("The selected runs")
    runs = tables.runs_table(selected)
    if runs.empty:
        st.info("No rows selected.")
    else:
        st.dataframe(runs, hide_index=True, width="stretch", key="runs_table")
        shown = [(source, command) for source, command in commands.items() if source in set(runs["file"]) and command]
        if shown:
            with st.expander(f"The commands that made them ({len(shown)})"):
                for source, command in shown:
                    st.markdown(f"`{source}`")
                    st.code(command, language="bash", wrap_lines=True)
        with st.expander("Versions of every run (torch, CUDA, cupy, numba, ...)"):
            st.dataframe(tables.environment_table(selected), width="stretch", key="env_table")
    columns = [c for c in selected.columns if c not in ("hardware", "source")]
    st.download_button(f"Download the {len(selected):,} selected rows as CSV", selected[columns].to_csv(index=False),
                       file_name="nmsbench-selection.csv", mime="text/csv", key="download", disabled=selected.empty)
    st.subheader("Implementations on this machine")
    if st.toggle("Check which implementations run here", key="check_impls",
                 help="Imports every implementation (numba, cupy where installed); the other views never do"):
        st.dataframe(implementation_table(), hide_index=True, width="stretch", key="impl_table")


def main() -> None:
    with st.sidebar:
        st.header("Results")
        uploads = st.file_uploader("Add results CSVs", type=["csv"], accept_multiple_files=True, key="uploads")
        compare = st.toggle("Every run", key="compare_runs",
                            help="Off: each case's newest measurement per machine, one line per implementation. "
                                 "On: every loaded run, one line per implementation and commit.")
        include_archive = st.toggle("Include archived runs", key="include_archive",
                                    help="Also load the older runs in results/archive/")
        hide_noisy = st.toggle("Hide noisy points", key="hide_noisy",
                               help="Off: noisy measurements are drawn hollow (hover one for why). On: they are left out.")
        frame, problems, commands, data_key, notes = load_all(uploads, include_archive)
        st.caption(f"{len(frame):,} rows from {len(data_key)} file(s) in `{results_dir()}` (the references at its top, "
                   "runs/" + (", archive/" if include_archive else "") + ") and uploads.")
        for problem in problems:
            st.error(problem)
        for note in notes:
            st.warning(note)
        st.header("Filters")
        choices = sidebar_filters(frame) if not frame.empty else {}
    if frame.empty:
        st.info(f"No results yet: `{results_dir()}` has no results CSV. Upload one in the sidebar, or make one with "
                "`nmsbench sweep --n 64..1024 --device cpu`. The suppression differences view reads the files "
                "`nmsbench diff` writes.")

    def pick(**chosen):
        rows = tables.select(frame, **chosen) if not frame.empty else frame
        # newest per case unless comparing; the commit then names no line (one run per case is left)
        rows = rows if compare else tables.latest_runs(rows).assign(git_commit="")
        return tables.clean_rows(rows) if hide_noisy else rows  # the newest run's noisy rows, not an older clean one

    shown = pick(**choices)
    if not frame.empty:
        status = shown["status"].value_counts()
        st.caption(f"Drawn: {len(shown):,} rows ({', '.join(f'{v:,} {k}' for k, v in status.items()) or 'none'}) of "
                   f"{len(frame):,}" + ("." if compare else ", each case's newest run per machine (the sidebar's "
                                                         "Every run draws them all)."))
    colors = plots.color_map(tables.options(frame, "impl"))
    views_key = data_key + (("compare", compare), ("hide_noisy", hide_noisy))

    def newest() -> pd.DataFrame:  # the pipeline and accuracy views' rows (each view makes them when open)
        rows = frame if compare else tables.latest_runs(frame)
        return tables.clean_rows(rows) if hide_noisy else rows

    if LOADING is not None:
        LOADING.empty()
    curves_tab, pipeline_tab, accuracy_tab, diff_tab, conformance_tab, compare_tab, env_tab = st.tabs(
        VIEWS, key="view", on_change="rerun")
    if curves_tab.open:
        with curves_tab:
            choices_key = tuple(sorted((k, tuple(map(str, v))) for k, v in choices.items())) + views_key[len(data_key):]
            note = family_caption(choices.get("family", []), hidden_families(frame, choices)) if not frame.empty else ""
            all_timers = pick(**{k: v for k, v in choices.items() if k != "timer"})
            without_impl = pick(**{k: v for k, v in choices.items() if k not in ("impl", "family")})  # the baseline's too
            curves_view(shown, all_timers, without_impl, colors, data_key, choices_key, note)
    if pipeline_tab.open:
        with pipeline_tab:
            pipeline_view(newest(), views_key)
    if accuracy_tab.open:
        with accuracy_tab:
            accuracy_view(newest(), views_key, colors)
    if diff_tab.open:
        with diff_tab:
            differences_view(include_archive)
    if conformance_tab.open:
        with conformance_tab:
            from nmsbench.conformance_view import conformance_view

            conformance_view(results_dir(), include_archive)
    if compare_tab.open:
        with compare_tab:
            from nmsbench.dashboard_compare import compare_view

            compare_view(results_dir(), data_key, uploads)
    if env_tab.open:
        with env_tab:
            environment_view(tables.select(frame, **choices) if not frame.empty else frame, commands)


main()
