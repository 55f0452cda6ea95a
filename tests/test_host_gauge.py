"""The host's speed gauge (nmsbench.timing.HostGauge) and what the sweep does with it: a
measurement timed while the host ran slow is marked, left out of its row's median, and
made up for by extra turns; a row left with too few usual rounds is flagged."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import nmsbench.runner as runner
from nmsbench import timing
from nmsbench.cli import main
from nmsbench.timing import Blocks, HostGauge, summarize

from keep_all import keep_every_box, run_and_name

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
        self.script = iter(readings_us)
        self.loops = 0

    def loop_us(self):
        if self.loops % timing.CANARY_REPEATS == 0:
            self.current = next(self.script)
        self.loops += 1
        return self.current


def test_the_gauge_judges_against_its_usual_speed_the_best_while_readings_are_few():
    gauge = Scripted([20.0, 21.0, 40.0, 24.0, 27.0])
    readings = [gauge.read() for _ in range(5)]
    assert readings == pytest.approx([20, 21, 40, 24, 27]) and gauge.best == pytest.approx(20)
    assert not gauge.slow(20 * timing.HOST_SLOW - 0.1) and gauge.slow(20 * timing.HOST_SLOW + 0.1)
    assert [gauge.judge(a, b) for a, b in [(20, 21), (21, 40), (40, 24), (24, 27)]] == [False, True, True, True]
    assert gauge.summary() == {"canary_best_us": 20.0, "canary_usual_us": 20.0, "canary_median_us": 24.0,
                               "slow_limit": timing.HOST_SLOW, "measurements": 4, "slow": 3, "waited_s": 0.0}


def test_one_outlier_fast_reading_does_not_make_the_usual_speed_look_slow():
    """The usual speed is a low quantile of the readings once there are enough: a single
    15 µs reading among ordinary 22-25 µs ones judged every later 25 µs reading slow
    against the best; against the usual speed only the slow stretch's 40 µs are."""
    ordinary = [22.0, 23.0, 24.0, 25.0] * 8
    gauge = Scripted([15.0] + ordinary + [25.0, 40.0] + ordinary)
    readings = [gauge.read() for _ in range(1 + len(ordinary))]
    assert gauge.best == 15.0 and gauge.usual == pytest.approx(np.percentile(readings, timing.USUAL_QUANTILE))
    assert 22.0 <= gauge.usual <= 23.0
    assert not gauge.slow(gauge.read()) and gauge.slow(gauge.read())  # 25 usual, 40 slow


def test_the_usual_speed_follows_a_run_that_starts_slow_down_to_its_fast_readings():
    gauge = Scripted([40.0] * timing.USUAL_REFRESH + [20.0] * (2 * timing.USUAL_REFRESH))
    for _ in range(timing.USUAL_REFRESH):
        gauge.read()
    assert gauge.usual == 40.0 and not gauge.slow(40.0)
    for _ in range(2 * timing.USUAL_REFRESH):
        gauge.read()
    assert gauge.usual == 20.0 and gauge.slow(40.0)


def test_waiting_for_the_usual_speed_reads_until_it_is_back_or_the_time_is_up(monkeypatch):
    monkeypatch.setattr(timing.time, "sleep", lambda seconds: None)
    gauge = Scripted([20.0, 45.0, 44.0, 21.0])
    gauge.read()
    assert gauge.wait_for_usual_speed(10.0) and gauge.loops == 4 * timing.CANARY_REPEATS
    gauge = Scripted([20.0] * timing.USUAL_REFRESH + [45.0] * 100_000)  # then slow for ever
    for _ in range(timing.USUAL_REFRESH):
        gauge.read()
    assert not gauge.wait_for_usual_speed(0.02) and gauge.waited >= 0.02
    assert len(gauge.readings) == timing.USUAL_REFRESH + 1 and gauge.usual == 20.0  # the wait's readings not recorded


def test_the_real_gauge_reads_a_positive_time():
    gauge = HostGauge()
    assert 0 < gauge.read() < 1e5 and gauge.best > 0


@pytest.fixture
def two_impls():
    with keep_every_box(NAMES) as calls:
        yield calls


def grid(**fields) -> runner.Grid:
    """A sweep of the two implementations: one box set of 8, 5 rounds (``fields`` change it)."""
    return runner.Grid(**dict(impls=list(NAMES), devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[8],
                              ious=[0.5], min_run_time=0.05, rounds=5) | fields)


class SlowWhile(HostGauge):
    """A gauge that reads slow right after a measurement the timer below ran slow."""

    slow_now = False

    def canary_us(self):
        reading = 50.0 if SlowWhile.slow_now else 20.0
        SlowWhile.slow_now = False  # the host is back by the next measurement
        return reading


def _sweep_with_slow_turns(monkeypatch, two_impls, slow_turns_of_b, stop_at_turn_of_b=None, **fields):
    """A sweep of the two implementations, 5 rounds, in which the host runs slow during
    the given turns of b (they time 2x slower); (rows by implementation, turns, counts).
    ``stop_at_turn_of_b``: that turn of b raises KeyboardInterrupt (Ctrl-C); ``fields``
    change the grid."""
    turns = []

    class Timer:
        def __init__(self, fn, **kwargs):
            self.fn = fn

        def blocks(self, seconds):
            name = run_and_name(self.fn, two_impls)
            turns.append(name)
            if name == NAMES[1] and turns.count(NAMES[1]) == stop_at_turn_of_b:
                raise KeyboardInterrupt
            SlowWhile.slow_now = name == NAMES[1] and turns.count(NAMES[1]) in slow_turns_of_b
            return Blocks(np.full(5, 200.0 if SlowWhile.slow_now else 100.0 if name == NAMES[1] else 50.0), 5)

    monkeypatch.setattr(timing, "WallTimer", Timer)
    monkeypatch.setattr(timing.CpuMeter, "contention", lambda self: "")
    rows = []
    try:
        counts = runner.run_sweep(grid(**fields), rows.append, gauge=SlowWhile())
    finally:
        _sweep_with_slow_turns.rows = rows  # what was written, also when the run stopped
    assert len({r["impl"] for r in rows}) == len(rows)  # each case written once
    return {r["impl"]: r for r in rows}, turns, counts


def test_a_measurement_timed_on_a_slow_host_is_left_out_of_the_median(monkeypatch, two_impls):
    """Two of b's five turns ran on a slow host: its median is its usual time, from the
    other three rounds; a is untouched; nothing is timed again; the counts say so."""
    rows, turns, counts = _sweep_with_slow_turns(monkeypatch, two_impls, (1, 4))
    assert turns.count(NAMES[0]) == 5 and turns.count(NAMES[1]) == 5
    assert rows[NAMES[1]]["median_us"] == 100.0 and rows[NAMES[1]]["rounds"] == 3 and not rows[NAMES[1]]["noisy"]
    assert rows[NAMES[0]]["median_us"] == 50.0 and rows[NAMES[0]]["rounds"] == 5
    assert counts["host"]["slow"] >= 2 and counts["host"]["measurements"] == 10


def test_a_row_whose_median_needs_slow_rounds_is_flagged(monkeypatch, two_impls):
    rows, turns, _ = _sweep_with_slow_turns(monkeypatch, two_impls, (1, 3, 4), slow_retries=0)
    assert len(turns) == 10  # nothing timed again
    b = rows[NAMES[1]]
    assert b["rounds"] == 5 and b["median_us"] == 200.0
    assert b["noisy"] and "the host ran slow in 3 of 5 rounds" in b["noise"]


def test_a_row_flagged_for_a_slow_host_alone_is_timed_again_at_the_end_of_its_pass(monkeypatch, two_impls):
    """With --slow-retries 1 (the default of a sweep of CUDA alone) b, slow in three of its
    five turns, is held back and timed again once the pass's other cases ran, alone (a was
    clean): the host is back, so the row is clean at its usual time, written once, two attempts."""
    rows, turns, _ = _sweep_with_slow_turns(monkeypatch, two_impls, (1, 3, 4), slow_retries=1)
    assert turns == turns[:10] + [NAMES[1]] * 5 and turns[:10].count(NAMES[1]) == 5
    b, a = rows[NAMES[1]], rows[NAMES[0]]
    assert not b["noisy"] and b["median_us"] == 100.0 and b["attempts"] == 2 and b["rounds"] == 5
    assert a["attempts"] == 1 and a["median_us"] == 50.0


def test_a_row_still_slow_after_its_retries_keeps_its_flag(monkeypatch, two_impls):
    rows, turns, _ = _sweep_with_slow_turns(monkeypatch, two_impls, range(1, 16), slow_retries=2)
    b = rows[NAMES[1]]
    assert turns.count(NAMES[1]) == 15  # five turns, then twice five more
    assert b["noisy"] and "the host ran slow in 5 of 5 rounds" in b["noise"] and b["attempts"] == 3


def test_a_row_held_for_a_retry_is_written_as_it_was_when_the_run_stops(monkeypatch, two_impls):
    """Ctrl-C during the re-timing: b's first timing (flagged) is written, then the stop goes on."""
    with pytest.raises(KeyboardInterrupt):
        _sweep_with_slow_turns(monkeypatch, two_impls, (1, 3, 4), stop_at_turn_of_b=6, slow_retries=1)
    written = {r["impl"]: r for r in _sweep_with_slow_turns.rows}
    assert set(written) == set(NAMES) and written[NAMES[1]]["noisy"] and written[NAMES[1]]["attempts"] == 1


def test_slow_retries_default_to_one_on_a_sweep_of_cuda_alone(two_impls):
    """CUDA rows take a tenth of a second to time again; CPU rows on a busy machine would
    double a run, so a sweep with the CPU in it retries none unless asked."""
    assert runner.default_slow_retries(["cuda"]) == 1
    assert runner.default_slow_retries(["cpu"]) == runner.default_slow_retries(["cpu", "cuda"]) == 0
    assert grid().slow_retries == 0 and grid(slow_retries=3).slow_retries == 3


def test_slow_retries_is_checked_named_by_its_option_and_free_on_resume(tmp_path, two_impls):
    with pytest.raises(runner.GridError, match="slow_retries must be a whole number >= 0"):
        grid(slow_retries=-1)
    out = tmp_path / "retries.csv"
    args = ["sweep", "--impl", ",".join(NAMES), "--n", "8", "--scenario", "uniform", "--device", "cpu",
            "--min-run-time", "0.01"]
    first = CliRunner().invoke(main, args + ["--slow-retries", "0", "--out", str(out)])
    assert first.exit_code == 0, first.output
    assert json.loads(out.with_suffix(".json").read_text())["grid"]["slow_retries"] == 0
    again = CliRunner().invoke(main, args + ["--n", "8,16", "--resume", str(out)])
    assert again.exit_code == 0, again.output  # a retry changes no row's measurement: resumable with another K
    negative = CliRunner().invoke(main, args + ["--slow-retries", "-1", "--out", str(tmp_path / "x.csv")])
    assert negative.exit_code == 2 and "--slow-retries" in negative.output


def test_the_sidecar_records_the_hosts_speed_and_the_summary_says_when_it_was_slow(tmp_path, monkeypatch, two_impls):
    class HalfSlow(HostGauge):
        count = 0

        def canary_us(self):
            HalfSlow.count += 1
            return 50.0 if HalfSlow.count % 4 == 0 else 20.0

    monkeypatch.setattr("nmsbench.engine.rounds.HostGauge", HalfSlow)  # start_run makes the default gauge
    out = tmp_path / "gauge.csv"
    result = CliRunner().invoke(main, ["sweep", "--impl", ",".join(NAMES), "--n", "8", "--scenario", "uniform",
                                       "--device", "cpu", "--min-run-time", "0.02", "--out", str(out)])
    assert result.exit_code == 0, result.output
    host = json.loads(out.with_suffix(".json").read_text())["host"][0]
    assert host["slow"] > 0 and host["measurements"] >= host["slow"] and host["canary_best_us"] == 20.0
    assert "the host ran slow" in result.output and "left out of their rows' medians" in result.output


class Counted(SlowWhile):
    """SlowWhile, counting its waits; a wait succeeds while ``recovers`` says so."""

    recovers = True

    def __init__(self):
        super().__init__()
        self.waits = 0

    def wait_for_usual_speed(self, seconds):
        self.waits += 1
        self.seconds = seconds
        return Counted.recovers


def _sweep_waiting(monkeypatch, two_impls, host_wait, recovers):
    class Timer:
        def __init__(self, fn, **kwargs):
            self.fn = fn

        def blocks(self, seconds):
            self.fn()
            return Blocks(np.full(5, 100.0), 5)

    monkeypatch.setattr(timing, "WallTimer", Timer)
    monkeypatch.setattr(timing.CpuMeter, "contention", lambda self: "")
    Counted.recovers = recovers
    gauge = Counted()
    runner.run_sweep(grid(ns=[8, 16], host_wait=host_wait), [].append, gauge=gauge)
    return gauge


def test_host_wait_waits_before_every_turn(monkeypatch, two_impls):
    gauge = _sweep_waiting(monkeypatch, two_impls, 3.0, recovers=True)
    assert gauge.waits == 2 * 5 * 2 and gauge.seconds == 3.0  # two box sets, five rounds, two implementations


def test_a_wait_that_runs_out_ends_the_waiting_for_that_case(monkeypatch, two_impls):
    gauge = _sweep_waiting(monkeypatch, two_impls, 3.0, recovers=False)
    assert gauge.waits == 2  # once per box set: the first wait runs out


def test_no_host_wait_never_waits(monkeypatch, two_impls):
    assert _sweep_waiting(monkeypatch, two_impls, 0.0, recovers=True).waits == 0


def test_host_wait_is_checked_named_by_its_option_and_kept_for_resume(tmp_path, two_impls):
    with pytest.raises(runner.GridError, match="host_wait must be a number of seconds >= 0"):
        grid(host_wait=-1)
    out = tmp_path / "wait.csv"
    args = ["sweep", "--impl", ",".join(NAMES), "--n", "8", "--scenario", "uniform", "--device", "cpu",
            "--min-run-time", "0.01"]
    first = CliRunner().invoke(main, args + ["--host-wait", "0.01", "--out", str(out)])
    assert first.exit_code == 0, first.output
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["grid"]["host_wait"] == 0.01 and "--host-wait 0.01" in meta["command"]
    other = CliRunner().invoke(main, args + ["--resume", str(out)])
    assert other.exit_code == 2 and "was timed with --host-wait 0.01" in other.output
    negative = CliRunner().invoke(main, args + ["--host-wait", "-1", "--out", str(tmp_path / "x.csv")])
    assert negative.exit_code == 2 and "--host-wait" in negative.output
