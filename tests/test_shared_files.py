"""Results files are safe to share: one run writes a file at a time (the others are refused,
naming it), a refused --resume leaves the file byte for byte as it was, and damaged rows or
a case measured twice are reported with the file and line by every reader.

No test races two timers: a run that must hold the lock holds it until the test lets it go
(a gate file, or a lock the test process takes itself)."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nmsbench.cli import main
from nmsbench.results import ResultsFileBusy, ResultsLock, case_key, lock_path, read_results, sidecar_path

REPO = Path(__file__).resolve().parent.parent
SWEEP = ["sweep", "--n", "64", "--impl", "torchvision", "--scenario", "uniform", "--device", "cpu",
         "--min-run-time", "0.01", "--threads", "1"]

# a sweep in a child process with one more implementation, test_gate, that waits for the file
# NMSBENCH_TEST_GATE to exist before it returns: the run holds its file's lock until the test
# creates the gate, however slow the machine
GATED_CHILD = """
import os, sys, time, torch
from nmsbench import NMSResult, register

@register(name="test_gate", family="hard", devices=("cpu",), summary="waits for the gate file, keeps every box")
def gate(boxes, scores, *, iou_threshold, labels=None):
    deadline = time.monotonic() + 600
    while not os.path.exists(os.environ["NMSBENCH_TEST_GATE"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return NMSResult(torch.arange(boxes.shape[0]))

from nmsbench.cli import main
main()
"""


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """A complete results file (and sidecar) of SWEEP; copy it before changing it."""
    out = tmp_path_factory.mktemp("swept") / "run.csv"
    result = run(*SWEEP, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def copy_of(swept: Path, folder: Path, name: str = "run.csv") -> Path:
    out = folder / name
    out.write_bytes(swept.read_bytes())
    sidecar_path(out).write_bytes(sidecar_path(swept).read_bytes())
    return out


def wait_first(children: list[subprocess.Popen], timeout: float = 600) -> subprocess.Popen:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in children:
            if child.poll() is not None:
                return child
        time.sleep(0.05)
    pytest.fail(f"neither sweep ended in {timeout} s")


def wait_for_header(out: Path, writer: subprocess.Popen, timeout: float = 600) -> None:
    """Wait until ``writer`` has put the header line in ``out``: a run takes the file's lock a
    moment before it opens the file (it reads the machine first), and a refused run can end
    in between."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if out.exists() and b"\n" in out.read_bytes():
            return
        if writer.poll() is not None:
            pytest.fail(f"the run holding {out} ended (status {writer.returncode}) before writing its header")
        time.sleep(0.05)
    pytest.fail(f"{out} had no header line after {timeout} s")


# --------------------------------------------------------------------------- one writer at a time


def test_two_sweeps_on_one_file_one_runs_and_the_other_is_refused_naming_it(tmp_path):
    out, gate = tmp_path / "shared.csv", tmp_path / "gate"
    env = os.environ | {"NMSBENCH_TEST_GATE": str(gate)}
    args = [*SWEEP[:4], "torchvision,test_gate", *SWEEP[5:], "--out", str(out)]
    children = [subprocess.Popen([sys.executable, "-c", GATED_CHILD, *args], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        # the winner waits at the gate while it holds the lock, so the other meets the lock
        loser = wait_first(children)
        winner = next(c for c in children if c is not loser)
        _, stderr = loser.communicate(timeout=60)
        assert loser.returncode == 2, stderr[-3000:]
        assert f"cannot write {out}: another run is writing it (pid {winner.pid} on " in flat(stderr)
        assert "Traceback" not in stderr
        assert json.loads(lock_path(out).read_text())["pid"] == winner.pid

        # --force and --resume while the winner writes: refused, the file untouched
        wait_for_header(out, winner)
        before = out.read_bytes()
        forced = run(*SWEEP, "--out", str(out), "--force")
        assert forced.exit_code == 2 and f"another run is writing it (pid {winner.pid} on " in flat(forced.output)
        resumed = run(*SWEEP, "--resume", str(out))
        assert resumed.exit_code == 2 and f"cannot resume {out}: another run is writing it (pid {winner.pid}" in \
            flat(resumed.output)
        assert out.read_bytes() == before
    finally:
        gate.touch()
    _, stderr = winner.communicate(timeout=600)
    assert winner.returncode == 0, stderr[-3000:]
    frame = read_results(out)
    keys = [case_key(row) for row in frame.astype(object).where(frame.notna(), "").to_dict("records")]
    assert sorted(frame["impl"]) == ["test_gate", "torchvision"] and len(set(keys)) == len(keys) == 2
    assert not lock_path(out).exists()  # released with the run


PIPELINE = ["pipeline", "--source", "real", "--batch", "1", "--pipeline", "numpy", "--stage", "total",
            "--min-run-time", "0.001", "--threads", "1"]
ACCURACY = ["accuracy", "--images", "2", "--impl", "torchvision", "--source", "scenes-sparse", "--threads", "1"]


def test_a_held_lock_refuses_every_writer_and_they_leave_the_file_alone(tmp_path, swept):
    out = copy_of(swept, tmp_path)
    before, sidecar = out.read_bytes(), sidecar_path(out).read_bytes()
    with ResultsLock(out, "pytest holds it"):
        attempts = {
            "sweep": run(*SWEEP, "--out", str(out)),
            "sweep --force": run(*SWEEP, "--out", str(out), "--force"),
            "sweep --resume": run(*SWEEP[:2], "32,64", *SWEEP[3:], "--resume", str(out)),
            "pipeline --force": run(*PIPELINE, "--out", str(out), "--force"),
            "accuracy --force": run(*ACCURACY, "--out", str(out), "--force"),
        }
        for what, result in attempts.items():
            assert result.exit_code == 2, (what, result.output)
            assert f"(pid {os.getpid()} on " in flat(result.output) and "pytest holds it" in result.output, what
        assert out.read_bytes() == before and sidecar_path(out).read_bytes() == sidecar
    assert not lock_path(out).exists()
    # released: the same resume now runs, and adds the one case the file lacks
    result = run(*SWEEP[:2], "32,64", *SWEEP[3:], "--resume", str(out))
    assert result.exit_code == 0, result.output
    assert sorted(read_results(out)["n"]) == [32, 64]


def test_a_writer_that_dies_leaves_no_lock_behind(tmp_path):
    out = tmp_path / "run.csv"
    # the lock module alone: the child needs no torch
    code = ("import importlib.util, sys, time; "
            f"spec = importlib.util.spec_from_file_location('results_lock', {str(REPO / 'nmsbench' / 'results_lock.py')!r}); "
            "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
            "lock = module.ResultsLock(sys.argv[1], 'the child'); print('held', flush=True); time.sleep(600)")
    child = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(ResultsFileBusy) as busy:
            ResultsLock(out)
        assert busy.value.holder["pid"] == child.pid and busy.value.holder["command"] == "the child"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    assert lock_path(out).exists()  # left behind by the kill, but no longer locked
    with ResultsLock(out, "after the kill") as lock:
        assert json.loads(lock.lock_file.read_text())["pid"] == os.getpid()
    assert not lock_path(out).exists()


def test_a_forked_child_does_not_give_its_parents_lock_away(tmp_path):
    out = tmp_path / "run.csv"
    with ResultsLock(out, "parent") as lock:
        child = os.fork()
        if child == 0:  # pragma: no cover (the child: a worker that tidies up what it inherited)
            lock.release()
            os._exit(0)
        os.waitpid(child, 0)
        with pytest.raises(ResultsFileBusy):
            ResultsLock(out)
        assert lock_path(out).exists()


def test_the_python_writer_takes_the_lock_too(tmp_path):
    from nmsbench.results import ResultWriter

    path = tmp_path / "r.csv"
    with ResultWriter(path, {"machine": "m"}, {}) as writer:
        writer.write({"impl": "a", "n": 1, "status": "ok", "median_us": 1.0})
        with pytest.raises(ResultsFileBusy, match=f"pid {os.getpid()} on "):
            ResultWriter(path, {"machine": "m"}, {})
    assert len(read_results(path)) == 1 and not lock_path(path).exists()


# --------------------------------------------------------------------------- a refused resume changes nothing


def damage(kind: str, out: Path) -> str:
    """Damage ``out`` (a copy of the swept file) by ``kind``; what the refusal must say."""
    lines = out.read_bytes().splitlines(keepends=True)
    partial = lines[1][:50]  # a row cut short: a resume that goes ahead cuts it, a refused one must not
    if kind == "foreign file":  # the issue's reproducer
        out.write_bytes(b"id,name,notes\n1,alpha,keep me\n2,beta,no newline")
        return "its header is not this nmsbench's results schema"
    if kind == "garbage line":
        out.write_bytes(lines[0] + b"garbage,in,the,middle\r\n" + lines[1] + partial)
        return f"{out}:2: 4 fields where the header has"
    if kind == "fragment row":  # the right field count, but no status: a fragment of a row reads so
        header, row = csv.reader([lines[0].decode(), lines[1].decode()])
        row[header.index("status")] = ""
        text = io.StringIO()
        csv.writer(text).writerow(row)
        out.write_bytes(lines[0] + lines[1] + text.getvalue().encode() + partial)
        return f"{out}:3: status '' is not one of ok, error, skipped"
    if kind == "case twice":
        out.write_bytes(lines[0] + lines[1] + lines[1] + partial)
        return f"{out}:2: benchmark=nms impl=torchvision device=cpu"
    if kind == "missing sidecar":
        out.write_bytes(out.read_bytes() + partial)
        sidecar_path(out).unlink()
        return "its sidecar " + str(sidecar_path(out)) + " is missing"
    if kind == "half-written sidecar":
        out.write_bytes(out.read_bytes() + partial)
        text = sidecar_path(out).read_text()
        sidecar_path(out).write_text(text[:len(text) // 2])
        return "is not readable JSON"
    if kind == "deeply nested sidecar":  # json.loads recurses once a level
        out.write_bytes(out.read_bytes() + partial)
        sidecar_path(out).write_text("[" * 200_000 + "]" * 200_000)
        return "is not readable JSON"
    if kind == "sidecar without --min-run-time":
        out.write_bytes(out.read_bytes() + partial)
        meta = json.loads(sidecar_path(out).read_text())
        del meta["grid"]["min_run_time"]
        sidecar_path(out).write_text(json.dumps(meta))
        return "records no --min-run-time"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["foreign file", "garbage line", "fragment row", "case twice", "missing sidecar",
                                  "half-written sidecar", "deeply nested sidecar", "sidecar without --min-run-time"])
def test_a_refused_resume_leaves_the_file_byte_identical(tmp_path, swept, kind):
    out = copy_of(swept, tmp_path, "mydata.csv")
    says = damage(kind, out)
    before = out.read_bytes()
    sidecar = sidecar_path(out).read_bytes() if sidecar_path(out).exists() else None
    result = run(*SWEEP[:2], "32,64", *SWEEP[3:], "--resume", str(out))
    assert result.exit_code == 2, result.output
    assert says in flat(result.output) and "Traceback" not in result.output
    assert out.read_bytes() == before
    assert (sidecar_path(out).read_bytes() if sidecar_path(out).exists() else None) == sidecar
    assert not lock_path(out).exists()


def test_the_issues_reproducer_in_a_real_process(tmp_path):
    data = tmp_path / "mydata.csv"
    data.write_bytes(b"id,name,notes\n1,alpha,keep me\n2,beta,no newline")
    result = subprocess.run([sys.executable, "-m", "nmsbench.cli", *SWEEP, "--resume", str(data)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "cannot resume" in result.stderr and data.read_bytes() == b"id,name,notes\n1,alpha,keep me\n2,beta,no newline"


def test_other_measurement_settings_are_refused_before_a_partial_row_is_cut(tmp_path, swept):
    out = copy_of(swept, tmp_path)
    out.write_bytes(out.read_bytes() + b"8,torchvision,hard,cpu")
    before = out.read_bytes()
    for changed in (["--min-run-time", "0.02"], ["--rounds", "2"]):
        result = run(*SWEEP, *changed, "--resume", str(out))
        assert result.exit_code == 2 and "rows of one file must be measured alike" in result.output, result.output
        assert out.read_bytes() == before


def test_resume_without_metadata_is_an_explicit_choice(tmp_path, swept):
    out = copy_of(swept, tmp_path)
    sidecar_path(out).unlink()
    refused = run(*SWEEP[:2], "32,64", *SWEEP[3:], "--resume", str(out))
    assert refused.exit_code == 2 and "--resume-without-metadata" in refused.output
    alone = run(*SWEEP, "--out", str(tmp_path / "new.csv"), "--resume-without-metadata")
    assert alone.exit_code == 2 and "it goes with --resume FILE" in flat(alone.output)
    result = run(*SWEEP[:2], "32,64", *SWEEP[3:], "--resume", str(out), "--resume-without-metadata")
    assert result.exit_code == 0, result.output
    assert "resuming without checking" in flat(result.output)
    assert sorted(read_results(out)["n"]) == [32, 64]
    assert "--resume-without-metadata" in run("sweep", "--help").output


# --------------------------------------------------------------------------- readers name the damage


@pytest.fixture
def twice(tmp_path, swept) -> Path:
    """A results file with its one case on lines 2 and 3."""
    out = tmp_path / "twice.csv"
    lines = swept.read_bytes().splitlines(keepends=True)
    out.write_bytes(lines[0] + lines[1] + lines[1])
    return out


@pytest.mark.parametrize("command", ["export", "plot"])
def test_export_and_plot_refuse_a_case_measured_twice(tmp_path, twice, command):
    args = [command, str(twice)] + (["-o", str(tmp_path / "figure.svg")] if command == "plot" else [])
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "twice.csv:2: benchmark=nms impl=torchvision" in flat(result.output) and "on line 3 too" in flat(result.output)


def test_the_dashboard_names_the_damage_instead_of_crashing(tmp_path, monkeypatch, twice):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("NMSBENCH_RESULTS_DIR", str(tmp_path / "empty"))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=90)
    at.run()
    at.file_uploader(key="uploads").upload("twice.csv", twice.read_bytes(), "text/csv").run()
    assert not at.exception
    errors = [flat(e.value) for e in at.sidebar.error]
    assert any(e.startswith("upload twice.csv: 1 case(s) measured in more than one row: twice.csv:2:") for e in errors), errors
    # a junk CSV without a final line end: what is wrong with it, not "a run was stopped while writing it"
    at.file_uploader(key="uploads").upload("junk.csv", b"name,age\nada,36\nbob,4", "text/csv").run()
    assert not at.exception
    errors = [flat(e.value) for e in at.sidebar.error]
    assert any(e.startswith("upload junk.csv: not an nmsbench results file (missing columns") for e in errors), errors
    assert not any("stopped while writing" in w.value for w in at.sidebar.warning)
