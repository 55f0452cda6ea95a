"""Raw samples (nmsbench.engine.samples): each timed row's rounds beside its results CSV."""

from __future__ import annotations

import json

import numpy as np
import pytest

import nmsbench.runner as runner
from nmsbench.engine.samples import Samples, read_samples, samples_path
from nmsbench.results import COLUMNS, SCHEMA_VERSION, ResultWriter, case_key, read_results
from nmsbench.timing import Blocks, SteadyHost

from keep_all import keep_every_box

ENV = {"machine": "here", "git_commit": "abc"}


def test_samples_come_from_the_rounds_blocks():
    samples = Samples.from_blocks([Blocks(np.array([1.0, 3.0, 2.0]), 3), Blocks(np.array([5.0]), 1)])
    assert samples.round_medians_us == (2.0, 5.0) and samples.blocks_us == ((1.0, 3.0, 2.0), (5.0,))
    assert list(samples.pooled()) == [1.0, 3.0, 2.0, 5.0]
    assert samples_path("runs/x.csv").as_posix() == "runs/x.samples.jsonl"


def sweep_into(path, grid, append=False, done=frozenset()):
    with ResultWriter(path, ENV, grid.__dict__, "test", append=append) as writer:
        runner.run_sweep(grid, writer.write, done=done)


@pytest.fixture
def grid(monkeypatch):
    monkeypatch.setattr("nmsbench.engine.rounds.HostGauge", SteadyHost)  # start_run makes the default gauge
    with keep_every_box(["test_samples_a"]):
        yield runner.Grid(impls=["test_samples_a", "torchvision"], devices=["cpu"], dtypes=["float32"],
                          scenarios=["uniform"], ns=[8, 16], ious=[0.5], timers=["wall", "api"], min_run_time=0.01,
                          rounds=2)


def test_a_sweep_writes_one_samples_line_per_ok_timed_row_paired_with_it(tmp_path, grid):
    path = tmp_path / "run.csv"
    sweep_into(path, grid)
    frame = read_results(path)
    assert list(frame.columns) == COLUMNS and set(frame.schema_version) == {SCHEMA_VERSION}  # `_samples` is no column
    ok = frame[frame.status == "ok"]
    lines = samples_path(path).read_text().splitlines()
    assert len(ok) == 8 and len(lines) == len(ok)
    found = read_samples(path)
    assert set(found) == {case_key(row) for _, row in ok.iterrows()}
    for _, row in ok.iterrows():
        samples = found[case_key(row)]
        assert len(samples.round_medians_us) == row["rounds"] and len(samples.pooled()) == row["blocks"]
        assert np.median(samples.round_medians_us) == pytest.approx(row["median_us"])
    record = json.loads(lines[0])
    assert record["machine"] == "here" and record["git_commit"] == "abc" and record["key"]["benchmark"] == "nms"


def test_skipped_and_error_rows_have_no_samples(tmp_path, grid, monkeypatch):
    path = tmp_path / "run.csv"
    monkeypatch.setattr(runner.datasets, "generate", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no boxes")))
    sweep_into(path, grid)
    assert set(read_results(path).status) == {"error"}
    assert read_samples(path) == {} and not samples_path(path).exists()


def test_resume_appends_and_force_truncates(tmp_path, grid):
    path = tmp_path / "run.csv"
    first = runner.Grid(**grid.__dict__ | {"ns": [8]})
    sweep_into(path, first)
    done = {case_key(row) for _, row in read_results(path).iterrows()}
    sweep_into(path, grid, append=True, done=done)
    assert len(samples_path(path).read_text().splitlines()) == 8 and len(read_samples(path)) == 8
    sweep_into(path, first)  # a new run over the file (--force)
    assert len(samples_path(path).read_text().splitlines()) == 4 and len(read_samples(path)) == 4


def test_a_cut_last_line_is_ignored_and_cut_before_a_resume_appends(tmp_path, grid):
    path = tmp_path / "run.csv"
    first = runner.Grid(**grid.__dict__ | {"ns": [8]})
    sweep_into(path, first)
    whole = samples_path(path).read_bytes()
    samples_path(path).write_bytes(whole + whole.splitlines(keepends=True)[0][:40])  # a run stopped mid-line
    assert len(read_samples(path)) == 4
    done = {case_key(row) for _, row in read_results(path).iterrows()}
    sweep_into(path, grid, append=True, done=done)
    assert len(read_samples(path)) == 8 and samples_path(path).read_bytes().startswith(whole)


def test_lines_without_their_row_are_ignored_and_damage_inside_is_refused(tmp_path):
    path = tmp_path / "run.csv"
    samples = Samples((1.0,), ((1.0,),))
    with ResultWriter(path, ENV, {}, "test") as writer:
        writer.write({"benchmark": "nms", "impl": "a", "n": 8, "status": "ok", "median_us": 1.0, "_samples": samples})
    with open(samples_path(path), "a") as f:  # a run stopped after a row's samples, before the row
        f.write(json.dumps(samples.record({"benchmark": "nms", "impl": "b", "n": 8}, ENV)) + "\n")
    assert list(read_samples(path)) == [case_key({"benchmark": "nms", "impl": "a", "n": 8})]
    with open(samples_path(path), "a") as f:
        f.write("not json\n" + json.dumps(samples.record({"benchmark": "nms", "impl": "a", "n": 8}, ENV)) + "\n")
    with pytest.raises(ValueError, match=r"run.samples.jsonl:3: not a samples line"):
        read_samples(path)


def test_a_csv_without_samples_reads_as_none(tmp_path):
    path = tmp_path / "run.csv"
    with ResultWriter(path, ENV, {}, "test") as writer:
        writer.write({"benchmark": "nms", "impl": "a", "n": 8, "status": "ok", "median_us": 1.0})
    assert read_samples(path) == {} and read_samples(tmp_path / "missing.csv") == {}
