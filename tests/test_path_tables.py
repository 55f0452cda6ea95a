"""The kernel path tables (nmsbench.cuda.paths): one type for every op that runs in more
than one way, found by name, with the chooser and the forced-path check in one place."""

from __future__ import annotations

import inspect

import pytest
import torch

import nmsbench
from nmsbench.cuda import KernelPath, PathTable, path_table, path_tables
from nmsbench.cuda.kernels import kernel_implementations


def toy_table() -> PathTable:
    """Three paths: "small" takes up to 8 boxes (chosen up to 4), "eager" no padded call,
    "any" everything; ``limit=`` (context) moves small's choice."""
    return PathTable("toy", (
        KernelPath("small", refuses=lambda n, *call, **context: None if n <= 8 else "it takes at most 8 boxes",
                   passes_over=lambda n, *call, limit=4: None if n <= limit else f"above {limit} the others are faster"),
        KernelPath("eager", refuses=lambda n, dtype, padded, *call, **context: "no padded calls" if padded else None),
        KernelPath("any"),
    ), register=False, limit=4)


def test_choose_gives_the_first_path_that_neither_refuses_nor_passes_the_call_over():
    table = toy_table()
    assert list(table) == ["small", "eager", "any"] and len(table) == 3 and table["any"].name == "any"
    assert table.choose(4) == "small"
    assert table.choose(5) == "eager"  # small could take it; the chooser passes it over
    assert table.choose(6, limit=6) == "small"  # the caller's context replaces the table's
    assert table.choose(100, padded=True) == "any"
    assert table.valid(6) == ["small", "eager", "any"] and table.valid(9, padded=True) == ["any"]


def test_a_refused_path_is_named_with_its_reason_and_the_paths_that_take_the_call():
    table = toy_table()
    table.check("small", 8)  # forced past the chooser's limit: the kernels take it
    assert table.refusal("small", 9) == "it takes at most 8 boxes"
    with pytest.raises(ValueError, match=r"^toy: path 'small' cannot take this call: it takes at most 8 boxes; "
                                         r"for N = 9 \(padded=True\) the valid paths are any$"):
        table.check("small", 9, padded=True)
    with pytest.raises(ValueError, match=r"^probe: no path 'tiles'; the paths are small, eager, any$"):
        table.check("tiles", 1, op="probe")
    assert table.refusal("tiles", 1) == "no path 'tiles'; the paths are small, eager, any"


def test_a_table_with_no_path_for_a_call_or_two_paths_of_one_name_is_an_error():
    with pytest.raises(ValueError, match="toy: no path takes N = 3"):
        PathTable("toy", (KernelPath("never", refuses=lambda *call, **context: "no"),), register=False).choose(3)
    with pytest.raises(ValueError, match="distinct names"):
        PathTable("toy", (KernelPath("a"), KernelPath("a")), register=False)
    assert path_table("toy") is None  # register=False: not listed


# the CUDA backends whose path= is decided by another op's table
DISPATCHED = {"hard_graph": "overlap_graph", "matrix_graph": "overlap_graph"}


def test_every_multi_path_kernel_has_its_table_listed():
    """Every CUDA backend of ours that takes ``path=`` has a table registered under its name
    (or the dispatcher's), and the rank every backend uses has one too."""
    impls = nmsbench.implementations()
    with_paths = [name for name in kernel_implementations()
                  if "path" in inspect.signature(impls[name].backends["cuda"].fn).parameters]
    assert {"hard_fused", "matrix_recompute", "soft_rounds", "diou_nms"} <= set(with_paths)
    for name in with_paths:
        assert isinstance(path_table(DISPATCHED.get(name, name)), PathTable), name
    assert list(path_table("rank_by_score")) == ["counting", "merge"]
    assert list(path_table("overlap_graph")) == ["dense", "graph"]
    assert all(isinstance(path, KernelPath) for table in path_tables().values() for path in table.values())


@pytest.mark.parametrize("n", [1, 32, 33, 64, 65, 96, 97, 160, 161, 256, 257, 1024, 1025, 2048, 2049, 4096, 4097,
                               8192, 8193, 65535, 65536])
def test_every_tables_choice_is_a_path_its_check_accepts(n):
    """Without a device (nothing asked of a GPU), eager and padded, with labels and without."""
    kernel_implementations()  # imports every variant: their tables register
    for op, table in path_tables().items():
        for padded in (False, True):
            if op == "soft_rounds" and padded:
                continue  # no padded output: every path refuses it
            for labels in (False, True):
                chosen = table.choose(n, torch.float32, padded, None, labels)
                table.check(chosen, n, torch.float32, padded, None, labels)
