"""Interleaved rounds, the api timer, and the Grid's own validation (nmsbench.runner)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import nmsbench.runner as runner
from nmsbench import timing
from nmsbench import NMSResult
from nmsbench.cli import main
from nmsbench.results import case_key, read_results

from keep_all import keep_every_box, run_and_name

NAMES = ("test_round_a", "test_round_b", "test_round_c")


@pytest.fixture
def three_impls():
    """Three implementations that keep every box; ``calls`` logs which one ran."""
    with keep_every_box(NAMES) as calls:
        yield calls


@pytest.fixture(autouse=True)
def steady_host(monkeypatch):
    """These tests count turns: the host's gauge never judges it slow here (test_host_gauge.py tests it)."""
    from nmsbench.timing import SteadyHost

    monkeypatch.setattr("nmsbench.engine.rounds.HostGauge", SteadyHost)  # start_run makes the default gauge


def grid(**fields):
    base = dict(impls=list(NAMES), devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[8], ious=[0.5],
                min_run_time=0.03, threads=1, rounds=3)
    return runner.Grid(**base | fields)


class FakeTimer:
    """A WallTimer stand-in; subclasses say what ``blocks(seconds)`` gives (the fixture's
    call log says which implementation's call ran)."""

    def __init__(self, fn, **kwargs):
        self.fn = fn


def test_rounds_rotate_the_order_and_share_the_time_budget(monkeypatch, three_impls):
    order = []

    class Turns(FakeTimer):
        def blocks(self, seconds):
            order.append((run_and_name(self.fn, three_impls), seconds))
            return timing.Blocks(np.full(5, 100.0), 5)

    monkeypatch.setattr(timing, "WallTimer", Turns)
    rows = []
    runner.run_sweep(grid(), rows.append)
    a, b, c = NAMES
    assert [name for name, _ in order] == [a, b, c, b, c, a, c, a, b]  # round r starts at implementation r
    assert [seconds for _, seconds in order] == pytest.approx([0.01] * 9)  # min_run_time / rounds each turn
    assert [r["impl"] for r in rows] == list(NAMES) and {r["rounds"] for r in rows} == {3}
    assert {r["blocks"] for r in rows} == {15} and {r["runs"] for r in rows} == {15}


def test_a_row_reports_the_median_of_its_round_medians_and_their_spread(monkeypatch, three_impls):
    values = {NAMES[0]: iter([100.0, 300.0, 110.0]), NAMES[1]: iter([50.0, 50.0, 50.0]), NAMES[2]: iter([10.0, 10.0, 10.5])}

    class Scripted(FakeTimer):
        def blocks(self, seconds):
            return timing.Blocks(np.full(5, next(values[run_and_name(self.fn, three_impls)])), 5)

    monkeypatch.setattr(timing, "WallTimer", Scripted)
    monkeypatch.setattr(timing.CpuMeter, "contention", lambda self: "")
    rows = {r["impl"]: r for r in (lambda out: (runner.run_sweep(grid(), out.append), out)[1])([])}
    a, b, c = (rows[name] for name in NAMES)
    assert a["median_us"] == 110.0 and a["round_spread"] == pytest.approx((300 - 100) / 110)
    assert a["noisy"] and "rounds spread" in a["noise"]
    assert b["median_us"] == 50.0 and b["round_spread"] == 0 and not b["noisy"] and b["noise"] == ""
    assert c["median_us"] == 10.0 and c["round_spread"] == pytest.approx(0.05) and not c["noisy"]


def test_few_blocks_are_retimed_up_to_min_blocks(monkeypatch, three_impls):
    turns = []

    class OneBlock(FakeTimer):
        def blocks(self, seconds):
            self.fn()
            turns.append(seconds)
            return timing.Blocks(np.array([100.0]), 1)  # a call longer than the turn: one block

    monkeypatch.setattr(timing, "WallTimer", OneBlock)
    monkeypatch.setattr(timing.CpuMeter, "contention", lambda self: "")
    rows = []
    runner.run_sweep(grid(impls=[NAMES[0]], rounds=2), rows.append)
    assert len(turns) == timing.MIN_BLOCKS and rows[0]["blocks"] == timing.MIN_BLOCKS and not rows[0]["noisy"]


def test_resume_times_a_box_sets_pending_implementations_together(three_impls):
    rows = []
    g = grid(ns=[4, 8], min_run_time=0.01)
    runner.run_sweep(g, rows.append)
    done = {case_key(r) for r in rows if not (r["impl"] == NAMES[1] and r["n"] == 8)}
    again = []
    three_impls.clear()
    runner.run_sweep(g, again.append, done=done)
    assert [(r["impl"], r["n"]) for r in again] == [(NAMES[1], 8)]
    assert set(three_impls) == {NAMES[1]}


def test_the_api_timer_times_run_nms_on_the_case_tensors(monkeypatch, three_impls):
    import nmsbench.api

    seen = []
    real = nmsbench.api.run_nms

    def spy(name, boxes, scores, **kwargs):
        seen.append((name, boxes.data_ptr()))
        return real(name, boxes, scores, **kwargs)

    monkeypatch.setattr(nmsbench.api, "run_nms", spy)
    rows = []
    runner.run_sweep(grid(impls=[NAMES[0], "torchvision"], timers=["wall", "api"], min_run_time=0.02), rows.append)
    assert [(r["impl"], r["timer"], r["status"]) for r in rows] == [
        (NAMES[0], "wall", "ok"), (NAMES[0], "api", "ok"), ("torchvision", "wall", "ok"), ("torchvision", "api", "ok")]
    assert {name for name, _ in seen} == {NAMES[0], "torchvision"} and len(seen) > 10
    assert len({ptr for _, ptr in seen}) == 1  # one box tensor for every implementation of the case
    assert all(r["median_us"] > 0 and r["kept"] == 8 for r in rows)


def test_an_api_call_that_differs_from_the_backend_call_is_an_error_row(monkeypatch, three_impls):
    import nmsbench.api

    monkeypatch.setattr(nmsbench.api, "run_nms", lambda name, boxes, scores, **kw: NMSResult(torch.arange(1)))
    rows = []
    runner.run_sweep(grid(impls=[NAMES[0]], timers=["wall", "api"], min_run_time=0.01), rows.append)
    assert [r["status"] for r in rows] == ["error", "error"]
    assert rows[0]["error"] == "RuntimeError: nmsbench.run_nms's output differs from the backend call's"


@pytest.mark.parametrize("fields, field, message", [
    ({"impls": ["nope"]}, "impls", "unknown nope"),
    ({"impls": []}, "impls", "non-empty list"),
    ({"scenarios": ["moon"]}, "scenarios", "unknown moon; known: uniform"),
    ({"dtypes": ["int8"]}, "dtypes", "unknown int8"),
    ({"timers": ["stopwatch"]}, "timers", "choose from wall, api, device, events, graph"),
    ({"devices": ["tpu"]}, "devices", "choose cpu and/or cuda"),
    ({"ns": [0]}, "ns", "positive whole numbers"),
    ({"ns": [8.5]}, "ns", "positive whole numbers"),
    ({"ious": [1.5]}, "ious", "must lie in [0, 1]"),
    ({"ious": [float("nan")]}, "ious", "must lie in [0, 1]"),
    ({"scenarios": ["chain"], "overlaps": [1.5]}, "overlaps", "outside chain's knob range"),
    ({"scenarios": ["file"]}, "file", "needs a boxes file"),
    ({"file": "boxes.npz"}, "file", "only read by the file scenario"),
    ({"recordings": ["bus.jpg@640"]}, "recordings", "for the real scenario"),
    ({"rounds": 0}, "rounds", "rounds must be a whole number >= 1"),
    ({"min_run_time": 0}, "min_run_time", "positive number of seconds"),
    ({"threads": 0}, "threads", "threads must be"),
    ({"classes": 0}, "classes", "classes must be"),
    ({"case_timeout": -1}, "case_timeout", "positive number of seconds"),
])
def test_a_grid_checks_itself_with_value_errors(fields, field, message):
    base = dict(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[8], ious=[0.5])
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")) as caught:
        runner.Grid(**base | fields)
    assert caught.value.field == field


def test_run_sweep_checks_a_grid_changed_after_it_was_made():
    g = runner.Grid(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[8], ious=[0.5])
    g.scenarios = ["moon"]
    with pytest.raises(ValueError, match="unknown moon"):
        runner.run_sweep(g, [].append)


def test_the_cli_gives_the_grids_errors_under_the_options_name(tmp_path):
    boxes = tmp_path / "b.npz"
    np.savez(boxes, boxes=np.array([[0, 0, 1, 1]] * 5, np.float32), scores=np.linspace(0.1, 0.9, 5).astype(np.float32))
    result = CliRunner().invoke(main, ["sweep", "--file", str(boxes), "--n", "4", "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 2 and "Invalid value for --file" in result.output
    assert "only read by the file scenario" in result.output and not (tmp_path / "x.csv").exists()


def test_rounds_and_min_run_time_are_in_the_sidecar_and_the_command(tmp_path):
    out = tmp_path / "run.csv"
    result = CliRunner().invoke(main, ["sweep", "--impl", "torchvision", "--scenario", "uniform", "--n", "4",
                                       "--rounds", "2", "--min-run-time", "0.01", "--threads", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["grid"]["rounds"] == 2 and meta["grid"]["min_run_time"] == 0.01
    assert "--rounds 2 --min-run-time 0.01" in meta["command"]
    assert [entry["when"] for entry in meta["load"]] == ["start", "end"]
    assert all(len(entry["loadavg"]) == 3 and entry["cpus"] >= 1 for entry in meta["load"])
    frame = read_results(out)
    assert list(frame.rounds) == [2] and frame.blocks.iloc[0] >= 5 and frame.round_spread.iloc[0] >= 0


def test_a_grid_takes_numpy_numbers():
    g = runner.Grid(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[np.int64(8)],
                    ious=[np.float32(0.5)], min_run_time=0.01, rounds=1)
    rows = []
    runner.run_sweep(g, rows.append)
    assert rows[0]["status"] == "ok" and rows[0]["n"] == 8


def test_a_turn_rotates_its_timers_too(monkeypatch, three_impls):
    order = []

    class Turns(FakeTimer):
        def blocks(self, seconds):
            order.append((run_and_name(self.fn, three_impls), self.timer))
            return timing.Blocks(np.full(5, 100.0), 5)

    made = iter(("wall", "api") * 3)  # _prepare builds each implementation's timers in --timer order

    def timer_for(fn, **kwargs):
        timer = Turns(fn)
        timer.timer = next(made)
        return timer

    monkeypatch.setattr(timing, "WallTimer", timer_for)
    runner.run_sweep(grid(timers=["wall", "api"]), lambda row: None)
    first = [(name, timer) for name, timer in order if name == NAMES[0]]
    assert [timer for _, timer in first] == ["wall", "api", "api", "wall", "wall", "api"]  # rounds 0, 1, 2


def test_the_display_may_redraw_between_turns_only(monkeypatch, three_impls):
    log = []

    class Logged(FakeTimer):
        def blocks(self, seconds):
            log.append("time")
            self.fn()
            log.append("timed")
            return timing.Blocks(np.full(5, 100.0), 5)

    monkeypatch.setattr(timing, "WallTimer", Logged)
    runner.run_sweep(grid(), lambda row: None, between_turns=lambda: log.append("redraw"))
    assert log == ["time", "timed", "redraw"] * 9  # 3 rounds x 3 implementations, one timer each
