"""``nmsbench plot`` and ``nmsbench export``: paper figures and tables from results CSVs."""

from __future__ import annotations

import io
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

pytest.importorskip("plotly", reason="figures need plotly (a GPU box installed with --no-deps may lack it)")

from dash_support import CPU_CSV, CUDA_CSV, PIPELINE_CSV, accuracy_csv, cpu_results, pipeline_results, small_run  # noqa: F401
from dash_support import with_made_up_cuda_rows  # noqa: F401
from nmsbench.cli import main

HAVE_CHROMIUM = any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome"))
needs_chromium = pytest.mark.skipif(
    not HAVE_CHROMIUM and not os.environ.get("CI"),
    reason="static export (kaleido) needs Chromium: apt-get install chromium (CI installs it and runs these)",
)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def export(*args):
    result = invoke("export", *args)
    assert result.exit_code == 0, result.output
    return result.output


# --- export ---------------------------------------------------------------------------

def test_export_csv_equals_the_results(tmp_path):
    out = tmp_path / "table.csv"
    result = invoke("export", CPU_CSV, "--format", "csv", "--scenario", "crowd", "-o", out)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    raw = pd.read_csv(CPU_CSV)
    raw = raw[raw["scenario"] == "crowd"]
    assert table["n"].tolist() == sorted(raw["n"].unique())
    impls = sorted(raw["impl"].unique())
    order = ["torchvision"] + [i for i in impls if i != "torchvision"]
    assert [c for c in table.columns if c.endswith("median_us")] == [f"{i} median_us" for i in order]
    for _, row in raw.iterrows():
        base = raw[(raw["impl"] == "torchvision") & (raw["n"] == row["n"])]["median_us"].item()
        mine = table[table["n"] == row["n"]]
        assert mine[f"{row['impl']} median_us"].item() == row["median_us"]
        assert mine[f"{row['impl']} speedup"].item() == pytest.approx(base / row["median_us"])


def test_export_markdown_and_latex_show_the_csv_numbers(cpu_results):
    raw = pd.read_csv(cpu_results)
    markdown = export(cpu_results, "--scenario", "chain", "--impl", "allpairs", "--baseline", "torchvision")
    assert "speedup vs torchvision" in markdown and "| N | allpairs |" in markdown
    for n in (16, 32, 64):
        mine = raw[(raw.impl == "allpairs") & (raw.scenario == "chain") & (raw.n == n)]
        ap = mine["median_us"].item()
        tv = raw[(raw.impl == "torchvision") & (raw.scenario == "chain") & (raw.n == n)]["median_us"].item()
        from nmsbench.tables import format_us, noisy_mask
        mark = "†" if noisy_mask(mine).item() else ""
        assert f"| {n} | {format_us(ap)}{mark} ({tv / ap:.2f}×) |" in markdown
    latex = export(cpu_results, "--format", "latex")
    assert latex.startswith(r"\begin{table}") and r"matrix\_naive" in latex and "scenario" in latex


def test_export_splits_by_commit_only_where_one_column_has_several(tmp_path):
    """A run resumed at a later commit for another implementation is one table; the same
    implementation measured at two commits is two groups (never one median of both)."""
    raw = pd.read_csv(CPU_CSV)
    raw = raw[raw["scenario"] == "crowd"]
    resumed = raw.assign(git_commit=np.where(raw["impl"] == "torchvision", "a" * 40, "b" * 40))
    resumed.to_csv(tmp_path / "resumed.csv", index=False)
    text = export(tmp_path / "resumed.csv")
    assert "commit" not in text and "| N |" in text
    twice = pd.concat([raw.assign(git_commit="a" * 40), raw.assign(git_commit="b" * 40)])
    twice.to_csv(tmp_path / "twice.csv", index=False)
    text = export(tmp_path / "twice.csv")
    assert "| commit | N |" in text and text.count("aaaa") >= 1 and text.count("bbbb") >= 1


def test_export_groups_devices_of_several_files():
    text = export(CPU_CSV, CUDA_CSV, "--scenario", "crowd")
    assert "| device | N |" in text and "| cuda | 64 |" in text and "| cpu | 64 |" in text


@pytest.mark.parametrize("args, message", [
    (["missing.csv"], "does not exist"),
    ([CPU_CSV, "--scenario", "nope"], "nope not in h200-host-cpu.csv; it has: chain, clustered, crowd"),
    ([CPU_CSV, "--impl", "fastest"], "fastest not in"),
    ([CPU_CSV, "--baseline", "nonesuch"], "nonesuch not in"),
    ([CPU_CSV, "--device", "cuda"], "cuda not in"),
    ([CPU_CSV, "--timer", "device"], "device not in"),
    ([CUDA_CSV, "--baseline", "allpairs"], "allpairs has no measured rows"),
    ([CUDA_CSV, "--impl", "allpairs"], "no measured rows of the chosen implementations"),
])
def test_export_bad_input_is_one_clear_message(args, message):
    result = invoke("export", *args)
    assert result.exit_code == 2  # bad input, whatever is wrong with it
    assert message in result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)


def test_export_takes_sweep_rows_unless_pipeline_rows_are_asked_for(cpu_results, pipeline_results):
    sweeps = export(cpu_results, pipeline_results)
    assert "| torchvision |" in sweeps.replace("| N | torchvision |", "| torchvision |") and "numpy" not in sweeps
    pipes = export(cpu_results, pipeline_results, "--benchmark", "pipeline")  # baseline: numpy, the reference
    assert "| pipeline | B=1 |" in pipes and "| numpy | " in pipes and "| torch_batched_nms | " in pipes
    assert "speedup vs numpy" in pipes and "stage total" in pipes
    result = invoke("export", cpu_results, "--benchmark", "training")
    assert result.exit_code == 2 and "training not in" in result.output


def test_export_pipeline_rows_as_time_per_image(tmp_path):
    out = tmp_path / "pipeline.csv"
    result = invoke("export", PIPELINE_CSV, "--format", "csv", "-o", out)  # a file of pipeline rows only: no --benchmark needed
    assert result.exit_code == 0, result.output
    assert "4 pipelines x 2 batch sizes" in result.output
    table = pd.read_csv(out)
    assert list(table.columns) == ["source", "conf", "pipeline", "B=1 us_per_image", "B=1 noisy", "B=1 speedup",
                                   "B=8 us_per_image", "B=8 noisy", "B=8 speedup"]
    raw = pd.read_csv(PIPELINE_CSV)
    raw = raw[(raw.stage == "total") & (raw.timer == "wall")]
    for _, row in table.iterrows():
        for b in (1, 8):
            case = raw[(raw.scenario == row["source"]) & np.isclose(raw.overlap, row["conf"]) & (raw.batch == b)]
            own = case[case.impl == row["pipeline"]]["median_us"].item() / b
            ref = case[case.impl == "numpy"]["median_us"].item() / b
            assert row[f"B={b} us_per_image"] == pytest.approx(own) and row[f"B={b} speedup"] == pytest.approx(ref / own)


def test_export_pipeline_stages_and_baseline():
    text = export(PIPELINE_CSV, "--scenario", "real", "--stage", "decode,nms", "--impl", "torch+allpairs",
                  "--baseline", "torch_batched_nms")
    assert "| conf | stage | pipeline | B=1 | B=8 |" in text and "speedup vs torch_batched_nms" in text
    assert "| 0.25 | decode | torch+allpairs |" in text and "| total |" not in text and "numpy" not in text
    latex = export(PIPELINE_CSV, "--format", "latex", "--scenario", "synthetic")
    assert r"torch+bitmask\_two\_phase" in latex and r"\textmu s per image" not in latex and "per image" in latex


def test_export_compares_cuda_rows_with_the_cpu_reference(tmp_path):
    both = tmp_path / "both.csv"
    with_made_up_cuda_rows(pd.read_csv(PIPELINE_CSV), factor=4.0).to_csv(both, index=False)  # a known ratio, not a measurement
    text = export(both, "--scenario", "real", "--device", "cuda")
    assert "cuda rows compare with it on the CPU" in text and "| conf | pipeline | B=1 | B=8 |" in text
    cpu = export(both, "--scenario", "real", "--device", "cpu", "--format", "csv")
    cuda = export(both, "--scenario", "real", "--device", "cuda", "--format", "csv")
    cpu, cuda = (pd.read_csv(io.StringIO(t)).set_index(["conf", "pipeline"]) for t in (cpu, cuda))
    assert np.allclose(cuda["B=8 speedup"], 4 * cpu.loc[cuda.index, "B=8 speedup"])


def _noisy_pipeline_csv(tmp_path):
    """PIPELINE_CSV with its rows clean but for one pipeline's wall-timer totals on one case, marked noisy."""
    raw = pd.read_csv(PIPELINE_CSV)
    raw["noisy"], raw["noise"] = False, ""
    case = (raw.stage == "total") & (raw.timer == "wall") & (raw.scenario == "real") & np.isclose(raw.overlap, 0.25)
    marked = raw.index[case & (raw.impl == "torch+allpairs")]  # B=1 and B=8 of one pipeline
    raw.loc[marked, "noisy"] = True
    raw.loc[marked, "noise"] = "the host ran slow in 5 of 5 rounds"
    path = tmp_path / "pipeline.csv"
    raw.to_csv(path, index=False)
    return path, len(marked)


def test_export_pipeline_marks_the_noisy_cells(tmp_path):
    path, marked = _noisy_pipeline_csv(tmp_path)
    markdown = export(path)
    noisy = [line for line in markdown.splitlines() if "†" in line and line.startswith("| ")]
    assert len(noisy) == 1 and noisy[0].startswith("| real | 0.25 | torch+allpairs |") and noisy[0].count("†") == marked
    assert f"† noisy: {marked} cells (slow host {marked})" in markdown
    latex = export(path, "--format", "latex")
    assert "†" not in latex and latex.count(r"\textsuperscript{\dag}") == marked + 1  # the cells and the footnote
    assert rf"\textsuperscript{{\dag}} noisy: {marked} cells" in latex.split(r"\caption{")[1]
    table = pd.read_csv(io.StringIO(export(path, "--format", "csv")))
    flags = table.set_index(["source", "conf", "pipeline"])[["B=1 noisy", "B=8 noisy"]]
    assert flags.loc[("real", 0.25, "torch+allpairs")].tolist() == [True, True] and flags.to_numpy().sum() == marked


def _noisy_accuracy_csv(tmp_path):
    """A small accuracy run whose torchvision rows on scenes-crowd are noisy, the others clean."""
    rows = small_run()
    for row in rows:
        noisy = row["impl"] == "torchvision" and row["scenario"] == "scenes-crowd"
        row.update(noisy=noisy, noise="IQR 12% of the median" if noisy else "")
    path = tmp_path / "accuracy.csv"
    path.write_bytes(accuracy_csv(rows))
    return path, sum(1 for r in rows if r["noisy"] and r["status"] == "ok")


def test_export_accuracy_marks_the_noisy_times_and_names_the_ap_unit(tmp_path):
    path, marked = _noisy_accuracy_csv(tmp_path)
    markdown = export(path, "--benchmark", "accuracy")
    noisy = [line for line in markdown.splitlines() if "†" in line and line.startswith("| ")]
    assert marked and len(noisy) == marked and all(line.startswith("| scenes-crowd | torchvision |") for line in noisy)
    assert f"† noisy: {marked} settings (wide IQR {marked})" in markdown
    latex = export(path, "--benchmark", "accuracy", "--format", "latex")
    assert "†" not in latex and latex.count(r"\textsuperscript{\dag}") == marked + 1  # the cells and the footnote
    table = pd.read_csv(io.StringIO(export(path, "--benchmark", "accuracy", "--format", "csv")))
    assert {"ap_pct", "ap50_pct", "ap75_pct", "ar100_pct", "ar100_crowded_pct"} <= set(table.columns)
    assert "ap" not in table.columns and table["ap_pct"].max() > 1  # percent, the unit markdown and LaTeX show
    shown = {tuple(c.strip() for c in line.split("|")[1:4]): line.split("|")[4].strip()
             for line in markdown.splitlines() if line.startswith("| scenes-")}
    for _, row in table.iterrows():  # the same number markdown shows, to one decimal
        assert shown[(row["source"], row["implementation"], f"{row['iou_threshold']:g}")] == f"{row['ap_pct']:.1f}"
    noisy_rows = table[table["noisy"]]
    assert len(noisy_rows) == marked and set(noisy_rows["implementation"]) == {"torchvision"}


@pytest.mark.parametrize("args, message", [
    ([PIPELINE_CSV, "--stage", "postprocess"], "postprocess: choose from decode, nms, total"),
    ([CPU_CSV, "--stage", "nms"], "--stage picks stages of pipeline rows"),
    ([PIPELINE_CSV, "--baseline", "torchvision"], "torchvision not in pipeline-devbox-cpu.csv"),
])
def test_export_pipeline_bad_input_is_one_clear_message(args, message):
    result = invoke("export", *args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_export_foreign_csv(tmp_path):
    foreign = tmp_path / "people.csv"
    foreign.write_text("name,age\nada,36\n")
    result = invoke("export", foreign)
    assert result.exit_code == 2 and "people.csv: not an nmsbench results file (missing columns: schema_version" in result.output
    garbage = tmp_path / "garbage.csv"
    garbage.write_bytes(b"\x00\xff\xfe binary")
    result = invoke("export", garbage)
    assert result.exit_code == 2 and "garbage.csv" in result.output and isinstance(result.exception, SystemExit)


def test_export_all_error_rows_says_so(tmp_path):
    frame = pd.read_csv(CPU_CSV)
    frame["status"] = "error"
    path = tmp_path / "failed.csv"
    frame.to_csv(path, index=False)
    result = invoke("export", path)
    assert result.exit_code == 2 and "no measured (status ok) rows" in result.output and f"{len(frame)} error" in result.output


# --- plot -----------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["missing.csv", "-o", "x.pdf"], "does not exist"),
    ([CPU_CSV, "-o", "fig.jpg"], "choose a .pdf, .png or .svg"),
    ([CPU_CSV, "-o", "fig.pdf", "--scenario", "nope"], "nope not in"),
    ([CPU_CSV, "-o", "fig.pdf", "--impl", "nope"], "nope not in"),
    ([CPU_CSV, "-o", "fig.pdf", "--baseline", "nope"], "nope not in"),
    ([CPU_CSV, "-o", "fig.pdf", "--kind", "memory"], "no peak-memory values"),
    ([CPU_CSV, "-o", "fig.pdf", "--kind", "timers"], "no GPU-timer rows to plot"),
    ([CPU_CSV, "-o", "fig.pdf", "--kind", "overlap", "--at-n", "100"], "no measured rows at N = 100"),
    ([CUDA_CSV, "-o", "fig.pdf", "--impl", "allpairs"], "no measured rows of the chosen implementations"),
])
def test_plot_bad_input_is_one_clear_message(args, message, tmp_path):
    args = [tmp_path / a if str(a).startswith("fig.") else a for a in args]
    result = invoke("plot", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output, result.output
    assert isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("args, message", [
    ([PIPELINE_CSV, "-o", "fig.pdf", "--kind", "pipeline-devices"], "no pipeline with wall-timer total rows on both cpu and cuda"),
    ([CPU_CSV, "-o", "fig.pdf", "--kind", "pipeline"], "no pipeline rows in h200-host-cpu.csv (benchmark: nms); `nmsbench pipeline"),
    ([PIPELINE_CSV, "-o", "fig.pdf", "--kind", "pipeline", "--stage", "nms,total"], "--kind pipeline draws one stage"),
    ([PIPELINE_CSV, "-o", "fig.pdf", "--kind", "pipeline", "--benchmark", "nms"], "leave --benchmark out"),
    ([PIPELINE_CSV, "-o", "fig.pdf", "--kind", "time", "--stage", "nms"], "--stage is for the pipeline kinds"),
    ([PIPELINE_CSV, "-o", "fig.pdf", "--kind", "pipeline-stages", "--impl", "torch+magic"], "torch+magic not in"),
])
def test_plot_pipeline_bad_input_is_one_clear_message(args, message, tmp_path):
    args = [tmp_path / a if str(a).startswith("fig.") else a for a in args]
    result = invoke("plot", *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert isinstance(result.exception, SystemExit)


@needs_chromium
def test_plot_writes_the_pipeline_figures(tmp_path):
    png, svg, pdf = tmp_path / "per-image.png", tmp_path / "stages.svg", tmp_path / "devices.pdf"
    result = invoke("plot", PIPELINE_CSV, "-o", png, "--kind", "pipeline", "--scale", "1")
    assert result.exit_code == 0, result.output
    assert "pipeline, 4 pipelines, 2 source(s), batch sizes 1, 8" in result.output
    from PIL import Image

    with Image.open(io.BytesIO(png.read_bytes())) as image:
        assert image.size[0] == 1100 and image.size[1] >= 600  # four panels: source x threshold
        pixels = np.asarray(image.convert("RGB").resize((64, 64))).reshape(-1, 3)
        assert len(np.unique(pixels, axis=0)) > 20
    result = invoke("plot", PIPELINE_CSV, "-o", svg, "--kind", "pipeline-stages", "--scenario", "real")
    assert result.exit_code == 0, result.output
    text = svg.read_text()
    assert text.lstrip().startswith("<svg") and "timed alone" in text and "end to end" in text
    both = tmp_path / "both.csv"
    with_made_up_cuda_rows(pd.read_csv(PIPELINE_CSV)).to_csv(both, index=False)  # a known ratio, not a measurement
    result = invoke("plot", both, "-o", pdf, "--kind", "pipeline-devices")
    assert result.exit_code == 0, result.output
    assert pdf.read_bytes().startswith(b"%PDF-")


def test_plot_foreign_csv(tmp_path):
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("x,y\n1,2\n")
    result = invoke("plot", foreign, "-o", tmp_path / "f.pdf")
    assert result.exit_code == 2 and "foreign.csv: not an nmsbench results file" in result.output


@needs_chromium
def test_plot_writes_pdf_png_and_svg(tmp_path, cpu_results):
    pdf, png, svg = tmp_path / "fig.pdf", tmp_path / "fig.png", tmp_path / "overlap.svg"
    result = invoke("plot", CPU_CSV, "-o", pdf, "--scenario", "clustered,chain", "--impl", "allpairs,bitmask_classic")
    assert result.exit_code == 0, result.output
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-") and b"%%EOF" in data[-1024:] and len(data) > 5_000
    result = invoke("plot", CPU_CSV, CUDA_CSV, "-o", png, "--kind", "speedup", "--scenario", "crowd", "--scale", "1")
    assert result.exit_code == 0, result.output
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (1100, int(image.size[1])) and image.size[1] >= 400
        pixels = np.asarray(image.convert("RGB").resize((64, 64))).reshape(-1, 3)
        assert len(np.unique(pixels, axis=0)) > 20  # not a blank page
    result = invoke("plot", cpu_results, "-o", svg, "--kind", "overlap")
    assert result.exit_code == 0, result.output
    assert svg.read_text().lstrip().startswith("<svg")
