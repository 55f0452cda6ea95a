"""The dashboard's default selection (nmsbench.dashboard_defaults): one machine and device."""

from __future__ import annotations

import pandas as pd

from nmsbench import tables
from nmsbench.dashboard_defaults import default_filters, multi_point_scenarios


def rows(source: str, machine: str, device: str, stamp: str, gpu: str = "H200", n=(64, 128), scenario="uniform",
         benchmark: str = "nms", status: str = "ok") -> pd.DataFrame:
    frame = pd.DataFrame([{
        "schema_version": 2, "impl": "torchvision", "device": device, "scenario": scenario, "n": size, "status": status,
        "benchmark": benchmark, "machine": machine, "cpu": "Xeon", "gpu": gpu, "timestamp": stamp, "median_us": 10.0,
    } for size in n])
    return tables.prepare(frame, source=source)


def test_the_newest_cuda_reference_without_runs_of_the_user():
    frame = tables.concat([
        rows("h200-host-cpu.csv", "vm", "cpu", "2026-12-03T00:00:00+00:00"),  # newer, but CPU
        rows("h200-cuda.csv", "vm", "cuda", "2026-12-02T00:00:00+00:00"),
        rows("a100-cuda.csv", "old", "cuda", "2026-01-01T00:00:00+00:00", gpu="A100"),
    ])
    assert default_filters(frame) == {"hardware": ["vm: H200"], "device": ["cuda"]}


def test_the_users_newest_run_wins_over_the_references():
    frame = tables.concat([
        rows("h200-cuda.csv", "vm", "cuda", "2026-12-02T00:00:00+00:00"),
        rows("runs/old.csv", "laptop", "cpu", "2026-01-01T00:00:00+00:00", gpu=""),
        rows("runs/mine/new.csv", "box", "cpu", "2026-02-01T00:00:00+00:00", gpu=""),
    ])
    assert default_filters(frame) == {"hardware": ["box: Xeon"], "device": ["cpu"]}
    uploaded = tables.concat([frame, rows("x.csv (uploaded)", "up", "cpu", "2026-03-01T00:00:00+00:00", gpu="")])
    assert default_filters(uploaded) == {"hardware": ["up: Xeon"], "device": ["cpu"]}


def test_a_run_on_two_devices_opens_on_the_one_with_more_rows():
    run = tables.concat([rows("runs/r.csv", "gpu-box", "cpu", "2026-02-01T00:00:00+00:00"),
                         rows("runs/r.csv", "gpu-box", "cuda", "2026-02-01T00:01:00+00:00", n=(64, 128, 256))])
    assert default_filters(run) == {"hardware": ["gpu-box: H200"], "device": ["cuda"]}


def test_no_cuda_reference_falls_back_to_the_newest_reference_and_pipelines_do_not_count():
    frame = tables.concat([
        rows("cpu.csv", "vm", "cpu", "2026-12-01T00:00:00+00:00", gpu=""),
        rows("pipeline.csv", "other", "cuda", "2026-12-05T00:00:00+00:00", benchmark="pipeline"),
    ])
    assert default_filters(frame) == {"hardware": ["vm: Xeon"], "device": ["cpu"]}


def test_nothing_to_choose_means_everything():
    assert default_filters(tables.concat([])) == {}
    assert default_filters(rows("x.csv", "vm", "cpu", "", benchmark="accuracy")) == {}


def test_missing_timestamps_still_choose_one_pair():
    frame = tables.concat([rows("a.csv", "vm", "cuda", ""), rows("b.csv", "vm", "cuda", "not a date")])
    assert default_filters(frame) == {"hardware": ["vm: H200"], "device": ["cuda"]}


def test_single_point_scenarios_are_set_apart():
    frame = tables.concat([rows("a.csv", "vm", "cpu", "", n=(64, 128)), rows("a.csv", "vm", "cpu", "", n=(500,), scenario="file")])
    assert multi_point_scenarios(frame) == (["uniform"], ["file"])
    assert multi_point_scenarios(frame.iloc[:0]) == ([], [])
