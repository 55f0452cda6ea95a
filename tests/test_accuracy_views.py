"""The accuracy views: the Pareto front, ``plots.pareto``, the accuracy tables and the
``plot --kind pareto`` / ``export --benchmark accuracy`` commands, on accuracy rows (results
schema 8) written here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, strategies as st

pytest.importorskip("plotly", reason="figures need plotly (a GPU box installed with --no-deps may lack it)")

from dash_support import GAUSSIAN, LINEAR, SETTINGS, accuracy_csv, accuracy_row, frame_of, small_run  # noqa: E402
from nmsbench import plots, tables  # noqa: E402
from nmsbench.cli import main  # noqa: E402
from test_exports import needs_chromium  # noqa: E402  (static export: kaleido drives Chromium)


@pytest.fixture
def run_csv(tmp_path):
    path = tmp_path / "accuracy.csv"
    path.write_bytes(accuracy_csv(small_run()))
    return path


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# --- the front -------------------------------------------------------------------------

def dominated(i: int, time, metric) -> bool:
    """Point i has another that is no slower and no less accurate, better in one."""
    return any(time[j] <= time[i] and metric[j] >= metric[i] and (time[j] < time[i] or metric[j] > metric[i])
               for j in range(len(time)) if j != i and not (math.isnan(time[j]) or math.isnan(metric[j])))


# values from small sets, so ties in time, in metric and whole repeated points are common
TIMES = st.one_of(st.sampled_from([1.0, 2.0, 3.0, 5.0, 8.0]), st.floats(0.5, 100), st.just(float("nan")))
METRICS = st.one_of(st.sampled_from([0.1, 0.3, 0.5, 0.7]), st.floats(0, 1), st.just(float("nan")))


@given(st.lists(st.tuples(TIMES, METRICS), max_size=40))
def test_the_front_is_exactly_the_non_dominated_points(points):
    time = [t for t, _ in points]
    metric = [m for _, m in points]
    front = tables.pareto_front(time, metric)
    expected = [not (math.isnan(time[i]) or math.isnan(metric[i])) and not dominated(i, time, metric) for i in range(len(points))]
    assert front.tolist() == expected


def test_ties_in_time_keep_only_the_better_and_equal_points_stay_together():
    #                 a    b    c    d    e
    time = np.array([10., 10., 20., 20., 5.])
    metric = np.array([.5, .4, .6, .6, .3])
    assert tables.pareto_front(time, metric).tolist() == [True, False, True, True, True]
    assert tables.pareto_front([7.0], [0.2]).tolist() == [True]  # a single point is its own front
    assert tables.pareto_front([], []).tolist() == []


def test_points_are_settings_and_fronts_are_per_source():
    points = tables.accuracy_points(frame_of(small_run()))
    assert points.attrs["groups"] == ["scenario"]
    assert len(points) == 2 * len(SETTINGS)  # the skipped row is no point
    crowd = points[points["scenario"] == "scenes-crowd"].set_index(["variant", "iou_threshold"])
    # allpairs (fastest), hard_fused at 0.5 (torchvision's AP, faster), soft_nms' two kernels (more AP, slower);
    # matrix_naive is slower than hard_fused with less AP
    assert set(crowd.index[crowd["front"]]) == {("allpairs", 0.5), ("hard_fused", 0.5), ("soft_nms kernel=linear", 0.5),
                                                ("soft_nms kernel=gaussian", 0.5)}
    assert crowd.loc[("torchvision", 0.5), "ap"] == pytest.approx(0.402)
    # a point is judged only against its own source: with AP from a row of another source it would fall off
    sparse = points[points["scenario"] == "scenes-sparse"]
    assert sparse["front"].sum() == crowd["front"].sum()
    # a chosen metric has its own front
    ar = tables.accuracy_points(frame_of(small_run()), "ar100_crowded")
    assert ar.attrs["metric"] == "ar100_crowded" and not ar[ar["scenario"] == "scenes-sparse"]["front"].any()


def test_an_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown accuracy metric 'map'"):
        tables.accuracy_points(frame_of(small_run()), "map")


# --- the figure ------------------------------------------------------------------------

def traces(fig, role: str) -> list:
    return [t for t in fig.data if (t.meta or {}).get("role") == role]


def test_pareto_has_one_marker_per_setting_in_its_colours_and_the_front_as_a_step_line():
    frame = frame_of(small_run())
    fig = plots.pareto(frame)
    meta = fig.layout.meta
    assert meta["figure"] == "pareto" and meta["metric"] == "ap" and meta["settings"] == 2 * len(SETTINGS)
    assert meta["not_measured"] == 1  # the skipped row: listed, not drawn
    markers = traces(fig, "points")
    assert sum(len(t.x) for t in markers) == 2 * len(SETTINGS)
    for t in markers:
        assert t.marker.color == plots.PINNED_COLORS[t.meta["impl"]] and t.marker.symbol == plots.PINNED_SYMBOLS[t.meta["impl"]]
    assert fig.layout.xaxis.type == "log" and "AP@[.5:.95]" in fig.layout.yaxis.title.text
    assert [a.text for a in fig.layout.annotations] == ["scenes-crowd", "scenes-sparse"]  # a panel per source
    points = tables.accuracy_points(frame)
    for front, (_source, part) in zip(traces(fig, "front"), points.groupby("scenario")):
        on = part[part["front"]].sort_values("median_us")
        assert front.line.shape == "hv"
        assert list(front.x[:-1]) == on["median_us"].tolist() and list(front.y[:-1]) == pytest.approx((100 * on["ap"]).tolist())
        assert front.x[-1] == part["median_us"].max() and front.y[-1] == front.y[-2]  # on to the slowest setting
    # the hover names the setting and gives every number
    soft = next(t for t in markers if t.meta["impl"] == "soft_nms" and t.xaxis == "x")
    assert "µs per image" in soft.hovertemplate and "%{y:.1f}" in soft.hovertemplate
    linear = list(soft.customdata[:, 0]).index("soft_nms kernel=linear")
    assert soft.customdata[linear, 1] == "IoU 0.5" and "AP 43.1 · AP50 63.1 · AP75 38.8" in soft.customdata[linear, 3]


def test_pareto_filters_to_a_device_and_a_metric():
    rows = small_run() + [accuracy_row("hard_fused", 12.0, 0.402, device="cuda")]
    fig = plots.pareto(frame_of(rows))
    assert [a.text for a in fig.layout.annotations] == ["scenes-crowd · cpu", "scenes-crowd · cuda", "scenes-sparse · cpu"]
    one = plots.pareto(tables.select(frame_of(rows), device=["cuda"]))
    assert sum(len(t.x) for t in traces(one, "points")) == 1 and not one.layout.annotations
    crowded = plots.pareto(frame_of(rows), "ar100_crowded")
    assert crowded.layout.meta["without_metric"] == len(SETTINGS) and crowded.layout.meta["without_metric_in"] == ["scenes-sparse · cpu"]
    assert sum(len(t.x) for t in traces(crowded, "points")) == len(SETTINGS) + 1


def test_pareto_of_a_single_point_and_of_nothing():
    fig = plots.pareto(frame_of([accuracy_row("torchvision", 250.0, 0.4)]))
    (front,) = traces(fig, "front")
    assert list(front.x) == [250.0, 250.0] and list(front.y) == pytest.approx([40.0, 40.0])
    assert fig.layout.xaxis.tickvals  # the log axis has ticks around one value
    nothing = plots.pareto(frame_of([accuracy_row("torchvision", 0, 0, status="error")]))
    assert nothing.layout.meta["empty"] and "no measured" in nothing.layout.meta["message"]
    nan = plots.pareto(frame_of([accuracy_row("torchvision", 250.0, float("nan"))]))
    assert nan.layout.meta["empty"] and "no AP@[.5:.95] value" in nan.layout.meta["message"]


def test_a_setting_without_the_metric_is_left_off_the_figure_and_blank_in_the_table():
    rows = [accuracy_row("torchvision", 100.0, 0.4), accuracy_row("soft_nms", 50.0, float("nan"), params=LINEAR)]
    fig = plots.pareto(frame_of(rows))
    assert [t.meta["impl"] for t in traces(fig, "points")] == ["torchvision"] and fig.layout.meta["without_metric"] == 1
    points = tables.accuracy_points(frame_of(rows))
    assert points.set_index("impl")["front"].to_dict() == {"torchvision": True, "soft_nms": False}
    markdown = tables.render_accuracy_table(points, "markdown")
    assert "| soft_nms | 0.5 |  |" in markdown and "| torchvision | 0.5 | 40.0 |" in markdown


# --- the tables and the commands -------------------------------------------------------

def test_export_csv_has_the_rows_numbers(run_csv, tmp_path):
    out = tmp_path / "table.csv"
    result = invoke("export", run_csv, "--benchmark", "accuracy", "--format", "csv", "-o", out)
    assert result.exit_code == 0, result.output
    assert f"{2 * len(SETTINGS)} settings of 5 implementations" in result.output
    table = pd.read_csv(out, keep_default_na=False, na_values=[""])
    raw = pd.read_csv(run_csv)
    raw = raw[raw["status"] == "ok"]
    assert len(table) == len(raw)
    for _, row in raw.iterrows():
        label = {LINEAR: "soft_nms kernel=linear", GAUSSIAN: "soft_nms kernel=gaussian"}.get(row["params"], row["impl"])
        mine = table[(table["source"] == row["scenario"]) & (table["implementation"] == label)
                     & (table["iou_threshold"] == row["iou_threshold"])]
        assert len(mine) == 1
        for metric in ("ap", "ap50", "ap75", "ar100"):  # in percent, as markdown and LaTeX show them
            assert mine[f"{metric}_pct"].item() == pytest.approx(100 * row[metric])
        assert mine["us_per_image"].item() == row["median_us"] and mine["images"].item() == row["images"]
        assert mine["ar100_crowded_pct"].isna().item() == math.isnan(row["ar100_crowded"])


def test_export_markdown_and_latex_show_the_metrics_in_percent(run_csv):
    result = invoke("export", run_csv, "--benchmark", "accuracy", "--scenario", "scenes-crowd")
    assert result.exit_code == 0, result.output
    text = result.output
    assert "| implementation | IoU | AP | AP50 | AP75 | AR100 | AR100-crowded | µs/image | front |" in text
    assert "| source |" not in text  # one source chosen: no group column
    assert "| hard_fused | 0.5 | 40.2 | 60.2 | 36.2 | 50.2 | 32.2 | 95.0 | yes |" in text
    assert "| torchvision | 0.5 | 40.2 | 60.2 | 36.2 | 50.2 | 32.2 | 310 |  |" in text
    latex = invoke("export", run_csv, "--benchmark", "accuracy", "--format", "latex", "--impl", "soft_nms", "--metric", "ap50")
    assert latex.exit_code == 0, latex.output
    assert latex.output.startswith(r"\begin{table}") and r"soft\_nms kernel=gaussian & 0.5 & 44.7" in latex.output
    assert "Pareto front of AP50" in latex.output and "scenes-sparse" in latex.output


@pytest.mark.parametrize("args, message", [
    (["--benchmark", "accuracy", "--baseline", "torchvision"], "--baseline: not used by an accuracy table"),
    (["--benchmark", "accuracy", "--metric", "map"], "'map' is not one of"),
    (["--benchmark", "accuracy", "--impl", "nothing"], "nothing not in accuracy.csv"),
])
def test_export_bad_input_is_one_clear_message(run_csv, args, message):
    result = invoke("export", run_csv, *args)
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_export_and_plot_say_how_to_make_accuracy_rows(tmp_path):
    from dash_support import CPU_CSV

    result = invoke("export", CPU_CSV, "--metric", "ap")
    assert result.exit_code == 2 and "--metric is for accuracy rows" in result.output
    result = invoke("plot", CPU_CSV, "-o", tmp_path / "fig.png", "--kind", "pareto")
    assert result.exit_code == 2 and "no accuracy rows in h200-host-cpu.csv" in result.output and "nmsbench accuracy" in result.output
    result = invoke("plot", CPU_CSV, "-o", tmp_path / "fig.png", "--metric", "ap")
    assert result.exit_code == 2 and "--metric is for --kind pareto" in result.output


@needs_chromium
def test_plot_pareto_writes_the_figure(run_csv, tmp_path):
    out = tmp_path / "pareto.png"
    result = invoke("plot", run_csv, "-o", out, "--kind", "pareto", "--metric", "ar100_crowded")
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = " ".join(result.output.split())
    assert f"{len(SETTINGS)} settings" in text and "1 error or skipped rows" in text
    assert f"{len(SETTINGS)} settings without a value of AR@100 on crowded images (scenes-sparse)" in text
    svg = tmp_path / "pareto.svg"
    assert invoke("plot", run_csv, "-o", svg, "--kind", "pareto", "--scenario", "scenes-crowd").exit_code == 0
    assert "Pareto front" in svg.read_text() and "hard_fused" in svg.read_text()


# --- end to end: `nmsbench accuracy` on a tiny source, then the views of its CSV ---------

@pytest.fixture(scope="module")
def measured_csv(tmp_path_factory):
    """A real `nmsbench accuracy` run: three implementations x two IoU thresholds on four
    images of two scene sets, on the CPU."""
    out = tmp_path_factory.mktemp("accuracy-run") / "accuracy.csv"
    result = invoke("accuracy", "--images", "4", "--impl", "torchvision,allpairs,soft_nms", "--source",
                    "scenes-crowd,scenes-sparse", "--iou", "0.5,0.7", "--threads", "1", "--out", out)
    assert result.exit_code == 0, result.output
    return out


def test_the_views_of_a_measured_run(measured_csv, tmp_path):
    frame = tables.load_results([measured_csv])
    ok = tables.ok_rows(tables.accuracy_rows(frame))
    assert len(ok) == 12
    fig = plots.pareto(frame)
    drawn = traces(fig, "points")
    assert sum(len(t.x) for t in drawn) == len(ok) and [a.text for a in fig.layout.annotations] == ["scenes-crowd", "scenes-sparse"]
    for source, part in ok.groupby("scenario"):  # the ringed settings are the ones no other setting of the source beats
        panel = next(t for t in traces(fig, "front rings") if t.xaxis == ("x" if source == "scenes-crowd" else "x2"))
        beaten = [any(o.median_us <= r.median_us and o.ap >= r.ap and (o.median_us < r.median_us or o.ap > r.ap)
                      for o in part.itertuples()) for r in part.itertuples()]
        expected = part[[not b for b in beaten]]
        assert sorted(panel.x) == sorted(expected["median_us"]) and sorted(panel.y) == pytest.approx(sorted(100 * expected["ap"]))
    out = tmp_path / "table.csv"
    assert invoke("export", measured_csv, "--benchmark", "accuracy", "--format", "csv", "-o", out).exit_code == 0
    table = pd.read_csv(out).sort_values(["source", "implementation", "iou_threshold"])
    expected = ok.sort_values(["scenario", "impl", "iou_threshold"])
    assert table["ap_pct"].tolist() == pytest.approx((100 * expected["ap"]).tolist())
    assert table["us_per_image"].tolist() == pytest.approx(expected["median_us"].tolist())


@needs_chromium
def test_plot_pareto_of_a_measured_run(measured_csv, tmp_path):
    out = tmp_path / "pareto.pdf"
    result = invoke("plot", measured_csv, "-o", out, "--kind", "pareto", "--metric", "ar100")
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:5] == b"%PDF-" and "12 settings" in result.output and "2 panel(s)" in result.output
