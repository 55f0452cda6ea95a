"""nmsbench dashboard: ``streamlit run app.py``.

A thin page over :mod:`nmsbench.tables`, :mod:`nmsbench.plots` and
:mod:`nmsbench.differences` (the same builders ``nmsbench plot`` and ``nmsbench export``
use). It loads every results CSV under ``results/`` (or ``$NMSBENCH_RESULTS_DIR``) and any
CSV uploaded in the sidebar, and has four views: curves, the post-processing pipeline
(time per image vs batch, stage costs, CPU vs GPU, agreement), suppression differences
on a regenerated box set, and the environment of the selected runs with a CSV download.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
from pathlib import Path

import pandas as pd
import streamlit as st

from nmsbench import datasets, differences, plots, tables
from nmsbench.registry import describe, implementations
from nmsbench.results import PartialRowWarning

APP_DIR = Path(__file__).resolve().parent
VIEWS = ["Curves", "Pipeline", "Suppression differences", "Environment & data"]
MAX_DIFF_N = 8192


def results_dir() -> Path:
    return Path(os.environ.get("NMSBENCH_RESULTS_DIR") or APP_DIR / "results")


# --- cached loading ---------------------------------------------------------------------

def _load(source, name: str):
    """(frame, None, notes) or (None, what is wrong, notes); notes say what was dropped
    (a partial last row of a run stopped while writing it)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PartialRowWarning)
        try:
            frame, error = tables.load_results([source], names=[name]), None
        except ValueError as e:
            frame, error = None, str(e)
    return frame, error, [str(w.message) for w in caught if issubclass(w.category, PartialRowWarning)]


@st.cache_data(show_spinner=False, max_entries=256)
def load_csv(path: str, mtime_ns: int, size: int):
    """``_load`` of a file of the folder; mtime and size make an edited file reload."""
    return _load(path, Path(path).name)


@st.cache_data(show_spinner=False, max_entries=64)
def load_upload(name: str, data: bytes):
    return _load(io.BytesIO(data), name)


@st.cache_data(show_spinner=False, max_entries=256)
def sidecar_command(path: str, mtime_ns: int) -> str:
    try:
        return str(json.loads(Path(path).read_text()).get("command", ""))
    except (OSError, ValueError, AttributeError):
        return ""


@st.cache_data(show_spinner="Regenerating the box set and running every implementation on it…", max_entries=64)
def run_case(scenario: str, n: int, overlap: float, seed: int, iou: float, classes: int, device: str):
    return differences.run_case(scenario, n, overlap, seed, iou, classes=classes, device=device)


@st.cache_data(show_spinner=False)
def implementation_table() -> pd.DataFrame:
    rows = pd.DataFrame(describe())
    rows["available here"] = rows.apply(lambda r: "yes" if r["available"] else f"no: {r['reason']}", axis=1)
    return rows[["name", "family", "device", "available here", "summary"]]


def load_all(uploads) -> tuple[pd.DataFrame, list[str], dict[str, str], tuple, list[str]]:
    """Every results file of the folder plus the uploads: (rows, problems, commands, data
    key, notes); the key names the loaded files' versions, for caching what is computed
    from them; notes are warnings about files that did load."""
    frames, problems, commands, sources, notes = [], [], {}, [], []
    folder = results_dir()
    for path in sorted(folder.glob("*.csv")) if folder.is_dir() else []:
        stat = path.stat()
        frame, error, dropped = load_csv(str(path), stat.st_mtime_ns, stat.st_size)
        notes += dropped
        if error:
            problems.append(error)
            continue
        frames.append(frame)
        sources.append((str(path), stat.st_mtime_ns, stat.st_size))
        sidecar = path.with_suffix(".json")
        if sidecar.exists():
            commands[path.name] = sidecar_command(str(sidecar), sidecar.stat().st_mtime_ns)
    for upload in uploads or []:
        data = upload.getvalue()
        frame, error, dropped = load_upload(upload.name, data)
        notes += [f"upload {note}" for note in dropped]
        if error:
            problems.append(f"upload {error}")
            continue
        frames.append(frame.assign(source=f"{upload.name} (uploaded)"))
        sources.append((upload.name, hashlib.sha1(data).hexdigest()))
    return tables.concat(frames), problems, commands, tuple(sources), notes


@st.cache_data(show_spinner="Drawing…", max_entries=32)
def curve_figures(data_key: tuple, choices_key: tuple, scenario: str | None, baseline: str, at_n: int,
                  _rows: pd.DataFrame, _all_timers: pd.DataFrame, _without_impl: pd.DataFrame, _colors: dict) -> dict:
    """The curves view's figures; the arguments without ``_`` say which data and choices
    they show (the frames themselves are not hashed: tens of thousands of rows)."""
    facet = None if scenario else "scenario"
    rows, all_timers, without_impl = _rows, _all_timers, _without_impl
    if scenario:
        rows, all_timers, without_impl = (tables.select(f, scenario=[scenario]) for f in (rows, all_timers, without_impl))
    shown = tables.options(tables.ok_rows(rows), "impl")
    return {
        "time": plots.time_vs_n(rows, facet=facet, colors=_colors),
        "speedup": plots.speedup_vs_n(without_impl, baseline, show=shown, facet=facet, colors=_colors),
        "timers": plots.wall_vs_device(all_timers, facet=facet, colors=_colors),
        "memory": plots.memory_vs_n(rows, facet=facet, colors=_colors),
        "overlap": plots.time_vs_overlap(rows, at_n, colors=_colors),
    }


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


# --- the page ---------------------------------------------------------------------------

def number_label(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def sidebar_filters(frame: pd.DataFrame) -> dict:
    """One multiselect per filter column; nothing chosen means every value."""
    choices = {}
    for column, label in tables.FILTERS:
        values = tables.options(frame, column)
        key = f"filter_{column}"
        if key in st.session_state:  # a value whose file went away must not break the widget
            st.session_state[key] = [v for v in st.session_state[key] if v in values]
        elif column == "timer" and "wall" in values:
            st.session_state[key] = ["wall"]
        elif column == "benchmark" and "nms" in values and len(values) > 1:
            st.session_state[key] = ["nms"]  # pipeline rows time other things than NMS vs N
        if not values or (column in tables.OPTIONAL_FILTERS and len(values) < 2):
            continue
        choices[column] = st.multiselect(label, values, key=key, placeholder="all", format_func=number_label)
    return choices


def curves_view(rows: pd.DataFrame, all_timers: pd.DataFrame, without_impl: pd.DataFrame, colors: dict,
                data_key: tuple, choices_key: tuple) -> None:
    measured = tables.ok_rows(rows)
    if measured.empty:
        st.info("No measured (status ok) rows in this selection: widen the filters in the sidebar, "
                "or run `nmsbench sweep --n 64..1024 --device cpu` to make results.")
        skipped = tables.not_measured(rows)
        if not skipped.empty:
            st.dataframe(skipped, hide_index=True, width="stretch")
        return
    if set(measured["benchmark"]) == {"pipeline"}:
        st.info("These are `nmsbench pipeline` rows, drawn here against N (raw rows per image): the Pipeline tab "
                "shows them as time per image vs batch size and by stage.")
    scenarios = tables.options(measured, "scenario")
    impls = tables.options(tables.ok_rows(without_impl), "impl")
    c1, c2, c3, c4 = st.columns([1.3, 1, 1, 1])
    layout = c1.radio("Scenarios", ["one panel each", "one at a time"], horizontal=True, key="layout")
    scenario = None
    if layout == "one at a time":
        scenario = c2.selectbox("Scenario", scenarios, key="one_scenario")
        measured = tables.select(measured, scenario=[scenario])
    baseline = c3.selectbox("Speedup baseline", impls, key="baseline",
                            index=impls.index(tables.DEFAULT_BASELINE) if tables.DEFAULT_BASELINE in impls else 0)
    sizes = [int(n) for n in tables.options(measured, "n")]
    at_n = c4.selectbox("N for time vs overlap", sizes, index=len(sizes) - 1, key="overlap_n")

    figures = curve_figures(data_key, choices_key, scenario, baseline, at_n, rows, all_timers, without_impl, colors)
    st.subheader("Median time vs N")
    st.plotly_chart(figures["time"], key="chart_time")
    st.caption("Log-log axes; the band is the median ± IQR/2 of the timed runs. Timer(s): "
               f"{', '.join(tables.options(measured, 'timer'))}. Hover a point for its numbers; click a legend entry to hide a line.")

    st.subheader(f"Speedup vs {baseline}")
    st.plotly_chart(figures["speedup"], key="chart_speedup")
    st.caption(f"{baseline}'s median divided by each implementation's median on the same case (hardware, device, "
               "dtype, timer, scenario, knob, N, IoU); above 1 is faster.")

    timers = figures["timers"]
    st.subheader("Wall vs device time")
    if timers is None:
        st.info("No device-timer rows in this selection: device (CUDA event) time is recorded for CUDA runs only.")
    else:
        st.plotly_chart(timers, key="chart_timers")

    memory = figures["memory"]
    st.subheader("Peak memory vs N")
    if memory is None:
        st.info("No peak-memory values in this selection: peak device memory is recorded for CUDA rows only.")
    else:
        st.plotly_chart(memory, key="chart_memory")

    st.subheader(f"Time vs realized overlap at N = {at_n}")
    st.plotly_chart(figures["overlap"], key="chart_overlap")

    skipped = tables.not_measured(rows)
    if not skipped.empty:
        with st.expander(f"{int(skipped['rows'].sum())} rows of this selection are not plotted (error or skipped)"):
            st.dataframe(skipped, hide_index=True, width="stretch")


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
                         help="wall: what a caller waits for; device: CUDA events (cuda rows only)")
    machines = tables.options(measured, "machine")
    machine = (st.multiselect("Machine", machines, key="pipe_machine", placeholder="all") if len(machines) > 1 else [])
    choices = {"scenario": sources, "overlap": [conf], "device": devices, "impl": chosen, "timer": [timer], "machine": machine}
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


def differences_view(colors: dict) -> None:
    st.caption("Regenerates one box set exactly as a sweep does, runs every implementation on it once and "
               "shows which boxes two of them keep. Times of one call are shown for orientation, not as a benchmark.")
    scenarios = list(datasets.SYNTHETIC)
    c1, c2, c3, c4, c5, c6 = st.columns([1.1, 1.4, 0.9, 0.8, 1.1, 0.8])
    scenario = c1.selectbox("Scenario", scenarios, index=scenarios.index("chain"), key="diff_scenario")
    spec = datasets.SCENARIOS[scenario]
    lo, hi = (float(v) for v in spec.knob_range)
    overlap = c2.slider("Overlap knob", lo, hi, float(spec.default_overlap), step=0.01 if hi - lo <= 2 else 0.1,
                        key=f"diff_knob_{scenario}", help=spec.knob)
    n = int(c3.number_input("N boxes", 1, MAX_DIFF_N, 256, step=64, key="diff_n"))
    seed = int(c4.number_input("Seed", 0, 2**31 - 1, 0, key="diff_seed"))
    iou = c5.slider("IoU threshold", 0.0, 1.0, 0.5, step=0.05, key="diff_iou")
    classes = int(c6.number_input("Classes", 1, 80, 1, key="diff_classes",
                                  help="Above 1, boxes get labels and NMS is class-aware"))
    device_options = differences.devices()
    d1, d2, d3 = st.columns([1, 1.5, 1.5])
    device = d1.radio("Device", device_options, horizontal=True, key="diff_device",
                      help="The GPU is offered when there is one" if len(device_options) > 1 else "No CUDA device on this machine")
    ready = differences.availability(device)
    runnable = [name for name, reason in ready.items() if not reason]
    if len(runnable) < 1:
        st.error(f"No implementation can run on {device} here.")
        return
    default_b = "allpairs" if "allpairs" in runnable else runnable[-1]
    name_a = d2.selectbox("Implementation A", runnable, key="diff_a",
                          index=runnable.index("torchvision") if "torchvision" in runnable else 0)
    name_b = d3.selectbox("Implementation B", runnable, key="diff_b", index=runnable.index(default_b))

    case = run_case(scenario, n, overlap, seed, float(iou), classes, device)
    for name, reason in {**case.unavailable, **case.errors}.items():
        if name in (name_a, name_b):
            st.error(f"{name} did not run: {reason}")
    if name_a not in case.keeps or name_b not in case.keeps:
        return
    codes, counts = differences.classify(case.n, case.keeps[name_a], case.keeps[name_b])
    jac = differences.jaccard(case.keeps[name_a], case.keeps[name_b])
    m = st.columns(5)
    m[0].metric("kept by both", counts["kept by both"])
    m[1].metric(f"kept only by A ({name_a})", counts["only A"])
    m[2].metric(f"kept only by B ({name_b})", counts["only B"])
    m[3].metric("suppressed by both", counts["suppressed by both"])
    m[4].metric("Jaccard of kept sets", f"{jac:.3f}")
    title = (f"{scenario}, knob {overlap:g}, N = {case.n}, seed {seed}, IoU {iou:g}: "
             f"A = {name_a} keeps {len(case.keeps[name_a])}, B = {name_b} keeps {len(case.keeps[name_b])}")
    st.plotly_chart(plots.boxes_canvas(case.boxes, codes, (name_a, name_b), scores=case.scores, title=title), key="chart_boxes")

    st.subheader("Pairwise agreement on this box set")
    left, right = st.columns([3, 2])
    matrix = differences.agreement_matrix(case.keeps)
    left.plotly_chart(plots.agreement_heatmap(matrix), key="chart_agreement")
    kept = pd.DataFrame({
        "implementation": list(case.keeps),
        "kept": [len(k) for k in case.keeps.values()],
        "one warm call (ms)": [round(case.seconds[name] * 1e3, 3) for name in case.keeps],
    })
    right.dataframe(kept, hide_index=True, width="stretch")
    missing = {**case.unavailable, **case.errors}
    if missing:
        right.dataframe(pd.DataFrame({"implementation": list(missing), f"not run on {device}": list(missing.values())}),
                        hide_index=True, width="stretch")


def environment_view(selected: pd.DataFrame, commands: dict) -> None:
    st.subheader("Environment of the selected runs")
    env = tables.environment_table(selected, commands)
    if env.empty or not len(env.columns):
        st.info("No rows selected.")
    else:
        st.dataframe(env, width="stretch", height=35 * (len(env) + 1) + 3)
        for source, command in commands.items():
            if source in set(selected["source"]) and command:
                st.caption(f"{source} was made by:")
                st.code(command, language="bash", wrap_lines=True)
    columns = [c for c in selected.columns if c not in ("hardware", "source")]
    st.download_button(f"Download the {len(selected):,} selected rows as CSV", selected[columns].to_csv(index=False),
                       file_name="nmsbench-selection.csv", mime="text/csv", key="download", disabled=selected.empty)
    st.subheader("Implementations on this machine")
    st.dataframe(implementation_table(), hide_index=True, width="stretch")


def main() -> None:
    st.set_page_config(page_title="nmsbench", layout="wide")
    st.title("nmsbench: which NMS, how fast, and what it suppresses")
    with st.sidebar:
        st.header("Results")
        uploads = st.file_uploader("Add results CSVs", type=["csv"], accept_multiple_files=True, key="uploads")
        frame, problems, commands, data_key, notes = load_all(uploads)
        st.caption(f"{len(frame):,} rows from {len(data_key)} file(s) in `{results_dir()}` and uploads.")
        for problem in problems:
            st.error(problem)
        for note in notes:
            st.warning(note)
        st.header("Filters")
        choices = sidebar_filters(frame) if not frame.empty else {}
    if frame.empty:
        st.info(f"No results yet: `{results_dir()}` has no results CSV. Upload one in the sidebar, or make one with "
                "`nmsbench sweep --n 64..1024 --device cpu`. The suppression differences view works without results.")
    selected = tables.select(frame, **choices) if not frame.empty else frame
    all_timers = tables.select(frame, **{k: v for k, v in choices.items() if k != "timer"}) if not frame.empty else frame
    without_impl = tables.select(frame, **{k: v for k, v in choices.items() if k != "impl"}) if not frame.empty else frame
    if not frame.empty:
        status = selected["status"].value_counts()
        st.caption(f"Selection: {len(selected):,} rows ({', '.join(f'{v:,} {k}' for k, v in status.items()) or 'none'}) "
                   f"of {len(frame):,}.")
    names = sorted(set(implementations()) | set(tables.options(frame, "impl")))
    colors = plots.color_map(names)

    curves_tab, pipeline_tab, diff_tab, env_tab = st.tabs(VIEWS, key="view", on_change="rerun")
    if curves_tab.open:
        with curves_tab:
            choices_key = tuple(sorted((k, tuple(map(str, v))) for k, v in choices.items()))
            curves_view(selected, all_timers, without_impl, colors, data_key, choices_key)
    if pipeline_tab.open:
        with pipeline_tab:
            pipeline_view(frame, data_key)
    if diff_tab.open:
        with diff_tab:
            differences_view(colors)
    if env_tab.open:
        with env_tab:
            environment_view(selected, commands)


main()
