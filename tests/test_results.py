"""Results rows: flushed as written, readable back, foreign files rejected, Ctrl-C kept."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from nmsbench import NMSResult, register
from nmsbench.cli import main
from nmsbench.registry import unregister
from nmsbench.results import COLUMNS, PartialRowWarning, ResultWriter, environment, folder_files, read_results


def test_rows_are_on_disk_as_soon_as_written(tmp_path):
    path = tmp_path / "r.csv"
    writer = ResultWriter(path, {"machine": "m"}, {"ns": [1]}, "nmsbench sweep --n 1")
    writer.write({"impl": "a", "n": 1, "status": "ok", "median_us": 3.5})
    # read through another handle while the writer is still open
    frame = pd.read_csv(path)
    assert len(frame) == 1 and frame.loc[0, "impl"] == "a" and frame.loc[0, "machine"] == "m"
    writer.write({"impl": "b", "n": 2, "status": "error", "error": "boom"})
    assert len(pd.read_csv(path)) == 2
    writer.close()
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["command"] == "nmsbench sweep --n 1" and meta["columns"] == COLUMNS


def test_rows_outside_the_schema_are_refused(tmp_path):
    with ResultWriter(tmp_path / "r.csv", {}, {}) as writer, pytest.raises(ValueError, match="outside the schema"):
        writer.write({"impl": "a", "colour": "red"})


def test_environment_names_the_software():
    env = environment()
    assert env["torch"] == torch.__version__ and env["numba"] and env["nmsbench"]
    assert env["timestamp"].endswith("+00:00")


def test_read_results_rejects_foreign_csv(tmp_path):
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not an nmsbench results file"):
        read_results(foreign)
    garbage = tmp_path / "garbage.csv"
    garbage.write_bytes(b"\x00\x01\x02")
    with pytest.raises(ValueError, match="garbage.csv"):
        read_results(garbage)


def test_ctrl_c_keeps_the_rows_written_so_far(tmp_path):
    calls = {"n": 0}

    @register(name="test_interrupts", family="hard", devices=("cpu",))
    def interrupts(boxes, scores, *, iou_threshold, labels=None):
        if boxes.shape[0] >= 16:
            raise KeyboardInterrupt
        calls["n"] += 1
        return NMSResult(torch.arange(boxes.shape[0]))

    out = tmp_path / "run.csv"
    try:
        result = CliRunner().invoke(main, ["sweep", "--n", "4,8,16,32", "--impl", "test_interrupts", "--scenario", "uniform",
                                           "--min-run-time", "0.01", "--out", str(out)])
    finally:
        unregister("test_interrupts")
    assert result.exit_code == 130
    assert "interrupted: 2 of 4 rows" in result.output
    frame = read_results(out)
    assert list(frame.n) == [4, 8] and set(frame.status) == {"ok"}


def test_validation_runs_once_per_case_outside_the_timed_calls(monkeypatch):
    import nmsbench.runner as runner

    validations, calls = [], []
    real_validate = runner.validate_nms_inputs
    monkeypatch.setattr(runner, "validate_nms_inputs", lambda *a: validations.append(1) or real_validate(*a))

    @register(name="test_counts_calls", family="hard", devices=("cpu",))
    def counts_calls(boxes, scores, *, iou_threshold, labels=None):
        calls.append(1)
        return NMSResult(torch.arange(boxes.shape[0]))

    rows = []
    try:
        grid = runner.Grid(impls=["test_counts_calls"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"],
                           ns=[8, 16], ious=[0.5], min_run_time=0.01)
        runner.run_sweep(grid, rows.append)
    finally:
        unregister("test_counts_calls")
    assert len(validations) == len(rows) == 2
    assert len(calls) > 10 * len(rows)  # warm-up + timed calls, none of them validating again


def test_bad_parameters_from_the_python_api_become_error_rows():
    import nmsbench.runner as runner

    rows = []
    grid = runner.Grid(impls=["matrix_fused", "torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"],
                       ns=[8], ious=[0.5], params={"sigma": -1.0}, min_run_time=0.01)
    counts = runner.run_sweep(grid, rows.append)
    by_impl = {row["impl"]: row for row in rows}
    assert {k: counts[k] for k in ("ok", "error", "skipped")} == {"ok": 1, "error": 1, "skipped": 0} and "host" in counts
    assert by_impl["matrix_fused"]["error"] == "ValueError: sigma must be a positive number, got -1.0"
    assert json.loads(by_impl["matrix_fused"]["params"]) == {"sigma": -1.0}
    assert by_impl["torchvision"]["status"] == "ok" and json.loads(by_impl["torchvision"]["params"]) == {}


def written(path, rows: list[dict], env: dict | None = None):
    with ResultWriter(path, env or {"machine": "m"}, {}) as writer:
        for row in rows:
            writer.write(row)
    return path.read_bytes().splitlines(keepends=True)


ROWS = [{"benchmark": "nms", "impl": "a", "n": 1, "status": "ok", "median_us": 1.0},
        {"benchmark": "nms", "impl": "b", "n": 2, "status": "error", "error": "x"},
        {"benchmark": "nms", "impl": "c", "n": 3, "status": "skipped"}]


def test_read_results_names_the_lines_of_rows_that_are_not_well_formed(tmp_path):
    from nmsbench.results import MalformedResults

    path = tmp_path / "r.csv"
    header, a, b, c = written(path, ROWS)
    glued = a.rstrip() + b  # two rows on one line (two writers at once): twice the fields
    fragment = b[len(b) // 2:]  # the tail of a row: fewer fields, which pandas would fill with NaN
    status = c.replace(b",skipped,", b",done,")  # the right width, an unknown status
    path.write_bytes(header + glued + fragment + status + a)
    with pytest.raises(MalformedResults) as refused:
        read_results(path)
    lines = [line for line, _ in refused.value.problems]
    assert lines == [2, 3, 4]
    message = str(refused.value)
    assert message.startswith(f"{path}: 3 rows that are not well-formed results rows: {path}:2: {2 * len(COLUMNS) - 1} "
                              f"fields where the header has {len(COLUMNS)}; {path}:3: ")
    assert f"{path}:4: status 'done' is not one of ok, error, skipped" in message


def test_read_results_refuses_one_case_in_two_rows(tmp_path):
    path = tmp_path / "r.csv"
    header, a, b, c = written(path, ROWS)
    path.write_bytes(header + a + b + c + a + a)
    with pytest.raises(ValueError, match=r"r.csv: 1 case\(s\) measured in more than one row: .*r.csv:2: "
                                         r"benchmark=nms impl=a n=1 machine=m is on lines 5, 6 too"):
        read_results(path)
    # the same case measured on another machine, or at another commit: two measurements, not a repeat
    elsewhere = ResultWriter(tmp_path / "b.csv", {"machine": "other"}, {})
    elsewhere.write(ROWS[0])
    elsewhere.close()
    later = ResultWriter(tmp_path / "c.csv", {"machine": "m", "git_commit": "abc"}, {})
    later.write(ROWS[0])
    later.close()
    rows = [(tmp_path / name).read_bytes().splitlines(keepends=True)[1] for name in ("b.csv", "c.csv")]
    path.write_bytes(header + a + b + c + b"".join(rows))
    assert list(read_results(path)["impl"]) == ["a", "b", "c", "a", "a"]


def test_a_junk_csv_without_a_last_line_end_is_not_taken_for_a_stopped_run(tmp_path):
    import warnings

    junk = tmp_path / "junk.csv"
    junk.write_bytes(b"name,age\nada,36\nbob,4")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no PartialRowWarning: the file is not a results file at all
        with pytest.raises(ValueError, match="junk.csv: not an nmsbench results file"):
            read_results(junk)
    unterminated = tmp_path / "quote.csv"
    unterminated.write_bytes(b'a,b\n"1,2\n3,4\n')
    with pytest.raises(ValueError, match=r"quote.csv: not a readable CSV \(line 2: "):
        read_results(unterminated)


def test_resume_names_the_file_and_line_of_a_garbage_line_and_changes_nothing(tmp_path):
    from nmsbench.results import open_for_resume

    env = environment()
    path = tmp_path / "r.csv"
    header, a, b, c = written(path, ROWS, env)
    damaged = header + a + b"garbage\x00line\r\n" + b + c[:20]
    path.write_bytes(damaged)
    with pytest.raises(ValueError, match=f"{path}:3: 1 fields where the header has {len(COLUMNS)}"):
        open_for_resume(path, env)
    assert path.read_bytes() == damaged  # the partial last row too: nothing is cut from a refused file
    path.write_bytes(header + a + b + c[:20])
    with pytest.warns(PartialRowWarning, match="dropped a partial last row"):
        assert len(open_for_resume(path, env)) == 2
    assert path.read_bytes() == header + a + b  # accepted: then cut


def test_the_sidecar_is_replaced_whole(tmp_path):
    path = tmp_path / "r.csv"
    with ResultWriter(path, {"machine": "m"}, {"ns": [1]}) as writer:
        writer.note("load", {"when": "start"})
    assert json.loads(path.with_suffix(".json").read_text())["load"] == [{"when": "start"}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.json"]  # no temporary file, no lock file left


def test_a_results_folders_files_are_found_at_its_top_under_runs_and_in_the_archive_when_asked(tmp_path):
    for name in ("a.csv", "runs/b.csv", "runs/mine/deep/c.csv", "archive/d.csv", "archive/gpu-check/e.csv",
                 "elsewhere/f.csv", "g.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    found = lambda *args, **kwargs: [p.relative_to(tmp_path).as_posix() for p in folder_files(tmp_path, *args, **kwargs)]  # noqa: E731
    assert found("*.csv") == ["a.csv", "runs/b.csv", "runs/mine/deep/c.csv"]
    assert found("*.csv", True) == ["a.csv", "archive/d.csv", "archive/gpu-check/e.csv", "runs/b.csv", "runs/mine/deep/c.csv"]
    assert found("*.csv", True, archive_anywhere=False) == ["a.csv", "archive/d.csv", "runs/b.csv", "runs/mine/deep/c.csv"]
    assert found("*.json") == ["g.json"] and folder_files(tmp_path / "missing", "*.csv") == []
