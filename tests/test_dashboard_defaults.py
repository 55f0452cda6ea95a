"""The dashboard's default selection (nmsbench.dashboard_defaults): one machine and device,
and no more implementations than a legend holds."""

from __future__ import annotations

import pandas as pd

from nmsbench import tables
from nmsbench.dashboard_defaults import (DEFAULT_FAMILY, LEGEND_MAX, default_families, default_filters, family_caption,
                                         hidden_families, multi_point_scenarios)


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


def _implementations(count: int, family: str = "matrix", device: str = "cuda", timer: str = "wall") -> pd.DataFrame:
    frame = pd.DataFrame([{
        "schema_version": 2, "impl": f"{family}_{k}", "family": family, "device": device, "scenario": "uniform", "n": 64,
        "status": "ok", "benchmark": "nms", "machine": "vm", "cpu": "Xeon", "gpu": "H200", "timer": timer,
        "timestamp": "2026-12-02T00:00:00+00:00", "median_us": 10.0,
    } for k in range(count)])
    return tables.prepare(frame, source="h200-cuda.csv")


def test_more_implementations_than_a_legend_holds_start_on_the_exact_greedy_family():
    many = tables.concat([_implementations(8, "hard"), _implementations(LEGEND_MAX - 7, "soft")])
    assert many["impl"].nunique() == LEGEND_MAX + 1
    assert default_families(many, {"device": ["cuda"]}) == [DEFAULT_FAMILY]
    assert hidden_families(many, {"device": ["cuda"], "family": [DEFAULT_FAMILY]}) == ["soft"]
    caption = family_caption([DEFAULT_FAMILY], ["soft"])
    assert "hard" in caption and "Hidden: soft" in caption and "family filter" in caption
    # few enough on the chosen device, implementations chosen by name, or no exact greedy family: every family
    assert default_families(many, {"device": ["cpu"]}) == []
    assert default_families(many, {"device": ["cuda"], "impl": ["hard_0"]}) == []
    assert default_families(_implementations(LEGEND_MAX + 1, "soft"), {}) == []
    assert default_families(tables.concat([_implementations(8, "hard"), _implementations(4, "soft")]), {}) == []
    assert hidden_families(many, {"device": ["cuda"]}) == [] and family_caption([], []) == ""


def test_the_family_default_counts_the_wall_timer_lines_unless_a_timer_is_chosen():
    rows = tables.concat([_implementations(6, "hard"), _implementations(7, "soft", timer="device")])
    assert default_families(rows, {}) == []  # the wall timer's 6 implementations
    assert default_families(rows, {"timer": ["wall", "device"]}) == [DEFAULT_FAMILY]
