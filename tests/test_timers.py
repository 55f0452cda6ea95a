"""The timer registry (nmsbench.timers): what it holds, and that a timer is one module."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import nmsbench.runner as runner
from nmsbench import timers
from nmsbench.engine.rounds import Settings
from nmsbench.timers import DEFAULT_TIMERS, TIMERS, Callables, Timer, register_timer, timers_for
from nmsbench.timing import Blocks, SteadyHost


def test_the_registry_holds_every_timer_in_its_order_with_its_devices():
    assert list(TIMERS) == ["wall", "api", "device", "events", "graph"]
    assert DEFAULT_TIMERS == ("wall", "device")
    assert {name: t.devices for name, t in TIMERS.items()} == {
        "wall": ("cpu", "cuda"), "api": ("cpu", "cuda"), "device": ("cuda",), "events": ("cuda",), "graph": ("cuda",)}
    assert [name for name, t in TIMERS.items() if t.needs_graph_safe] == ["graph"]
    assert [name for name, t in TIMERS.items() if not t.host_bound] == ["device"]
    assert [name for name, t in TIMERS.items() if t.separate_pass] == ["device"]
    assert TIMERS["device"].columns == ("span_us", "span_iqr_us", "launches", "copies", "syncs")
    assert {t.dash for t in TIMERS.values()} >= {"solid", "dash", "dot"}


def test_timers_for_keeps_the_given_order_and_drops_gpu_only_timers_on_the_cpu():
    assert timers_for("cpu", ["device", "api", "wall", "graph"]) == ["api", "wall"]
    assert timers_for("cuda", ["device", "api"]) == ["device", "api"]


def test_every_timer_has_a_one_line_help_that_the_sweeps_timer_option_shows():
    timer_axis = next(axis for axis in runner.AXES if axis.name == "timers")
    for timer in TIMERS.values():
        assert timer.help and "\n" not in timer.help
        assert timer.help in timer_axis.help


def test_register_timer_refuses_a_second_timer_of_one_name_and_unknown_devices():
    with pytest.raises(ValueError, match="registered already"):
        register_timer(Timer(name="wall", devices=("cpu",), help="x", build=lambda o: o.op, measurer=lambda c, s: c))
    with pytest.raises(ValueError, match="devices among cpu, cuda"):
        register_timer(Timer(name="tpu_clock", devices=("tpu",), help="x", build=lambda o: o.op, measurer=lambda c, s: c))
    assert "tpu_clock" not in TIMERS


def test_a_timer_needing_what_a_benchmark_does_not_offer_says_so():
    with pytest.raises(ValueError, match="needs a public call"):
        TIMERS["api"].build(Callables(op=lambda: None))
    with pytest.raises(ValueError, match="needs a capturable call"):
        TIMERS["graph"].build(Callables(op=lambda: None))


def test_the_api_timer_checks_the_public_call_against_the_op():
    def check(timer, output):
        if output != "op":
            raise RuntimeError(f"{timer} differs")

    assert TIMERS["api"].build(Callables(op=lambda: "op", public=lambda: "op", check=check))() == "op"
    with pytest.raises(RuntimeError, match="api differs"):
        TIMERS["api"].build(Callables(op=lambda: "op", public=lambda: "other", check=check))


def test_the_wall_timer_fixes_its_block_from_the_settings(monkeypatch):
    made = []

    class Recorded:
        def __init__(self, fn, *, threads, block_seconds):
            made.append((threads, block_seconds))

        def blocks(self, seconds):
            return Blocks(np.ones(5), 5)

    monkeypatch.setattr(timers.wall.timing, "WallTimer", Recorded)
    TIMERS["wall"].measurer(lambda: None, Settings(rounds=4, min_run_time=0.4, threads=3))
    assert made == [(3, pytest.approx(0.4 / 4 / 10))]


TOY = '''
import numpy as np

from nmsbench.timers import Timer, register_timer
from nmsbench.timing import Blocks


def measurer(call, settings):
    def measure(seconds):
        call()
        return Blocks(np.full(4, 42.0), 4)
    return measure


register_timer(Timer(name="toy", devices=("cpu",), help="a clock that always reads 42 us", build=lambda offered: offered.op,
                     measurer=measurer))
'''


@pytest.fixture
def toy_module(tmp_path, monkeypatch):
    """A timer module in a folder of the timers package's path (as a new module in the package is)."""
    (tmp_path / "toy.py").write_text(TOY)
    monkeypatch.setattr(timers, "__path__", [*timers.__path__, str(tmp_path)])
    try:
        yield
    finally:
        TIMERS.pop("toy", None)
        sys.modules.pop("nmsbench.timers.toy", None)


def test_adding_a_timer_is_one_module_that_a_sweep_then_uses(toy_module, monkeypatch):
    assert "toy" not in TIMERS
    timers.discover()
    assert "toy" in TIMERS and list(TIMERS)[-1] == "toy"
    monkeypatch.setattr("nmsbench.engine.rounds.HostGauge", SteadyHost)  # start_run makes the default gauge
    grid = runner.Grid(impls=["torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[8],
                       ious=[0.5], timers=["wall", "toy"], min_run_time=0.01, rounds=2)
    rows = []
    runner.run_sweep(grid, rows.append)
    toy = next(row for row in rows if row["timer"] == "toy")
    assert [row["timer"] for row in rows] == ["wall", "toy"] and toy["status"] == "ok"
    assert toy["median_us"] == 42.0 and toy["blocks"] == 8 and toy["rounds"] == 2 and toy["kept"] >= 1
    assert toy["_samples"].round_medians_us == (42.0, 42.0)


def test_a_pass_of_its_own_reuses_the_box_sets_and_references_of_the_first(monkeypatch):
    """A timer timed in a pass of its own (device) gets the same box sets, realized overlap
    and references as the first pass, made once: generating and checking again would double
    the sweep's work outside the timed blocks."""
    import dataclasses

    from nmsbench import datasets

    monkeypatch.setitem(TIMERS, "solo", dataclasses.replace(
        TIMERS["wall"], name="solo", separate_pass=True, help="the wall clock, in a pass of its own"))
    monkeypatch.setattr("nmsbench.engine.rounds.HostGauge", SteadyHost)
    made, references = [], []
    generate, reference = datasets.generate, runner._reference
    monkeypatch.setattr(datasets, "generate", lambda *a, **k: made.append(a) or generate(*a, **k))
    monkeypatch.setattr(runner, "_reference", lambda *a, **k: references.append(a) or reference(*a, **k))
    grid = runner.Grid(impls=["torchvision", "hard_fused"], devices=["cpu"], scenarios=["uniform", "clustered"], ns=[8, 40],
                       timers=["wall", "solo"], min_run_time=0.01, rounds=2)
    rows = []
    runner.run_sweep(grid, rows.append)
    assert [row["timer"] for row in rows] == ["wall"] * 8 + ["solo"] * 8  # two passes
    assert all(row["status"] == "ok" for row in rows), [row["error"] for row in rows]
    assert len(made) == 4 and len(references) == 4  # one box set and one reference per (scenario, N)
    by_case = {}
    for row in rows:  # each pass's rows of a case carry the same realized overlap and agreement
        by_case.setdefault((row["impl"], row["scenario"], row["n"]), []).append((row["mean_max_iou"], row["kept"], row["jaccard"]))
    assert all(len(set(values)) == 1 for values in by_case.values()), by_case
