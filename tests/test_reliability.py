"""Reliability of sweeps: rows survive kills, --resume completes a sweep without
repeating a row, Ctrl-C stops cleanly, hanging and out-of-memory cases become error rows,
noisy measurements are re-timed, and the timed call is the call whose output was checked."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

import nmsbench.runner as runner
from nmsbench import NMSResult, register
from nmsbench.cli import main
from nmsbench.registry import unregister
from nmsbench.results import (COLUMNS, KEY_COLUMNS, SCHEMA_VERSION, PartialRowWarning, ResultWriter, case_key, environment,
                              open_for_resume, read_results)
from nmsbench import timing
from nmsbench.timing import SteadyHost

TESTS = Path(__file__).resolve().parent

SLOW_GRID = ["sweep", "--impl", "test_slow", "--scenario", "uniform", "--n", "2,4,8,16,32,64,128,256",
             "--min-run-time", "0.01", "--threads", "1"]


def cli_command(*args: str) -> list[str]:
    """``nmsbench ARGS`` in a child Python with reliability_plugin's implementations registered."""
    code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); import reliability_plugin; "
            "from nmsbench.cli import main; main()")
    return [sys.executable, "-c", code, *args]


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def data_rows(path) -> int:
    """Complete data lines in a results CSV (what a reader sees while it is written)."""
    try:
        return max(path.read_bytes().count(b"\n") - 1, 0)
    except FileNotFoundError:
        return 0


def start_and_wait(args, out, rows: int, env=None, timeout: float = 120) -> subprocess.Popen:
    """A sweep in a child process, returned once ``out`` holds at least ``rows`` rows."""
    # SIGINT as a terminal delivers it, even when this test runs in a background job (whose
    # children inherit SIGINT ignored, and Python then never raises KeyboardInterrupt)
    child = subprocess.Popen(cli_command(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + timeout
    while data_rows(out) < rows:
        if child.poll() is not None:
            pytest.fail(f"the sweep ended early ({child.returncode}): {child.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"no {rows} rows in {out} after {timeout} s")
        time.sleep(0.05)
    return child


def keys(frame: pd.DataFrame) -> list[tuple]:
    return [case_key(row) for row in frame.astype(object).where(frame.notna(), "").to_dict("records")]


# --------------------------------------------------------------------------- kill and resume


def test_sigkill_halfway_then_resume_completes_without_duplicates(tmp_path):
    out, log = tmp_path / "run.csv", tmp_path / "calls.txt"
    env = os.environ | {"NMSBENCH_TEST_CALL_LOG": str(log)}
    child = start_and_wait([*SLOW_GRID, "--out", str(out)], out, rows=3, env=env)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)
    killed = read_results(out)  # every written row parses
    assert 3 <= len(killed) < 8 and set(killed.status) == {"ok"}
    assert list(killed.n) == [2, 4, 8, 16, 32, 64, 128, 256][:len(killed)]
    log.write_text("")

    resumed = subprocess.run(cli_command(*SLOW_GRID, "--resume", str(out)), env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"({len(killed)} already there)" in resumed.stderr
    final = read_results(out)
    assert sorted(final.n) == [2, 4, 8, 16, 32, 64, 128, 256] and set(final.status) == {"ok"}
    assert len(set(keys(final))) == len(final) == 8
    assert list(final.columns) == COLUMNS
    # the resumed run called the implementation only for the missing cases
    called = {int(n) for n in log.read_text().split()}
    assert called == set(final.n) - set(killed.n)
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["resumed"] and "--resume" in meta["resumed"][0]["command"]


def stop_sweep_with(signal_number: int, out) -> tuple[int, str]:
    """Start SLOW_GRID writing ``out``, send ``signal_number`` once two rows are there;
    (exit status, stderr)."""
    child = start_and_wait([*SLOW_GRID, "--out", str(out)], out, rows=2)
    child.send_signal(signal_number)
    _, stderr = child.communicate(timeout=60)
    return child.returncode, stderr


def test_sigint_stops_cleanly_with_a_summary_and_how_to_resume(tmp_path):
    out = tmp_path / "run.csv"
    returncode, stderr = stop_sweep_with(signal.SIGINT, out)
    assert returncode == 130, stderr[-2000:]
    written = len(read_results(out))
    assert f"interrupted: {written} of 8 rows are in {out}" in stderr
    assert "Traceback" not in stderr
    resume = stderr.split("resume with: ", 1)[1].split("\n", 1)[0].strip()
    assert resume.startswith("nmsbench sweep") and resume.endswith(f"--resume {out}")
    # the printed command completes the sweep
    completed = subprocess.run(cli_command(*shlex.split(resume)[1:]), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    final = read_results(out)
    assert sorted(final.n) == [2, 4, 8, 16, 32, 64, 128, 256] and len(set(keys(final))) == 8


def test_sigterm_stops_like_ctrl_c_with_status_143(tmp_path):
    out = tmp_path / "run.csv"
    returncode, stderr = stop_sweep_with(signal.SIGTERM, out)
    assert returncode == 143, stderr[-2000:]
    written = read_results(out)  # every written row parses
    assert 2 <= len(written) < 8
    assert f"terminated (SIGTERM): {len(written)} of 8 rows are in {out}" in stderr
    assert "Traceback" not in stderr and f"--resume {out}" in stderr


def test_a_partial_last_line_is_dropped_on_load_and_cut_on_resume(tmp_path):
    out = tmp_path / "run.csv"
    args = ["sweep", "--impl", "torchvision", "--scenario", "uniform", "--n", "4,8,16", "--min-run-time", "0.01",
            "--threads", "1"]
    assert run(*args, "--out", str(out)).exit_code == 0
    whole = out.read_bytes()
    lines = whole.splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])  # a kill in the middle of the last row's write
    with pytest.warns(PartialRowWarning, match="dropped a partial last row"):
        frame = read_results(out)
    assert list(frame.n) == [4, 8]
    result = run(*args, "--resume", str(out))
    assert result.exit_code == 0, result.output
    assert "dropped a partial last row" in result.output
    final = read_results(out)
    assert list(final.n) == [4, 8, 16] and out.read_bytes().endswith(b"\n")


def test_rows_are_single_lines_even_with_newlines_in_messages(tmp_path):
    path = tmp_path / "r.csv"
    with ResultWriter(path, {"machine": "m"}, {}) as writer:
        writer.write({"impl": "a", "n": 1, "status": "error", "error": "line one\nline two\r\nthree"})
        writer.write({"impl": "b", "n": 2, "status": "ok", "median_us": 1.0})
    assert path.read_bytes().count(b"\n") == 3
    assert read_results(path).error.iloc[0] == "line one line two three"


def test_resume_refuses_another_schema_machine_or_measurement(tmp_path):
    base = ["sweep", "--impl", "torchvision", "--scenario", "uniform", "--n", "4", "--min-run-time", "0.01",
            "--threads", "1"]
    good = tmp_path / "good.csv"
    assert run(*base, "--out", str(good)).exit_code == 0

    schema4 = tmp_path / "schema4.csv"  # a file written before the device timer's activity columns
    frame = pd.read_csv(good).drop(columns=["span_us", "span_iqr_us", "launches", "copies", "syncs"])
    frame.to_csv(schema4, index=False)
    result = run(*base, "--resume", str(schema4))
    assert result.exit_code == 2
    assert f"not this nmsbench's results schema {SCHEMA_VERSION} (missing span_us, span_iqr_us, launches, copies, syncs)" in result.output

    other = tmp_path / "other.csv"
    frame = pd.read_csv(good)
    frame["machine"] = "another-host"
    frame.to_csv(other, index=False)
    result = run(*base, "--resume", str(other))
    assert result.exit_code == 2 and "written on another machine (machine: 'another-host'" in result.output

    result = run(*[a if a != "0.01" else "0.02" for a in base], "--resume", str(good))
    assert result.exit_code == 2 and "timed with --min-run-time 0.01" in result.output
    result = run(*base, "--rounds", "2", "--resume", str(good))
    assert result.exit_code == 2 and "timed with --rounds 5, this command asks for 2" in result.output
    meta = json.loads(good.with_suffix(".json").read_text())
    assert meta["grid"]["rounds"] == 5 and meta["grid"]["min_run_time"] == 0.01
    assert "--rounds 5 --min-run-time 0.01" in meta["command"]

    result = run(*base, "--resume", str(tmp_path / "missing.csv"))
    assert result.exit_code == 2 and "no such file" in result.output
    result = run(*base, "--resume", str(good), "--force")
    assert result.exit_code == 2 and "contradicts" in result.output
    before = good.read_bytes()
    assert run(*base, "--resume", str(good)).exit_code == 0  # nothing missing: nothing added
    assert good.read_bytes() == before
    del meta["grid"]["rounds"]  # a sidecar written before --rounds: timed in one round
    good.with_suffix(".json").write_text(json.dumps(meta))
    result = run(*base, "--resume", str(good))
    assert result.exit_code == 2 and "timed with --rounds 1, this command asks for 5" in result.output
    assert run(*base, "--rounds", "1", "--resume", str(good)).exit_code == 0


def test_open_for_resume_returns_the_keys_of_the_written_cases(tmp_path):
    out = tmp_path / "run.csv"
    assert run("sweep", "--impl", "torchvision,allpairs", "--scenario", "uniform", "--n", "4,8", "--min-run-time", "0.01",
               "--out", str(out)).exit_code == 0
    done = open_for_resume(out, environment())
    assert len(done) == 4 and all(len(k) == len(KEY_COLUMNS) for k in done)
    frame = read_results(out)
    assert set(keys(frame)) == done


def test_resume_runs_only_missing_rows_of_a_case(tmp_path, monkeypatch):
    """A case with one of its timer rows written runs again for the other row only."""
    rows = []
    grid = runner.Grid(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[4, 8],
                       ious=[0.5], min_run_time=0.01)
    runner.run_sweep(grid, rows.append)
    again = []
    runner.run_sweep(grid, again.append, done={case_key(rows[0])})
    assert [r["n"] for r in again] == [8]


# --------------------------------------------------------------------------- hangs and OOM


@pytest.fixture
def hanging_impl():
    @register(name="test_hangs", family="hard", devices=("cpu",), summary="loops forever in Python at n >= 8")
    def hangs(boxes, scores, *, iou_threshold, labels=None):
        while boxes.shape[0] >= 8:
            pass
        return NMSResult(torch.arange(boxes.shape[0]))

    yield "test_hangs"
    unregister("test_hangs")


def test_case_timeout_turns_a_hang_into_an_error_row_and_the_sweep_goes_on(tmp_path, hanging_impl):
    out = tmp_path / "run.csv"
    start = time.monotonic()
    result = run("sweep", "--impl", "test_hangs,torchvision", "--scenario", "uniform", "--n", "4,8,16",
                 "--min-run-time", "0.01", "--case-timeout", "0.5", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert time.monotonic() - start < 60
    frame = read_results(out).set_index(["impl", "n"])
    assert frame.loc[("test_hangs", 4), "status"] == "ok"
    for n in (8, 16):
        assert frame.loc[("test_hangs", n), "status"] == "error"
        assert "case timeout of 0.5 s (--case-timeout)" in frame.loc[("test_hangs", n), "error"]
    assert (frame.loc["torchvision", "status"] == "ok").all()
    assert "--case-timeout 0.5" in json.loads(out.with_suffix(".json").read_text())["command"]
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no alarm left armed


def test_a_timer_stopped_with_what_earlier_timers_left_names_the_case_timeout():
    """A case's timers share its --case-timeout: a later timer stopped by the remainder
    names the case's timeout and what the earlier ones took, not the remainder alone."""
    with pytest.raises(runner.CaseTimeout, match=r"case timeout of 2 s \(--case-timeout\): the case's earlier "
                                                 r"timers took 1\.9 s of it, this one the remaining 0\.1 s"):
        with runner.case_deadline(0.1, 2.0):
            while True:
                time.sleep(0.001)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_case_timeout_is_refused_off_the_main_thread():
    import threading

    errors = []
    grid = runner.Grid(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[4],
                       ious=[0.5], min_run_time=0.01, case_timeout=1.0)
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(ValueError, runner.run_sweep, grid, [].append)))
    thread.start()
    thread.join()
    assert "main thread" in str(errors[0].value)


def test_cuda_out_of_memory_becomes_an_error_row_and_the_next_case_runs(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))

    @register(name="test_cuda_oom", family="hard", devices=("cpu",), summary="raises CUDA OOM at n=16")
    def oom(boxes, scores, *, iou_threshold, labels=None):
        if boxes.shape[0] == 16:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")
        return NMSResult(torch.arange(boxes.shape[0]))

    rows = []
    try:
        grid = runner.Grid(impls=["test_cuda_oom"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"],
                           ns=[8, 16, 32], ious=[0.5], min_run_time=0.01)
        counts = runner.run_sweep(grid, rows.append)
    finally:
        unregister("test_cuda_oom")
    assert [(r["n"], r["status"]) for r in rows] == [(8, "ok"), (16, "error"), (32, "ok")]
    assert rows[1]["error"] == "OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB"
    assert emptied == [1] and counts["error"] == 1


def test_n_beyond_memory_is_refused_up_front(tmp_path):
    result = run("sweep", "--n", "1000000000000", "--scenario", "uniform", "--impl", "torchvision",
                 "--out", str(tmp_path / "x.csv"))
    assert result.exit_code == 2 and "boxes need about" in result.output and "GiB available" in result.output
    assert not (tmp_path / "x.csv").exists()
    from nmsbench import datasets

    with pytest.raises(ValueError, match="n=1,000,000,000,000 boxes need about"):
        datasets.generate("clustered", 10**12)


# --------------------------------------------------------------------------- measurements


@pytest.fixture
def logged_impl():
    """An implementation that logs the arguments of every call."""
    calls = []

    @register(name="test_logs_calls", family="hard", devices=("cpu",), summary="keeps every box, logs its calls")
    def logs(boxes, scores, *, iou_threshold, labels=None):
        calls.append((boxes.data_ptr(), scores.data_ptr(), boxes.dtype, iou_threshold, labels is None))
        return NMSResult(torch.arange(boxes.shape[0]))

    yield calls
    unregister("test_logs_calls")


def test_the_timed_callable_is_the_checked_one(monkeypatch, logged_impl):
    """The warm-up call (whose output is compared with the reference) and every timed call
    go through one callable with identical arguments; nothing else calls the backend."""
    timers = []
    real_wall_timer = timing.WallTimer

    class Spy(real_wall_timer):
        def __init__(self, fn, **kwargs):
            timers.append(fn)
            super().__init__(fn, **kwargs)

    monkeypatch.setattr(timing, "WallTimer", Spy)
    checked = []
    real_compare = runner.compare_keep
    monkeypatch.setattr(runner, "compare_keep", lambda keep, ref: checked.append((len(logged_impl), keep)) or real_compare(keep, ref))
    rows = []
    grid = runner.Grid(impls=["test_logs_calls"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[16],
                       ious=[0.5], min_run_time=0.01, repeat_noisy=0, rounds=3)
    runner.run_sweep(grid, rows.append, gauge=timing.SteadyHost())  # no round left out for a slow host (CI is busy)
    assert len(rows) == 1 and rows[0]["kept"] == 16 and rows[0]["rounds"] == 3
    assert checked == [(1, checked[0][1])]  # compared right after the first (warm-up) call
    assert len(timers) == 1  # one timer for the row, its block size fixed once for every round
    assert len(logged_impl) > 1 + rows[0]["runs"] - 1  # the timed calls, plus the warm-up and the calibration
    assert len(set(logged_impl)) == 1  # the timed calls got exactly the warm-up call's arguments
    # and the timed callable is that call: calling it again reproduces the checked output
    assert timers[0]().keep.tolist() == list(range(16)) and len(set(logged_impl)) == 1


def fake_blocks(*medians_and_spreads):
    """A WallTimer stand-in whose successive measurements have the given (median, IQR/median):
    five blocks each, at median * (1 - s, 1 - s/2, 1, 1 + s/2, 1 + s)."""
    values = iter(medians_and_spreads)

    class Fake:
        def __init__(self, fn, **kwargs):
            self.fn = fn

        def blocks(self, seconds):
            self.fn()
            median, s = next(values)
            return timing.Blocks(np.array([1 - s, 1 - s / 2, 1, 1 + s / 2, 1 + s]) * median, 5)

    return Fake


def test_repeat_noisy_retimes_the_same_call_and_keeps_the_least_noisy(monkeypatch, logged_impl):
    # IQR / median of five blocks at (1 - s, 1 - s/2, 1, 1 + s/2, 1 + s) is s
    monkeypatch.setattr(timing, "WallTimer", fake_blocks((100, 0.5), (100, 0.3), (100, 0.4), (100, 0.05), (100, 0.01)))
    monkeypatch.setattr(timing.CpuMeter, "contention", lambda self: "")
    monkeypatch.setattr("nmsbench.engine.rounds.HostGauge", SteadyHost)  # start_run makes the default gauge
    rows = []
    grid = runner.Grid(impls=["test_logs_calls"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[8],
                       ious=[0.5], min_run_time=0.01, repeat_noisy=5, rounds=1)
    runner.run_sweep(grid, rows.append)
    row = rows[0]
    assert row["attempts"] == 4 and row["rel_spread"] == pytest.approx(0.05) and not row["noisy"] and row["noise"] == ""
    assert len(set(logged_impl)) == 1

    monkeypatch.setattr(timing, "WallTimer", fake_blocks((100, 0.5), (100, 0.3), (100, 0.4)))
    rows.clear()
    runner.run_sweep(runner.Grid(**grid.__dict__ | {"repeat_noisy": 2}), rows.append)
    assert rows[0]["attempts"] == 3 and rows[0]["rel_spread"] == pytest.approx(0.3) and rows[0]["noisy"]
    assert rows[0]["noise"] == "IQR 30% of the median"


def test_noisy_rows_are_warned_about_and_listed_in_the_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(timing, "WallTimer", fake_blocks(*[(10, 0.5)] * 6))
    monkeypatch.setattr(timing.CpuMeter, "contention", lambda self: "")
    monkeypatch.setattr("nmsbench.engine.rounds.HostGauge", SteadyHost)  # the noise asserted is the IQR's alone, on any machine
    out = tmp_path / "run.csv"
    result = run("sweep", "--impl", "torchvision", "--scenario", "uniform", "--n", "4,8", "--min-run-time", "0.01",
                 "--repeat-noisy", "2", "--rounds", "1", "--verbose", "--out", str(out))
    assert result.exit_code == 0, result.output
    # the warning (--verbose) names the whole case
    assert result.output.count("noisy torchvision cpu float32 wall uniform overlap=") == 2
    assert "torchvision cpu float32 wall uniform overlap=0.05 n=8 iou=0.5: IQR 50% of the median (after 3 timings)" in result.output
    assert "warning: 2 noisy row(s)" in result.output and "2 noisy" in result.output
    frame = read_results(out)
    assert list(frame.attempts) == [3, 3] and frame.noisy.all() and set(frame.noise) == {"IQR 50% of the median"}
    assert "--repeat-noisy 2" in json.loads(out.with_suffix(".json").read_text())["command"]


def test_schema_2_files_still_load_without_attempts(tmp_path):
    committed = sorted(p for p in Path(__file__).resolve().parent.parent.glob("results/*.csv") if "conformance" not in p.name)
    older = [path for path in committed if pd.read_csv(path, usecols=["schema_version"]).schema_version.max() < 3]
    assert older
    for path in older:
        frame = read_results(path)
        assert "attempts" in frame.columns and frame["attempts"].isna().all()


def test_resume_of_real_and_file_scenarios_keys_by_the_requested_case(tmp_path):
    """Recorded scenarios write the N they used (n) and the cap (n_cap); a larger cap that gives
    the same box set is a skipped row; a file too short for n gives error rows. Resuming
    any of them adds nothing that is already there."""
    import numpy as np

    boxes = tmp_path / "b.npz"
    np.savez(boxes, boxes=np.array([[0, 0, 1, 1]] * 5, np.float32), scores=np.linspace(0.1, 0.9, 5).astype(np.float32))
    out = tmp_path / "run.csv"
    args = ["sweep", "--impl", "torchvision", "--scenario", "real,file", "--file", str(boxes), "--n", "5,100000",
            "--overlap", "0.25", "--min-run-time", "0.01", "--threads", "1"]
    result = run(*args, "--out", str(out))
    assert result.exit_code == 2 and "holds 5 boxes" in result.output  # the CLI refuses up front...
    grid = runner.Grid(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["real", "file"],
                       ns=[5, 100000], ious=[0.5], overlaps=[0.25], file=str(boxes), min_run_time=0.01)
    rows = []
    runner.run_sweep(grid, rows.append)  # ...the runner turns it into error rows
    assert [r["status"] for r in rows] == ["ok", "skipped", "ok", "error"]  # few real candidates pass 0.25
    assert rows[1]["n_cap"] == 100000 and rows[1]["n"] < 100000
    for cut in range(len(rows) + 1):
        again = []
        runner.run_sweep(grid, again.append, done={case_key(r) for r in rows[:cut]})
        assert [case_key(r) for r in again] == [case_key(r) for r in rows[cut:]]
    # and the keys read back from a CSV match the runner's (text vs numbers, blanks)
    args = ["sweep", "--impl", "torchvision", "--scenario", "real", "--n", "5,100000", "--overlap", "0.25",
            "--min-run-time", "0.01", "--threads", "1"]
    assert run(*args, "--out", str(out)).exit_code == 0
    before = out.read_bytes()
    out.write_bytes(before[:before.rstrip(b"\n").rfind(b"\n") + 1])  # drop the skipped row
    assert run(*args, "--resume", str(out)).exit_code == 0
    assert run(*args, "--resume", str(out)).exit_code == 0
    final = read_results(out)
    assert list(final.status) == ["ok", "skipped"] and list(final.n_cap) == [5, 100000]


# --------------------------------------------------------------------------- a loaded CPU


def _pinned(cpus):
    def pin():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.sched_setaffinity(0, cpus)
    return pin


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="pins processes to two CPUs (Linux)")
def test_a_parallel_backend_oversubscribed_by_a_busy_core_is_flagged_or_correct(tmp_path):
    """A busy process holds one of two CPUs; a numba parallel backend swept with --threads 2
    on those two CPUs waits for the busy one. Its rows must come out noisy, or within
    reach of the same sweep with --threads 1 (which leaves the busy CPU alone)."""
    cpus = set(sorted(os.sched_getaffinity(0))[:2])
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_pinned({min(cpus)}))
    try:
        frames = {}
        for threads in (1, 2):
            out = tmp_path / f"threads{threads}.csv"
            args = ["sweep", "--impl", "allpairs,hard_fused", "--scenario", "uniform", "--n", "512,2048",
                    "--min-run-time", "0.1", "--threads", str(threads), "--out", str(out)]
            done = subprocess.run(cli_command(*args), capture_output=True, text=True, timeout=600,
                                  preexec_fn=_pinned(cpus))
            assert done.returncode == 0, done.stderr[-3000:]
            frames[threads] = read_results(out).set_index(["impl", "n"])
            if threads == 2:
                assert "warning" in done.stderr or frames[2].noisy.any()
    finally:
        busy.kill()
        busy.wait()
    one, two = frames[1], frames[2]
    assert set(two.status) == {"ok"}
    for case, row in two.iterrows():
        assert row.noisy or row.median_us <= 2 * one.loc[case, "median_us"], (
            f"{case}: {row.median_us:.0f} µs with --threads 2 against {one.loc[case, 'median_us']:.0f} µs with "
            f"--threads 1, and not flagged ({row.noise!r})")
    assert two.noise.str.contains("other processes kept").any()  # the meter saw the busy CPU


@pytest.mark.parametrize("signal_number, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_the_program_starts_exits_quietly(tmp_path, signal_number, status):
    """Ctrl-C (SIGINT) or SIGTERM while `nmsbench` still imports its modules: the usual
    status and one line, no traceback."""
    script = Path(sys.executable).parent / "nmsbench"
    if not script.exists():
        pytest.skip("the nmsbench console script is not installed next to this Python")
    child = subprocess.Popen([str(script), "sweep", "--n", "4", "--impl", "torchvision", "--scenario", "uniform",
                              "--out", str(tmp_path / "run.csv")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(0.5)  # after the interpreter started, while torch is imported
    child.send_signal(signal_number)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == status, stderr[-2000:]
    assert "Traceback" not in stderr and "Aborted" not in stderr
    assert ("terminated" if signal_number == signal.SIGTERM else "interrupted") in stderr
