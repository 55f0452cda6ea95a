"""The post-processing pipeline's figures and tables (``nmsbench pipeline`` rows in, plotly
figures and per-image tables out), on the frozen CPU run in tests/data."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

go = pytest.importorskip("plotly.graph_objects", reason="figures need plotly (a GPU box installed with --no-deps may lack it)")

from dash_support import CPU_CSV, PIPELINE_CSV, with_made_up_cuda_rows  # noqa: E402
from nmsbench import plots, tables  # noqa: E402

PIPELINES = {"numpy", "torch_batched_nms", "torch+bitmask_two_phase", "torch+allpairs"}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return tables.load_results([PIPELINE_CSV])


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    """The CSV as written, for the expected numbers."""
    return pd.read_csv(PIPELINE_CSV)


def csv_us_per_image(raw, impl, scenario, conf, batch, stage, device="cpu") -> float:
    row = raw[(raw.impl == impl) & (raw.scenario == scenario) & np.isclose(raw.overlap, conf) & (raw.batch == batch)
              & (raw.stage == stage) & (raw.device == device) & (raw.timer == "wall")]
    assert len(row) == 1
    return float(row["median_us"].iloc[0]) / batch


def lines(fig) -> list:
    return [t for t in fig.data if (t.meta or {}).get("role") == "line"]


# --- tables -----------------------------------------------------------------------------

def test_per_image_divides_the_per_call_median_by_the_batch(frame, raw):
    rows = tables.per_image(frame)
    assert len(rows) == len(raw) and set(rows["benchmark"]) == {"pipeline"}
    assert np.allclose(rows["us_per_image"], rows["median_us"] / rows["batch"])
    assert np.allclose(rows["iqr_us_per_image"], rows["iqr_us"] / rows["batch"])
    from nmsbench.pipeline_bench import per_image_table  # what `nmsbench pipeline` prints: the same numbers

    printed = per_image_table(raw).set_index(["scenario", "impl", "batch", "stage", "overlap"])["us_per_image"]
    mine = rows.set_index(["scenario", "impl", "batch", "stage", "overlap"])["us_per_image"]
    assert np.allclose(mine.sort_index().to_numpy(), printed.sort_index().to_numpy())
    assert tables.per_image(tables.load_results([CPU_CSV])).empty  # sweeps have no time per image


def test_pipeline_table_speedup_is_numpy_over_each(frame, raw):
    table = tables.pipeline_table(frame)
    assert table.attrs["groups"] == ["scenario", "overlap"] and table.attrs["stages"] == ["total"]
    assert table.attrs["impls"][0] == "numpy" and set(table["impl"]) == PIPELINES
    for _, row in table.iterrows():
        own = csv_us_per_image(raw, row["impl"], row["scenario"], row["overlap"], row["batch"], "total")
        ref = csv_us_per_image(raw, "numpy", row["scenario"], row["overlap"], row["batch"], "total")
        assert row["us_per_image"] == pytest.approx(own) and row["speedup"] == pytest.approx(ref / own)
    assert (table[table["impl"] == "numpy"]["speedup"] == 1).all()
    staged = tables.pipeline_table(tables.select(frame, scenario=["real"], overlap=[0.25]), stages=None)
    assert staged.attrs["groups"] == ["stage"] and list(dict.fromkeys(staged["stage"])) == ["decode", "nms", "total"]


def test_cuda_rows_compare_with_the_cpu_reference(frame):
    both = with_made_up_cuda_rows(frame, factor=4.0)
    rows = tables.with_pipeline_speedup(both)
    cuda = rows[rows["device"] == "cuda"]
    assert set(cuda["baseline_device"]) == {"cpu"}  # numpy runs on the CPU only
    cpu = rows[rows["device"] == "cpu"].set_index(["impl", "scenario", "overlap", "batch", "stage"])["speedup"]
    twin = cuda.set_index(["impl", "scenario", "overlap", "batch", "stage"])["speedup"]
    assert np.allclose(twin.to_numpy(), 4 * cpu.loc[twin.index].to_numpy())
    # another baseline that runs on both devices compares within each device
    rows = tables.with_pipeline_speedup(both, "torch_batched_nms")
    assert set(rows["baseline_device"]) == {"cpu", "cuda"} and (rows["baseline_device"] == rows["device"]).all()
    table = tables.pipeline_table(both)
    assert table.attrs["groups"][0] == "device"
    text = tables.render_pipeline_table(table, "markdown")
    assert "| device | source | conf | pipeline | B=1 | B=8 |" in text and "| cuda | real | 0.25 | torch+allpairs |" in text


def test_two_gpu_machines_under_one_host_name_keep_their_own_reference(frame):
    """GPU machines share host names ("vm"): each machine's cuda rows compare with its own
    CPU reference (its CPU rows name its GPU), never with the other's or a blend of both."""
    first = with_made_up_cuda_rows(frame, factor=4.0)
    second = with_made_up_cuda_rows(frame, factor=2.0).assign(gpu="another made-up GPU")
    second["median_us"] = second["median_us"] * 3  # a slower machine throughout: the same ratios
    rows = tables.with_pipeline_speedup(pd.concat([first, second], ignore_index=True))
    index = ["impl", "scenario", "overlap", "batch", "stage"]
    for gpu, factor in (("made-up GPU", 4.0), ("another made-up GPU", 2.0)):
        own = rows[rows["gpu"] == gpu]
        cpu = own[own["device"] == "cpu"].set_index(index)["speedup"]
        cuda = own[own["device"] == "cuda"].set_index(index)["speedup"]
        assert len(own) == len(first) - len(first[first["benchmark"] != "pipeline"])
        assert np.allclose(cuda.to_numpy(), factor * cpu.loc[cuda.index].to_numpy()), gpu


def test_device_timer_rows_have_no_cpu_twin(frame):
    both = with_made_up_cuda_rows(frame)
    device = both[both["device"] == "cuda"].assign(timer="device")
    rows = tables.with_pipeline_speedup(pd.concat([both, device], ignore_index=True))
    assert rows[rows["timer"] == "device"]["speedup"].isna().all()


def test_rendered_pipeline_tables(frame):
    table = tables.pipeline_table(tables.select(frame, overlap=[0.25]))
    markdown = tables.render_pipeline_table(table, "markdown")
    assert markdown.startswith("Median time per image in µs") and "speedup vs numpy" in markdown
    assert "| source | pipeline | B=1 | B=8 |" in markdown and "| real | numpy | " in markdown and "(1.00×)" in markdown
    latex = tables.render_pipeline_table(table, "latex")
    assert latex.startswith(r"\begin{table}") and r"torch+bitmask\_two\_phase" in latex and r"\textmu s" in latex
    csv = pd.read_csv(__import__("io").StringIO(tables.render_pipeline_table(table, "csv")))
    assert list(csv.columns) == ["source", "pipeline", "B=1 us_per_image", "B=1 noisy", "B=1 speedup", "B=8 us_per_image",
                                 "B=8 noisy", "B=8 speedup"]
    assert csv["pipeline"].iloc[0] == "numpy" and len(csv) == 8


def test_agreement_is_once_per_case_with_the_csv_numbers(frame, raw):
    agreement = tables.pipeline_agreement(frame)
    assert len(agreement) == len(raw) // 3  # one row per case, not per stage
    assert list(agreement.columns) == ["source", "conf", "batch", "pipeline", "device", "candidates", "kept", "ref_kept",
                                       "jaccard", "extra", "missing", "mismatched"]
    allpairs = agreement[(agreement["pipeline"] == "torch+allpairs") & np.isclose(agreement["conf"], 0.001)]
    assert (allpairs["extra"] + allpairs["missing"]).gt(0).all() and allpairs["jaccard"].lt(1).all()
    hard = agreement[agreement["pipeline"] != "torch+allpairs"]
    assert hard["jaccard"].eq(1).all() and hard["mismatched"].eq(0).all()
    for _, row in agreement.iterrows():
        source = raw[(raw.impl == row["pipeline"]) & (raw.scenario == row["source"]) & np.isclose(raw.overlap, row["conf"])
                     & (raw.batch == row["batch"])]
        assert set(source["candidates"]) == {row["candidates"]} and set(source["kept"]) == {row["kept"]}


# --- figures ----------------------------------------------------------------------------

def test_time_per_image_is_the_csv_over_the_batch_one_line_per_pipeline(frame, raw):
    fig = plots.pipeline_time_per_image(tables.select(frame, overlap=[0.25]))
    assert fig.layout.meta["figure"] == "pipeline_time_per_image" and fig.layout.meta["stage"] == "total"
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert [a.text for a in fig.layout.annotations] == ["real", "synthetic"]  # one panel per source
    assert {t.name for t in lines(fig)} == PIPELINES and len(lines(fig)) == 2 * len(PIPELINES)
    assert list(fig.layout.xaxis.tickvals) == [1, 8]
    for trace in lines(fig):
        scenario = "real" if trace.xaxis == "x" else "synthetic"
        expected = [csv_us_per_image(raw, trace.meta["impl"], scenario, 0.25, b, "total") for b in trace.x]
        assert list(trace.x) == [1, 8] and np.allclose(trace.y, expected)
    nms = plots.pipeline_time_per_image(tables.select(frame, overlap=[0.25], scenario=["real"]), stage="nms")
    numpy_line = next(t for t in lines(nms) if t.name == "numpy")
    assert np.allclose(numpy_line.y, [csv_us_per_image(raw, "numpy", "real", 0.25, b, "nms") for b in (1, 8)])


def test_time_per_image_panels_by_threshold_when_several(frame):
    fig = plots.pipeline_time_per_image(frame)
    assert [a.text for a in fig.layout.annotations] == ["real · conf 0.001", "real · conf 0.25", "synthetic · conf 0.001",
                                                        "synthetic · conf 0.25"]
    assert "xaxis4" in fig.layout and "xaxis5" not in fig.layout  # 2 x 2, not 3 + 1


def test_cpu_and_gpu_lines_are_told_apart(frame):
    fig = plots.pipeline_time_per_image(tables.select(with_made_up_cuda_rows(frame), overlap=[0.25], scenario=["real"]))
    names = {t.name: t for t in lines(fig)}
    assert set(names) == {"numpy · cpu"} | {f"{p} · {d}" for p in PIPELINES - {"numpy"} for d in ("cpu", "cuda")}
    assert names["torch+allpairs · cpu"].line.dash == "solid" and names["torch+allpairs · cuda"].line.dash == "dash"
    assert names["torch+allpairs · cpu"].line.color == names["torch+allpairs · cuda"].line.color == plots.PINNED_COLORS["allpairs"]
    assert names["numpy · cpu"].line.color == plots.REFERENCE_COLOR


def test_stage_bars_stack_decode_and_nms_and_mark_the_total(frame, raw):
    fig = plots.pipeline_stage_bars(tables.select(frame, overlap=[0.001]))
    assert fig.layout.barmode == "stack" and fig.layout.meta["figure"] == "pipeline_stages"
    assert "timed on their own" in fig.layout.meta["note"]  # the stages are measured separately, and say so
    names = {t.name for t in fig.data if t.showlegend}
    assert names == {"decode (timed alone)", "nms (timed alone)", "total (end to end)"}
    assert [a.text for a in fig.layout.annotations] == ["real", "synthetic"]
    for scenario, axis in (("real", "x"), ("synthetic", "x2")):
        parts = {t.meta["role"] + (t.meta.get("stage") or ""): t for t in fig.data if t.xaxis == axis}
        decode, nms, total = parts["stagedecode"], parts["stagenms"], parts["total"]
        assert decode.orientation == "h" and list(decode.y[0]) == list(total.y[0])
        cases = list(zip(decode.y[0], decode.y[1]))
        assert cases[-1] == ("numpy", "B=1") and len(cases) == 2 * len(PIPELINES)  # the reference on top
        for (impl, batch), d, n, t in zip(cases, decode.x, nms.x, total.x):
            b = int(batch[2:])
            assert d == pytest.approx(csv_us_per_image(raw, impl, scenario, 0.001, b, "decode"))
            assert n == pytest.approx(csv_us_per_image(raw, impl, scenario, 0.001, b, "nms"))
            assert t == pytest.approx(csv_us_per_image(raw, impl, scenario, 0.001, b, "total"))
            assert 1 / 3 < (d + n) / t < 3  # the two stages are the pipeline, up to timing noise
        assert fig.layout[f"xaxis{axis[1:]}"].range[1] >= max(max(total.x), max(np.add(decode.x, nms.x)))


def test_stage_bars_panel_by_device_when_both(frame):
    fig = plots.pipeline_stage_bars(tables.select(with_made_up_cuda_rows(frame), overlap=[0.25]))
    assert [a.text for a in fig.layout.annotations] == ["real · cpu", "real · cuda", "synthetic · cpu", "synthetic · cuda"]


def test_cpu_vs_gpu_ratio_only_where_both_devices_exist(frame):
    assert plots.pipeline_cpu_vs_gpu(frame) is None
    fig = plots.pipeline_cpu_vs_gpu(tables.select(with_made_up_cuda_rows(frame, factor=4.0), overlap=[0.25]))
    assert fig.layout.meta["figure"] == "pipeline_cpu_vs_gpu" and fig.layout.yaxis.type == "log"
    assert {t.name for t in lines(fig)} == PIPELINES - {"numpy"}  # numpy runs on the CPU only
    for trace in lines(fig):
        assert list(trace.x) == [1, 8] and np.allclose(trace.y, 4.0)


def test_empty_selections_explain_themselves(frame):
    fig = plots.pipeline_time_per_image(frame.iloc[0:0])
    assert fig.layout.meta["empty"] and "No measured pipeline rows" in fig.layout.meta["message"]
    assert plots.pipeline_stage_bars(tables.load_results([CPU_CSV])).layout.meta["empty"]


def test_pipeline_colours_follow_the_implementation():
    colors = plots.pipeline_color_map(["numpy", "torch+allpairs", "torch_batched_nms", "torch+torchvision", "mine"])
    assert colors["numpy"] == plots.REFERENCE_COLOR and colors["torch+allpairs"] == plots.PINNED_COLORS["allpairs"]
    assert colors["torch+torchvision"] == plots.PINNED_COLORS["torchvision"]
    assert len(set(colors.values())) == len(colors)
    # the shelf's pipelines, more than the extra colours: each its own colour
    shelf = ["numpy", "batched_op", "batched_op_graph", "cupy_seed_kernels", "onnxruntime_nms",
             "torchvision_batched_nms", "ultralytics_loop", "torch+hard_fused"]
    colors = plots.pipeline_color_map(shelf)
    assert len(set(colors.values())) == len(shelf) and colors == plots.pipeline_color_map(list(reversed(shelf)))


@pytest.mark.parametrize("lo, hi", [(290, 814), (100, 500), (1.2, 1.9), (3, 3000), (1, 1e6)])
def test_log_ticks_show_at_least_two_labels_inside(lo, hi):
    ticks = plots.log_tick_values([lo, hi])
    assert sum(lo <= t <= hi for t in ticks) >= 2 or math.log10(hi / lo) < 0.2
    assert ticks[0] <= lo and ticks[-1] >= hi
