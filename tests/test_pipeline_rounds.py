"""Pipeline and accuracy on the engine: rotated rounds, the noise rule, raw samples, and
the impossible stage (timed above its total) re-timed then flagged. Timings here come from
a fake timer (scripted block times), so nothing depends on this machine's speed."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from click.testing import CliRunner

from nmsbench import accuracy, timing
from nmsbench.accuracy_bench import AccuracyGrid, run_accuracy_bench
from nmsbench.cli import main
from nmsbench.engine.axes import GridError
from nmsbench.engine.plugins import BENCHMARKS
from nmsbench.engine.samples import read_samples
from nmsbench.pipeline import Pipeline, Prepared, get_pipeline, register_pipeline, unregister_pipeline
from nmsbench.pipeline_bench import PipelineGrid, impossible, run_pipeline_bench
from nmsbench.results import ResultWriter, case_key
from nmsbench.timers import TIMERS
from nmsbench.timing import Blocks, SteadyHost, Timing

from test_host_gauge import SlowWhile  # the gauge that reads slow after a measurement marked slow

FAST = {"rounds": 3, "min_run_time": 0.003, "threads": 1}


@pytest.fixture
def staged():
    """A pipeline ``test_stages`` (the numpy reference) whose stage calls say what ran."""
    ran: list[str] = []

    def build(raw, config, device):
        reference = get_pipeline("numpy").build(raw, config, device)

        def decode():
            ran.append("decode")
            return reference.decode()

        def nms(candidates):
            ran.append("nms")
            return reference.nms(candidates)

        return Prepared(decode, nms)

    register_pipeline(Pipeline("test_stages", "numpy, stages logged", ("cpu",), "hard", build))
    try:
        yield ran
    finally:
        unregister_pipeline("test_stages")


def fake_wall(monkeypatch, ran: list, times):
    """Replace the wall timer by one that calls the op once per measurement and returns five
    blocks of ``times(what, k)`` µs, ``what`` the stage it saw run (or what ``ran`` says),
    ``k`` that one's count of measurements so far; the log of what it measured."""
    log: list[str] = []
    stage_of = {("decode",): "decode", ("nms",): "nms", ("decode", "nms"): "total"}

    def measurer(call, settings):
        def measure(seconds):
            start = len(ran)
            call()
            seen = tuple(ran[start:])
            what = stage_of.get(seen, seen[0] if seen else "")
            log.append(what)
            return Blocks(np.full(5, float(times(what, log.count(what)))), 5)
        return measure

    monkeypatch.setitem(TIMERS, "wall", dataclasses.replace(TIMERS["wall"], measurer=measurer))
    return log


def pipeline_rows(**fields) -> list[dict]:
    rows: list[dict] = []
    grid = PipelineGrid(pipelines=["test_stages"], sources=["real"], batches=[1], timers=["wall"], **FAST | fields)
    run_pipeline_bench(grid, rows.append, gauge=SteadyHost())
    return rows


def test_stages_are_contenders_in_rotated_rounds(monkeypatch, staged):
    log = fake_wall(monkeypatch, staged, lambda what, k: {"decode": 10, "nms": 20, "total": 40}[what])
    rows = pipeline_rows()
    # round r starts at the r-th contender (decode, nms, total)
    assert log == ["decode", "nms", "total", "nms", "total", "decode", "total", "decode", "nms"]
    by_stage = {row["stage"]: row for row in rows}
    assert [by_stage[s]["median_us"] for s in ("decode", "nms", "total")] == [10, 20, 40]
    for row in rows:
        assert row["status"] == "ok" and row["rounds"] == 3 and row["attempts"] == 1 and row["blocks"] == 15
        assert row["round_spread"] == 0 and "above" not in row["noise"] and isinstance(row["noisy"], bool)
        assert row["_samples"].round_medians_us == (row["median_us"],) * 3


def test_a_stage_above_its_total_is_retimed_once_and_kept_when_it_clears(monkeypatch, staged):
    # the nms stage comes out ten times the total in its first three measurements only
    log = fake_wall(monkeypatch, staged, lambda what, k: {"decode": 10, "total": 100}.get(what, 1000 if k <= 3 else 50))
    rows = {row["stage"]: row for row in pipeline_rows()}
    assert len(log) == 2 * 9  # the whole case group, once more
    assert rows["nms"]["median_us"] == 50 and rows["total"]["median_us"] == 100
    for row in rows.values():
        assert row["attempts"] == 2 and "above" not in row["noise"]


def test_a_stage_above_its_total_that_persists_is_flagged(monkeypatch, staged):
    log = fake_wall(monkeypatch, staged, lambda what, k: {"decode": 10, "nms": 1000, "total": 100}[what])
    rows = {row["stage"]: row for row in pipeline_rows()}
    assert len(log) == 2 * 9  # re-timed once, not more
    assert rows["nms"]["noisy"] is True and "nms stage timed above its total" in rows["nms"]["noise"]
    assert rows["total"]["noisy"] is True and "the nms stage timed above this total" in rows["total"]["noise"]
    assert "above" not in rows["decode"]["noise"]
    assert all(row["status"] == "ok" and row["attempts"] == 2 for row in rows.values())


def test_a_pipeline_whose_detections_change_after_its_warm_up_gives_error_rows(monkeypatch):
    """Its timed calls computed something else than the checked warm-up call (as a CUDA graph
    reading freed memory did): no times are reported for it, and the rows say why."""
    fake_wall(monkeypatch, [], lambda what, k: 10)
    calls = []

    def build(raw, config, device):
        reference = get_pipeline("numpy").build(raw, config, device)

        def nms(candidates):
            calls.append(1)
            detections = reference.nms(candidates)
            if len(calls) > 1:  # every call after the warm-up loses image 0's last detection
                first = detections[0]
                detections[0] = type(first)(first.rows[:-1], first.boxes[:-1], first.scores[:-1], first.labels[:-1])
            return detections

        return Prepared(reference.decode, nms)

    register_pipeline(Pipeline("test_drifts", "numpy, then one detection fewer", ("cpu",), "hard", build))
    try:
        rows: list[dict] = []
        grid = PipelineGrid(pipelines=["test_drifts", "numpy"], sources=["real"], batches=[1], timers=["wall"], **FAST)
        run_pipeline_bench(grid, rows.append, gauge=SteadyHost())
    finally:
        unregister_pipeline("test_drifts")
    drifting = [row for row in rows if row["impl"] == "test_drifts"]
    assert len(drifting) == 3 and len(calls) > 1
    for row in drifting:
        assert row["status"] == "error" and "differ from its checked warm-up call's" in row["error"]
        assert "1 missing" in row["error"] and "median_us" not in row
    assert all(row["status"] == "ok" for row in rows if row["impl"] == "numpy")


def test_the_impossible_rule_allows_the_noise():
    def timing(median, iqr):
        return Timing(median_us=median, iqr_us=iqr, runs=10)

    assert impossible(timing(200, 10), timing(100, 10))
    assert not impossible(timing(100, 10), timing(100, 10))  # equal: a stage may be (nearly) all of its total
    assert not impossible(timing(120, 40), timing(100, 10))  # 120 - 20 < 100 + 5: within the spreads
    assert impossible(timing(120, 10), timing(100, 10))  # 115 > 105


def test_pipeline_rows_and_samples_reach_the_files(tmp_path):
    out = tmp_path / "pipe.csv"
    grid = PipelineGrid(pipelines=["numpy"], sources=["real"], batches=[1], stages=["decode", "total"], timers=["wall"],
                        **FAST)
    writer = ResultWriter(out, {"machine": "here", "git_commit": "abc"}, dataclasses.asdict(grid), "test")
    try:
        counts = run_pipeline_bench(grid, writer.write)
    finally:
        writer.close()
    frame = pd.read_csv(out)
    assert counts["ok"] == 2 and "host" in counts
    assert {"rounds", "round_spread", "noise", "noisy", "attempts"} <= set(frame.columns) and (frame["rounds"] >= 1).all()
    assert "_samples" not in frame.columns
    samples = read_samples(out)
    keys = [case_key(row) for row in frame.astype(object).where(frame.notna(), "").to_dict("records")]
    assert set(samples) == set(keys)
    for key, row in zip(keys, frame.itertuples()):
        assert np.median(samples[key].round_medians_us) == pytest.approx(row.median_us)


def test_pipeline_grid_checks_its_axes_and_settings():
    with pytest.raises(GridError, match="unknown timer graph") as info:
        PipelineGrid(pipelines=["numpy"], timers=["graph"])
    assert info.value.field == "timers"
    for fields, field in [({"rounds": 0}, "rounds"), ({"batches": [0]}, "batches"), ({"confs": [2.0]}, "confs"),
                          ({"stages": ["paint"]}, "stages"), ({"pipelines": ["nope"]}, "pipelines"),
                          ({"timers": ["device"]}, "timers")]:
        with pytest.raises(GridError) as info:
            PipelineGrid(**{"pipelines": ["numpy"]} | fields)
        assert info.value.field == field
    grid = PipelineGrid()
    assert grid.pipelines and grid.settings.rounds == grid.rounds
    assert BENCHMARKS["pipeline"].grid is PipelineGrid and BENCHMARKS["pipeline"].command == "pipeline"
    assert {a.name for a in BENCHMARKS["pipeline"].axes} <= {f.name for f in dataclasses.fields(PipelineGrid)}


def slow_total_rows(monkeypatch, staged, slow_totals: int, **fields) -> tuple[dict, list]:
    """The staged pipeline's rows (by stage) and the measurement log, the host slow (the
    total timed twice as long) during the first ``slow_totals`` measurements of the total."""
    def times(what, k):
        slow = what == "total" and k <= slow_totals
        SlowWhile.slow_now = slow
        return {"decode": 10, "nms": 20}.get(what, 80 if slow else 40)

    log = fake_wall(monkeypatch, staged, times)
    monkeypatch.setattr(timing.CpuMeter, "contention", lambda self: "")
    rows: list[dict] = []
    grid = PipelineGrid(pipelines=["test_stages"], sources=["real"], batches=[1], timers=["wall"], **FAST | fields)
    run_pipeline_bench(grid, rows.append, gauge=SlowWhile())
    assert len(rows) == 3 and len({case_key(row) for row in rows}) == 3  # each row written once
    return {row["stage"]: row for row in rows}, log


def test_a_pipeline_row_timed_on_a_slow_host_is_timed_again_at_the_end_of_its_pass(monkeypatch, staged):
    """Slow in all three rounds of the total, the total row is held back and timed again, alone,
    after the pass's other rows: the host is back, so it is clean at its usual time, two attempts."""
    rows, log = slow_total_rows(monkeypatch, staged, slow_totals=3, slow_retries=1)
    assert log[:9].count("total") == 3 and log[9:] == ["total"] * 3
    total = rows["total"]
    assert total["median_us"] == 40 and not total["noisy"] and total["attempts"] == 2 and total["rounds"] == 3
    assert rows["decode"]["attempts"] == rows["nms"]["attempts"] == 1


def test_a_pipeline_row_timed_on_a_slow_host_keeps_its_flag_without_retries(monkeypatch, staged):
    rows, log = slow_total_rows(monkeypatch, staged, slow_totals=3, slow_retries=0)
    assert len(log) == 9  # nothing timed again
    total = rows["total"]
    assert total["noisy"] and "the host ran slow in 3 of 3 rounds" in total["noise"] and total["attempts"] == 1


def test_a_pipeline_row_still_slow_after_its_retries_is_written_flagged(monkeypatch, staged):
    rows, log = slow_total_rows(monkeypatch, staged, slow_totals=9, slow_retries=2)
    assert log.count("total") == 9  # three rounds, then twice three more
    assert rows["total"]["noisy"] and rows["total"]["attempts"] == 3


def test_a_pipeline_row_held_for_a_retry_is_written_as_it_was_when_the_run_stops(monkeypatch, staged):
    """Ctrl-C during the re-timing: the total's first timing (flagged) is written, then the stop goes on."""
    def times(what, k):
        if what == "total" and k == 4:
            raise KeyboardInterrupt
        SlowWhile.slow_now = what == "total"
        return {"decode": 10, "nms": 20}.get(what, 80)

    fake_wall(monkeypatch, staged, times)
    monkeypatch.setattr(timing.CpuMeter, "contention", lambda self: "")
    rows: list[dict] = []
    grid = PipelineGrid(pipelines=["test_stages"], sources=["real"], batches=[1], timers=["wall"], slow_retries=1, **FAST)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline_bench(grid, rows.append, gauge=SlowWhile())
    written = {row["stage"]: row for row in rows}
    assert len(rows) == 3 and written["total"]["noisy"] and written["total"]["attempts"] == 1


def test_pipeline_slow_retries_default_to_one_on_cuda_alone_and_are_checked():
    assert PipelineGrid(pipelines=["numpy"], devices=["cuda"]).slow_retries == 1
    assert PipelineGrid(pipelines=["numpy"], devices=["cpu"]).slow_retries == 0
    assert PipelineGrid(pipelines=["numpy"], devices=["cpu", "cuda"]).slow_retries == 0
    assert PipelineGrid(pipelines=["numpy"], devices=["cuda"], slow_retries=3).slow_retries == 3
    with pytest.raises(GridError, match="slow_retries must be a whole number >= 0") as info:
        PipelineGrid(pipelines=["numpy"], slow_retries=-1)
    assert info.value.field == "slow_retries"


def test_pipeline_slow_retries_is_an_option_free_on_resume(tmp_path):
    out = tmp_path / "pipe.csv"
    args = ["pipeline", "--pipeline", "numpy", "--source", "real", "--batch", "1", "--stage", "total", "--timer", "wall",
            "--rounds", "1", "--min-run-time", "0.01", "--threads", "1"]
    first = CliRunner().invoke(main, args + ["--slow-retries", "0", "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert json.loads(out.with_suffix(".json").read_text())["grid"]["slow_retries"] == 0
    again = CliRunner().invoke(main, args + ["--batch", "1,2", "--slow-retries", "2", "--resume", str(out)])
    assert again.exit_code == 0, again.output  # a retry changes no row's measurement: resumable with another K
    assert len(pd.read_csv(out)) == 2
    negative = CliRunner().invoke(main, args + ["--slow-retries", "-1", "--out", str(tmp_path / "x.csv")])
    assert negative.exit_code == 2 and "--slow-retries" in negative.output


# --- accuracy


def logged_nms(monkeypatch) -> list[str]:
    """Every implementation name nmsbench.accuracy calls run_nms with, in order."""
    ran: list[str] = []
    real = accuracy.run_nms

    def run_nms(name, *args, **kwargs):
        ran.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(accuracy, "run_nms", run_nms)
    return ran


def test_accuracy_cases_take_turns_and_their_time_is_per_image(monkeypatch):
    ran = logged_nms(monkeypatch)
    log = fake_wall(monkeypatch, ran, lambda what, k: {"torchvision": 400, "allpairs": 800, "hard_graph": 1200}[what])
    rows: list[dict] = []
    grid = AccuracyGrid(impls=["torchvision", "allpairs", "hard_graph"], sources=["scenes-sparse"], images=4, **FAST)
    run_accuracy_bench(grid, rows.append, gauge=SteadyHost())
    assert log == ["torchvision", "allpairs", "hard_graph", "allpairs", "hard_graph", "torchvision",
                   "hard_graph", "torchvision", "allpairs"]
    assert [row["impl"] for row in rows] == grid.impls  # rows in the grid's order
    by_impl = {row["impl"]: row for row in rows}
    assert by_impl["torchvision"]["median_us"] == 100 and by_impl["hard_graph"]["median_us"] == 300  # a pass / 4 images
    for row in rows:
        assert row["status"] == "ok" and row["timer"] == "wall" and row["rounds"] == 3 and isinstance(row["noisy"], bool)
        assert row["runs"] == 3 * 5 * 4  # rounds x calls x images
        assert row["_samples"].round_medians_us == (row["median_us"],) * 3 and 0 <= row["ap"] <= 1


def test_accuracy_rows_and_samples_reach_the_files(tmp_path):
    out = tmp_path / "acc.csv"
    grid = AccuracyGrid(impls=["torchvision", "soft_nms"], sources=["scenes-clustered"], images=3,
                        params={"kernel": ["linear", "gaussian"]}, **FAST)
    writer = ResultWriter(out, {"machine": "here", "git_commit": "abc"}, dataclasses.asdict(grid), "test")
    try:
        counts = run_accuracy_bench(grid, writer.write)
    finally:
        writer.close()
    frame = pd.read_csv(out)
    assert counts["ok"] == 3 and len(frame) == 3 and (frame["rounds"] >= 1).all()
    assert frame["noisy"].isin([True, False]).all() and frame["attempts"].eq(1).all()
    assert set(json.loads(p).get("kernel") for p in frame["params"]) == {None, "linear", "gaussian"}
    assert len(read_samples(out)) == 3


def test_accuracy_grid_checks_in_one_place():
    for fields, field in [({"impls": ["nope"]}, "impls"), ({"ious": [1.5]}, "ious"), ({"images": 0}, "images"),
                          ({"sources": ["coco"]}, "sources"), ({"image_ids": [1]}, "image_ids"),
                          ({"params": {"nope": [1]}}, "params"), ({"min_run_time": 0}, "min_run_time"),
                          ({"params": {"kernel": ["sideways"]}, "impls": ["soft_nms"]}, "params")]:
        with pytest.raises(GridError) as info:
            AccuracyGrid(**{"impls": ["torchvision"]} | fields)
        assert info.value.field == field, fields
    assert BENCHMARKS["accuracy"].grid is AccuracyGrid and AccuracyGrid(impls=["torchvision"]).settings.threads == 1
