"""Figure and table builders: results tables in, plotly figures and paper tables out."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest

go = pytest.importorskip("plotly.graph_objects", reason="figures need plotly (a GPU box installed with --no-deps may lack it)")

from dash_support import COMMITTED, CPU_CSV, CUDA_CSV, SAMPLES, cpu_results, pipeline_results  # noqa: E402,F401  (fixtures)
from nmsbench import differences, plots, tables  # noqa: E402  (after the plotly skip)
from nmsbench.results import COLUMNS, SCHEMA_VERSION  # noqa: E402


@pytest.fixture(scope="module")
def sample() -> pd.DataFrame:
    return tables.load_results(SAMPLES)


def lines(fig, role: str = "line") -> list:
    return [t for t in fig.data if (t.meta or {}).get("role") == role]


def one_panel(frame, **choices):
    return tables.select(frame, **choices)


# --- loading and selecting ------------------------------------------------------------

def test_load_results_adds_source_and_hardware(sample):
    assert set(sample["source"]) == {p.name for p in SAMPLES}
    cuda = sample[sample["device"] == "cuda"]
    cpu = sample[sample["device"] == "cpu"]
    assert set(cuda["hardware"]) == {"vm: NVIDIA H200"}
    assert set(cpu["hardware"]) == {"vm: Intel(R) Xeon(R) Processor (host of NVIDIA H200)"}
    assert sample["cuda"].map(type).eq(str).all()  # versions stay text ("13.0", never 13.0)


def test_a_gpu_machines_cpu_rows_are_not_another_machines(tmp_path):
    """Two machines with the same host name and CPU model, one with a GPU: their CPU rows
    are two machines (the dashboard's newest run per machine keeps both)."""
    first = pd.read_csv(SAMPLES[0])
    cpu = first[first["device"] == "cpu"].head(1)
    assert not cpu.empty and cpu["gpu"].iloc[0]
    elsewhere = cpu.assign(gpu="", timestamp="2099-01-01T00:00:00+00:00")
    cpu.to_csv(tmp_path / "gpu-machine.csv", index=False)
    elsewhere.to_csv(tmp_path / "cpu-machine.csv", index=False)
    frame = tables.load_results(sorted(tmp_path.glob("*.csv")))
    assert frame["hardware"].nunique() == 2
    assert len(tables.latest_runs(frame)) == 2


def test_load_results_names_the_bad_file(tmp_path):
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"foreign.csv: not an nmsbench results file \(missing columns: schema_version"):
        tables.load_results([foreign])
    with pytest.raises(ValueError, match="upload.csv: not a readable CSV"):
        tables.load_results([io.BytesIO(b"")], names=["upload.csv"])


def test_load_tolerates_extra_columns_and_bad_numbers(tmp_path):
    frame = pd.read_csv(CPU_CSV)
    frame["future_column"] = "x"  # a later schema may add columns
    frame["median_us"] = frame["median_us"].astype(object)
    frame.loc[0, "median_us"] = "n/a"
    path = tmp_path / "wider.csv"
    frame.to_csv(path, index=False)
    loaded = tables.load_results([path])
    assert "future_column" in loaded.columns
    assert math.isnan(loaded.loc[0, "median_us"]) and len(tables.ok_rows(loaded)) == len(frame) - 1


def test_every_committed_run_loads_and_draws():
    frame = tables.load_results(COMMITTED)  # whatever results/ holds now, schema 1 or later
    assert set(frame["source"]) == {p.name for p in COMMITTED}
    rows = tables.select(frame, timer=["wall"])
    fig = plots.time_vs_n(rows)
    assert {t.meta["impl"] for t in lines(fig)} == set(tables.ok_rows(rows)["impl"])
    assert lines(plots.speedup_vs_n(rows)) and tables.speedup_table(rows)["median_us"].gt(0).all()


def test_schema_2_sweeps_and_pipeline_rows_stay_apart(cpu_results, pipeline_results):
    frame = tables.load_results([CPU_CSV, cpu_results, pipeline_results])  # schema 1 and this version's together
    assert set(frame["benchmark"]) == {"nms", "pipeline"} and set(frame["schema_version"]) == {1, SCHEMA_VERSION}
    sweeps = tables.select(frame, benchmark=["nms"], scenario=["chain"])
    assert {t.meta["impl"] for t in lines(plots.time_vs_n(sweeps))} == set(tables.ok_rows(sweeps)["impl"])
    pipes = tables.select(frame, benchmark=["pipeline"])
    names = {t.name for t in lines(plots.time_vs_n(pipes))}
    assert {"numpy · decode", "numpy · nms", "numpy · total"} <= names  # stages never share a line
    table = tables.speedup_table(pipes, "numpy")
    assert table.attrs["groups"] == ["stage"] and (table.loc[table["impl"] == "numpy", "speedup"] == 1).all()


def test_runs_of_two_commits_are_two_lines():
    frame = tables.load_results([CPU_CSV])
    other = frame.assign(git_commit="abc1234", source="later.csv")
    both = pd.concat([frame, other], ignore_index=True)
    names = {t.name for t in lines(plots.time_vs_n(tables.select(both, scenario=["crowd"])))}
    assert {"torchvision · @abc1234", f"torchvision · @{frame['git_commit'].iloc[0]}"} <= names


def test_empty_load_has_the_usual_columns():
    empty = tables.concat([])
    assert empty.empty and {"impl", "status", "median_us", "hardware", "source"} <= set(empty.columns)


def test_select_matches_numbers_with_tolerance_and_ignores_empty_choices(sample):
    knob = tables.select(sample, scenario=["clustered"], overlap=[0.7000000001])
    assert len(knob) and set(knob["scenario"]) == {"clustered"}
    assert len(tables.select(sample, impl=[], device=None)) == len(sample)
    with pytest.raises(ValueError, match="no column"):
        tables.select(sample, nonsense=["x"])


def test_series_names_only_what_varies(sample):
    cpu = tables.select(sample, device=["cpu"], scenario=["clustered"])
    assert set(tables.add_series(cpu)["series"]) == set(cpu["impl"])
    both = tables.select(sample, timer=["wall"], scenario=["clustered"])
    labels = set(tables.add_series(both)["series"])
    assert {"torchvision · cpu", "torchvision · cuda"} <= labels  # hardware follows from device: not named


# --- figures --------------------------------------------------------------------------

def test_time_vs_n_is_log_log_with_one_line_per_impl_and_an_iqr_band(sample):
    rows = one_panel(sample, device=["cpu"], scenario=["clustered"])
    fig = plots.time_vs_n(rows)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "µs" in fig.layout.yaxis.title.text and "N" in fig.layout.xaxis.title.text
    drawn = lines(fig)
    assert sorted(t.name for t in drawn) == sorted(rows["impl"].unique())
    for trace in drawn:
        part = rows[rows["impl"] == trace.name].sort_values("n")
        assert list(trace.x) == part["n"].tolist()
        assert np.allclose(trace.y, part["median_us"])
    bands = lines(fig, "band")
    assert len(bands) == len(drawn)  # one closed polygon per line
    tv = rows[rows["impl"] == "torchvision"].sort_values("n")
    band = next(t for t in bands if t.meta["series"] == "torchvision")
    k = band.meta["points"]
    upper, lower = np.asarray(band.y[:k]), np.asarray(band.y[k:])[::-1]
    assert band.fill == "toself" and list(band.x[:k]) == list(band.x[k:][::-1]) == tv["n"].tolist()
    assert np.allclose(upper, tv["median_us"] + tv["iqr_us"] / 2)
    assert np.all(lower <= tv["median_us"].to_numpy()) and np.all(lower > 0)  # stays on the log axis


def test_time_vs_n_facets_by_scenario(sample):
    rows = one_panel(sample, device=["cpu"])
    fig = plots.time_vs_n(rows)
    titles = {a.text for a in fig.layout.annotations}
    assert set(rows["scenario"]) <= titles
    assert len(lines(fig)) == rows["impl"].nunique() * rows["scenario"].nunique()
    assert sum(t.showlegend for t in lines(fig)) == rows["impl"].nunique()  # one legend entry per impl
    single = plots.time_vs_n(rows, facet=None)
    assert len(lines(single)) == rows["impl"].nunique() * rows["scenario"].nunique()  # scenario joins the label
    assert all(" · " in t.name for t in lines(single))


def test_speedup_of_the_baseline_is_one_and_others_are_ratios(sample):
    rows = one_panel(sample, device=["cpu"], scenario=["clustered"])
    fig = plots.speedup_vs_n(rows, "torchvision")
    drawn = {t.name: t for t in lines(fig)}
    assert fig.layout.yaxis.type == "log" and "torchvision" in fig.layout.yaxis.title.text
    assert np.allclose(drawn["torchvision"].y, 1.0)
    tv = rows[rows["impl"] == "torchvision"].set_index("n")["median_us"]
    ap = rows[rows["impl"] == "allpairs"].set_index("n")["median_us"]
    assert np.allclose(drawn["allpairs"].y, (tv / ap).sort_index().to_numpy())
    other = plots.speedup_vs_n(rows, "allpairs", show=["torchvision"])
    assert {t.name for t in lines(other)} == {"torchvision", "allpairs"}


def test_speedup_pairs_rows_of_the_same_device(sample):
    rows = tables.select(sample, timer=["wall"], scenario=["chain"])
    speed = tables.with_speedup(rows, "torchvision")
    assert set(speed["device"]) == {"cpu", "cuda"}
    for device in ("cpu", "cuda"):
        base = speed[(speed["device"] == device) & (speed["impl"] == "torchvision")]
        assert np.allclose(base["speedup"], 1.0)


def test_missing_baseline_gives_an_explaining_figure(sample):
    rows = one_panel(sample, device=["cpu"], impl=["allpairs"])
    fig = plots.speedup_vs_n(rows, "torchvision")
    assert fig.layout.meta["empty"] and "torchvision" in fig.layout.meta["message"]
    assert plots.time_vs_n(rows.iloc[0:0]).layout.meta["empty"]


def test_wall_vs_device_and_memory_only_where_recorded(sample, cpu_results):
    fig = plots.wall_vs_device(sample)  # schema-1 files: their device rows timed CUDA events, read as events rows
    pairs = {(t.name, t.meta["timer"]) for t in lines(fig)}
    assert {("torchvision", "wall"), ("torchvision", "events"), ("matrix_naive", "events")} <= pairs
    assert all(t.line.dash == ("dot" if t.meta["timer"] == "events" else "solid") for t in lines(fig))
    legend = [t.name for t in lines(fig) if t.showlegend]
    assert sorted(legend) == sorted({t.name for t in lines(fig)})  # one entry per implementation, for both timers
    memory = plots.memory_vs_n(tables.select(sample, device=["cuda"]))
    assert memory.layout.yaxis.type == "log" and "MiB" in memory.layout.yaxis.title.text
    cpu_only = tables.load_results([cpu_results])
    assert plots.wall_vs_device(cpu_only) is None and plots.memory_vs_n(cpu_only) is None


def test_time_vs_overlap_at_one_n(sample):
    rows = one_panel(sample, device=["cpu"])
    fig = plots.time_vs_overlap(rows, 1024)
    assert fig.layout.meta["n"] == 1024 and fig.layout.yaxis.type == "log"
    assert "realized overlap" in fig.layout.xaxis.title.text
    tv = next(t for t in lines(fig) if t.name == "torchvision")
    expected = rows[(rows["impl"] == "torchvision") & (rows["n"] == 1024)].sort_values("mean_max_iou")
    assert np.allclose(tv.x, expected["mean_max_iou"]) and np.allclose(tv.y, expected["median_us"])
    assert plots.time_vs_overlap(rows, 3).layout.meta["empty"]


def test_colors_are_stable_per_implementation():
    a = plots.color_map(["torchvision", "zeta", "alpha"])
    b = plots.color_map(["alpha", "zeta", "torchvision", "allpairs"])
    assert a["torchvision"] == b["torchvision"] == plots.PINNED_COLORS["torchvision"]
    assert a["alpha"] == b["alpha"] and len(set(b.values())) == 4


def test_print_curves_have_time_and_speedup_rows(sample):
    rows = tables.select(sample, device=["cpu"], scenario=["chain", "crowd"])
    fig = plots.style_for_print(plots.curves_for_print(rows, "torchvision", show=["allpairs"]))
    assert {t.name for t in lines(fig)} == {"allpairs", "torchvision"}  # the baseline's line at 1 stays
    assert fig.layout.template.layout.paper_bgcolor in (None, "white") and fig.layout.paper_bgcolor == "white"
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis3.type == "log"


# --- tables ---------------------------------------------------------------------------

def test_speedup_table_matches_the_csv(sample):
    rows = tables.select(sample, device=["cpu"], scenario=["clustered"])
    table = tables.speedup_table(rows, "torchvision")
    assert table.attrs["groups"] == [] and table["impl"].iloc[0] == "torchvision"
    raw = pd.read_csv(CPU_CSV)
    raw = raw[raw["scenario"] == "clustered"]
    for _, row in table.iterrows():
        source = raw[(raw["impl"] == row["impl"]) & (raw["n"] == row["n"])]["median_us"].item()
        base = raw[(raw["impl"] == "torchvision") & (raw["n"] == row["n"])]["median_us"].item()
        assert row["median_us"] == source and row["speedup"] == pytest.approx(base / source)


def test_rendered_tables(sample):
    rows = tables.select(sample, device=["cpu"], scenario=["clustered"])
    table = tables.speedup_table(rows, "torchvision", impls=["torchvision", "allpairs"])
    markdown = tables.render_table(table, "markdown")
    assert "| N | torchvision | allpairs |" in markdown
    ap = rows[(rows["impl"] == "allpairs") & (rows["n"] == 8192)]["median_us"].item()
    tv = rows[(rows["impl"] == "torchvision") & (rows["n"] == 8192)]["median_us"].item()
    assert f"| 8,192 | {tables.format_us(tv)} (1.00×) | {tables.format_us(ap)} ({tv / ap:.2f}×) |" in markdown
    latex = tables.render_table(table, "latex")
    assert r"\begin{tabular}{rrr}" in latex and r"\toprule" in latex and r"$\times$" in latex and "µ" not in latex
    wide = pd.read_csv(io.StringIO(tables.render_table(table, "csv")))
    assert list(wide.columns) == ["n", "torchvision median_us", "torchvision noisy", "torchvision speedup",
                                  "allpairs median_us", "allpairs noisy", "allpairs speedup"]
    assert wide.loc[wide["n"] == 8192, "allpairs median_us"].item() == ap
    with pytest.raises(ValueError, match="unknown table format"):
        tables.render_table(table, "html")


def test_table_groups_by_what_varies(sample):
    table = tables.speedup_table(tables.select(sample, timer=["wall"], scenario=["chain", "crowd"]))
    assert table.attrs["groups"] == ["device", "scenario"]  # hardware follows from the device
    markdown = tables.render_table(table, "markdown")
    assert "| device | scenario | N |" in markdown and "| cuda | crowd | 8,192 |" in markdown


def test_environment_table_has_a_column_per_run(sample):
    env = tables.environment_table(sample, {"h200-cuda.csv": "nmsbench sweep ..."})
    assert len(env.columns) == 2
    cuda = next(c for c in env.columns if "cuda" in c)
    assert env.loc["gpu", cuda] == "NVIDIA H200" and env.loc["driver", cuda] == "580.159.04"
    assert env.loc["git_commit", cuda] and env.loc["command", cuda] == "nmsbench sweep ..."
    skipped = (pd.read_csv(CUDA_CSV)["status"] == "skipped").sum()
    assert skipped and env.loc["skipped", cuda] == f"{skipped:,}"


# --- the differences view -------------------------------------------------------------

def test_differences_classify_and_agree():
    codes, counts = differences.classify(6, [0, 1, 2], [1, 2, 3])
    assert codes.tolist() == [2, 1, 1, 3, 0, 0]
    assert counts == {"suppressed by both": 2, "kept by both": 2, "only A": 1, "only B": 1}
    assert differences.jaccard([0, 1, 2], [1, 2, 3]) == pytest.approx(0.5)
    assert differences.jaccard([], []) == 1.0
    matrix = differences.agreement_matrix({"a": np.array([0, 1]), "b": np.array([1]), "c": np.array([0, 1])})
    assert matrix.loc["a", "c"] == 1.0 and matrix.loc["a", "b"] == matrix.loc["b", "a"] == 0.5


def test_run_case_on_chains_shows_greedy_and_allpairs_differ():
    case = differences.run_case("chain", 128, overlap=0.6, seed=0, iou_threshold=0.5)
    assert case.n == 128 and case.boxes.shape == (128, 4)
    assert {"torchvision", "allpairs", "bitmask_two_phase"} <= set(case.keeps)
    assert not case.errors
    codes, counts = differences.classify(case.n, case.keeps["torchvision"], case.keeps["allpairs"])
    assert counts["only A"] > 0 and counts["only B"] == 0  # all-pairs over-suppresses chains
    assert differences.jaccard(case.keeps["torchvision"], case.keeps["bitmask_two_phase"]) == 1.0


def test_run_case_reports_unavailable_backends_instead_of_raising():
    case = differences.run_case("uniform", 32, device="cuda", impls=["torchvision", "allpairs", "nope"])
    if differences.devices()[-1] != "cuda":
        assert case.unavailable["torchvision"] == "no CUDA device" and not case.keeps
    for name in ("torchvision", "allpairs"):  # e.g. "no CUDA device", "cupy not installed", "no cuda backend (has: cpu)"
        assert name in case.keeps or case.unavailable[name]
    assert "unknown implementation" in case.errors["nope"]


def test_boxes_canvas_colours_the_four_classes():
    boxes = np.array([[0, 0, 10, 10], [5, 5, 15, 15], [100, 100, 120, 130], [200, 200, 210, 210]], dtype=float)
    codes, counts = differences.classify(4, [0, 2], [0, 3])
    fig = plots.boxes_canvas(boxes, codes, ("tv", "ap"))
    outlines = {t.meta["class"]: t for t in lines(fig, "boxes")}
    assert set(outlines) == set(plots.BOX_CLASSES)
    assert len(set(t.line.color for t in outlines.values())) == 4
    assert outlines["only A"].name == "kept only by tv (1)" and outlines["only B"].name == "kept only by ap (1)"
    assert outlines["suppressed by both"].meta["count"] == 1 and outlines["kept by both"].meta["count"] == 1
    assert list(fig.layout.yaxis.range) == [1024.0, 0.0]  # image coordinates: y down
    assert fig.layout.yaxis.scaleanchor == "x"
    heat = plots.agreement_heatmap(differences.agreement_matrix({"a": np.array([0]), "b": np.array([0, 1])}))
    assert heat.data[0].zmin == 0 and heat.data[0].zmax == 1 and heat.data[0].z[0][1] == 0.5
    assert heat.data[0].texttemplate == "%{text}" and heat.data[0].text[0][1] == "0.50"
    # many implementations: cells too narrow to write in; hover still gives every value
    many = plots.agreement_heatmap(differences.agreement_matrix(
        {f"impl_{k}": np.arange(k + 1) for k in range(plots.ANNOTATED_MAX + 1)}))
    assert many.data[0].text is None and many.data[0].texttemplate is None and "%{z:.3f}" in many.data[0].hovertemplate
    assert many.layout.height < 110 + 60 * (plots.ANNOTATED_MAX + 1)


def test_results_columns_are_all_known_to_the_tables():
    assert set(tables.NUMERIC_COLUMNS) <= set(COLUMNS)
    assert set(tables.CASE_KEYS) - {"hardware"} <= set(COLUMNS)


# --- the dashboard's defaults ---------------------------------------------------------

def _two_runs(sample):
    rows = tables.select(sample, device=["cpu"], impl=["torchvision", "allpairs"], scenario=["chain"])
    old = rows.assign(source="old.csv", git_commit="aaaaaaa", timestamp="2026-01-01T00:00:00+00:00")
    new = rows[rows["n"] <= 1024].assign(source="new.csv", git_commit="bbbbbbb", timestamp="2026-02-01T00:00:00+00:00",
                                         median_us=lambda d: d["median_us"] * 2)
    return old, new


def test_latest_runs_keeps_each_cases_newest_file(sample):
    old, new = _two_runs(sample)
    latest = tables.latest_runs(pd.concat([old, new], ignore_index=True))
    assert set(latest.loc[latest["n"] <= 1024, "source"]) == {"new.csv"}  # measured by both: the newer file
    assert set(latest.loc[latest["n"] > 1024, "source"]) == {"old.csv"}   # measured only by the older one: kept
    assert len(latest) == len(old)
    other = old.assign(hardware="another machine: another CPU")  # another machine's run is its own newest
    both = tables.latest_runs(pd.concat([other, new], ignore_index=True))
    assert len(both) == len(other) + len(new)


def test_widest_n_is_the_largest_n_every_line_has(sample):
    rows = tables.select(sample, timer=["wall"])
    n = tables.widest_n(rows)
    ok = tables.ok_rows(rows)
    lines = ok[["impl", "hardware", "device", "threads"]].drop_duplicates()
    at_n = ok[ok["n"] == n][["impl", "hardware", "device", "threads"]].drop_duplicates()
    assert len(at_n) == len(lines) and n == ok["n"].max()
    more = pd.concat([rows, rows[(rows["impl"] == "torchvision") & (rows["n"] == n)].assign(n=2 * n)], ignore_index=True)
    assert tables.widest_n(more) == n  # a larger N that only one line has is not the default
    assert tables.widest_n(rows.iloc[0:0]) is None


def test_thread_counts_name_cpu_lines_only(sample):
    rows = tables.ok_rows(tables.select(sample, impl=["torchvision"], timer=["wall"]))
    rows = pd.concat([rows, rows[rows["device"] == "cpu"].assign(threads=2)], ignore_index=True)
    names = set(tables.add_series(rows, ["device", "threads"])["series"])
    assert names == {"torchvision · cpu · 16 threads", "torchvision · cpu · 2 threads", "torchvision · cuda"}


def test_runs_table_is_one_row_per_file_and_machine(sample):
    runs = tables.runs_table(sample)
    assert len(runs) == sample.groupby(["source", "hardware"]).ngroups
    cuda = runs[runs["devices"] == "cuda"].iloc[0]
    assert cuda["GPU / CPU"] == "NVIDIA H200" and cuda["driver"] == "580.159.04" and cuda["rows"] == (sample["device"] == "cuda").sum()
    assert runs["ok"].sum() + runs["error"].sum() + runs["skipped"].sum() == len(sample)


def test_lines_carry_their_implementations_marker(sample):
    fig = plots.time_vs_n(tables.select(sample, timer=["wall"]))
    for trace in lines(fig):
        symbol = plots.PINNED_SYMBOLS[trace.meta["impl"]]
        assert set(np.atleast_1d(trace.marker.symbol)) <= {symbol, plots.hollow(symbol)}  # hollow: a noisy point
        assert trace.line.color == plots.PINNED_COLORS[trace.meta["impl"]]


def test_boxes_canvas_draws_decayed_boxes_fainter():
    boxes = np.array([[0, 0, 10, 10], [5, 5, 15, 15], [100, 100, 120, 130], [200, 200, 210, 210]], dtype=float)
    codes, _ = differences.classify(4, [0, 2], [0, 1, 2, 3])
    remaining = np.array([1.0, 0.1, 0.6, np.nan])  # B decays: box 1 keeps a tenth of its score, box 2 sixty percent
    fig = plots.boxes_canvas(boxes, codes, ("tv", "matrix"), scores=np.ones(4), remaining=remaining)
    outlines = lines(fig, "boxes")
    opacity = {(t.meta["class"], t.meta["opacity"]): t.meta["count"] for t in outlines}
    assert opacity == {("kept by both", 1.0): 1, ("kept by both", 0.6): 1, ("only B", 0.15): 1, ("only B", 1.0): 1,
                       ("only A", 1.0): 0, ("suppressed by both", 1.0): 0}
    assert sum(t.showlegend is not False for t in outlines) == 4  # one legend entry per class, whatever its opacities
    key = lines(fig, "decay key")
    assert [t.meta["count"] for t in key] == [1, 1, 0, 1] and fig.layout.meta["decayed"]
    assert not plots.boxes_canvas(boxes, codes).layout.meta["decayed"]


def _two_parameter_sets(sample):
    """torchvision's wall rows of one scenario as two made-up implementations, each run with
    two parameter sets: "base" at 1x and 1.5x torchvision's time, "x" at 2x and 3x."""
    rows = tables.select(sample, timer=["wall"], impl=["torchvision"], device=["cpu"])
    rows = rows[rows["scenario"] == rows["scenario"].iloc[0]]
    made = []
    for impl, kernel, factor in (("base", "a", 1.0), ("base", "b", 1.5), ("x", "a", 2.0), ("x", "b", 3.0)):
        made.append(rows.assign(impl=impl, params=json.dumps({"kernel": kernel, "sigma": 0.5}),
                                median_us=rows["median_us"] * factor))
    return pd.concat(made, ignore_index=True)


def test_a_baseline_with_two_parameter_sets_is_matched_parameter_for_parameter(sample):
    """Speedups against a baseline that ran each case with two parameter sets pair the rows
    of the same parameters (never a mix): the baseline is exactly 1 against itself."""
    speed = tables.with_speedup(_two_parameter_sets(sample), "base")
    assert len(speed) == 4 * len(speed[(speed["impl"] == "x") & speed["params"].str.contains('"a"')])
    mine = speed[speed["impl"] == "base"]
    assert np.allclose(mine["speedup"], 1.0)
    assert np.allclose(speed[speed["impl"] == "x"]["speedup"], 0.5)  # 1/2 for a, 1.5/3 for b


def test_the_export_gives_each_parameter_set_its_own_column(sample):
    table = tables.speedup_table(_two_parameter_sets(sample), "base")
    assert table.attrs["impls"] == ["base kernel=a", "base kernel=b", "x kernel=a", "x kernel=b"]  # sigma is shared
    assert np.allclose(table[table["impl"].str.startswith("base")]["speedup"], 1.0)
    assert np.allclose(table[table["impl"].str.startswith("x")]["speedup"], 0.5)
    chosen = tables.speedup_table(_two_parameter_sets(sample), "base", impls=["x"])
    assert set(chosen["impl"]) == {"x kernel=a", "x kernel=b"} and np.allclose(chosen["speedup"], 0.5)
    assert tables.format_speedup(0.0075) == "0.0075" and tables.format_speedup(1.234) == "1.23"


def test_a_cuda_backend_is_compared_with_a_cpu_only_baseline_of_the_same_machine(sample):
    """A baseline that never runs on CUDA (soft_nms): CUDA rows take its CPU rows of the same
    machine and case; a baseline that runs on both devices (torchvision) never crosses."""
    cpu = tables.select(sample, timer=["wall"], impl=["torchvision"], device=["cpu"])
    cpu = cpu[cpu["threads"] == cpu["threads"].iloc[0]]
    cuda = cpu.assign(impl="gpu_op", device="cuda", threads=cpu["threads"], median_us=cpu["median_us"] / 4)
    cuda["hardware"] = cuda["machine"] + ": " + cuda["gpu"]
    frame = pd.concat([cpu.assign(impl="cpu_ref"), cuda], ignore_index=True)
    speed = tables.with_speedup(frame, "cpu_ref")
    assert np.allclose(speed[speed["impl"] == "gpu_op"]["speedup"], 4.0) and len(speed) == len(frame)
    elsewhere = cuda.assign(machine="another machine")  # another machine's GPU: no twin
    assert tables.with_speedup(pd.concat([cpu.assign(impl="cpu_ref"), elsewhere]), "cpu_ref")["impl"].eq("cpu_ref").all()
    both = pd.concat([frame, cuda.assign(impl="cpu_ref", median_us=cuda["median_us"] * 2)], ignore_index=True)
    crossed = tables.with_speedup(both, "cpu_ref")  # the baseline has CUDA rows: same device only
    assert np.allclose(crossed[(crossed["impl"] == "gpu_op")]["speedup"], 2.0)


def test_a_line_names_only_the_parameters_that_tell_its_implementations_runs_apart(sample):
    frame = pd.concat([_two_parameter_sets(sample),
                       tables.select(sample, timer=["wall"], impl=["torchvision"], device=["cpu"])], ignore_index=True)
    series = tables.add_series(frame, ["params"])
    assert set(series["series"]) >= {"base · kernel=a", "base · kernel=b", "x · kernel=a", "x · kernel=b"}
    assert set(series[series["impl"] == "torchvision"]["series"]) == {"torchvision"}  # one parameter set: no suffix


# --- noisy rows, marked ---------------------------------------------------------------

def _with_noise(sample):
    """The sample's wall rows of one scenario with every allpairs row at N = 1024 noisy (a slow host)."""
    rows = tables.select(sample, timer=["wall"], device=["cpu"], scenario=["clustered"])
    hit = rows["impl"].eq("allpairs") & rows["n"].eq(1024)
    assert hit.sum() == 1
    return rows.assign(noisy=hit.map({True: "True", False: "False"}),
                       noise=hit.map({True: "the host ran slow in 5 of 5 rounds", False: ""})), hit


def test_a_noisy_cell_carries_a_dagger_and_the_csv_a_noisy_column(sample):
    rows, _ = _with_noise(sample)
    table = tables.speedup_table(rows, "torchvision", impls=["torchvision", "allpairs"])
    markdown = tables.render_table(table, "markdown")
    ap = rows[rows["impl"].eq("allpairs") & rows["n"].eq(1024)]["median_us"].item()
    assert f"| {tables.format_us(ap)}† (" in markdown and markdown.count("†") == 2  # the cell and its footnote
    assert "† noisy: 1 cells (slow host 1)" in markdown
    latex = tables.render_table(table, "latex")
    assert latex.count(r"\textsuperscript{\dag}") == 2 and "†" not in latex
    wide = pd.read_csv(io.StringIO(tables.render_table(table, "csv")))
    assert wide["allpairs noisy"].tolist() == [n == 1024 for n in wide["n"]]
    assert not wide["torchvision noisy"].any()
    clean = tables.speedup_table(rows.assign(noisy="False"), "torchvision", impls=["torchvision", "allpairs"])
    assert "†" not in tables.render_table(clean, "markdown")


def test_noisy_points_are_hollow_and_say_why(sample):
    rows, _ = _with_noise(sample)
    for fig in (plots.time_vs_n(rows), plots.speedup_vs_n(rows, "torchvision")):
        for trace in lines(fig):
            symbols = np.broadcast_to(np.atleast_1d(trace.marker.symbol), len(trace.x))
            hollow = [s.endswith("-open") or s.endswith("-open-dot") for s in symbols]
            expected = [trace.meta["impl"] == "allpairs" and x == 1024 for x in trace.x]
            assert hollow == expected, trace.name
            if any(expected):
                assert "noisy</b>: the host ran slow in 5 of 5 rounds" in trace.text[list(trace.x).index(1024)]
                assert "%{text}" in trace.hovertemplate
        keys = [t for t in fig.data if (t.meta or {}).get("role") == "key"]
        assert [t.name for t in keys] == [tables.HOLLOW_NOTE]
    plain = plots.time_vs_n(rows.assign(noisy="False"))
    assert not [t for t in plain.data if (t.meta or {}).get("role") == "key"]
    overlap = plots.time_vs_overlap(rows, 1024)
    points = [t for t in overlap.data if (t.meta or {}).get("role") == "points"]
    assert sum(t.meta["noisy"] for t in points) == 1
    assert plots.hollow("hexagon-open") == "hexagon-open-dot" and plots.hollow("circle") == "circle-open"


def test_lines_without_an_n_are_named_by_what_sets_them_apart(sample):
    """A chart at one N cannot draw a line measured elsewhere only: lines_without names each
    such line (its implementation, then the line keys that vary), and none that has rows there."""
    cuda = tables.ok_rows(sample[sample["device"] == "cuda"])
    impl, n = cuda["impl"].iloc[0], int(cuda["n"].max())
    assert tables.lines_without(cuda, n) == []  # every line of one run reaches its largest N
    short = cuda[~((cuda["impl"] == impl) & (cuda["n"] == n))]
    assert tables.lines_without(short, n) == [impl]  # one machine: the implementation names it
    elsewhere = cuda[cuda["impl"] == impl].assign(hardware="vm: another GPU", n=n // 2)
    assert tables.lines_without(tables.concat([cuda, elsewhere]), n) == [f"{impl} · vm: another GPU"]
