"""The noisy rule (nmsbench.timing) on synthetic block times, and the CPU contention meter."""

from __future__ import annotations

import numpy as np
import pytest

from nmsbench import timing
from nmsbench.timing import MIN_BLOCKS, Blocks, CpuMeter, summarize


def blocks(*times_us) -> Blocks:
    return Blocks(np.array(times_us, dtype=float), len(times_us))


def test_tight_blocks_are_clean():
    t = summarize([blocks(*np.linspace(99, 101, 20))])
    assert not t.noisy and t.noise == ""
    assert t.median_us == pytest.approx(100) and t.blocks == 20 and t.rounds == 1 and t.round_spread is None


def test_fewer_than_min_blocks_is_noisy_even_with_no_spread():
    t = summarize([blocks(100.0, 100.0, 100.0)])
    assert t.iqr_us == 0 and t.noisy
    assert t.noise == f"3 blocks (< {MIN_BLOCKS})"
    assert not summarize([blocks(*[100.0] * MIN_BLOCKS)]).noisy


def test_a_wide_iqr_is_noisy():
    t = summarize([blocks(*np.linspace(80, 120, 20))])
    assert t.rel_spread > timing.NOISY_SPREAD and t.noise.startswith("IQR ")


def test_a_long_tail_is_noisy_although_the_iqr_is_small():
    # 16 calls at 100 µs, 4 of 20 (a descheduled thread's waits) at 3,000 µs
    t = summarize([blocks(*[100.0] * 16, *[3000.0] * 4)])
    assert t.rel_spread <= timing.NOISY_SPREAD  # the IQR alone would call it clean
    assert t.noisy and "90th percentile 30.0x the median" in t.noise


def test_the_median_is_the_median_of_round_medians_and_the_iqr_pools_the_blocks():
    rounds = [blocks(10, 10, 10), blocks(20, 21, 19), blocks(30, 30, 30)]
    t = summarize(rounds)
    assert t.median_us == 20 and t.rounds == 3 and t.blocks == 9 and t.runs == 9
    assert t.round_spread == pytest.approx((30 - 10) / 20)
    pooled = np.concatenate([r.times_us for r in rounds])
    assert t.iqr_us == pytest.approx(np.percentile(pooled, 75) - np.percentile(pooled, 25))


def test_rounds_that_disagree_are_noisy_although_each_is_tight():
    rounds = [blocks(*[100.0] * 10) for _ in range(4)] + [blocks(*[140.0] * 10)]
    t = summarize(rounds)
    assert t.iqr_us == 0 and t.p90_us < timing.TAIL_RATIO * t.median_us
    assert t.noise == "rounds spread 40% of the median (over 25% for 5 rounds)"
    agree = summarize([blocks(*[100.0] * 10) for _ in range(4)] + [blocks(*[110.0] * 10)])
    assert not agree.noisy


def test_contention_is_a_reason_and_the_reasons_add_up():
    t = summarize([blocks(100.0, 100.0)], contention="other processes kept 1.0 of 2 CPUs busy (--threads 2)")
    assert t.noise == "2 blocks (< 5); other processes kept 1.0 of 2 CPUs busy (--threads 2)"


def test_no_blocks_is_an_error():
    with pytest.raises(ValueError, match="no timing blocks"):
        summarize([])


def fake_proc(monkeypatch, samples):
    """/proc readings: each entry (busy, total, own) jiffies, read in order."""
    readings = iter(samples)
    current = {}

    def busy(cpus):
        current.update(zip(("busy", "total", "own"), next(readings)))
        return current["busy"], current["total"]

    monkeypatch.setattr(timing, "_busy_jiffies", busy)
    monkeypatch.setattr(timing, "_own_jiffies", lambda: current["own"])
    monkeypatch.setattr(timing, "usable_cpus", lambda: [0, 1])


def test_cpu_meter_sees_other_processes_on_the_cores_threads_need(monkeypatch):
    # 100 jiffies of wall time on 2 CPUs (200 in all): all busy, 100 of them ours -> others keep 1 CPU busy
    fake_proc(monkeypatch, [(0, 0, 0), (200, 200, 100)])
    meter = CpuMeter(threads=2)
    with meter:
        pass
    assert meter.busy_others == pytest.approx(1.0)
    assert meter.contention() == "other processes kept 1.0 of 2 CPUs busy (--threads 2)"
    # one thread leaves a CPU free for them: no contention
    fake_proc(monkeypatch, [(0, 0, 0), (200, 200, 100)])
    meter = CpuMeter(threads=1)
    with meter:
        pass
    assert meter.contention() == ""


def test_cpu_meter_adds_up_its_stretches_and_is_quiet_when_alone(monkeypatch):
    fake_proc(monkeypatch, [(0, 0, 0), (100, 100, 100), (100, 100, 100), (300, 300, 300)])
    meter = CpuMeter(threads=2)
    for _ in range(2):
        with meter:
            pass
    assert meter.busy_others == 0 and meter.contention() == ""


def test_cpu_meter_without_proc_reports_nothing(monkeypatch):
    monkeypatch.setattr(timing, "_busy_jiffies", lambda cpus: None)
    meter = CpuMeter(threads=64)
    with meter:
        pass
    assert meter.busy_others is None and meter.contention() == ""


def test_load_warning_when_the_load_leaves_fewer_free_cpus_than_threads(monkeypatch):
    monkeypatch.setattr(timing, "usable_cpus", lambda: [0, 1])
    monkeypatch.setattr(timing, "load_average", lambda: (1.5, 1.0, 0.5))
    assert "load average is 1.5 on 2 CPU(s)" in timing.load_warning(2)
    assert timing.load_warning(0) == ""
    monkeypatch.setattr(timing, "load_average", lambda: (0.2, 0.1, 0.1))
    assert timing.load_warning(1) == ""
    assert timing.load_warning(2) == ""  # a fifth of one CPU busy: both still count as free
    monkeypatch.setattr(timing, "load_average", lambda: (0.6, 0.1, 0.1))
    assert "load average is 0.6 on 2 CPU(s)" in timing.load_warning(2)


def test_expected_range_is_the_control_chart_constant():
    d2 = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 10: 3.078, 15: 3.472, 25: 3.931}
    assert {k: round(timing.expected_range(k), 3) for k in d2} == d2


def test_the_rounds_limit_asks_the_same_certainty_at_any_number_of_rounds():
    limits = [timing.round_spread_limit(k) for k in range(2, 31)]
    assert timing.round_spread_limit(timing.DEFAULT_ROUNDS) == pytest.approx(timing.ROUND_SPREAD)
    assert all(a < b for a, b in zip(limits, limits[1:]))  # more rounds allow a wider range
    # the standard error of the median of K rounds at the limit is the same for every K
    errors = [timing.round_spread_limit(k) / timing.expected_range(k) / np.sqrt(k) for k in range(2, 31)]
    assert np.ptp(errors) < 1e-12


def rounds_of(*medians) -> list:
    return [blocks(*np.full(10, m)) for m in medians]


def test_a_spread_noisy_at_five_rounds_is_clean_at_fifteen():
    five = summarize(rounds_of(80, 95, 100, 105, 120))  # range 40 % of the median
    assert five.noisy and "rounds spread 40% of the median (over 25% for 5 rounds)" in five.noise
    fifteen = summarize(rounds_of(80, 120, *np.linspace(95, 105, 13)))  # the same range over 15 rounds
    assert fifteen.round_spread == pytest.approx(0.4) and not fifteen.noisy
    three = summarize(rounds_of(90, 100, 110))  # 20 %: above the 14 % that three rounds allow
    assert three.noisy and "for 3 rounds" in three.noise
