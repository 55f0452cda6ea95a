"""The device timer's reading of a profile (nmsbench.gpu_activity) and its rows, on the CPU:
the split of a profile into calls, the profiler's CPU side, skipped rows, the columns.
The GPU side (a synthetic op of known kernels and durations) is tests/test_gpu_activity_gpu.py."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import nmsbench.runner as runner
from nmsbench import tables
from nmsbench.gpu_activity import MARK, NoGpuActivity, ProfileError, Record, records_of, records_of_profile, split_calls
from nmsbench.results import read_results
from nmsbench import timing
from nmsbench.timing import Blocks, summarize

from keep_all import keep_every_box

# one call's work, as a test describes it: GPU records (name, duration µs), host API calls (names)
Work = tuple[list[tuple[str, float]], list[str]]


def profile_of(calls: list[Work], before: list[Record] = (), shuffle: int | None = None) -> list[Record]:
    """The records a profile of ``calls`` would hold: a mark, each call's API calls and the
    GPU work they started (one correlation id each, increasing), a mark after each call;
    ``before``: records from ahead of the first mark; ``shuffle``: in a random order."""
    records, ids, clock = list(before), iter(range(1000, 10**6)), 0.0
    records.append(Record(MARK, False, next(ids), 0.0, 0.0))
    for gpu, host in calls:
        for name, duration in gpu:
            corr = next(ids)
            launch = "cudaMemcpyAsync" if name.startswith("Memcpy") else "cudaLaunchKernel"
            records.append(Record(launch, False, corr, 0.0, 0.0))
            records.append(Record(name, True, corr, clock, clock + duration))
            clock += duration + 2.0  # a gap: the span includes it, the GPU time does not
        records += [Record(name, False, next(ids), 0.0, 0.0) for name in host]
        records.append(Record(MARK, False, next(ids), 0.0, 0.0))
        clock += 50.0
    if shuffle is not None:
        random.Random(shuffle).shuffle(records)
    return records


def test_each_call_gets_its_kernels_copies_and_syncs():
    calls = [([("kernel_a", 10.0), ("Memcpy DtoH (Device -> Pinned)", 1.0), ("kernel_b", 4.0)], ["cudaStreamSynchronize"]),
             ([("kernel_a", 12.0), ("Memset (Device)", 0.5)], ["cudaStreamSynchronize", "cudaEventSynchronize", "cudaGetDevice"])]
    first, second = split_calls(profile_of(calls, shuffle=1), 2)
    assert (first.launches, first.copies, first.syncs) == (2, 1, 1)
    assert first.gpu_us == pytest.approx(15.0) and first.span_us == pytest.approx(15.0 + 2 * 2.0)
    assert (second.launches, second.copies, second.syncs) == (1, 1, 2)  # cudaGetDevice does not wait
    assert second.gpu_us == pytest.approx(12.5) and second.span_us == pytest.approx(12.0 + 2.0 + 0.5)


def test_activity_ahead_of_the_first_mark_and_sync_records_are_not_work():
    before = [Record("warm_up_kernel", True, 5, -100.0, -50.0)]
    (call,) = split_calls(profile_of([([("kernel", 8.0), ("Stream Sync", 30.0)], [])], before=before), 1)
    assert (call.launches, call.copies, call.gpu_us) == (1, 0, pytest.approx(8.0))


def test_a_profile_without_marks_or_with_extra_ones_is_refused():
    with pytest.raises(ProfileError, match="no CUDA API calls .*CUPTI"):
        split_calls([Record("kernel", True, 3, 0.0, 1.0)], 1)
    syncing = ([("kernel", 1.0)], [MARK])  # an op that synchronizes the device itself
    with pytest.raises(ProfileError, match=f"expected 3 {MARK} calls around 2 calls, the profile has 5 and GPU work after"):
        split_calls(profile_of([syncing, syncing]), 2)
    with pytest.raises(ProfileError, match=f"expected 4 {MARK} calls around 3 calls, the profile has 3"):
        split_calls(profile_of([([("kernel", 1.0)], [])] * 2), 3)


def test_the_profilers_own_marks_around_the_calls_are_left_out():
    own = [Record(MARK, False, 1, 0.0, 0.0), Record(MARK, False, 2, 0.0, 0.0)]  # ahead of ours: no GPU work between
    records = profile_of([([("kernel", 3.0)], []), ([("kernel", 5.0)], [])], before=own)
    records += [Record(MARK, False, 10**7, 0.0, 0.0)]  # torch.profiler synchronizes the device as it stops
    assert [c.gpu_us for c in split_calls(records, 2)] == pytest.approx([3.0, 5.0])


def test_a_call_without_gpu_work_is_no_gpu_activity():
    with pytest.raises(NoGpuActivity, match="no GPU work in a call"):
        split_calls(profile_of([([("kernel", 1.0)], []), ([], ["cudaStreamSynchronize"])]), 2)
    with pytest.raises(NoGpuActivity, match="no GPU work in the calls"):  # a backend that works on the host
        split_calls(profile_of([([], ["cudaGetDevice"])] * 3), 3)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(st.sampled_from(["k1", "k2", "Memcpy HtoD", "Memset (Device)"]),
                                             st.floats(0.5, 500.0)), min_size=1, max_size=6),
                          st.lists(st.sampled_from(["cudaStreamSynchronize", "cudaLaunchKernel", "cudaMemcpy",
                                                    "cudaGetDevice"]), max_size=4)),
                min_size=1, max_size=8),
       st.integers(0, 2**16))
def test_the_split_recovers_every_call_whatever_the_record_order(calls, seed):
    got = split_calls(profile_of(calls, shuffle=seed), len(calls))
    for (gpu, host), activity in zip(calls, got):
        copies = sum(name.startswith(("Memcpy", "Memset")) for name, _ in gpu)
        assert (activity.launches, activity.copies) == (len(gpu) - copies, copies)
        assert activity.syncs == sum(name in ("cudaStreamSynchronize", "cudaMemcpy") for name in host)
        assert activity.gpu_us == pytest.approx(sum(d for _, d in gpu))
        assert activity.span_us == pytest.approx(sum(d for _, d in gpu) + 2.0 * (len(gpu) - 1))


def test_records_of_reads_a_real_profile_on_the_cpu():
    from torch.profiler import ProfilerActivity, profile

    a = torch.ones(64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            torch.add(a, a)
    records = records_of(prof.events())
    adds = [r for r in records if r.name == "aten::add"]
    assert len(adds) == 3 and not any(r.on_gpu for r in records)
    assert all(isinstance(r.correlation, int) and r.end_us >= r.start_us for r in adds)


def test_the_fast_reader_gives_the_records_events_gives():
    """records_of_profile reads the profiler's result directly (five fields a record, not
    events()' FunctionEvents): the same records, the profiler's bookkeeping left out alike
    (events() also merges a CPU op into a child of its own name, e.g. aten::sum's; a profile
    of CUDA activity alone holds CUDA API calls and GPU records, none nested so)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    a = torch.ones(64)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(3):
            with record_function("call"):
                torch.mul(torch.add(a, a), a)
    fast, slow = records_of_profile(prof), records_of(prof.events())
    assert len(slow) >= 9 and sorted(fast) == sorted(slow)  # in another order: split_calls sorts them
    assert not any(r.name in ("[memory]", "profiler::_record_function_enter_new") for r in fast)


def test_a_device_rows_timing_carries_span_and_counts():
    def profiled(gpu, span, launches):
        activity = {"gpu_us": np.array(gpu), "span_us": np.array(span), "launches": np.array(launches, float),
                    "copies": np.zeros(len(gpu)), "syncs": np.ones(len(gpu))}
        return Blocks(np.array(gpu), len(gpu), host_bound=False, activity=activity)

    t = summarize([profiled([10.0, 10.2, 9.8], [30.0, 31.0, 29.0], [3, 3, 3]),
                   profiled([10.1, 10.0, 10.3], [40.0, 41.0, 39.0], [3, 3, 4])])
    assert t.median_us == pytest.approx(10.05) and t.span_us == pytest.approx(35.0)
    assert (t.launches, t.copies, t.syncs) == (3.0, 0.0, 1.0) and t.span_iqr_us > 0
    plain = summarize([Blocks(np.array([1.0, 2.0]), 2)])
    assert plain.span_us is None and plain.launches is None


@pytest.fixture(autouse=True)
def steady_host(monkeypatch):
    from nmsbench.timing import SteadyHost

    monkeypatch.setattr("nmsbench.engine.rounds.HostGauge", SteadyHost)  # start_run makes the default gauge


def _group_rows(monkeypatch, device_blocks):
    """A CPU case of one test implementation with wall and device rows, the device timer's
    profile replaced by ``device_blocks`` (the sweep makes device rows on cuda only)."""
    monkeypatch.setattr(timing, "device_blocks", device_blocks)
    with keep_every_box(["test_activity"]):
        grid = runner.Grid(impls=["test_activity"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[8],
                           ious=[0.5], min_run_time=0.01, threads=1, rounds=2)
        impl = runner.get("test_activity")
        base = {"scenario": "uniform", "overlap": 0.5, "n": 8, "seed": 0, "classes": 1}
        rows = [r | {"timer": t} for r in runner._case_rows(impl, "cpu", "float32", 0.5, grid, base, {})
                for t in ("wall", "device")]
        box_set = runner.datasets.generate("uniform", 8, overlap=0.5, seed=0)
        reference = lambda dtype, iou: torch.arange(8)  # noqa: E731  (keeps every box, as the implementation)
        return list(runner._run_group([(impl, rows)], "cpu", "float32", 0.5, grid, box_set, reference,
                                      {"test_activity": ({}, None)}))


def test_a_backend_the_profiler_cannot_see_gets_a_skipped_device_row(monkeypatch):
    def unseen(fn, **kwargs):
        fn()
        raise NoGpuActivity("the profiler saw no GPU work in a call (a backend that runs on the host, "
                            "or CUPTI cannot see this GPU)")

    rows = {r["timer"]: r for r in _group_rows(monkeypatch, unseen)}
    assert rows["wall"]["status"] == "ok" and rows["wall"]["launches"] == ""
    assert rows["device"]["status"] == "skipped" and "saw no GPU work" in rows["device"]["error"]


def test_device_rows_carry_the_activity_columns_and_are_not_judged_by_the_host_gauge(monkeypatch):
    judged = []
    monkeypatch.setattr(runner.HostGauge, "judge", lambda self, before, after: judged.append(1) or False)

    def profiled(fn, **kwargs):
        fn()
        activity = {"gpu_us": np.full(4, 20.0), "span_us": np.full(4, 50.0), "launches": np.full(4, 2.0),
                    "copies": np.ones(4), "syncs": np.ones(4)}
        return Blocks(activity["gpu_us"], 4, host_bound=False, activity=activity)

    rows = {r["timer"]: r for r in _group_rows(monkeypatch, profiled)}
    device = rows["device"]
    assert device["status"] == "ok" and device["median_us"] == 20.0 and device["span_us"] == 50.0
    assert (device["launches"], device["copies"], device["syncs"]) == (2.0, 1.0, 1.0)
    assert len(judged) == 2  # the wall timer's two rounds; the device timer's are GPU durations


def test_a_grid_whose_timers_give_a_device_no_rows_is_refused():
    with pytest.raises(ValueError, match="device times the GPU only, so cpu would give no rows") as caught:
        runner.Grid(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[8],
                    ious=[0.5], timers=["device"])
    assert caught.value.field == "timers"


def test_older_files_device_rows_are_read_as_events_rows(tmp_path):
    frame = pd.DataFrame({"schema_version": [4, 4, 5], "impl": "torchvision", "family": "hard", "device": "cuda",
                          "dtype": "float32", "timer": ["device", "wall", "device"], "scenario": "uniform",
                          "overlap": 0.5, "classes": 1, "n": 64, "iou_threshold": 0.5, "seed": 0, "params": "{}",
                          "status": "ok", "median_us": 1.0})
    path = tmp_path / "mixed.csv"
    frame.to_csv(path, index=False)
    assert list(read_results(path)["timer"]) == ["events", "wall", "device"]


def test_exports_give_the_launches_per_call_of_device_rows(tmp_path):
    rows = []
    for impl, launches, us in (("torchvision", 10, 300.0), ("hard_fused", 1, 30.0)):
        for n in (64, 1024):
            rows.append({"schema_version": 5, "impl": impl, "family": "hard", "device": "cuda", "dtype": "float32",
                         "timer": "device", "scenario": "uniform", "overlap": 0.5, "classes": 1, "n": n,
                         "iou_threshold": 0.5, "seed": 0, "params": "{}", "status": "ok", "median_us": us,
                         "iqr_us": 1.0, "launches": launches, "copies": 1, "syncs": 1, "span_us": us * 2})
    path = tmp_path / "device.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    frame = tables.load_results([path])
    table = tables.speedup_table(frame)
    assert set(table.loc[table["impl"] == "torchvision", "launches"]) == {10}
    assert "[k]: kernel launches per call" in tables.render_table(table, "markdown")
    assert "30.0 (10.00×) [1]" in tables.render_table(table, "markdown")
    assert "hard_fused launches" in tables.render_table(table, "csv").splitlines()[0]
    from nmsbench import plots

    fig = plots.wall_vs_device(frame)
    names = {t.name for t in fig.data if (t.meta or {}).get("role") == "line"}
    assert names == {"torchvision · 10 launches", "hard_fused · 1 launch"}
    device = next(t for t in fig.data if t.name == "torchvision · 10 launches")
    assert "10 launches, 1 copy, 1 host sync per call" in device.customdata[0][0]
    assert device.line.dash == "dash"


def test_the_device_timer_runs_in_a_pass_after_every_other_timer(monkeypatch):
    passes = []
    monkeypatch.setattr(runner, "_sweep_pass", lambda grid, *rest: passes.append((grid.timers, grid.devices)))
    grid = runner.Grid(impls=["torchvision"], devices=["cpu", "cuda"], dtypes=["float32"], scenarios=["uniform"], ns=[8],
                       ious=[0.5], timers=["device", "wall", "api"])
    runner.run_sweep(grid, [].append)
    assert passes == [(["wall", "api"], ["cpu", "cuda"]), (["device"], ["cuda"])]
    passes.clear()
    runner.run_sweep(runner.Grid(**{**grid.__dict__, "devices": ["cpu"], "timers": ["wall", "device"]}), [].append)
    assert passes == [(["wall"], ["cpu"])]  # no cuda: no device pass
    passes.clear()
    runner.run_sweep(runner.Grid(**{**grid.__dict__, "devices": ["cuda"], "timers": ["device"]}), [].append)
    assert passes == [(["device"], ["cuda"])]


def test_the_pipeline_benchmark_times_device_rows_last(monkeypatch):
    import nmsbench.pipeline_bench as bench

    passes = []
    monkeypatch.setattr(bench, "_pipeline_pass", lambda grid, *rest: passes.append(list(grid.timers)))
    grid = bench.PipelineGrid(pipelines=["numpy"], devices=["cpu", "cuda"], sources=["synthetic"],
                              timers=["device", "events", "wall"])
    bench.run_pipeline_bench(grid, [].append)
    assert passes == [["events", "wall"], ["device"]]
