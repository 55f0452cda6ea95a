"""Fuzzing the entry points with hostile input: every CPU implementation through the
Python API, and the boxes-file loaders with truncated and byte-corrupted files.

The contract: a ``ValueError`` with a message naming the problem, or a result that obeys
the family's definition (tests/definitions.py). Never another exception, never a hang
(each example has a deadline once the implementations are compiled). Kept small enough
for CI (about 15 s for the file on 2 cores; NMSBENCH_EXAMPLES_SCALE=25 runs ~25x more).
"""

from __future__ import annotations

import io
import tempfile
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nmsbench
from nmsbench.datasets import load_boxes_file
from test_properties import (EXTERNAL, Case, check_allpairs, check_diou, check_hard, check_matrix, check_soft,
                             check_weighted, examples)

CPU_IMPLS = sorted(name for name, impl in nmsbench.implementations().items()
                   if "cpu" in impl.backends and impl.backend("cpu").availability()[0])
# hostile floats: subnormals, the edge of float32, infinities, NaN, negative zero
SPECIAL = [0.0, -0.0, 1e-45, 1e-40, -1e-40, 1e-30, 0.5, 1.0, 10.0, 1e6, 3e38, -3e38, 1.7e308, -1.7e308,
           float("inf"), float("-inf"), float("nan")]
DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
FUZZ = settings(max_examples=examples(150), deadline=timedelta(seconds=5),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Compile every numba signature before the deadlines apply (float32/64, labels or not)."""
    for name in CPU_IMPLS:
        for dtype in (torch.float32, torch.float64):
            for labels in (None, torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int32)):
                boxes = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1]], dtype=dtype)
                try:
                    nmsbench.run_nms(name, boxes, torch.tensor([0.5, 0.4], dtype=dtype), labels=labels)
                except ValueError:
                    pass


def floats(dtype_name: str, non_finite: bool):
    width = {"float16": 16, "float32": 32, "float64": 64}[dtype_name]
    values = [st.sampled_from([v for v in SPECIAL if np.isfinite(v)]), st.floats(width=width, allow_nan=False,
              allow_infinity=False), st.floats(-100, 100, width=width)]
    return st.one_of(*values, st.sampled_from(SPECIAL)) if non_finite else st.one_of(*values)


@st.composite
def hostile_inputs(draw):
    """(boxes, scores, labels, iou_threshold) as numpy arrays and a float: about half of
    them well-formed (corners ordered, shapes matching, finite), the rest broken somehow."""
    dtype_name = draw(st.sampled_from(["float32", "float32", "float64", "float16"]))
    n = draw(st.integers(0, 8))
    broken = draw(st.sampled_from(["none"] * 5 + ["shape", "length", "non-finite", "order", "labels"]))
    shape = draw(st.sampled_from([(n, 3), (n,), (n, 4, 1), (4, n + 1)])) if broken == "shape" else (n, 4)
    count = int(np.prod(shape))
    element = floats(dtype_name, broken == "non-finite")
    with np.errstate(over="ignore"):  # float64 draws beyond float32/16 become inf, on purpose
        boxes = np.array(draw(st.lists(element, min_size=count, max_size=count)),
                         dtype=np.float64).astype(DTYPES[dtype_name]).reshape(shape)
        if broken != "order" and boxes.ndim == 2 and boxes.shape[1] == 4:
            boxes = np.concatenate([np.minimum(boxes[:, :2], boxes[:, 2:]), np.maximum(boxes[:, :2], boxes[:, 2:])], axis=1)
        m = draw(st.sampled_from([n + 1, max(n - 1, 0), 2 * n + 1])) if broken == "length" else n
        scores = np.array(draw(st.lists(element, min_size=m, max_size=m)),
                          dtype=np.float64).astype(DTYPES[dtype_name])
    labels = None
    if draw(st.booleans()) or broken == "labels":
        values = st.one_of(st.integers(-3, 3), st.sampled_from([2**31 - 1, -2**31, 2**62, -2**62]))
        labels = np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=np.int64)
        if broken == "labels":
            labels = labels.astype(draw(st.sampled_from([np.float32, np.bool_, np.float64])))
        elif draw(st.booleans()):
            labels = labels.astype(np.int32)  # wraps the big ones: still valid labels
    threshold = draw(st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1.0, 0.5])))
    if broken == "none" and draw(st.integers(0, 9)) == 0:
        threshold = draw(st.sampled_from([float("nan"), -0.1, 1.5, float("inf")]))
    return boxes, scores, labels, threshold


def call(name: str, boxes, scores, labels, threshold, **params):
    return nmsbench.run_nms(name, torch.from_numpy(boxes), torch.from_numpy(scores), iou_threshold=threshold,
                            labels=None if labels is None else torch.from_numpy(labels), **params)


def check_family(name: str, case: Case, threshold: float, kernel: str = "gaussian") -> None:
    """Run ``name`` on ``case`` and hold it to its family's definition (a library's entry:
    valid, distinct indices, as tests/test_externals.py takes its own conventions)."""
    impl = nmsbench.implementations()[name]
    if name in EXTERNAL:
        params = {"kernel": kernel} if impl.family == "soft" else {}
        keep = call(name, case.boxes, case.scores, case.labels, threshold, **params).keep.tolist()
        assert len(set(keep)) == len(keep) and all(0 <= k < len(case.scores) for k in keep)
    elif impl.family == "hard":
        check_hard(name, case, threshold)
    elif impl.family == "allpairs":
        check_allpairs(name, case, threshold)
    elif impl.family == "matrix":
        check_matrix(name, case, threshold, kernel, 0.5, 0.05)
    elif impl.family == "soft":
        check_soft(name, case, threshold, kernel, 0.5, 0.001)
    elif impl.family == "diou":
        check_diou(name, case, threshold, 1.0)
    elif impl.family == "weighted":
        check_weighted(name, case, threshold)
    else:
        raise AssertionError(f"{name}: no check for family {impl.family}")


@pytest.mark.parametrize("name", CPU_IMPLS)
@FUZZ
@given(data=hostile_inputs(), kernel=st.sampled_from(["gaussian", "linear"]))
def test_api_answers_hostile_input_with_a_value_error_or_a_correct_result(name, data, kernel):
    boxes, scores, labels, threshold = data
    impl = nmsbench.implementations()[name]
    params = {"kernel": kernel} if impl.family in ("matrix", "soft") else {}
    try:
        call(name, boxes, scores, labels, threshold, **params)
    except ValueError as e:
        assert str(e).strip(), "a ValueError must say what is wrong"
        return
    check_family(name, Case(boxes, scores, labels), threshold, kernel)


# --------------------------------------------------------------------------- files


def _valid_files() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 100, size=(12, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(1, 30, size=(12, 2)).astype(np.float32)], axis=1)
    scores = rng.uniform(size=12).astype(np.float32)
    labels = rng.integers(0, 3, size=12)
    npz = io.BytesIO()
    np.savez(npz, boxes=boxes, scores=scores, labels=labels)
    compressed = io.BytesIO()
    np.savez_compressed(compressed, boxes=boxes, scores=scores)
    pt = io.BytesIO()
    torch.save({"boxes": torch.from_numpy(boxes), "scores": torch.from_numpy(scores)}, pt)
    csv = "x1,y1,x2,y2,score,label\n" + "".join(f"{b[0]},{b[1]},{b[2]},{b[3]},{s},{k}\n"
                                                for b, s, k in zip(boxes, scores, labels))
    return {"a.npz": npz.getvalue(), "c.npz": compressed.getvalue(), "a.pt": pt.getvalue(), "a.csv": csv.encode()}


VALID = _valid_files()


@st.composite
def damaged(draw):
    name = draw(st.sampled_from(sorted(VALID)))
    data = bytearray(VALID[name])
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    flips = draw(st.lists(st.tuples(st.integers(0, max(len(data) - 1, 0)), st.integers(0, 255)), max_size=4))
    for offset, value in flips:
        if data:
            data[offset] = value
    return name, bytes(data)


@FUZZ
@given(case=damaged())
def test_loaders_answer_damaged_files_with_a_value_error_or_a_valid_load(case):
    name, data = case
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        try:
            loaded = load_boxes_file(path)
        except ValueError as e:
            assert name in str(e), f"the message names the file: {e}"
            return
    nmsbench.validate_nms_inputs(loaded.boxes, loaded.scores, loaded.labels)
    assert loaded.boxes.dtype == torch.float32 and loaded.boxes.shape[1] == 4
