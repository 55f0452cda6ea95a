"""Case keys: which of a resumed file's keys a grid asks for (nmsbench.keys.keys_of_grid)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from nmsbench.keys import case_key, keys_of_grid


def key(**columns):
    return case_key({"benchmark": "nms", "impl": "torchvision", "device": "cpu", "dtype": "float32", "timer": "wall",
                     "scenario": "uniform", "n": 64, "iou_threshold": 0.5} | columns)


GRID = SimpleNamespace(impls=["torchvision", "hard_fused"], devices=["cpu"], dtypes=["float32"], timers=["wall"],
                       scenarios=["uniform", "real"], ns=[64, 8192], ious=[0.5])


def test_a_key_counts_when_every_listed_column_is_among_the_grids_values():
    assert keys_of_grid([key(), key(impl="hard_fused", n=8192)], GRID) == 2
    for other in ({"impl": "allpairs"}, {"n": 128}, {"iou_threshold": 0.7}, {"timer": "device"}, {"scenario": "chain"}):
        assert keys_of_grid([key(), key(**other)], GRID) == 1, other


def test_a_recorded_scenario_is_asked_for_by_its_requested_n():
    assert keys_of_grid([key(scenario="real", n=6982, n_cap=8192)], GRID) == 1
    assert keys_of_grid([key(scenario="real", n=6982, n_cap=4096)], GRID) == 0


def test_other_benchmarks_grids_name_their_own_axes():
    pipeline = SimpleNamespace(sources=["synthetic"], batches=[1, 8], stages=["total"], devices=["cuda"])
    row = {"benchmark": "pipeline", "impl": "batched_op", "device": "cuda", "scenario": "synthetic", "batch": 8,
           "stage": "total"}
    assert keys_of_grid([case_key(row), case_key(row | {"batch": 32}), case_key(row | {"stage": "nms"})], pipeline) == 1


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["torchvision", "hard_fused", "allpairs"]), st.sampled_from([64, 128, 8192])),
                max_size=12))
def test_the_count_is_the_keys_the_grid_would_run(cases):
    keys = [key(impl=impl, n=n) for impl, n in cases]
    asked = [k for (impl, n), k in zip(cases, keys) if impl in GRID.impls and n in GRID.ns]
    assert keys_of_grid(keys, GRID) == len(asked)
