"""An `nmsbench diff` file's case is read and compared without torch (the dashboard's
differences view), with the same Jaccard index as the results' column."""

from __future__ import annotations

import subprocess
import sys

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dash_support import REPO
from nmsbench.agreement import compare_keep
from nmsbench.diff_cases import agreement_matrix, jaccard, read_case


def test_reading_and_comparing_a_diff_file_imports_no_torch():
    code = ("import sys; from nmsbench import diff_cases as d; c = d.read_case(sys.argv[1]); "
            "d.agreement_matrix(c.keeps); d.classify(c.n, *list(c.keeps.values())[:2]); "
            "print('torch' in sys.modules, len(c.keeps))")
    done = subprocess.run([sys.executable, "-c", code, str(REPO / "results" / "diff-clustered-512.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported, kept = done.stdout.split()
    assert imported == "False" and int(kept) >= 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=30), st.lists(st.integers(0, 40), max_size=30))
def test_jaccard_is_the_results_columns(keep_a, keep_b):
    expected = compare_keep(torch.tensor(keep_a, dtype=torch.int64), torch.tensor(keep_b, dtype=torch.int64))["jaccard"]
    assert jaccard(keep_a, keep_b) == expected


def test_the_agreement_matrix_is_symmetric_with_ones_on_the_diagonal():
    case = read_case(REPO / "results" / "diff-clustered-512.json")
    matrix = agreement_matrix(case.keeps)
    assert list(matrix.index) == list(matrix.columns) == list(case.keeps)
    assert (matrix.to_numpy() == matrix.to_numpy().T).all() and (matrix.to_numpy().diagonal() == 1).all()
    assert matrix.loc["torchvision", "allpairs"] == jaccard(case.keeps["torchvision"], case.keeps["allpairs"])
