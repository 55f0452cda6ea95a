"""What a sweep says of the newer families: the family agreement columns (schema 7: soft,
diou and weighted rows held to their family's exact CPU implementation on the same boxes,
beside greedy NMS), and the sweep limit of the plain Soft-NMS loop."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from nmsbench.agreement import FAMILY_REFERENCES, compare_family
from nmsbench.boxes import NMSResult
from nmsbench.results import COLUMNS, read_results
from nmsbench.runner import Grid, run_sweep


def sweep_rows(impls, ns=(64, 300), dtypes=("float32",)):
    rows = []
    grid = Grid(impls=list(impls), devices=["cpu"], dtypes=list(dtypes), scenarios=["clustered"], ns=list(ns),
                ious=[0.5], timers=["wall"], min_run_time=0.01, rounds=1)
    run_sweep(grid, rows.append)
    assert all(row["status"] == "ok" for row in rows), [row.get("error") for row in rows]
    return rows


def test_each_family_row_names_its_reference_and_how_far_it_is():
    rows = sweep_rows(["soft_nms", "soft_torch", "weighted_nms", "diou_nms", "torchvision"])
    by_impl = {}
    for row in rows:
        by_impl.setdefault(row["impl"], []).append(row)
    for name in ("soft_nms", "weighted_nms", "diou_nms"):  # the references themselves
        for row in by_impl[name]:
            assert row["family_ref"] == name and row["family_jaccard"] == 1.0
            assert math.isnan(row["family_max_diff"]) if name == "diou_nms" else row["family_max_diff"] == 0.0
    for row in by_impl["soft_torch"]:  # the plain loop: torch's exp, the same picks here
        assert row["family_ref"] == "soft_nms" and row["family_jaccard"] == 1.0 and row["family_max_diff"] < 1e-12
    for row in by_impl["torchvision"]:  # hard: greedy NMS is its family's answer, the columns above say it
        assert row["family_ref"] == "" and math.isnan(row["family_jaccard"])
    # greedy agreement and family agreement answer different questions
    assert any(row["jaccard"] < 1 for row in by_impl["soft_nms"])


def test_a_reference_in_the_sweep_is_not_run_again_as_its_own_reference(monkeypatch):
    """soft_nms on the CPU is its family's reference: its own warm-up result serves as the
    reference of its rows and of the family's other rows (at a million boxes a second run
    of it cost as long as the case), and the columns are the same as before."""
    import nmsbench.runner as runner

    calls = []
    real = runner._family_result
    monkeypatch.setattr(runner, "_family_result", lambda name, *args: calls.append(name) or real(name, *args))
    rows = sweep_rows(["soft_nms", "soft_torch"], dtypes=("float32", "float64"))
    assert calls == []
    for row in rows:
        assert row["family_ref"] == "soft_nms" and row["family_jaccard"] == 1.0, row


@pytest.mark.skipif(importlib.util.find_spec("ensemble_boxes") is None, reason="needs ensemble-boxes (.[externals])")
def test_an_external_soft_nms_shows_its_distance_from_the_definition():
    for row in sweep_rows(["ensemble_boxes_soft"]):
        assert row["family_ref"] == "soft_nms" and row["family_jaccard"] == 1.0
        assert 0 < row["family_max_diff"] < 1e-4  # its normalised float32 coordinates


def test_compare_family_by_index():
    reference = NMSResult(torch.tensor([0, 1, 2]), torch.tensor([0.9, 0.5, 0.2]))
    result = NMSResult(torch.tensor([0, 2, 3]), torch.tensor([0.9, 0.25, 0.1]))
    out = compare_family(result, reference, "soft_nms")
    assert out["family_jaccard"] == 0.5 and out["family_max_diff"] == pytest.approx(0.05 / 0.25)
    moved = NMSResult(torch.tensor([1]), boxes=torch.tensor([[0.0, 0.0, 2.0, 4.0]]))
    assert compare_family(moved, NMSResult(torch.tensor([1]), boxes=torch.tensor([[0.0, 0.0, 2.0, 5.0]])),
                          "weighted_nms")["family_max_diff"] == pytest.approx(0.2)
    assert math.isnan(compare_family(NMSResult(torch.tensor([1])), NMSResult(torch.tensor([1])), "diou_nms")
                      ["family_max_diff"])
    assert set(FAMILY_REFERENCES) == {"soft", "diou", "weighted"}


def test_older_files_read_with_blank_family_columns(tmp_path):
    rows = sweep_rows(["soft_nms"], ns=(64,))
    frame = pd.DataFrame(rows).reindex(columns=COLUMNS)
    frame["schema_version"] = 6
    path = tmp_path / "old.csv"
    frame.drop(columns=["family_ref", "family_jaccard", "family_max_diff"]).to_csv(path, index=False)
    read = read_results(path)
    assert (read["family_ref"] == "").all() and read["family_jaccard"].isna().all()


# ------------------------------------------------------------------ sweep limits of slow baselines

def test_a_sweep_of_every_implementation_leaves_the_plain_loop_out_above_its_limit(monkeypatch):
    """soft_torch (a host synchronization per pick) has a sweep_max_n: a sweep without --impl
    (cap_slow) gives a skipped row above it, saying why and how to time it anyway; naming it
    in --impl (cap_slow False) times it."""
    import dataclasses

    from nmsbench import cli, registry
    from nmsbench.variants import soft_nms

    impl = registry.implementations()["soft_torch"]
    assert {d: b.sweep_max_n for d, b in impl.backends.items()} == soft_nms.SOFT_TORCH_SWEEP_MAX_N
    monkeypatch.setitem(impl.backends, "cpu", dataclasses.replace(impl.backends["cpu"], sweep_max_n=32))

    def rows(cap_slow):
        out = []
        grid = Grid(impls=["soft_torch", "torchvision"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"],
                    ns=[16, 64], ious=[0.5], timers=["wall"], min_run_time=0.01, rounds=1, cap_slow=cap_slow)
        run_sweep(grid, out.append)
        return {(row["impl"], row["n"]): row for row in out}

    capped = rows(True)
    assert capped["soft_torch", 16]["status"] == "ok" and capped["torchvision", 64]["status"] == "ok"
    assert capped["soft_torch", 64]["status"] == "skipped"
    assert "left out above N = 32 when --impl does not name it" in capped["soft_torch", 64]["error"]
    assert rows(False)["soft_torch", 64]["status"] == "ok"
    # the command a capped sweep records names no implementation (naming them all would lift the caps)
    grid = Grid(impls=["soft_torch"], devices=["cpu"], dtypes=["float32"], scenarios=["uniform"], ns=[16], ious=[0.5],
                cap_slow=True)
    sweep = cli.BENCHMARKS["nms"]
    assert "--impl" not in cli.reproduce(sweep, grid, Path("x.csv"))
    assert "--impl soft_torch" in cli.reproduce(sweep, dataclasses.replace(grid, cap_slow=False), Path("x.csv"))


def test_large_box_sets_take_the_graph_greedy_reference(monkeypatch):
    """From LARGE_REFERENCE_MIN_N boxes the greedy reference is hard_graph (torchvision's CPU
    NMS takes minutes there): the same indices, from the graph."""
    import dataclasses

    from nmsbench import datasets, registry, runner

    impl = registry.implementations()["hard_graph"]
    backend, calls = impl.backends["cpu"], []

    def counted(*args, **kwargs):
        calls.append(1)
        return backend.fn(*args, **kwargs)

    monkeypatch.setitem(impl.backends, "cpu", dataclasses.replace(backend, fn=counted))
    case = datasets.generate("clustered", 600, seed=2)
    small = runner._reference(case, 0.5)
    assert not calls
    monkeypatch.setattr(runner, "LARGE_REFERENCE_MIN_N", 600)
    assert torch.equal(runner._reference(case, 0.5), small) and calls == [1]


def test_a_float16_rows_family_reference_runs_on_the_float16_values():
    """A float16 case is held to its family's CPU implementation on the float32 copy of the
    float16 boxes and scores: the clustered boxes' rounding alone moves Soft-NMS's final
    scores by up to 45 % (a different pick order), which a reference on the unrounded boxes
    would have blamed on the backend."""
    from nmsbench import datasets
    from nmsbench.registry import implementations
    from nmsbench.runner import _family_result

    impl = implementations()["soft_nms"]
    params = impl.resolve_params({})
    box_set = datasets.generate("clustered", 64)
    rounded = box_set.to("cpu", torch.float16).to("cpu", torch.float32)
    expected = impl.backends["cpu"].fn(rounded.boxes, rounded.scores, iou_threshold=0.5, labels=None, **params)
    got = _family_result("soft_nms", box_set, "float16", 0.5, params)
    assert torch.equal(got.keep, expected.keep) and torch.equal(got.scores, expected.scores)
    unrounded = _family_result("soft_nms", box_set, "float32", 0.5, params)
    assert compare_family(got, unrounded, "soft_nms")["family_max_diff"] > 0.1  # the case the test is about
