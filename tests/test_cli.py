"""The command line, driven through click's CliRunner."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

import pandas as pd
import pytest
import torch
import torchvision
from click.testing import CliRunner

from nmsbench import NMSResult, register
from nmsbench.cli import main, parse_sizes
from nmsbench.engine.axes import Axis, check_axes, ints, names
from nmsbench.registry import unregister
from nmsbench.results import COLUMNS

BUILTIN = {"torchvision", "matrix_naive", "matrix_fused", "allpairs", "bitmask_two_phase", "bitmask_classic"}


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    "text, sizes",
    [
        ("64..8192", [64, 128, 256, 512, 1024, 2048, 4096, 8192]),
        ("64..100", [64, 100]),  # the upper bound ends the range, on the doubling grid or not
        ("100..1000", [100, 200, 400, 800, 1000]),
        ("100,1000", [100, 1000]),
        ("64..256, 1000", [64, 128, 256, 1000]),
        ("5", [5]),
        ("3..24,12", [3, 6, 12, 24]),
    ],
)
def test_parse_sizes(text, sizes):
    assert parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["", "abc", "0..8", "256..64", "64..", "1.5", "-4", "0", "8,0"])
def test_parse_sizes_rejects(text):
    with pytest.raises(ValueError):
        parse_sizes(text)


def test_list_shows_every_implementation():
    result = run("list")
    assert result.exit_code == 0
    for name in BUILTIN:
        assert name in result.output


def test_list_json_reports_availability():
    rows = json.loads(run("list", "--json").output)
    assert {r["name"] for r in rows} >= BUILTIN
    cpu = {r["name"]: r for r in rows if r["device"] == "cpu"}
    assert set(cpu) >= BUILTIN and all(cpu[name]["available"] for name in BUILTIN)
    assert cpu["torchvision"]["family"] == "hard" and cpu["torchvision"]["exact"] is True
    assert cpu["matrix_fused"]["params"] == {"kernel": "gaussian", "sigma": 0.5, "score_threshold": 0.05}
    cuda = [r for r in rows if r["device"] == "cuda"]
    assert {r["name"] for r in cuda} >= {"torchvision", "matrix_naive"}
    if not torch.cuda.is_available():
        assert all(not r["available"] and r["reason"] for r in cuda)
        assert {r["reason"] for r in cuda if r["name"] == "torchvision"} == {"no CUDA device"}


def test_tiny_sweep_writes_tidy_rows(tmp_path):
    out = tmp_path / "run.csv"
    result = run("sweep", "--n", "8,16", "--impl", "torchvision,allpairs", "--scenario", "uniform",
                 "--scenario", "chain", "--min-run-time", "0.01", "--threads", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert list(frame.columns) == COLUMNS
    assert len(frame) == 2 * 2 * 2
    assert set(frame.status) == {"ok"}
    assert (frame.median_us > 0).all() and (frame.runs > 0).all()
    assert set(frame.timer) == {"wall"} and set(frame.device) == {"cpu"}
    tv = frame[frame.impl == "torchvision"]
    assert (tv.jaccard == 1.0).all() and (tv.kept == tv.ref_kept).all()
    chain = frame[(frame.scenario == "chain") & (frame.impl == "allpairs")]
    assert (chain.kept <= chain.ref_kept).all()
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["command"].startswith("nmsbench sweep --n 8,16 --impl torchvision,allpairs --device cpu")
    assert "--scenario uniform,chain" in meta["command"] and "--threads 1" in meta["command"]
    assert meta["environment"]["torch"] == torch.__version__
    # the libraries the entries call, by the distribution that provides each import name
    import importlib.metadata

    assert meta["libraries"]["numba"] == f"numba {importlib.metadata.version('numba')}"  # allpairs requires numba
    assert set(meta["libraries"]) == {"numba", "torchvision"}
    assert "median µs" in result.output


def test_library_versions_name_the_distribution_and_leave_missing_ones_empty():
    import importlib.metadata

    from nmsbench.results import library_versions

    versions = library_versions(["numba", "no_such_module_here", "numba"])
    assert versions == {"numba": f"numba {importlib.metadata.version('numba')}", "no_such_module_here": ""}


def test_default_output_goes_under_results_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("sweep", "--n", "4", "--impl", "torchvision", "--scenario", "uniform", "--min-run-time", "0.01")
    assert result.exit_code == 0, result.output
    written = list((tmp_path / "results" / "runs").glob("sweep-*-cpu.csv"))
    assert len(written) == 1 and len(pd.read_csv(written[0])) == 1


@pytest.fixture
def failing_impl():
    @register(name="test_always_fails", family="hard", devices=("cpu",), summary="raises on purpose")
    def always_fails(boxes, scores, *, iou_threshold, labels=None):
        raise RuntimeError("boom at n=%d" % boxes.shape[0])

    @register(name="test_out_of_memory", family="hard", devices=("cpu",), summary="runs out of memory")
    def out_of_memory(boxes, scores, *, iou_threshold, labels=None):
        if boxes.shape[0] > 8:
            raise MemoryError("cannot allocate")
        return NMSResult(torch.arange(boxes.shape[0]))

    yield
    unregister("test_always_fails")
    unregister("test_out_of_memory")


def test_failing_implementation_becomes_error_rows(tmp_path, failing_impl):
    out = tmp_path / "run.csv"
    result = run("sweep", "--n", "8,16", "--impl", "test_always_fails,test_out_of_memory,torchvision",
                 "--scenario", "uniform", "--min-run-time", "0.01", "--out", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out).set_index(["impl", "n"])
    assert len(frame) == 6
    assert frame.loc[("test_always_fails", 8), "status"] == "error"
    assert frame.loc[("test_always_fails", 16), "error"] == "RuntimeError: boom at n=16"
    assert frame.loc[("test_out_of_memory", 8), "status"] == "ok"
    assert frame.loc[("test_out_of_memory", 16), "error"] == "MemoryError: cannot allocate"
    assert (frame.loc["torchvision", "status"] == "ok").all()
    assert (frame.mean_max_iou >= 0).all()  # the box set's overlap is known whatever the implementation did
    assert "3 ok, 3 error" in result.output


def test_unsupported_cells_become_skipped_rows(tmp_path):
    out = tmp_path / "run.csv"
    result = run("sweep", "--n", "8", "--impl", "allpairs", "--dtype", "float16,float32", "--scenario", "uniform",
                 "--min-run-time", "0.01", "--out", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out).set_index("dtype")
    assert frame.loc["float16", "status"] == "skipped" and "float16 not supported on cpu" in frame.loc["float16", "error"]
    assert frame.loc["float32", "status"] == "ok"


def test_matrix_params_reach_the_rows(tmp_path):
    out = tmp_path / "run.csv"
    result = run("sweep", "--n", "32", "--impl", "matrix_fused,torchvision", "--scenario", "clustered",
                 "--param", "kernel=linear", "--param", "score_threshold=0.3", "--min-run-time", "0.01", "--out", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out).set_index("impl")
    assert json.loads(frame.loc["matrix_fused", "params"]) == {"kernel": "linear", "score_threshold": 0.3, "sigma": 0.5}
    assert json.loads(frame.loc["torchvision", "params"]) == {}


def test_class_aware_sweep(tmp_path):
    out = tmp_path / "run.csv"
    result = run("sweep", "--n", "64", "--classes", "3", "--impl", "bitmask_two_phase,bitmask_classic",
                 "--scenario", "crowd", "--min-run-time", "0.01", "--out", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert (frame.classes == 3).all() and (frame.jaccard == 1.0).all()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--n", "abc"], "is not a box count"),
        (["--impl", "nope"], "unknown nope"),
        (["--device", "tpu"], "choose cpu and/or cuda"),
        (["--iou", "1.5"], "must lie in [0, 1]"),
        (["--iou", "half"], "must be numbers"),
        (["--dtype", "int8"], "unknown int8"),
        (["--scenario", "moon"], "unknown moon"),
        (["--scenario", "file"], "needs a boxes file"),
        (["--n", "0"], "must be positive"),
        (["--n", "4", "--rounds", "0"], "0 is not in the range"),
        (["--scenario", "chain", "--overlap", "1.5"], "outside chain's knob range"),
        (["--impl", "matrix_fused", "--param", "sigma=-1"], "sigma must be a positive number"),
        (["--impl", "matrix_fused", "--param", "colour=red"], "no selected implementation takes colour"),
        (["--param", "sigma"], "is not KEY=VALUE"),
        (["--classes", "0"], "0 is not in the range"),
        (["--timer", "stopwatch"], "choose from wall, api, device, events, graph"),
    ],
)
def test_bad_options_exit_nonzero_with_a_message(tmp_path, args, message):
    result = run("sweep", *args, "--out", str(tmp_path / "x.csv"))
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "x.csv").exists()


def test_existing_output_is_not_overwritten(tmp_path):
    out = tmp_path / "keep.csv"
    out.write_text("precious\n")
    result = run("sweep", "--n", "4", "--impl", "torchvision", "--scenario", "uniform", "--out", str(out))
    assert result.exit_code == 2 and "--force" in result.output
    assert out.read_text() == "precious\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_a_device_is_a_clear_error(tmp_path):
    result = run("sweep", "--device", "cuda", "--out", str(tmp_path / "x.csv"))
    assert result.exit_code == 2
    assert "no CUDA device is available" in result.output


def test_file_scenario_sweep(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 500, size=(40, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(5, 80, size=(40, 2))], axis=1).astype(np.float32)
    path = tmp_path / "boxes.npz"
    np.savez(path, boxes=boxes, scores=rng.uniform(size=40).astype(np.float32))
    out = tmp_path / "run.csv"
    result = run("sweep", "--scenario", "file", "--file", str(path), "--n", "10,40", "--impl", "torchvision,allpairs",
                 "--overlap", "1,2", "--min-run-time", "0.01", "--out", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert len(frame) == 2 * 2 * 2 and set(frame.status) == {"ok"}
    assert set(frame.scenario) == {"file"} and set(frame.overlap) == {1.0, 2.0}
    # doubling box sizes about their centres raises the realized overlap
    overlap = frame[frame.n == 40].groupby("overlap").mean_max_iou.first()
    assert overlap[2.0] > overlap[1.0]

    too_many = run("sweep", "--scenario", "file", "--file", str(path), "--n", "64", "--out", str(tmp_path / "x.csv"))
    assert too_many.exit_code == 2 and "holds 40 boxes" in too_many.output
    broken = tmp_path / "broken.npz"
    broken.write_bytes(path.read_bytes()[:100])
    bad = run("sweep", "--scenario", "file", "--file", str(broken), "--n", "8", "--out", str(tmp_path / "y.csv"))
    assert bad.exit_code == 2 and "broken.npz" in bad.output


def test_list_table_shows_host_sync_graph_safe_and_what_exact_means():
    result = run("list")
    assert result.exit_code == 0
    header = next(line for line in result.output.splitlines() if "name" in line and "family" in line)
    assert "host_sync" in header and "graph_safe" in header
    rows = {}
    for line in result.output.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").split("│")]
        if len(cells) > 4 and cells[4] == "cpu":
            rows[cells[1]] = cells
    assert rows["torchvision"][3] == "exact (hard)" and rows["hard_fused"][3] == "exact (hard)"
    assert rows["allpairs"][3] == "exact (allpairs)"
    assert rows["matrix_fused"][3] == "approx" and rows["matrix_naive"][3] == "approx"
    assert "exact (hard): keep equals torchvision's index for index" in " ".join(result.output.split())


@pytest.mark.parametrize("command", [["plot", "-o", "fig.png"], ["export"]])
def test_plot_and_export_refuse_a_file_that_is_not_results_with_status_2(tmp_path, command):
    foreign = tmp_path / "notresults.csv"
    foreign.write_text("name,age\nada,36\n")
    result = CliRunner().invoke(main, [command[0], str(foreign), *command[1:]])
    assert result.exit_code == 2 and "notresults.csv: not an nmsbench results file" in result.output
    assert "Traceback" not in result.output


def test_the_summary_shows_one_block_per_varying_dimension_and_never_pools(tmp_path):
    out = tmp_path / "run.csv"
    result = run("sweep", "--n", "16,32", "--impl", "torchvision", "--scenario", "uniform", "--iou", "0.3,0.7",
                 "--min-run-time", "0.005", "--rounds", "1", "--threads", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "median µs (wall timer) · uniform · IoU 0.3 · cpu" in text
    assert "median µs (wall timer) · uniform · IoU 0.7 · cpu" in text
    frame = pd.read_csv(out)
    # every printed number is one row's median (no median over IoU thresholds)
    for value in frame.median_us:
        assert f"{value:,.1f}" in result.output


def summary_of(rows: list[dict], tmp_path) -> str:
    """The summary of a run that wrote ``rows`` (made from the rows, never read back from a file)."""
    from nmsbench import summary

    base = {"schema_version": 4, "benchmark": "nms", "family": "hard", "device": "cpu", "dtype": "float32", "timer": "wall",
            "overlap": 0.25, "classes": 1, "iou_threshold": 0.5, "seed": 0, "params": "{}", "status": "ok"}
    with summary.console.capture() as captured:
        summary.show("nms", [base | row for row in rows], {"ok": len(rows), "error": 0, "skipped": 0, "noisy": 0},
                     tmp_path / "r.csv")
    return captured.get()


def test_the_summary_splits_many_box_counts_into_tables_without_cutting_them(tmp_path):
    from nmsbench import summary

    sizes = [2 ** k for k in range(2, 2 + summary.SUMMARY_COLUMNS + 3)]
    text = summary_of([{"impl": "torchvision", "scenario": "uniform", "n": n, "median_us": 1000.0 + n} for n in sizes], tmp_path)
    assert text.count("median µs (wall timer) · uniform · cpu") == 2  # two tables
    for n in sizes:
        assert f" {n} " in text and f"{1000 + n:,.1f}" in text


def test_the_summary_of_recordings_has_a_row_per_recording_and_a_column_per_cap(tmp_path):
    recordings = [(f"photo{i}.jpg", size) for i in range(15) for size in (416, 640)]
    rows = [{"impl": impl, "scenario": "real", "image": image, "input_size": size, "n_cap": cap, "n": min(cap, 10 + i),
             "median_us": 100.0 + i + (cap == 8192)}
            for i, (image, size) in enumerate(recordings) for cap in (64, 8192) for impl in ("torchvision", "hard_fused")]
    text = summary_of(rows, tmp_path)
    assert text.count("median µs (wall timer) · real · cpu") == 1  # one table: every realized N stays readable
    assert "cap 64" in text and "cap 8192" in text
    for i, (image, size) in enumerate(recordings):
        assert f"{image}@{size}" in text
        assert f"{100 + i:,.1f} (N={min(64, 10 + i)})" in text and f"{101 + i:,.1f} (N={10 + i})" in text


def test_interrupt_during_start_up_exits_130_without_a_traceback(tmp_path, monkeypatch):
    import nmsbench.progress as options

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(options, "environment", interrupted)
    out = tmp_path / "run.csv"
    result = CliRunner().invoke(main, ["sweep", "--n", "4", "--impl", "torchvision", "--scenario", "uniform",
                                       "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert f"interrupted before {out} was opened: no rows written" in result.output
    assert "start it again with: nmsbench sweep --n 4" in result.output and "Aborted" not in result.output


def test_interrupt_before_the_first_row_exits_130_with_the_resume_command(tmp_path, monkeypatch):
    import nmsbench.runner as runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.datasets, "generate", interrupted)
    out = tmp_path / "run.csv"
    result = CliRunner().invoke(main, ["sweep", "--n", "4", "--impl", "torchvision", "--scenario", "uniform",
                                       "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert f"interrupted: 0 of 1 rows are in {out}" in result.output
    assert "resume with: nmsbench sweep --n 4" in result.output and f"--resume {out}" in result.output


def test_sigterm_during_start_up_exits_143(tmp_path, monkeypatch):
    import nmsbench.progress as options

    def terminated():
        raise options.Terminated

    monkeypatch.setattr(options, "load_warning", lambda threads: terminated())
    result = CliRunner().invoke(main, ["sweep", "--n", "4", "--impl", "torchvision", "--scenario", "uniform",
                                       "--out", str(tmp_path / "run.csv")])
    assert result.exit_code == 143 and "terminated (SIGTERM) before" in result.output


def test_interrupt_in_any_command_exits_130(monkeypatch):
    import nmsbench.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "describe", interrupted)
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 130 and "interrupted" in result.output and "Aborted" not in result.output


def test_the_start_warns_when_the_load_leaves_fewer_cores_than_threads(tmp_path, monkeypatch):
    import nmsbench.progress as options
    from nmsbench import timing

    monkeypatch.setattr(timing, "usable_cpus", lambda: [0, 1])
    for module in (timing, options):
        monkeypatch.setattr(module, "load_average", lambda: (1.7, 1.0, 0.5))
    out = tmp_path / "run.csv"
    result = run("sweep", "--n", "4", "--impl", "torchvision", "--scenario", "uniform", "--min-run-time", "0.005",
                 "--threads", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "warning: the 1-minute load average is 1.7 on 2 CPU(s)" in " ".join(result.output.split())
    meta = json.loads(out.with_suffix(".json").read_text())
    assert [entry["loadavg"] for entry in meta["load"]] == [[1.7, 1.0, 0.5]] * 2
    for module in (timing, options):
        monkeypatch.setattr(module, "load_average", lambda: (0.4, 0.4, 0.4))
    quiet = run("sweep", "--n", "4", "--impl", "torchvision", "--scenario", "uniform", "--min-run-time", "0.005",
                "--threads", "1", "--out", str(tmp_path / "quiet.csv"))
    assert quiet.exit_code == 0 and "load average" not in quiet.output


@pytest.fixture
def thread_spy():
    """A CPU implementation that records the threads alive while it is timed."""
    seen = []

    @register(name="test_thread_spy", family="hard", devices=("cpu",), summary="records the live threads")
    def thread_spy(boxes, scores, *, iou_threshold, labels=None):
        seen.append({t.name for t in threading.enumerate() if t is not threading.main_thread()})
        return NMSResult(torchvision.ops.nms(boxes, scores, iou_threshold))

    yield seen
    unregister("test_thread_spy")


def test_no_progress_thread_runs_while_a_sweep_times(tmp_path, thread_spy):
    before = {t.name for t in threading.enumerate() if t is not threading.main_thread()}
    result = run("sweep", "--n", "16,32", "--impl", "test_thread_spy", "--scenario", "uniform", "--min-run-time", "0.01",
                 "--out", str(tmp_path / "run.csv"))
    assert result.exit_code == 0, result.output
    assert len(thread_spy) > 10  # timed, not only warmed up
    idle = {"nmsbench-watchdog", "nmsbench-native-watchdog"}  # blocked in read() until a signal (nmsbench.stopping)
    assert all(names <= before | idle for names in thread_spy), set().union(*thread_spy) - before - idle


def test_a_sweep_refuses_to_time_the_kernels_probe_variants(tmp_path, monkeypatch):
    """NMSBENCH_CUDA_TUNABLES (benchmarks/' kernel variants) set: the sweep and the pipeline
    benchmark refuse to start, so no row times a variant as the product's kernels."""
    monkeypatch.setenv("NMSBENCH_CUDA_TUNABLES", "PROBE_VARIANT=1")
    for command in (["sweep", "--n", "8", "--impl", "torchvision", "--scenario", "uniform"], ["pipeline"]):
        result = run(*command, "--out", str(tmp_path / "run.csv"))
        assert result.exit_code == 2 and "NMSBENCH_CUDA_TUNABLES is set (PROBE_VARIANT=1)" in result.output
        assert not (tmp_path / "run.csv").exists()


# ---------------------------------------------------------------- commands made from axes (nmsbench.engine)

@dataclasses.dataclass
class ToyGrid:
    """A toy benchmark's grid: it checks its axes (check_axes) like every plug-in's."""

    sizes: list = dataclasses.field(default_factory=lambda: [1])
    label: str = "a"
    rounds: int = 5
    min_run_time: float = 0.2
    threads: int = 1

    def __post_init__(self):
        check_axes(self, TOY_AXES)


TOY_AXES = (
    Axis("sizes", "--size", ints("sizes"), [1], "Sizes of the toy.", check=lambda v: "" if max(v) < 100 else "sizes stay below 100"),
    Axis("label", "--label", names("labels", lambda: ("a", "b")), "a", "The toy's label.", many=False),
)


def toy_run(grid, write, on_case, done, between_turns):
    """Count to each size."""
    for size in grid.sizes:
        row = {"benchmark": "toy", "impl": f"toy-{grid.label}", "device": "cpu", "n": size, "status": "ok", "median_us": 1.0}
        write(row)
        on_case(row)
    return {"ok": len(grid.sizes), "error": 0, "skipped": 0, "noisy": 0}


@pytest.fixture
def toy():
    from nmsbench.engine.plugins import BENCHMARKS, Benchmark, register_benchmark

    yield register_benchmark(Benchmark("toy", "toy", ToyGrid, TOY_AXES, toy_run, lambda grid: len(grid.sizes)))
    BENCHMARKS.pop("toy")


def test_a_registered_benchmark_gets_a_command_with_its_axes_as_options(toy, tmp_path, monkeypatch):
    from nmsbench import progress
    from nmsbench.cli_options import benchmark_command

    command = benchmark_command(toy)
    helped = CliRunner().invoke(command, ["--help"])
    assert helped.exit_code == 0
    text = " ".join(helped.output.split())
    assert "Count to each size." in text and "--size TEXT Sizes of the toy. [default: 1]" in text
    assert "--label TEXT The toy's label. [default: a]" in text and "--rounds" in text and "--resume" in text
    rows = []
    monkeypatch.setattr(progress, "ResultWriter", lambda *a, **k: FakeWriter(rows))
    done = CliRunner().invoke(command, ["--size", "2,3", "--size", "5", "--label", "b", "--rounds", "3",
                                        "--out", str(tmp_path / "toy.csv")])
    assert done.exit_code == 0, done.output
    assert [(row["impl"], row["n"]) for row in rows] == [("toy-b", 2), ("toy-b", 3), ("toy-b", 5)]
    bad = CliRunner().invoke(command, ["--size", "500", "--out", str(tmp_path / "bad.csv")])
    assert bad.exit_code == 2 and "Invalid value for --size: sizes stay below 100" in bad.output
    unused = CliRunner().invoke(command, ["--host-wait", "1", "--out", str(tmp_path / "bad.csv")])
    assert unused.exit_code == 2 and "--host-wait: not used by nmsbench toy" in unused.output


class FakeWriter:
    """Keeps rows instead of writing a results file (the toy's rows are not results rows)."""

    rows_written = 0

    def __init__(self, rows):
        self.write, self.note, self.close = rows.append, lambda *a: None, lambda: None


def test_the_reproduce_command_comes_from_the_grid_and_its_axes(toy):
    from nmsbench.cli_options import reproduce

    grid = ToyGrid(sizes=[2, 3], label="b", rounds=3)
    assert reproduce(toy, grid, Path("t.csv")) == ("nmsbench toy --size 2,3 --label b --rounds 3 --min-run-time 0.2 "
                                                   "--threads 1 --out t.csv")
    assert reproduce(toy, grid, Path("t.csv"), resume=True).endswith("--resume t.csv")


@pytest.mark.parametrize("fields, args", [
    ({"ious": [1.5]}, ["--iou", "1.5"]),
    ({"dtypes": ["int8"]}, ["--dtype", "int8"]),
    ({"timers": ["stopwatch"]}, ["--timer", "stopwatch"]),
    ({"scenarios": ["chain"], "overlaps": [1.5]}, ["--scenario", "chain", "--overlap", "1.5"]),
    ({"devices": ["cpu"], "timers": ["device"]}, ["--device", "cpu", "--timer", "device"]),
])
def test_a_bad_grid_value_is_the_same_message_from_python_and_the_command_line(tmp_path, fields, args):
    from nmsbench.runner import Grid

    with pytest.raises(ValueError) as refused:
        Grid(**fields)
    result = run("sweep", *args, "--out", str(tmp_path / "x.csv"))
    assert result.exit_code == 2
    assert " ".join(str(refused.value).split()) in " ".join(result.output.split())
    assert not (tmp_path / "x.csv").exists()


# every option the commands had before they were made from axes (issue 40): still accepted
OPTIONS_BEFORE = {
    "sweep": "n impl device scenario overlap iou dtype seed classes param file canvas recording timer rounds min-run-time "
             "host-wait threads out force resume resume-without-metadata case-timeout repeat-noisy",
    "pipeline": "batch device source pipeline conf iou max-det max-candidates recording seed stage timer min-run-time "
                "threads out force resume resume-without-metadata case-timeout list",
    "accuracy": "impl device source images seed iou param candidates annotations image-ids threads out force resume "
                "resume-without-metadata",
    "diff": "scenario overlap n seed iou classes impl device param out canvas force",
    "plot": "out scenario impl device timer baseline benchmark stage kind metric at-n width height scale",
    "export": "format scenario impl device timer baseline benchmark stage metric out",
}


@pytest.mark.parametrize("command", sorted(OPTIONS_BEFORE))
def test_every_option_of_before_is_still_accepted(command):
    have = {opt for param in main.commands[command].params for opt in param.opts}
    assert {f"--{name}" for name in OPTIONS_BEFORE[command].split()} <= have


def test_min_run_time_defaults_to_less_time_on_a_sweep_of_cuda_alone():
    from nmsbench import runner

    assert runner.default_run_time(["cuda"]) == 0.1
    assert runner.default_run_time(["cpu", "cuda"]) == runner.default_run_time(["cpu"]) == 0.2
    assert runner.Grid(impls=["torchvision"], devices=["cuda"], ns=[64]).min_run_time == 0.1
    assert runner.Grid(impls=["torchvision"], devices=["cpu", "cuda"], ns=[64]).min_run_time == 0.2
    assert runner.Grid(impls=["torchvision"], devices=["cuda"], ns=[64], min_run_time=0.3).min_run_time == 0.3
    help_text = CliRunner().invoke(main, ["sweep", "--help"]).output
    assert "Default: 0.2; a sweep on cuda alone 0.1" in " ".join(help_text.split())


def test_a_cli_sweep_records_the_run_time_its_grid_chose(tmp_path):
    out = tmp_path / "s.csv"
    result = CliRunner().invoke(main, ["sweep", "--impl", "torchvision", "--n", "16", "--scenario", "uniform",
                                       "--timer", "wall", "--rounds", "1", "--threads", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["grid"]["min_run_time"] == 0.2 and "--min-run-time 0.2" in sidecar["command"]
