"""The Streamlit dashboard (app.py), driven headless by streamlit.testing.v1.AppTest."""

from __future__ import annotations

import base64
import json
import shutil

import numpy as np
import pytest

pytest.importorskip("streamlit", reason="the dashboard needs streamlit (a GPU box installed with --no-deps may lack it)")
pytest.importorskip("plotly", reason="the dashboard needs plotly")
from streamlit.testing.v1 import AppTest  # noqa: E402

from dash_support import (COMMITTED, CPU_CSV, CUDA_CSV, DATA, PIPELINE_CSV, REPO, cpu_results, diff_results,  # noqa: F401  (fixtures)
                          pipeline_results, with_made_up_cuda_rows)
from nmsbench import plots, tables
from nmsbench.dashboard_curves import CHARTS

APP = str(REPO / "app.py")


def start(results_dir, monkeypatch) -> AppTest:
    monkeypatch.setenv("NMSBENCH_RESULTS_DIR", str(results_dir))
    at = AppTest.from_file(APP, default_timeout=90)
    at.run()
    assert not at.exception, at.exception
    return at


def figures(at: AppTest) -> dict[str, dict]:
    """The page's plotly figures (as JSON) by their builder's name."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        out[(spec["layout"].get("meta") or {}).get("figure", "?")] = spec
    return out


def curve_figures(at: AppTest) -> dict[str, dict]:
    """The Curves view's figures, its chart tabs opened one after another (only the open
    one is built and drawn); the first tab is open again afterwards."""
    out = {}
    for tab in [*CHARTS, CHARTS[0]]:
        out.update(figures(open_chart(at, tab)))
    return out


def open_tab(at: AppTest, tabs_key: str, tab: str) -> AppTest:
    """``at`` run again with tab ``tab`` of the tabs ``tabs_key`` open."""
    at.session_state[tabs_key] = tab
    at.run()
    assert not at.exception, at.exception
    return at


def open_chart(at: AppTest, tab: str) -> AppTest:
    return open_tab(at, "curve_chart", tab)


def values(trace: dict, key: str) -> list:
    """A trace's data array; plotly encodes numeric arrays as base64 typed arrays."""
    data = trace[key]
    if isinstance(data, dict) and "bdata" in data:
        return np.frombuffer(base64.b64decode(data["bdata"]), dtype=np.dtype(data["dtype"])).tolist()
    return list(data)


def line_names(spec: dict) -> set[str]:
    return {t["name"] for t in spec["data"] if (t.get("meta") or {}).get("role") == "line"}


def widen(at: AppTest) -> AppTest:
    """Every machine, device and family (the dashboard opens on one machine and device,
    and on the exact greedy family where they hold more implementations than a legend reads)."""
    at.multiselect(key="filter_hardware").set_value([])
    at.multiselect(key="filter_device").set_value([])
    if "filter_family" in [m.key for m in at.sidebar.multiselect]:
        at.multiselect(key="filter_family").set_value([])
    at.run()
    assert not at.exception, at.exception
    return at


def show(at: AppTest, view: str) -> AppTest:
    return open_tab(at, "view", view)


@pytest.fixture
def samples(tmp_path):
    """A results folder with the frozen H200 excerpts (and their sidecar JSON)."""
    folder = tmp_path / "results"
    folder.mkdir()
    for path in DATA.glob("h200-*"):
        shutil.copy(path, folder)
    return folder


def test_curves_on_the_committed_results(monkeypatch):
    at = widen(start(REPO / "results", monkeypatch))  # whatever results/ holds now (and a user's own runs/)
    assert not at.error
    figs = curve_figures(at)
    assert {"time_vs_n", "speedup_vs_n", "time_vs_overlap"} <= set(figs)
    loaded = [*COMMITTED, *sorted((REPO / "results" / "runs").glob("**/*.csv"))]
    wall = tables.select(tables.load_results(loaded), timer=["wall"], benchmark=["nms"])  # the curves view: sweeps
    impls = {t["meta"]["impl"] for t in figs["time_vs_n"]["data"] if t["meta"]["role"] == "line"}
    assert impls == set(tables.ok_rows(wall)["impl"])
    assert f"rows from {len(loaded)} file(s)" in " ".join(c.value for c in at.sidebar.caption)
    # one legend entry per implementation, machine (device, threads) and parameters (a Soft-NMS
    # kernel each) and canvas, none per commit
    legend = [t["name"] for t in figs["time_vs_n"]["data"] if t["meta"]["role"] == "line" and t.get("showlegend", True)]
    assert len(legend) == len(set(legend)) and not any("@" in name for name in legend)
    lines = tables.latest_runs(tables.ok_rows(wall))[["impl", "hardware", "device", "threads", "params", "canvas"]].drop_duplicates()
    assert len(legend) == len(lines)
    # the overlap chart opens at the N most of those lines have; the caption names the others
    overlap = figs["time_vs_overlap"]
    n = overlap["layout"]["meta"]["n"]
    absent = tables.lines_without(tables.latest_runs(tables.ok_rows(wall)), n)
    assert len(line_names(overlap)) + len(absent) == len(legend), (n, line_names(overlap), absent)
    captions = " ".join(c.value for c in open_chart(at, "Time vs overlap").caption)
    assert (f"Not measured at N = {n}: {', '.join(absent)}." in captions) if absent else "Not measured at" not in captions


def test_each_implementation_has_its_fixed_colour_and_marker(samples, monkeypatch):
    figs = figures(start(samples, monkeypatch))
    for trace in figs["time_vs_n"]["data"]:
        if trace["meta"]["role"] == "line":
            impl = trace["meta"]["impl"]
            assert trace["line"]["color"] == plots.PINNED_COLORS[impl]
            symbols = trace["marker"]["symbol"]  # a list where some points are noisy (hollow)
            assert set([symbols] if isinstance(symbols, str) else symbols) <= {plots.PINNED_SYMBOLS[impl],
                                                                             plots.hollow(plots.PINNED_SYMBOLS[impl])}


def _run_of(frame, commit: str, stamp: str, factor: float):
    out = frame.copy()
    out["git_commit"], out["timestamp"], out["median_us"] = commit, stamp, out["median_us"] * factor
    return out


def test_newest_run_per_case_unless_comparing_runs(tmp_path, monkeypatch):
    import pandas as pd

    raw = pd.read_csv(CPU_CSV)
    raw = raw[raw["impl"].isin(["torchvision", "allpairs"]) & raw["scenario"].eq("chain")]
    _run_of(raw, "aaaaaaa", "2026-01-01T00:00:00+00:00", 1.0).to_csv(tmp_path / "old.csv", index=False)
    (tmp_path / "runs" / "mine").mkdir(parents=True)  # a user's own run, under runs/
    _run_of(raw, "bbbbbbb", "2026-02-01T00:00:00+00:00", 2.0).to_csv(tmp_path / "runs" / "mine" / "new.csv", index=False)
    at = start(tmp_path, monkeypatch)
    assert "rows from 2 file(s)" in " ".join(c.value for c in at.sidebar.caption)
    time = figures(at)["time_vs_n"]
    assert line_names(time) == {"torchvision", "allpairs"}  # one line each, no commit in the name
    expected = tables.ok_rows(tables.prepare(raw[raw["impl"] == "torchvision"]))
    tv = next(t for t in time["data"] if t["name"] == "torchvision" and t["meta"]["role"] == "line")
    assert np.allclose(values(tv, "y"), 2.0 * expected.sort_values("n")["median_us"])  # the newer run's numbers
    at.toggle(key="compare_runs").set_value(True).run()
    assert not at.exception
    assert line_names(figures(at)["time_vs_n"]) == {"torchvision · @aaaaaaa", "torchvision · @bbbbbbb",
                                                    "allpairs · @aaaaaaa", "allpairs · @bbbbbbb"}


def test_archived_runs_load_only_when_asked(tmp_path, monkeypatch):
    shutil.copy(CPU_CSV, tmp_path / "reference.csv")
    (tmp_path / "archive").mkdir()
    shutil.copy(CUDA_CSV, tmp_path / "archive" / "older.csv")
    at = start(tmp_path, monkeypatch)
    assert "rows from 1 file(s)" in " ".join(c.value for c in at.sidebar.caption)
    assert "older.csv" not in " ".join(at.multiselect(key="filter_source").options)
    at.toggle(key="include_archive").set_value(True)
    widen(at)
    assert not at.exception and "rows from 2 file(s)" in " ".join(c.value for c in at.sidebar.caption)
    assert "archive/older.csv" in at.multiselect(key="filter_source").options
    assert "torchvision · cuda" in line_names(figures(at)["time_vs_n"])


def test_curves_and_filters_on_gpu_and_cpu_runs(samples, monkeypatch):
    at = widen(start(samples, monkeypatch))
    assert not at.error
    assert set(figures(at)) == {"time_vs_n"}  # the first chart tab alone is drawn
    figs = curve_figures(at)
    assert {"time_vs_n", "speedup_vs_n", "wall_vs_device", "memory_vs_n", "time_vs_overlap"} <= set(figs)
    time = figs["time_vs_n"]
    assert time["layout"]["xaxis"]["type"] == "log" and time["layout"]["yaxis"]["type"] == "log"
    # a line names only how it differs from most lines (the title names those: cpu unless labelled)
    assert {"torchvision · cuda", "torchvision", "allpairs"} <= line_names(time)
    assert "cpu unless labelled" in time["layout"]["title"]["subtitle"]["text"]
    labels = [m.label for m in at.sidebar.multiselect]
    for label in ("machine / GPU", "device", "dtype", "implementation", "family", "scenario", "overlap knob", "IoU threshold"):
        assert label in labels
    assert "benchmark" not in labels  # schema-1 files hold NMS sweeps only: no choice to offer


def test_changing_filters_changes_the_figures(samples, monkeypatch):
    at = widen(start(samples, monkeypatch))
    before = figures(at)["time_vs_n"]
    at.multiselect(key="filter_impl").select("allpairs").select("torchvision").run()
    after = figures(at)["time_vs_n"]
    assert line_names(after) == {"allpairs", "torchvision", "torchvision · cuda"} != line_names(before)
    at.multiselect(key="filter_device").select("cpu").run()
    assert line_names(figures(at)["time_vs_n"]) == {"allpairs", "torchvision"}
    open_chart(at, "Wall vs GPU time")
    assert "wall_vs_device" not in figures(at)  # device time exists for CUDA rows only, so it says so instead
    assert any("CUDA" in i.value for i in at.info)
    open_chart(at, "Time vs N")
    at.multiselect(key="filter_scenario").select("chain").run()
    chain = figures(at)["time_vs_n"]
    assert [a["text"] for a in chain["layout"].get("annotations", []) if a.get("text")] in ([], ["chain"])
    assert len(chain["data"]) < len(after["data"])
    open_chart(at, "Speedup").selectbox(key="baseline").select("allpairs").run()
    speed = figures(at)["speedup_vs_n"]
    allpairs = next(t for t in speed["data"] if t["name"] == "allpairs")
    assert all(abs(y - 1) < 1e-12 for y in values(allpairs, "y")) and "allpairs" in speed["layout"]["yaxis"]["title"]["text"]


def test_one_scenario_at_a_time(samples, monkeypatch):
    at = start(samples, monkeypatch)
    at.radio(key="layout").set_value("one at a time").run()
    at.selectbox(key="one_scenario").select("crowd").run()
    assert not at.exception
    time = figures(at)["time_vs_n"]
    assert time["layout"]["meta"]["figure"] == "time_vs_n" and "xaxis2" not in time["layout"]


def test_differences_view_draws_a_diff_file(samples, diff_results, monkeypatch):
    from nmsbench import differences

    (samples / "runs").mkdir()
    shutil.copy(diff_results, samples / "runs")
    at = show(start(samples, monkeypatch), "Suppression differences")
    figs = figures(at)
    assert {"boxes_canvas", "agreement"} <= set(figs) and "time_vs_n" not in figs
    canvas = figs["boxes_canvas"]
    counts: dict[str, int] = {}
    for t in canvas["data"]:
        if t["meta"]["role"] == "boxes":
            counts[t["meta"]["class"]] = counts.get(t["meta"]["class"], 0) + t["meta"]["count"]
    assert set(counts) == {"kept by both", "only A", "only B", "suppressed by both"} and sum(counts.values()) == 256
    case = differences.read_case(diff_results)
    _, expected = differences.classify(case.n, case.keeps["torchvision"], case.keeps["allpairs"])
    assert counts == {k: expected[k] for k in counts}  # A = torchvision, B = allpairs: the file's keeps
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["kept only by A (torchvision)"] == str(counts["only A"]) and float(metrics["Jaccard of kept sets"]) < 1
    assert set(figs["agreement"]["data"][0]["x"]) == {"torchvision", "allpairs", "bitmask_two_phase", "matrix_naive"}
    assert not any("decays scores" in i.value for i in at.info)
    at.selectbox(key="diff_b").select("bitmask_two_phase").run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Jaccard of kept sets"] == "1.000" and metrics["kept only by B (bitmask_two_phase)"] == "0"

    # Matrix NMS keeps nearly every box with a decayed score: said in words, drawn as opacity
    at.selectbox(key="diff_b").select("matrix_naive").run()
    assert not at.exception
    note = next(i.value for i in at.info if "decays scores rather than removing boxes" in i.value)
    assert f"{len(case.keeps['matrix_naive'])} of 256" in note and "score_threshold = 0.05" in note
    canvas = figures(at)["boxes_canvas"]
    assert canvas["layout"]["meta"]["decayed"]
    faint = [t for t in canvas["data"] if t["meta"]["role"] == "boxes" and t["meta"]["opacity"] < 1]
    assert faint and {t["meta"]["class"] for t in faint} <= {"kept by both", "only B"}
    key = [t for t in canvas["data"] if t["meta"]["role"] == "decay key"]
    left = differences.remaining_score(case, ["torchvision", "matrix_naive"])
    assert sum(t["meta"]["count"] for t in key) == int(np.isfinite(left).sum())


def test_differences_view_without_a_diff_file_says_how_to_make_one(samples, monkeypatch):
    at = show(start(samples, monkeypatch), "Suppression differences")
    assert not at.get("plotly_chart")
    assert any("nmsbench diff" in i.value for i in at.info)


def test_an_uploaded_diff_file_is_shown_first(samples, diff_results, monkeypatch):
    reference = samples / "diff-reference.json"  # a file of the folder, shown until something is uploaded
    shutil.copy(diff_results, reference)
    at = show(start(samples, monkeypatch), "Suppression differences")
    assert at.selectbox(key="diff_file").value == "diff-reference.json"
    at.file_uploader(key="diff_uploads").upload("mine.json", diff_results.read_bytes(), "application/json").run()
    assert not at.exception and not at.error
    assert at.selectbox(key="diff_file").value == "mine.json (uploaded)"
    counts = sum(t["meta"]["count"] for t in figures(at)["boxes_canvas"]["data"] if t["meta"]["role"] == "boxes")
    assert counts == 256
    at.file_uploader(key="diff_uploads").upload("junk.json", b"{not json", "application/json").run()
    assert any(e.value.startswith("upload junk.json: not readable JSON") for e in at.error)


def test_a_broken_diff_file_is_named(samples, monkeypatch):
    (samples / "diff-broken.json").write_text('{"format": "something else"}')
    at = show(start(samples, monkeypatch), "Suppression differences")
    assert any(e.value.startswith("diff-broken.json: not an `nmsbench diff` file") for e in at.error)


def test_environment_view_and_download(samples, monkeypatch):
    at = show(widen(start(samples, monkeypatch)), "Environment & data")
    runs = at.dataframe[0].value
    assert list(runs.columns[:4]) == ["file", "machine", "GPU / CPU", "devices"] and len(runs) == 2  # one row per run
    assert "NVIDIA H200" in runs.to_string() and "580.159.04" in runs.to_string()
    assert any("nmsbench sweep" in c.value for c in at.code)  # the commands from the sidecar JSON, in an expander
    assert at.get("download_button")
    assert len(at.dataframe) == 2  # the runs and, folded away, their versions; the implementations only when asked
    at.toggle(key="check_impls").set_value(True).run()
    available = at.dataframe[-1].value
    assert {"allpairs", "torchvision"} <= set(available["name"])
    if not available["available here"].str.startswith("yes").all():
        assert available["available here"].str.contains("no: ").any()  # CUDA backends without a GPU, with the reason


def test_empty_results_folder(tmp_path, monkeypatch):
    at = start(tmp_path, monkeypatch)
    assert any("No results yet" in i.value for i in at.info)
    assert not at.get("plotly_chart")
    at = show(at, "Suppression differences")
    assert any("nmsbench diff" in i.value for i in at.info)


def test_missing_results_folder(tmp_path, monkeypatch):
    at = start(tmp_path / "nowhere", monkeypatch)
    assert any("No results yet" in i.value for i in at.info)


DASHBOARD_IMPORTS = """
import os, sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=120)
at.run()
for view in ("Pipeline", "Suppression differences", "Compare runs", "Environment & data", "Curves"):
    at.session_state["view"] = view
    at.run()
    assert not at.exception, (view, at.exception)
print(sorted(m for m in ("numba", "cupy") if m in sys.modules))
"""


def test_the_dashboard_reads_results_without_running_nms(samples, diff_results, tmp_path):
    """Every view, in a fresh interpreter: neither numba nor cupy is imported (no NMS runs)."""
    import os
    import subprocess
    import sys

    shutil.copy(diff_results, samples)
    shutil.copy(PIPELINE_CSV, samples)
    script = tmp_path / "imports.py"
    script.write_text(DASHBOARD_IMPORTS)
    done = subprocess.run([sys.executable, str(script), APP], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NMSBENCH_RESULTS_DIR": str(samples)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


def test_cpu_only_results_and_a_bad_file_in_the_folder(tmp_path, monkeypatch, cpu_results):
    shutil.copy(cpu_results, tmp_path / "cpu.csv")
    (tmp_path / "notes.csv").write_text("what,why\nthis,that\n")
    at = start(tmp_path, monkeypatch)
    assert [e.value for e in at.sidebar.error] == ["notes.csv: not an nmsbench results file (missing columns: "
                                                  "schema_version, impl, family, device, dtype, timer, scenario, overlap, "
                                                  "classes, n, iou_threshold, seed, params, status, median_us)"]
    figs = figures(at)
    assert line_names(figs["time_vs_n"]) == {"torchvision", "allpairs", "matrix_naive"}
    assert "memory_vs_n" not in figs and "wall_vs_device" not in figs


@pytest.mark.parametrize("name, content, problem", [
    ("people.csv", b"name,age\nada,36\n", "upload people.csv: not an nmsbench results file (missing columns: schema_version"),
    ("empty.csv", b"", "upload empty.csv: not a readable CSV"),
    ("broken.csv", b'a,b\n"1,2\n3,4,5,6\n', "upload broken.csv: not a readable CSV"),
])
def test_malformed_upload_names_the_problem(tmp_path, monkeypatch, name, content, problem):
    at = start(tmp_path, monkeypatch)
    at.file_uploader(key="uploads").upload(name, content, "text/csv").run()
    assert not at.exception
    assert any(e.value.startswith(problem) for e in at.sidebar.error), [e.value for e in at.sidebar.error]


def test_a_good_upload_adds_its_rows(tmp_path, monkeypatch):
    at = start(tmp_path, monkeypatch)
    at.file_uploader(key="uploads").upload("mine.csv", CPU_CSV.read_bytes(), "text/csv").run()
    assert not at.exception and not at.sidebar.error
    assert "allpairs · cpu" in line_names(figures(at)["time_vs_n"]) or "allpairs" in line_names(figures(at)["time_vs_n"])
    assert "mine.csv (uploaded)" in at.multiselect(key="filter_source").options


def test_pipeline_rows_are_a_benchmark_filter_set_to_sweeps(tmp_path, monkeypatch, cpu_results, pipeline_results):
    shutil.copy(cpu_results, tmp_path / "sweep.csv")
    shutil.copy(pipeline_results, tmp_path / "pipeline.csv")
    at = start(tmp_path, monkeypatch)
    assert at.multiselect(key="filter_benchmark").value == ["nms"]
    assert line_names(figures(at)["time_vs_n"]) == {"torchvision", "allpairs", "matrix_naive"}
    at.multiselect(key="filter_benchmark").set_value(["pipeline"]).run()
    assert not at.exception
    assert {"numpy · decode", "numpy · total"} <= line_names(figures(at)["time_vs_n"])


# --- the Pipeline view --------------------------------------------------------------------

@pytest.fixture
def pipeline_folder(tmp_path):
    """The frozen CPU pipeline run next to a frozen sweep."""
    for path in (PIPELINE_CSV, PIPELINE_CSV.with_suffix(".json"), CPU_CSV):
        shutil.copy(path, tmp_path)
    return tmp_path


def test_pipeline_view_draws_the_pipeline_rows(pipeline_folder, monkeypatch):
    at = show(start(pipeline_folder, monkeypatch), "Pipeline")
    assert at.multiselect(key="filter_benchmark").value == ["nms"]  # the sidebar stays on sweeps; the view has its own filters
    figs = figures(at)
    assert {"pipeline_time_per_image", "pipeline_stages"} <= set(figs) and "time_vs_n" not in figs
    time = figs["pipeline_time_per_image"]
    assert line_names(time) == {"numpy", "torch_batched_nms", "torch+bitmask_two_phase", "torch+allpairs"}
    assert time["layout"]["yaxis"]["type"] == "log" and at.selectbox(key="pipe_conf").value == 0.25
    raw = tables.per_image(tables.load_results([PIPELINE_CSV]))
    numpy_real = next(t for t in time["data"] if t["name"] == "numpy" and t.get("xaxis", "x") == "x")
    expected = raw[(raw.impl == "numpy") & (raw.scenario == "real") & (raw.overlap == 0.25) & (raw.stage == "total")]
    assert np.allclose(values(numpy_real, "y"), expected.sort_values("batch")["us_per_image"])
    assert "pipeline_cpu_vs_gpu" not in figs and any("--device cpu,cuda" in i.value for i in at.info)  # CPU rows only
    table, agreement = at.dataframe[0].value, at.dataframe[1].value
    assert "B=8 µs per image" in table.columns and table["pipeline"].iloc[0] == "numpy" and (table["B=1 speedup"].iloc[0] == 1)
    assert {"candidates", "mismatched", "jaccard"} <= set(agreement.columns) and len(agreement) == 16


def test_pipeline_view_filters_change_the_figures(pipeline_folder, monkeypatch):
    at = show(start(pipeline_folder, monkeypatch), "Pipeline")
    before = figures(at)["pipeline_time_per_image"]
    at.multiselect(key="pipe_impls").select("numpy").select("torch+allpairs").run()
    assert not at.exception
    after = figures(at)["pipeline_time_per_image"]
    assert line_names(after) == {"numpy", "torch+allpairs"} != line_names(before)
    stages = figures(at)["pipeline_stages"]
    assert {tuple(t["y"][0]) for t in stages["data"]} <= {("torch+allpairs",) * 2 + ("numpy",) * 2}
    at.selectbox(key="pipe_conf").select(0.001).run()
    low = figures(at)["pipeline_time_per_image"]
    def drawn(spec):  # the lines, not the legend's key to hollow (noisy) markers
        return [t for t in spec["data"] if t["meta"]["role"] == "line"]

    assert max(max(values(t, "y")) for t in drawn(low)) > 10 * max(max(values(t, "y")) for t in drawn(after))
    at.multiselect(key="pipe_source").select("synthetic").run()
    one = figures(at)["pipeline_time_per_image"]
    assert "xaxis2" not in one["layout"] and len(drawn(one)) == 2
    at.radio(key="pipe_stage").set_value("nms").run()
    assert figures(at)["pipeline_time_per_image"]["layout"]["meta"]["stage"] == "nms"


def test_pipeline_view_says_how_to_make_rows(samples, monkeypatch):
    at = show(start(samples, monkeypatch), "Pipeline")
    assert not at.get("plotly_chart")
    assert any("No pipeline rows loaded" in i.value and "nmsbench pipeline --out results/" in i.value for i in at.info)


def test_pipeline_view_compares_cpu_and_gpu_rows(tmp_path, monkeypatch):
    import pandas as pd

    frame = with_made_up_cuda_rows(pd.read_csv(PIPELINE_CSV), factor=4.0)  # a known ratio, not a measurement
    frame.to_csv(tmp_path / "both.csv", index=False)
    at = show(start(tmp_path, monkeypatch), "Pipeline")
    figs = figures(at)
    ratio = figs["pipeline_cpu_vs_gpu"]
    assert line_names(ratio) == {"torch_batched_nms", "torch+bitmask_two_phase", "torch+allpairs"}
    assert all(np.allclose(values(t, "y"), 4.0) for t in ratio["data"] if t["meta"]["role"] == "line")
    assert {"torch+allpairs · cpu", "torch+allpairs · cuda"} <= line_names(figs["pipeline_time_per_image"])
    at.multiselect(key="pipe_devices").select("cuda").run()
    assert "pipeline_cpu_vs_gpu" not in figures(at) and line_names(figures(at)["pipeline_time_per_image"]) == {
        "torch_batched_nms", "torch+bitmask_two_phase", "torch+allpairs"}
    table = at.dataframe[0].value  # cuda rows only, still compared with numpy on the CPU
    assert "numpy" not in set(table["pipeline"]) and table["B=1 speedup"].notna().all()


def test_pipeline_view_opens_on_the_newest_machine(tmp_path, monkeypatch):
    """Two GPU machines' pipeline runs under one host name: the view offers both machines
    (host name and GPU), opens on the newer run's, and draws both when both are chosen."""
    import pandas as pd

    first = with_made_up_cuda_rows(pd.read_csv(PIPELINE_CSV), factor=4.0)  # made-up rows, not measurements
    second = with_made_up_cuda_rows(pd.read_csv(PIPELINE_CSV), factor=2.0).assign(gpu="another made-up GPU")
    second["timestamp"] = "2099-01-01T00:00:00+00:00"
    first.to_csv(tmp_path / "first.csv", index=False)
    second.to_csv(tmp_path / "second.csv", index=False)
    at = show(start(tmp_path, monkeypatch), "Pipeline")
    machine = at.multiselect(key="pipe_machine")
    host = str(first["machine"].iloc[0])
    assert machine.options == [f"{host}: another made-up GPU", f"{host}: made-up GPU"]
    assert machine.value == [f"{host}: another made-up GPU"]
    ratio = figures(at)["pipeline_cpu_vs_gpu"]
    assert all(np.allclose(values(t, "y"), 2.0) for t in ratio["data"] if t["meta"]["role"] == "line")
    one = len(figures(at)["pipeline_time_per_image"]["data"])
    machine.set_value(machine.options).run()
    assert len(figures(at)["pipeline_time_per_image"]["data"]) > one


# --- the Accuracy view --------------------------------------------------------------------

@pytest.fixture
def accuracy_folder(tmp_path):
    """Made-up accuracy rows with known fronts (dash_support.small_run) beside a frozen sweep."""
    from dash_support import accuracy_csv, small_run

    (tmp_path / "accuracy.csv").write_bytes(accuracy_csv(small_run()))
    shutil.copy(CPU_CSV, tmp_path)
    return tmp_path


def points_of(spec: dict) -> dict[str, list[float]]:
    """Each implementation's drawn settings: its markers' times, over every panel."""
    out: dict[str, list[float]] = {}
    for t in spec["data"]:
        if (t.get("meta") or {}).get("role") == "points":
            out.setdefault(t["meta"]["impl"], []).extend(values(t, "x"))
    return out


def test_accuracy_view_draws_the_pareto_chart_and_the_table(accuracy_folder, monkeypatch):
    from dash_support import SETTINGS

    at = start(accuracy_folder, monkeypatch)
    assert at.multiselect(key="filter_benchmark").value == ["nms"]  # the curves stay on sweeps
    at = show(at, "Accuracy")
    figs = figures(at)
    assert set(figs) == {"pareto"}
    pareto = figs["pareto"]
    assert pareto["layout"]["xaxis"]["type"] == "log" and pareto["layout"]["meta"]["metric"] == "ap"
    drawn = points_of(pareto)
    assert sum(len(v) for v in drawn.values()) == 2 * len(SETTINGS) and "bitmask_classic" not in drawn  # skipped: listed
    assert sorted(drawn["hard_fused"]) == [95.0, 95.0, 97.0, 97.0]
    table = at.dataframe[0].value
    assert list(table.columns[:3]) == ["source", "implementation", "IoU"] and len(table) == 2 * len(SETTINGS)
    row = table[(table["source"] == "scenes-crowd") & (table["implementation"] == "hard_fused") & (table["IoU"] == 0.5)]
    assert row["AP"].item() == pytest.approx(40.2) and row["µs/image"].item() == 95.0 and row["front"].item()
    assert not table[(table["implementation"] == "torchvision") & (table["IoU"] == 0.5)]["front"].any()  # hard_fused: same AP, faster
    assert any("not plotted (error or skipped)" in e.label for e in at.expander)


def test_accuracy_view_filters_by_source_metric_device_and_implementation(accuracy_folder, monkeypatch):
    at = show(start(accuracy_folder, monkeypatch), "Accuracy")
    at.multiselect(key="acc_source").select("scenes-crowd").run()
    assert not at.exception
    pareto = figures(at)["pareto"]
    assert "xaxis2" not in pareto["layout"] and set(at.dataframe[0].value.columns[:1]) == {"implementation"}
    at.selectbox(key="acc_metric").select("ar100_crowded").run()
    pareto = figures(at)["pareto"]
    assert pareto["layout"]["meta"]["metric"] == "ar100_crowded" and "crowded" in pareto["layout"]["yaxis"]["title"]["text"]
    at.multiselect(key="acc_source").set_value([]).run()  # both sources: the sparse one has no crowded image
    assert any("have no AR@100 on crowded images value" in i.value and "scenes-sparse" in i.value for i in at.info)
    at.multiselect(key="acc_impls").select("soft_nms").run()
    assert set(points_of(figures(at)["pareto"])) == {"soft_nms"}
    assert set(at.dataframe[0].value["implementation"]) == {"soft_nms kernel=linear", "soft_nms kernel=gaussian"}
    at.multiselect(key="acc_devices").select("cpu").run()
    assert not at.exception and figures(at)["pareto"]["layout"]["meta"]["settings"] == 2


def test_accuracy_view_without_accuracy_rows_says_how_to_make_them(samples, monkeypatch):
    at = show(start(samples, monkeypatch), "Accuracy")
    assert not at.get("plotly_chart")
    assert any("No accuracy rows loaded" in i.value and "nmsbench accuracy --out results/" in i.value for i in at.info)


def test_accuracy_rows_alone_point_the_curves_to_the_accuracy_tab(tmp_path, monkeypatch):
    from dash_support import accuracy_csv, small_run

    (tmp_path / "accuracy.csv").write_bytes(accuracy_csv(small_run()))
    at = start(tmp_path, monkeypatch)
    assert not at.get("plotly_chart") and any("the Accuracy tab draws them" in i.value for i in at.info)
    assert "pareto" in figures(show(at, "Accuracy"))


def test_the_first_view_imports_no_torch():
    """Opening the dashboard reads results and draws them: torch (seconds to import) waits
    until a view runs NMS (the suppression differences)."""
    import subprocess
    import sys

    code = ("import sys; from streamlit.testing.v1 import AppTest; at = AppTest.from_file('app.py', default_timeout=90); "
            "at.run(); assert not at.exception, at.exception; print('torch imported:', 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "torch imported: False" in done.stdout


# --- Compare runs: the verdicts of `nmsbench compare` ---------------------------------------

@pytest.fixture
def two_runs(tmp_path):
    """A base run at the top of the folder and a newer one under runs/ (made-up rows with raw
    samples: 256 the same, 512 slower, 1024 changed, 2048 only in base)."""
    from compare_support import ENV_A, ENV_B, timed, write_run

    write_run(tmp_path / "base.csv", [timed(100, 1, n=256), timed(100, 3, n=512), timed(100, 5, n=1024),
                                      timed(100, 7, n=2048)], ENV_A)
    (tmp_path / "runs").mkdir()
    write_run(tmp_path / "runs" / "new.csv", [timed(100, 2, n=256), timed(130, 4, n=512),
                                              timed(100, 6, n=1024, kept=9, missing=1, jaccard=0.9)], ENV_B)
    return tmp_path


def test_compare_runs_gives_the_cli_verdicts(two_runs, monkeypatch):
    from nmsbench import compare

    at = show(start(two_runs, monkeypatch), "Compare runs")
    assert at.selectbox(key="cmp_base").value == "base.csv" and at.selectbox(key="cmp_new").value == "runs/new.csv"
    expected = compare.compare_files(two_runs / "base.csv", two_runs / "runs" / "new.csv")
    table = at.dataframe[0].value
    assert table["verdict"].tolist() == ["changed", "slower", "only in base", "same"]  # rows to look at first
    assert sorted(table["verdict"]) == sorted(expected["verdict"])
    assert {m.label: m.value for m in at.metric} == {"changed": "1", "slower": "1", "only in base": "1", "same": "1"}
    at.multiselect(key="cmp_verdicts").set_value(["slower", "same"]).run()
    assert at.dataframe[0].value["verdict"].tolist() == ["slower", "same"]
    at.number_input(key="cmp_threshold").set_value(50.0).run()  # +30 % is within ±50 %
    assert not at.exception and at.dataframe[0].value["verdict"].tolist() == ["same", "same"]


def test_compare_runs_names_what_cannot_be_compared(two_runs, monkeypatch):
    at = show(start(two_runs, monkeypatch), "Compare runs")
    at.selectbox(key="cmp_new").set_value("base.csv").run()
    assert any("same file" in i.value for i in at.info)
    (two_runs / "runs" / "new.csv").unlink()
    at = show(start(two_runs, monkeypatch), "Compare runs")
    assert any("needs two results files" in i.value for i in at.info)


def test_compare_runs_of_different_benchmarks_is_an_error(tmp_path, monkeypatch):
    from compare_support import timed, write_run

    write_run(tmp_path / "sweep.csv", [timed(100, 1)])
    shutil.copy(PIPELINE_CSV, tmp_path / "pipeline.csv")
    at = show(start(tmp_path, monkeypatch), "Compare runs")
    assert any("different benchmarks do not compare" in e.value for e in at.error), [e.value for e in at.error]


def _hollow_points(spec: dict) -> int:
    """Noisy (hollow) points of a figure's lines."""
    count = 0
    for trace in spec["data"]:
        if (trace.get("meta") or {}).get("role") == "line":
            symbols = (trace.get("marker") or {}).get("symbol", [])
            count += sum(str(s).endswith(("-open", "-open-dot")) for s in ([symbols] if isinstance(symbols, str) else symbols))
    return count


def test_noisy_points_are_hollow_until_hidden(samples, monkeypatch):
    at = start(samples, monkeypatch)
    time = figures(at)["time_vs_n"]
    noisy = sum((t.get("meta") or {}).get("noisy", 0) for t in time["data"] if (t.get("meta") or {}).get("role") == "line")
    assert noisy > 0 and _hollow_points(time) == noisy
    assert tables.HOLLOW_NOTE in {t.get("name") for t in time["data"]}
    assert not at.toggle(key="hide_noisy").value  # off by default
    at.toggle(key="hide_noisy").set_value(True).run()
    assert not at.exception, at.exception
    time = figures(at)["time_vs_n"]
    assert _hollow_points(time) == 0 and tables.HOLLOW_NOTE not in {t.get("name") for t in time["data"]}
    assert line_names(time)  # the clean points are still drawn


def test_the_default_view_is_one_machine_and_device(tmp_path, monkeypatch):
    for path in COMMITTED:  # the committed reference shelf, without a user's runs: the H200 CUDA reference
        shutil.copy(path, tmp_path)
    at = start(tmp_path, monkeypatch)
    assert at.multiselect(key="filter_device").value == ["cuda"]
    assert len(at.multiselect(key="filter_hardware").value) == 1
    time = figures(at)["time_vs_n"]
    legend = {t["name"] for t in time["data"] if t["meta"]["role"] == "line" and t.get("showlegend", True)}
    # one machine's lines only, few enough for a legend (the family filter starts on hard where there are more)
    assert legend and not any(":" in name for name in legend) and len(legend) <= 12, legend
    assert not any(name.endswith((" · cpu", " · cuda")) for name in legend), legend  # one device: none in a label
