"""Large N on the CPU: an N^2 allocation is refused with its figure before it is made, a
sweep at N = 2^20 writes its rows (its overlap measurement is sampled: test_overlap.py),
and SIGTERM or Ctrl-C stop a run inside a native call that does not return."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import nmsbench.memory_guard as memory_guard
import nmsbench.runner as runner
from nmsbench import run_nms
from nmsbench.datasets import generate
from nmsbench.memory_guard import InsufficientMemory, check_fits, gib
from nmsbench.results import read_results
from nmsbench.stopping import GRACE, NATIVE_GRACE, Watchdog

BIG = 1 << 20
# the CPU backends whose memory grows as N^2, and what they need at N = 2^20 (float32)
CPU_SQUARED = {"bitmask_two_phase": (BIG * BIG // 8, "N²/8 bytes"), "bitmask_classic": (BIG * BIG // 8, "N²/8 bytes"),
               "cluster": (5 * BIG * BIG * 4, "5 N² x 4 bytes"), "matrix_naive": (5 * BIG * BIG * 4, "5 N² x 4 bytes")}
CUDA_SQUARED = ("bitmask_two_phase", "bitmask_classic", "cluster", "matrix_naive", "hard_fused", "diou_nms",
                "weighted_nms", "torchvision", "soft_rounds")


# --------------------------------------------------------------------------- the memory guard


def test_the_refusal_names_both_figures(monkeypatch):
    monkeypatch.setattr(memory_guard, "host_free_bytes", lambda: int(20.1 * 2**30))
    with pytest.raises(InsufficientMemory) as info:
        check_fits("bitmask_two_phase", BIG * BIG // 8, "cpu", n=BIG, formula="N²/8 bytes")
    assert str(info.value) == ("bitmask_two_phase needs 128.0 GiB for 1048576 boxes (N²/8 bytes); the device (cpu) "
                               "has 20.1 GiB free")
    assert isinstance(info.value, MemoryError) and info.value.needed == 2**37 and info.value.device == "cpu"
    check_fits("bitmask_two_phase", 20 * 2**30, "cpu", n=BIG, formula="N²/8 bytes")  # fits: no exception


def test_small_allocations_read_no_free_memory(monkeypatch):
    def unreadable():
        raise AssertionError("read free memory for a small allocation")

    monkeypatch.setattr(memory_guard, "host_free_bytes", unreadable)
    check_fits("x", memory_guard.CHECK_FROM_BYTES - 1, "cpu", n=1, formula="")
    monkeypatch.setattr(memory_guard, "host_free_bytes", lambda: None)  # unknown: the call goes on
    check_fits("x", 1 << 50, "cpu", n=1, formula="")


def test_units_and_a_cgroup_limit(tmp_path):
    assert [gib(x) for x in (12000, 3 * 2**20, 2**37, 20 * 2**40)] == ["11.7 KiB", "3.0 MiB", "128.0 GiB", "20.0 TiB"]
    (tmp_path / "memory.max").write_text("8589934592\n")
    (tmp_path / "memory.current").write_text("6442450944\n")
    (tmp_path / "memory.stat").write_text("anon 1\ninactive_file 1073741824\nactive_file 5\n")
    assert memory_guard._cgroup_headroom(tmp_path) == 3 * 2**30  # 8 - 6 + 1 GiB of reclaimable page cache
    (tmp_path / "memory.max").write_text("max\n")
    assert memory_guard._cgroup_headroom(tmp_path) is None
    assert memory_guard.host_free_bytes() > 0


@pytest.mark.parametrize("impl", sorted(CPU_SQUARED))
def test_every_squared_cpu_backend_asks_first(monkeypatch, impl):
    """With little free memory (faked) each refuses before it allocates, naming itself."""
    monkeypatch.setattr(memory_guard, "CHECK_FROM_BYTES", 0)
    monkeypatch.setattr(memory_guard, "host_free_bytes", lambda: 2**10)
    bs = generate("uniform", 1000, seed=0)
    with pytest.raises(InsufficientMemory, match=rf"^{impl} needs .* for 1000 boxes \({CPU_SQUARED[impl][1]}"):
        run_nms(impl, bs.boxes, bs.scores, 0.5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("impl", CUDA_SQUARED)
def test_every_squared_cuda_backend_asks_first(monkeypatch, impl):
    import nmsbench.variants.hard_fused.cuda as hard_fused_cuda

    monkeypatch.setattr(memory_guard, "CHECK_FROM_BYTES", 0)
    monkeypatch.setattr(hard_fused_cuda, "CHECK_FROM_BYTES", 0)
    monkeypatch.setattr(memory_guard, "free_bytes", lambda device: 2**10)
    bs = generate("uniform", 1000, seed=0).to("cuda")
    with pytest.raises(InsufficientMemory, match=rf"^{impl} needs .* for \d+ boxes .*; the device \(cuda"):
        run_nms(impl, bs.boxes, bs.scores, 0.5)


def test_a_sweep_turns_the_refusal_into_an_error_row_and_goes_on(monkeypatch):
    monkeypatch.setattr(memory_guard, "CHECK_FROM_BYTES", 0)
    monkeypatch.setattr(memory_guard, "host_free_bytes", lambda: 2**10)
    rows = []
    grid = runner.Grid(impls=["bitmask_two_phase", "torchvision"], devices=["cpu"], dtypes=["float32"],
                       scenarios=["uniform"], ns=[300], ious=[0.5], timers=["wall"], min_run_time=0.01, rounds=1)
    runner.run_sweep(grid, rows.append)
    by_impl = {row["impl"]: row for row in rows}
    assert by_impl["torchvision"]["status"] == "ok"
    assert by_impl["bitmask_two_phase"]["status"] == "error"
    assert by_impl["bitmask_two_phase"]["error"] == (  # 300 rows of 10 32-bit words
        "InsufficientMemory: bitmask_two_phase needs 11.7 KiB for 300 boxes (N²/8 bytes: its N x N-bit suppression "
        "mask); the device (cpu) has 1.0 KiB free")


# --------------------------------------------------------------------------- a sweep at N = 2^20


def sweep(*args: str, timeout: float, plugin: str = "", env=None) -> subprocess.CompletedProcess:
    """``nmsbench ARGS`` in a child Python (``plugin``: code it runs first)."""
    code = plugin + "\nfrom nmsbench.cli import main\nmain()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_a_million_boxes_on_the_cpu_write_their_rows(tmp_path):
    """torchvision's rows, and the N^2 backends' refusals with their figures. The bound is
    the child's timeout: before the overlap was sampled this sweep wrote nothing for many
    minutes. (A crowded canvas: boxes as wide as it, so greedy NMS keeps few boxes and
    torchvision's own calls take about a second.)"""
    free = memory_guard.host_free_bytes() or 0
    squared = [impl for impl, (needed, _) in CPU_SQUARED.items() if needed > free]  # refused here, never run for hours
    out = tmp_path / "big.csv"
    done = sweep("sweep", "--n", str(BIG), "--device", "cpu", "--impl", ",".join(["torchvision", *squared]),
                 "--scenario", "uniform", "--overlap", "1.0", "--timer", "wall", "--rounds", "1", "--min-run-time",
                 "0.01", "--threads", "2", "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    frame = read_results(out).set_index("impl")
    assert frame.loc["torchvision", "status"] == "ok" and frame.loc["torchvision", "kept"] > 0
    assert 0.9 < frame.loc["torchvision", "mean_max_iou"] <= 1  # the sampled estimate (boxes this large all overlap)
    for impl in squared:
        needed, formula = CPU_SQUARED[impl]
        assert frame.loc[impl, "status"] == "error"
        assert frame.loc[impl, "error"].startswith(f"InsufficientMemory: {impl} needs {gib(needed)} for {BIG} boxes "
                                                   f"({formula}")
        assert "the device (cpu) has " in frame.loc[impl, "error"]


# --------------------------------------------------------------------------- stopping inside a native call

# Registered in the child only: each hangs (for hours) inside one native call from N = 64
# on, after touching the file NMSBENCH_TEST_HANG_MARK names.
HANGS = """
import os
import numpy as np
import torch
from numba import njit
from nmsbench import NMSResult, register

@njit
def holding_the_gil(count):
    total = 0.0
    for i in range(count):
        total += np.sqrt(i)
    return total

@njit(nogil=True)
def without_the_gil(count):
    total = 0.0
    for i in range(count):
        total += np.sqrt(i)
    return total

holding_the_gil(2), without_the_gil(2)  # compiled now, not inside the case
MATRIX = torch.ones(5000, 5000, dtype=torch.float64)

def hang(kind):
    def call():
        if kind == "numba_gil":
            holding_the_gil(10**15)
        elif kind == "numba_nogil":
            without_the_gil(10**15)
        else:  # one torch op, minutes long on one thread
            while True:
                torch.linalg.matrix_power(MATRIX, 2**30)
    return call

for kind in ("numba_gil", "numba_nogil", "torch"):
    def make(kind=kind, call=hang(kind)):
        @register(name="test_hang_" + kind, family="hard", devices=("cpu",), summary="hangs in a native call")
        def hangs(boxes, scores, *, iou_threshold, labels=None):
            if boxes.shape[0] >= 64:
                open(os.environ["NMSBENCH_TEST_HANG_MARK"], "w").close()
                call()
            return NMSResult(torch.arange(boxes.shape[0]))
    make()
"""


@pytest.mark.parametrize(("kind", "signal_number", "status", "grace"), [
    ("numba_gil", signal.SIGTERM, 143, NATIVE_GRACE),  # no Python thread can run: the numba watchdog exits
    ("numba_nogil", signal.SIGINT, 130, GRACE),
    ("torch", signal.SIGTERM, 143, GRACE),
])
def test_a_signal_stops_a_run_stuck_in_a_native_call_and_keeps_its_rows(tmp_path, kind, signal_number, status, grace):
    out, mark = tmp_path / "run.csv", tmp_path / "inside"
    args = ["sweep", "--impl", f"test_hang_{kind}", "--scenario", "uniform", "--n", "4,64", "--timer", "wall",
            "--rounds", "1", "--min-run-time", "0.01", "--threads", "1", "--out", str(out)]
    child = subprocess.Popen([sys.executable, "-c", HANGS + "\nfrom nmsbench.cli import main\nmain()", *args],
                             env=os.environ | {"NMSBENCH_TEST_HANG_MARK": str(mark)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not mark.exists():
            assert child.poll() is None, child.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the case never reached its native call"
            time.sleep(0.05)
        time.sleep(0.5)  # inside the call now
        child.send_signal(signal_number)
        _, stderr = child.communicate(timeout=60)  # the call itself would take hours
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    what = "terminated (SIGTERM)" if signal_number == signal.SIGTERM else "interrupted"
    assert child.returncode == status, stderr[-3000:]
    assert f"{what} inside a call that had not returned {grace:g} s later: " in stderr
    assert (f"1 of 2 rows are in {out}" if grace == GRACE else f"the rows written before it are in {out}") in stderr
    assert f"--resume {out}" in stderr
    data = out.read_bytes()
    assert data.endswith(b"\n") and data.count(b"\n") == 2  # header and the n = 4 row, whole
    rows = read_results(out)
    assert rows.n.tolist() == [4] and rows.status.tolist() == ["ok"]


def test_a_watchdog_leaves_no_trace():
    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    with Watchdog() as stop:
        assert stop.running and len([t for t in threading.enumerate() if t.name.startswith("nmsbench-")]) == 2
        rows = []
        stop.guard(rows.append)({"n": 1})
        assert rows == [{"n": 1}]
    assert not any(t.name.startswith("nmsbench-") for t in threading.enumerate())
    assert signal.set_wakeup_fd(before) == before  # given back

    outside = []
    thread = threading.Thread(target=lambda: outside.append(Watchdog().__enter__().running))
    thread.start()
    thread.join()
    assert outside == [False]  # signals are the main thread's


def test_case_timeout_help_says_what_it_cannot_stop():
    from click.testing import CliRunner

    from nmsbench.cli import main

    text = " ".join(CliRunner().invoke(main, ["sweep", "--help"]).output.split())
    assert "only when that call returns; a native call that never returns is not stopped by it" in text
    assert "Ctrl-C or SIGTERM stop the whole run within 2 s" in text
