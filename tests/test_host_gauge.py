"""The host's speed gauge (nmsbench.timing.HostGauge) and what the sweep does with it: a
measurement timed while the host ran slow is marked, left out of its row's median, and
made up for by extra turns; a row left with too few usual rounds is flagged."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import nmsbench.runner as runner
from nmsbench import NMSResult, register, timing
from nmsbench.cli import main
from nmsbench.registry import unregister
from nmsbench.timing import Blocks, HostGauge, summarize

NAMES = ("test_gauge_a", "test_gauge_b")


def usual(value, calls=5):
    return Blocks(np.full(calls, float(value)), calls)


def slow(value, calls=5):
    return Blocks(np.full(calls, float(value)), calls, host_slow=True)


def test_summarize_leaves_slow_rounds_out_where_enough_usual_ones_remain():
    t = summarize([usual(100), slow(180), usual(104), slow(170), usual(102)])
    assert t.median_us == 102 and t.rounds == 3 and t.slow_rounds == 0 and not t.noisy
    assert t.round_spread == pytest.approx(4 / 102)


def test_summarize_flags_a_row_whose_median_needs_slow_rounds():
    t = summarize([usual(100), slow(180), slow(175), slow(170), usual(102)])
    assert t.median_us == 170 and t.rounds == 5 and t.slow_rounds == 3
    assert t.noisy and "the host ran slow in 3 of 5 rounds" in t.noise


def test_summarize_counts_enough_against_the_planned_rounds():
    """Extra turns add rounds: three usual of five planned suffice, whatever was added."""
    rounds = [usual(100), slow(180), slow(175), slow(170), usual(102), usual(101), slow(160)]
    assert summarize(rounds, planned=5).median_us == 101
    assert summarize(rounds).slow_rounds == 4  # four usual of seven would not


class Scripted(HostGauge):
    """A gauge whose canary takes the scripted µs, one entry per reading."""

    def __init__(self, readings_us):
        super().__init__()
        self.readings = iter(readings_us)
        self.loops = 0

    def loop_us(self):
        if self.loops % timing.CANARY_REPEATS == 0:
            self.current = next(self.readings)
        self.loops += 1
        return self.current


def test_the_gauge_judges_against_the_best_reading_so_far():
    gauge = Scripted([20.0, 21.0, 40.0, 24.0, 27.0])
    readings = [gauge.read() for _ in range(5)]
    assert readings == pytest.approx([20, 21, 40, 24, 27]) and gauge.best == pytest.approx(20)
    assert not gauge.slow(20 * timing.HOST_SLOW - 0.1) and gauge.slow(20 * timing.HOST_SLOW + 0.1)
    assert [gauge.judge(a, b) for a, b in [(20, 21), (21, 40), (40, 24), (24, 27)]] == [False, True, True, True]
    assert gauge.summary() == {"canary_best_us": 20.0, "slow_limit": timing.HOST_SLOW, "measurements": 4, "slow": 3,
                               "waited_s": 0.0}


def test_waiting_for_the_usual_speed_reads_until_it_is_back(monkeypatch):
    monkeypatch.setattr(timing.time, "sleep", lambda seconds: None)
    gauge = Scripted([20.0, 45.0, 44.0, 21.0, 50.0])
    gauge.read()
    assert gauge.wait_for_usual_speed(seconds=10) == pytest.approx(21)
    gauge = Scripted(itertools.chain([20.0], itertools.repeat(45.0)))
    gauge.read()
    assert gauge.wait_for_usual_speed(seconds=0.01) == pytest.approx(45)  # gives up after the wait


def test_the_real_gauge_reads_a_positive_time():
    gauge = HostGauge()
    assert 0 < gauge.read() < 1e5 and gauge.best > 0


@pytest.fixture
def two_impls():
    calls = []
    for name in NAMES:
        def fn(boxes, scores, *, iou_threshold, labels=None, name=name):
            calls.append(name)
            return NMSResult(torch.arange(boxes.shape[0]))

        register(name=name, family="hard", devices=("cpu",), summary="keeps every box")(fn)
    yield calls
    for name in NAMES:
        unregister(name)


class SlowWhile(HostGauge):
    """A gauge that reads slow right after a measurement the timer below ran slow."""

    slow_now = False

    def read(self):
        reading = 50.0 if SlowWhile.slow_now else 20.0
        SlowWhile.slow_now = False  # the host is back by the next measurement
        self.best = min(self.best, reading)
        return reading


def test_a_slow_measurement_is_left_out_and_made_up_for(monkeypatch, two_impls):
    """The host runs slow during three of b's five turns: they time 2x slower and are
    marked; b gets an extra turn (three usual of five are needed), its median is its
    usual time, a's is untouched, and the run's summary counts the slow ones."""
    turns = []

    class Timer:
        def __init__(self, fn, **kwargs):
            self.fn = fn

        def blocks(self, seconds):
            before = len(two_impls)
            self.fn()
            name = two_impls[before]
            turns.append(name)
            n_b = turns.count(NAMES[1])
            SlowWhile.slow_now = name == NAMES[1] and n_b in (1, 3, 4)  # slow while this measurement ran
            return Blocks(np.full(5, 200.0 if SlowWhile.slow_now else 100.0 if name == NAMES[1] else 50.0), 5)

    monkeypatch.setattr(runner, "WallTimer", Timer)
    monkeypatch.setattr(runner.CpuMeter, "contention", lambda self: "")
    gauge = SlowWhile()
    rows = []
    counts = runner.run_sweep(runner.Grid(impls=list(NAMES), devices=["cpu"], dtypes=["float32"], scenarios=["uniform"],
                                          ns=[8], ious=[0.5], min_run_time=0.05, rounds=5), rows.append, gauge=gauge)
    by_impl = {r["impl"]: r for r in rows}
    assert turns.count(NAMES[0]) == 5 and turns.count(NAMES[1]) == 6  # one extra turn, b's alone
    assert by_impl[NAMES[1]]["median_us"] == 100.0 and by_impl[NAMES[1]]["rounds"] == 3
    assert not by_impl[NAMES[1]]["noisy"]
    assert by_impl[NAMES[0]]["median_us"] == 50.0
    assert counts["host"]["slow"] >= 3 and counts["host"]["measurements"] == 11


def test_the_sidecar_records_the_hosts_speed_and_the_summary_says_when_it_was_slow(tmp_path, monkeypatch, two_impls):
    class HalfSlow(HostGauge):
        count = 0

        def read(self):
            HalfSlow.count += 1
            reading = 50.0 if HalfSlow.count % 4 == 0 else 20.0
            self.best = min(self.best, reading)
            return reading

        def wait_for_usual_speed(self, seconds=timing.HOST_WAIT):
            return self.read()

    monkeypatch.setattr(runner, "HostGauge", HalfSlow)
    out = tmp_path / "gauge.csv"
    result = CliRunner().invoke(main, ["sweep", "--impl", ",".join(NAMES), "--n", "8", "--scenario", "uniform",
                                       "--device", "cpu", "--min-run-time", "0.02", "--out", str(out)])
    assert result.exit_code == 0, result.output
    host = json.loads(out.with_suffix(".json").read_text())["host"][0]
    assert host["slow"] > 0 and host["measurements"] >= host["slow"] and host["canary_best_us"] == 20.0
    assert "the host ran slow" in result.output and "left out of their rows' medians" in result.output


def test_a_long_slow_stretch_ends_the_extra_turns_and_flags_the_rows(monkeypatch, two_impls):
    """The host stays slow: every measurement is marked, the one wait for it to recover
    fails, no extra turn runs, and every row keeps its rounds and says why it is noisy."""
    turns = []

    class Timer:
        def __init__(self, fn, **kwargs):
            self.fn = fn

        def blocks(self, seconds):
            self.fn()
            turns.append(seconds)
            return Blocks(np.full(5, 100.0), 5)

    class AlwaysSlow(HostGauge):
        def read(self):
            self.best = min(self.best, 20.0)
            return 20.0 if self.best == math.inf else 50.0

        def wait_for_usual_speed(self, seconds=timing.HOST_WAIT):
            self.waits = getattr(self, "waits", 0) + 1
            return self.read()

    monkeypatch.setattr(runner, "WallTimer", Timer)
    monkeypatch.setattr(runner.CpuMeter, "contention", lambda self: "")
    gauge = AlwaysSlow()
    rows = []
    runner.run_sweep(runner.Grid(impls=list(NAMES), devices=["cpu"], dtypes=["float32"], scenarios=["uniform"],
                                 ns=[8], ious=[0.5], min_run_time=0.05, rounds=5), rows.append, gauge=gauge)
    assert len(turns) == 10 and gauge.waits == 1  # the 5 rounds of each, one failed wait, nothing more
    assert all(r["noisy"] and "the host ran slow in 5 of 5 rounds" in r["noise"] and r["rounds"] == 5 for r in rows)
