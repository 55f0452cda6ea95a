"""matrix_graph: Matrix NMS from the overlap graph (only the pairs with IoU > 0) must be
the dense Matrix NMS: the same decays on its graph path and its dense path, and
matrix_fused's answer on a large sparse box set. (Against the family definition it is
held by test_properties.py's Matrix NMS property tests, as every matrix implementation.)"""

from __future__ import annotations

import pytest
import torch

import nmsbench
from nmsbench import datasets
from nmsbench.variants import matrix_graph

pytest.importorskip("numba")

PARAMS = [dict(kernel="gaussian", sigma=0.5, score_threshold=0.05), dict(kernel="linear", sigma=0.5, score_threshold=0.05),
          dict(kernel="gaussian", sigma=2.0, score_threshold=0.0)]


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("scenario", ["uniform", "clustered", "degenerate"])
def test_the_graph_path_equals_the_dense_path(monkeypatch, scenario, params):
    case = datasets.generate(scenario, 700, seed=3, classes=2)
    monkeypatch.setattr(matrix_graph, "DENSE_FRACTION", 1)  # any graph of up to N^2 pairs: the graph path
    on_graph = nmsbench.run_nms("matrix_graph", case.boxes, case.scores, labels=case.labels, **params)
    monkeypatch.setattr(matrix_graph, "DENSE_FRACTION", 10 ** 9)  # no graph fits: the dense passes
    dense = nmsbench.run_nms("matrix_graph", case.boxes, case.scores, labels=case.labels, **params)
    assert torch.equal(on_graph.keep, dense.keep) and torch.equal(on_graph.scores, dense.scores)


def test_a_large_sparse_set_gets_matrix_fuseds_answer():
    case = datasets.generate("uniform", 12000, seed=1, canvas="density")  # a large image: few pairs overlap
    got = nmsbench.run_nms("matrix_graph", case.boxes, case.scores)
    want = nmsbench.run_nms("matrix_fused", case.boxes, case.scores)
    assert 0 < len(got.keep) < 12000
    mine, theirs = dict(zip(got.keep.tolist(), got.scores.tolist())), dict(zip(want.keep.tolist(), want.scores.tolist()))
    border = {j for j, f in {**mine, **theirs}.items() if abs(f - 0.05) < 1e-6}
    assert set(mine) - border == set(theirs) - border
    assert max(abs(mine[j] - theirs[j]) for j in set(mine) & set(theirs)) < 1e-6
