"""The dashboard's default view reads at a glance (issue 41): at most 12 legend entries a
chart, lines named by their implementation (what they share in the title), N ticks at the
swept values and one time tick a decade, no line of one point."""

from __future__ import annotations

import math
import shutil

import pandas as pd
import pytest

pytest.importorskip("streamlit", reason="the dashboard needs streamlit (a GPU box installed with --no-deps may lack it)")
pytest.importorskip("plotly", reason="the dashboard needs plotly")

from dash_support import COMMITTED, CPU_CSV, SAMPLES  # noqa: E402
from nmsbench import plots, tables  # noqa: E402
from nmsbench.dashboard_defaults import DEFAULT_FAMILY, LEGEND_MAX  # noqa: E402
from test_app import curve_figures, figures, start, values  # noqa: E402

CURVES = ("time_vs_n", "speedup_vs_n", "wall_vs_device", "memory_vs_n", "time_vs_overlap")


def legend_entries(spec: dict) -> list[str]:
    """A figure's legend entries, the "hollow marker: noisy" key left out."""
    return [t["name"] for t in spec["data"] if t.get("showlegend", True) and t.get("name") != tables.HOLLOW_NOTE
            and (t.get("meta") or {}).get("role") != "band"]


def traces(fig, role: str = "line") -> list:
    return [t for t in fig.data if (t.meta or {}).get("role") == role]


# --- the default view of the committed shelf -----------------------------------------------

def test_the_default_view_has_at_most_12_legend_entries_a_chart(tmp_path, monkeypatch):
    for path in COMMITTED:  # the reference shelf, no runs of a user: the H200 CUDA reference
        shutil.copy(path, tmp_path)
    at = start(tmp_path, monkeypatch)
    figs = curve_figures(at)
    assert {"time_vs_n", "speedup_vs_n", "time_vs_overlap"} <= set(figs)
    sweeps = tables.ok_rows(tables.select(tables.load_results(COMMITTED), benchmark=["nms"], timer=["wall"],
                                          hardware=at.multiselect(key="filter_hardware").value,
                                          device=at.multiselect(key="filter_device").value))
    family = at.multiselect(key="filter_family").value
    if sweeps["impl"].nunique() > LEGEND_MAX:  # the H200 CUDA reference: ~15 implementations in 6 families
        assert family == [DEFAULT_FAMILY]
        hidden = sorted(set(sweeps["family"]) - {DEFAULT_FAMILY})
        note = next(c.value for c in at.caption if c.value.startswith("Family:"))
        assert all(f in note for f in hidden) and "family filter" in note
    for name in CURVES:
        if name in figs:
            entries = legend_entries(figs[name])
            assert len(entries) <= LEGEND_MAX, (name, entries)
            assert not any(":" in e or " · cuda" in e or "threads" in e for e in entries), (name, entries)
    context = figs["time_vs_n"]["layout"]["title"]["subtitle"]["text"]
    assert context.startswith(f"{at.multiselect(key='filter_device').value[0]} · {at.multiselect(key='filter_hardware').value[0]}")
    # no line of one point, N ticks at swept values, the time axis labelled once a decade
    for name in ("time_vs_n", "speedup_vs_n"):
        for trace in figs[name]["data"]:
            if (trace.get("meta") or {}).get("role") == "line":
                assert len(set(values(trace, "x"))) >= 2, (name, trace["name"])
    xaxis, yaxis = figs["time_vs_n"]["layout"]["xaxis"], figs["time_vs_n"]["layout"]["yaxis"]
    assert set(xaxis["tickvals"]) <= set(sweeps["n"].astype(int)) and len(xaxis["tickvals"]) <= plots.layout.N_TICKS_MAX
    assert all(len(text) <= 4 for text in xaxis["ticktext"]), xaxis["ticktext"]
    ticks = yaxis["tickvals"]
    assert len(ticks) >= 3 and all(math.isclose(b / a, 10) for a, b in zip(ticks, ticks[1:])), ticks


def _many_implementations(folder):
    """A made-up reference run (CPU rows of tests/data renamed): 10 exact greedy and 6
    matrix implementations on one machine, more than a legend holds."""
    raw = pd.read_csv(CPU_CSV)
    raw = raw[raw["impl"].eq("torchvision") & raw["scenario"].eq("chain")]
    runs = [raw.assign(impl=f"{family}_{k}", family=family) for family, count in (("hard", 10), ("matrix", 6))
            for k in range(count)]
    pd.concat(runs, ignore_index=True).to_csv(folder / "many.csv", index=False)


def test_the_family_filter_starts_on_hard_and_then_is_the_users(tmp_path, monkeypatch):
    _many_implementations(tmp_path)
    at = start(tmp_path, monkeypatch)
    assert at.multiselect(key="filter_family").value == ["hard"]
    time = figures(at)["time_vs_n"]
    assert {e.split(" ")[0] for e in legend_entries(time)} == {f"hard_{k}" for k in range(10)}
    assert any("Hidden: matrix" in c.value for c in at.caption)
    at.multiselect(key="filter_family").set_value(["hard", "matrix"]).run()  # the user's choice
    assert len(legend_entries(figures(at)["time_vs_n"])) == 16 and not any("Hidden" in c.value for c in at.caption)
    at.toggle(key="hide_noisy").set_value(True).run()
    assert at.multiselect(key="filter_family").value == ["hard", "matrix"]  # kept, not the default again
    at.multiselect(key="filter_impl").set_value(["matrix_0", "hard_0"]).run()
    assert {e.split(" ")[0] for e in legend_entries(figures(at)["time_vs_n"])} == {"matrix_0", "hard_0"}


# --- the figure builders -------------------------------------------------------------------

def test_n_ticks_are_swept_values_with_short_labels():
    swept = [64 * 2**k for k in range(15)]  # 64 .. 1M
    ticks = plots.layout.n_tick_values(swept)
    assert ticks == [64, 256, 1024, 4096, 16384, 65536, 262144, 1048576]
    assert [plots.layout.n_label(v) for v in ticks] == ["64", "256", "1k", "4k", "16k", "64k", "256k", "1M"]
    assert plots.layout.n_tick_values([100, 200, 500, 1000]) == [100, 200, 500, 1000]  # few: every one
    assert [plots.layout.n_label(v) for v in (1000, 1500, 2000000, 100, 131072)] == ["1k", "1.5k", "2M", "100", "128k"]
    rows = tables.select(tables.load_results(SAMPLES), device=["cpu"], scenario=["clustered"])
    fig = plots.time_vs_n(rows)
    assert list(fig.layout.xaxis.tickvals) == plots.layout.n_tick_values(rows["n"]) and fig.layout.xaxis.tickangle == 0


def test_time_axes_have_one_tick_a_decade_over_a_wide_range():
    assert plots.log_tick_values([30, 150_000]) == [10, 100, 1e3, 1e4, 1e5, 1e6]
    assert plots.log_tick_values([40, 900]) == [20, 50, 100, 200, 500, 1000]  # one decade inside: 1-2-5
    rows = tables.select(tables.load_results(SAMPLES), device=["cpu"], scenario=["clustered"])
    ticks = list(plots.time_vs_n(rows).layout.yaxis.tickvals)
    assert all(math.isclose(b / a, 10) for a, b in zip(ticks, ticks[1:])), ticks


def test_lines_are_named_by_implementation_and_the_title_names_what_they_share():
    sample = tables.load_results(SAMPLES)
    cpu = tables.select(sample, device=["cpu"], timer=["wall"])
    fig = plots.time_vs_n(cpu)
    assert {t.name for t in traces(fig)} == set(cpu["impl"])
    assert fig.layout.title.subtitle.text == "cpu · vm: Intel(R) Xeon(R) Processor (host of NVIDIA H200) · 16 threads · fixed canvas"
    # two devices: the lines of the less common one say so, the title names the common one
    both = tables.select(sample, timer=["wall"], impl=["torchvision", "allpairs"])
    names = {t.name for t in traces(plots.time_vs_n(both))}
    assert names == {"torchvision", "allpairs", "torchvision · cuda"}
    assert plots.time_vs_n(both).layout.title.subtitle.text == "16 threads · fixed canvas · cpu unless labelled"
    # two thread counts of the same machine's CPU: only the other count is named
    fewer = cpu[cpu["impl"].eq("torchvision")].assign(threads=2)
    names = {t.name for t in traces(plots.time_vs_n(pd.concat([cpu, fewer], ignore_index=True)))}
    assert names == set(cpu["impl"]) | {"torchvision · 2 threads"}


def test_lines_of_one_point_are_left_out_and_named():
    sample = tables.select(tables.load_results(SAMPLES), device=["cpu"], timer=["wall"], scenario=["clustered"])
    lone = sample[sample["impl"].eq("allpairs")]
    rows = pd.concat([sample[sample["impl"].ne("allpairs")], lone[lone["n"].eq(lone["n"].max())]], ignore_index=True)
    kept = plots.time_vs_n(rows, min_points=2)
    assert "allpairs" not in {t.name for t in traces(kept)} and kept.layout.meta["single_point"] == ["allpairs (clustered)"]
    assert all(len(set(t.x)) >= 2 for t in traces(kept))
    assert "allpairs" in {t.name for t in traces(plots.time_vs_n(rows))}  # `nmsbench plot` draws what it is given
    speed = plots.speedup_vs_n(rows, "torchvision", min_points=2)
    assert "allpairs" not in {t.name for t in traces(speed)} and speed.layout.meta["single_point"]
    only = plots.time_vs_n(lone[lone["n"].eq(lone["n"].max())], min_points=2)  # dots only: drawn, nothing beside them
    assert [t.name for t in traces(only)] == ["allpairs"] and "single_point" not in only.layout.meta
    at_n = tables.select(tables.load_results(SAMPLES), device=["cpu"], timer=["wall"], n=[1024])
    one_set = pd.concat([at_n[at_n["impl"].ne("allpairs")],
                         at_n[at_n["impl"].eq("allpairs") & at_n["scenario"].eq("chain")].head(1)], ignore_index=True)
    overlap = plots.time_vs_overlap(one_set, 1024, min_points=2)
    assert "allpairs" not in {t.name for t in traces(overlap)} and overlap.layout.meta["single_point"] == ["allpairs"]


def test_the_rows_not_plotted_are_listed_as_text_under_the_curves(tmp_path, monkeypatch):
    """Skipped and error rows of the selection: one line each (implementation, device,
    reason, count) in an expander, as text (a table there would load the browser's table
    component before the first chart)."""
    import re

    for path in COMMITTED:
        shutil.copy(path, tmp_path)
    at = start(tmp_path, monkeypatch)
    expander = next(e for e in at.expander if "not plotted (error or skipped)" in e.label)
    total = int(expander.label.split()[0])
    lines = [m.value for m in expander.markdown][0].splitlines()
    counts = [int(re.search(r"\((\d+) rows?\)$", line).group(1)) for line in lines]
    assert sum(counts) == total and all(line.startswith("- `") for line in lines)
    assert not expander.dataframe
