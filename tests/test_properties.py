"""Property tests: every registered CPU implementation against its family's definition.

The definitions live in tests/definitions.py (plain Python, torchvision's IoU arithmetic
in the input dtype). Implementations are taken from the registry by family, so a newly
registered variant is covered without touching this file.

Example counts scale with NMSBENCH_EXAMPLES_SCALE (default 1; e.g. 10 for a long run).
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import Optional

import numpy as np
import pytest
import torch
import torchvision
from hypothesis import given, settings
from hypothesis import strategies as st

import definitions as D
import nmsbench

SCALE = float(os.environ.get("NMSBENCH_EXAMPLES_SCALE", "1"))


def examples(n: int) -> int:
    return max(1, int(round(n * SCALE)))


# --------------------------------------------------------------------------- registry

IMPLS = nmsbench.implementations()

# The known core set: registry discovery must not lose any of these (a newly registered
# variant is covered by the family lists below without being named here).
CORE = {
    "torchvision": "hard",
    "bitmask_two_phase": "hard",
    "bitmask_classic": "hard",
    "hard_fused": "hard",
    "allpairs": "allpairs",
    "matrix_naive": "matrix",
    "matrix_fused": "matrix",
    "matrix_recompute": "matrix",
    "cluster": "hard",
}
CORE_EXACT = ("torchvision", "bitmask_two_phase", "bitmask_classic", "hard_fused", "allpairs", "cluster")
# The families tests/definitions.py defines, and the property tests that hold a variant to them.
DEFINITIONS = {"hard": D.hard_nms, "allpairs": D.allpairs_nms, "matrix": D.matrix_nms, "soft": D.soft_nms,
               "diou": D.diou_nms, "weighted": D.weighted_nms}
MATRIX_PARAMS = {"kernel", "sigma", "score_threshold"}


# Libraries' own NMS (ONNX Runtime, OpenCV, ensemble-boxes): held to their families to
# rounding and their own conventions in tests/test_externals.py, not index for index here.
EXTERNAL_PACKAGES = {"onnxruntime", "cv2", "ensemble_boxes"}
EXTERNAL = sorted(n for n, impl in IMPLS.items()
                  if any(EXTERNAL_PACKAGES & set(b.requires) for b in impl.backends.values()))


def family_impls(family: str) -> list[str]:
    return sorted(n for n, impl in IMPLS.items() if impl.family == family and n not in EXTERNAL)


HARD = family_impls("hard")
ALLPAIRS = family_impls("allpairs")
MATRIX = family_impls("matrix")
SOFT = family_impls("soft")
DIOU = family_impls("diou")
WEIGHTED = family_impls("weighted")
ALL_IMPLS = sorted(set(IMPLS) - set(EXTERNAL))
DTYPES = [torch.float32, torch.float64]
DTYPE_IDS = ["f32", "f64"]
# Every property test runs each backend: CPU in CI, CUDA (marked gpu) where there is a GPU.
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")],
    ),
]


def cpu_available(name: str, dtype: torch.dtype = torch.float32) -> bool:
    backend = IMPLS[name].backend("cpu")
    return backend.availability()[0] and dtype in backend.dtypes


def require(name: str, dtype: torch.dtype, device: str = "cpu") -> None:
    if device not in IMPLS[name].backends:
        pytest.skip(f"{name} has no {device} backend")
    backend = IMPLS[name].backend(device)
    ok, reason = backend.availability()
    if not ok:
        pytest.skip(f"{name} on {device} is unavailable: {reason}")
    if dtype not in backend.dtypes:
        pytest.skip(f"{name} on {device} does not support {dtype}")


def test_builtin_implementations_registered():
    missing = sorted(set(CORE) - set(IMPLS))
    assert not missing, f"built-in implementations not registered: {missing}"
    for name, family in CORE.items():
        impl = IMPLS[name]
        assert impl.family == family, name
        assert {"cpu", "cuda"} <= set(impl.devices), f"{name} should have a CPU and a CUDA backend"
    for name in CORE_EXACT:
        assert IMPLS[name].exact, f"{name} should be registered exact=True"


def test_every_registered_implementation_is_held_to_a_family_definition():
    without = sorted(f"{name} ({impl.family})" for name, impl in IMPLS.items() if impl.family not in DEFINITIONS)
    assert not without, f"no definition in tests/definitions.py for the family of: {without}"
    exercised = set(HARD) | set(ALLPAIRS) | set(MATRIX) | set(SOFT) | set(DIOU) | set(WEIGHTED) | set(EXTERNAL)
    assert exercised == set(IMPLS), f"not exercised by the family property tests: {sorted(set(IMPLS) - exercised)}"
    for name in MATRIX:
        assert MATRIX_PARAMS <= {p.name for p in IMPLS[name].params}, name


# --------------------------------------------------------------------------- inputs


def _npdtype(dtype: torch.dtype):
    return {torch.float32: np.float32, torch.float64: np.float64}[dtype]


class Case:
    """One NMS input: boxes (N, 4) and scores (N,) in the case dtype, labels (N,) int or None."""

    def __init__(self, boxes: np.ndarray, scores: np.ndarray, labels: Optional[np.ndarray] = None):
        self.boxes, self.scores, self.labels = boxes, scores, labels

    def tensors(self, device: str = "cpu"):
        return (
            torch.from_numpy(self.boxes.copy()).to(device),
            torch.from_numpy(self.scores.copy()).to(device),
            None if self.labels is None else torch.from_numpy(self.labels.copy()).to(device),
        )

    def __repr__(self) -> str:  # reproducible when hypothesis prints a failing case
        dt = self.boxes.dtype.name
        lab = "None" if self.labels is None else f"np.array({self.labels.tolist()}, dtype=np.{self.labels.dtype.name})"
        return (
            f"Case(boxes=np.array({self.boxes.tolist()}, dtype=np.{dt}).reshape(-1, 4), "
            f"scores=np.array({self.scores.tolist()}, dtype=np.{dt}), labels={lab})"
        )

    def _repr_pretty_(self, p, cycle):  # hypothesis' pretty printer
        p.text(repr(self))

    def row(self, k: int):
        return tuple(self.boxes[k])

    def label(self, k: int) -> int:
        return 0 if self.labels is None else int(self.labels[k])


THRESHOLDS = st.one_of(
    st.sampled_from([0.0, 0.3, 0.5, 0.7, 1.0, 0.25, 1 / 3, 2 / 3]),
    st.floats(0.0, 1.0),
)


@st.composite
def cases(draw, dtype: torch.dtype, min_n: int = 0, max_n: int = 40, with_labels: bool = True):
    """Box sets built to hit the corners: exact ties, duplicates, zero-area boxes, IoU
    exactly at the threshold (integer grids), chains (clusters) and plain floats."""
    npd = _npdtype(dtype)
    width = 32 if npd is np.float32 else 64
    n = draw(st.integers(min_n, max_n), label="n")
    kind = draw(st.sampled_from(["grid", "cluster", "float", "duplicates"]), label="kind")

    def ints(lo, hi, count):
        return np.array(draw(st.lists(st.integers(lo, hi), min_size=count, max_size=count)), dtype=npd)

    if kind == "grid":
        g = draw(st.sampled_from([2, 4, 8, 16]))
        scale = npd(draw(st.sampled_from([1.0, 0.5, 0.1, 3.0, 1 / 3, 1000.0])))
        raw = ints(0, g, 4 * n).reshape(n, 4) * scale
    elif kind == "cluster":
        k = draw(st.integers(1, 4))
        base = ints(0, 20, 4 * k).reshape(k, 4)
        pick = np.array(draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)), dtype=np.int64)
        step = npd(draw(st.sampled_from([1.0, 0.5, 0.25, 0.01])))
        raw = base[pick] + ints(-2, 2, 4 * n).reshape(n, 4) * step
    elif kind == "float":
        scale = npd(draw(st.sampled_from([1.0, 100.0, 1e4])))
        vals = draw(st.lists(st.floats(0.0, 1.0, width=width), min_size=4 * n, max_size=4 * n))
        raw = np.array(vals, dtype=npd).reshape(n, 4) * scale
    else:  # all boxes identical (possibly zero-area)
        one = np.array(draw(st.lists(st.integers(0, 3), min_size=4, max_size=4)), dtype=npd)
        raw = np.tile(one, (n, 1)).reshape(n, 4)
    raw = raw.astype(npd)
    boxes = np.stack(
        [
            np.minimum(raw[:, 0], raw[:, 2]),
            np.minimum(raw[:, 1], raw[:, 3]),
            np.maximum(raw[:, 0], raw[:, 2]),
            np.maximum(raw[:, 1], raw[:, 3]),
        ],
        axis=1,
    ).astype(npd).reshape(n, 4)

    skind = draw(st.sampled_from(["ties", "float", "wide"]), label="score kind")
    if skind == "ties":
        elem = st.sampled_from([0.0, 0.05, 0.1, 0.3, 0.5, 0.9, 1.0])
    elif skind == "float":
        elem = st.floats(0.0, 1.0, width=width)
    else:
        elem = st.floats(-10.0, 10.0, width=width)
    scores = np.array(draw(st.lists(elem, min_size=n, max_size=n)), dtype=npd).reshape(n)

    labels = None
    if with_labels and draw(st.booleans()):
        k = draw(st.integers(1, 3))
        values = draw(st.sampled_from([(0, 1, 2), (1, 7, 1000), (-1, 0, 5)]))[:k]
        ldtype = draw(st.sampled_from([np.int64, np.int64, np.int32]))
        labels = np.array(draw(st.lists(st.sampled_from(values), min_size=n, max_size=n)), dtype=ldtype).reshape(n)
    return Case(boxes, scores, labels)


# --------------------------------------------------------------------------- checks


def run(name, case: Case, iou_threshold, device: str = "cpu", **params):
    """run_nms on the case's tensors on ``device``; also checks the call left its inputs alone."""
    boxes, scores, labels = case.tensors(device)
    b0, s0 = boxes.clone(), scores.clone()
    l0 = None if labels is None else labels.clone()
    result = nmsbench.run_nms(name, boxes, scores, iou_threshold=iou_threshold, labels=labels, **params)
    assert torch.equal(boxes, b0) and torch.equal(scores, s0), f"{name} modified its inputs"
    assert labels is None or torch.equal(labels, l0), f"{name} modified its labels"
    check_keep(result.keep, boxes)
    return result


def check_keep(keep, boxes) -> list[int]:
    assert isinstance(keep, torch.Tensor)
    assert keep.dtype == torch.int64, keep.dtype
    assert keep.dim() == 1, keep.shape
    assert keep.device == boxes.device
    k = keep.tolist()
    assert len(set(k)) == len(k), f"duplicate indices in keep: {k}"
    n = boxes.shape[0]
    assert all(0 <= i < n for i in k), f"index out of range [0, {n}): {k}"
    return k


def assert_rank_ordered(keep: list[int], scores: np.ndarray) -> None:
    """Descending input score, ties by lower input index."""
    for a, b in zip(keep, keep[1:]):
        assert scores[a] > scores[b] or (scores[a] == scores[b] and a < b), (
            f"keep not in rank order at {a} (score {scores[a]}) -> {b} (score {scores[b]}): {keep}"
        )


def assert_kept_do_not_overlap(keep: list[int], case: Case, thr: float) -> None:
    """Greedy output: no two kept same-label boxes overlap above the threshold."""
    for p, a in enumerate(keep):
        for b in keep[p + 1 :]:
            if case.label(a) == case.label(b):
                v = float(D.iou(case.row(a), case.row(b)))
                assert not v > thr, f"kept boxes {a} and {b} have IoU {v} > {thr}"


def torchvision_entry(case: Case, thr: float) -> Optional[list[int]]:
    if "torchvision" in IMPLS and cpu_available("torchvision", torch.float32 if case.boxes.dtype == np.float32 else torch.float64):
        return nmsbench.run_nms("torchvision", *case.tensors()[:2], iou_threshold=thr, labels=case.tensors()[2]).keep.tolist()
    return None


# --------------------------------------------------------------------------- definitions, by hand

F32 = np.float32

# A chain: A overlaps B, B overlaps C, A and C only touch.
CHAIN = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [10, 0, 20, 10]], dtype=F32)
CHAIN_SCORES = np.array([0.9, 0.8, 0.7], dtype=F32)


def test_definition_iou_by_hand():
    a, b, c = (tuple(r) for r in CHAIN)
    assert D.iou(a, b) == F32(1) / F32(3)  # 50 / (100 + 100 - 50)
    assert D.iou(a, c) == 0  # touching
    assert D.iou(a, a) == 1
    z = tuple(np.array([1, 1, 1, 1], dtype=F32))
    assert D.iou(z, z) == 0  # two zero-area boxes: union 0 -> IoU 0
    assert D.iou(tuple(np.array([0, 0, 2, 1], dtype=F32)), tuple(np.array([0, 0, 1, 1], dtype=F32))) == 0.5
    assert type(D.iou(a, b)) is np.float32
    assert type(D.iou(*(tuple(r) for r in CHAIN.astype(np.float64)[:2]))) is np.float64


def test_definition_chain_greedy_vs_allpairs():
    assert D.hard_nms(CHAIN, CHAIN_SCORES, 0.3) == [0, 2]
    assert D.allpairs_nms(CHAIN, CHAIN_SCORES, 0.3) == [0]
    assert D.hard_nms(CHAIN, CHAIN_SCORES, 0.5) == [0, 1, 2]
    assert D.allpairs_nms(CHAIN, CHAIN_SCORES, 0.5) == [0, 1, 2]
    # B ranked first: it suppresses both A and C under either rule
    s = np.array([0.8, 0.9, 0.7], dtype=F32)
    assert D.hard_nms(CHAIN, s, 0.3) == [1]
    assert D.allpairs_nms(CHAIN, s, 0.3) == [1]
    # labels: B in its own class interacts with nobody
    lab = np.array([0, 1, 0])
    assert D.hard_nms(CHAIN, CHAIN_SCORES, 0.3, lab) == [0, 1, 2]
    assert D.allpairs_nms(CHAIN, CHAIN_SCORES, 0.3, lab) == [0, 1, 2]


def test_definition_threshold_is_strict_and_compared_in_float64():
    b = np.array([[0, 0, 2, 1], [0, 0, 1, 1]], dtype=F32)  # IoU exactly 0.5
    s = np.array([0.9, 0.8], dtype=F32)
    assert D.hard_nms(b, s, 0.5) == [0, 1]  # not > 0.5
    assert D.hard_nms(b, s, 0.4999) == [0]
    # float32 1/3 is 0.3333333432..., above the float64 1/3: suppressed in float32 only
    assert D.hard_nms(CHAIN[:2], CHAIN_SCORES[:2], 1 / 3) == [0]
    assert D.hard_nms(CHAIN[:2].astype(np.float64), CHAIN_SCORES[:2].astype(np.float64), 1 / 3) == [0, 1]
    # ... which is what torchvision itself does
    tb, ts = torch.from_numpy(CHAIN[:2]), torch.from_numpy(CHAIN_SCORES[:2])
    assert torchvision.ops.nms(tb, ts, 1 / 3).tolist() == [0]
    assert torchvision.ops.nms(tb.double(), ts.double(), 1 / 3).tolist() == [0, 1]
    # threshold 1.0 suppresses nothing, not even exact duplicates; 0.0 suppresses any overlap
    d = np.array([[0, 0, 1, 1]] * 3, dtype=F32)
    assert D.hard_nms(d, np.array([0.1, 0.2, 0.3], dtype=F32), 1.0) == [2, 1, 0]
    assert D.hard_nms(d, np.array([0.1, 0.2, 0.3], dtype=F32), 0.0) == [2]
    assert D.hard_nms(CHAIN, CHAIN_SCORES, 0.0) == [0, 2]  # touching boxes have IoU 0


def test_definition_ties_zero_area_and_empty():
    # equal scores: lower input index ranks first
    d = np.array([[0, 0, 1, 1]] * 3, dtype=F32)
    assert D.hard_nms(d, np.array([0.5, 0.5, 0.5], dtype=F32), 0.5) == [0]
    far = np.array([[0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10]], dtype=F32)
    assert D.hard_nms(far, np.array([0.5, 0.9, 0.5], dtype=F32), 0.5) == [1, 0, 2]
    assert D.rank(np.array([0.5, 0.9, 0.5, 0.9], dtype=F32)) == [1, 3, 0, 2]
    # zero-area duplicates never suppress each other (IoU 0), even at threshold 0
    z = np.array([[1, 1, 1, 1]] * 3, dtype=F32)
    assert D.hard_nms(z, np.array([0.1, 0.2, 0.3], dtype=F32), 0.0) == [2, 1, 0]
    assert D.allpairs_nms(z, np.array([0.1, 0.2, 0.3], dtype=F32), 0.0) == [2, 1, 0]
    e = np.zeros((0, 4), dtype=F32)
    assert D.hard_nms(e, np.zeros(0, dtype=F32), 0.5) == []
    assert D.allpairs_nms(e, np.zeros(0, dtype=F32), 0.5) == []
    assert D.matrix_nms(e, np.zeros(0, dtype=F32)) == ([], [])


def test_definition_matrix_by_hand():
    third = float(F32(1) / F32(3))  # the float32 IoU of A-B and of B-C
    # gaussian, sigma 0.5: cmax A = 0, B = 1/3, C = 1/3
    #   decay B = exp((0 - 1/9) / 0.5)
    #   decay C = min(A: exp((0 - 0) / 0.5), B: exp((1/9 - 1/9) / 0.5)) = 1
    keep, final = D.matrix_nms(CHAIN, CHAIN_SCORES, kernel="gaussian", sigma=0.5, score_threshold=0.05)
    fa, fb, fc = (float(v) for v in CHAIN_SCORES)
    assert keep == [0, 2, 1]
    assert final == [fa, fc, fb * math.exp(-(third**2) / 0.5)]
    assert math.isclose(final[2], 0.8 * math.exp(-2 / 9), rel_tol=1e-6)  # 0.64059
    # linear: decay B = 1 - 1/3, decay C = min(A: 1/1, B: (2/3) / (2/3)) = 1
    keep, final = D.matrix_nms(CHAIN, CHAIN_SCORES, kernel="linear", score_threshold=0.05)
    assert keep == [0, 2, 1]
    assert final == [fa, fc, fb * (1 - third)]
    # the threshold applies to the decayed score: B (0.64) goes at 0.65, C (0.7) stays
    assert D.matrix_nms(CHAIN, CHAIN_SCORES, score_threshold=0.65)[0] == [0, 2]
    # different labels: nothing decays
    keep, final = D.matrix_nms(CHAIN, CHAIN_SCORES, labels=np.array([0, 1, 0]))
    assert keep == [0, 1, 2] and final == [fa, fb, fc]


def test_definition_matrix_duplicates_by_hand():
    d = np.array([[0, 0, 2, 2]] * 3, dtype=F32)
    s = np.array([0.7, 0.9, 0.8], dtype=F32)  # rank: 1, 2, 0
    # gaussian: box 2's only parent is 1 (cmax 0): exp(-1/0.5); box 0: parent 1 gives
    # exp(-2), parent 2 (cmax 1) gives exp((1 - 1)/0.5) = 1 -> exp(-2)
    keep, final = D.matrix_nms(d, s, kernel="gaussian", sigma=0.5, score_threshold=0.0)
    assert keep == [1, 2, 0]
    assert final == [float(s[1]), float(s[2]) * math.exp(-2), float(s[0]) * math.exp(-2)]
    # linear: parent 1 gives 1 - 1 = 0; parent 2 has cmax 1 and constrains nothing
    keep, final = D.matrix_nms(d, s, kernel="linear", score_threshold=0.05)
    assert keep == [1] and final == [float(s[1])]
    keep, final = D.matrix_nms(d, s, kernel="linear", score_threshold=0.0)
    assert keep == [1, 0, 2] and final == [float(s[1]), 0.0, 0.0]  # ties by lower index


def test_definition_matrix_sigma_is_the_seed_convention():
    # exp(-x^2 / sigma): a larger sigma decays less
    b = np.array([[0, 0, 2, 1], [0, 0, 1, 1]], dtype=F32)  # IoU 0.5
    s = np.array([1.0, 1.0], dtype=F32)
    for sigma in (0.5, 2.0):
        _, final = D.matrix_nms(b, s, sigma=sigma, score_threshold=0.0)
        assert final[1] == math.exp(-0.25 / sigma)


# --------------------------------------------------------------------------- definitions vs independent formulations


def _torchvision_labelwise(case: Case, thr: float) -> list[int]:
    """torchvision.ops.nms per label (same arithmetic as the unlabelled kernel), merged by rank."""
    boxes, scores, labels = case.tensors()
    if labels is None:
        return torchvision.ops.nms(boxes, scores, thr).tolist()
    kept = []
    for c in torch.unique(labels):
        idx = torch.where(labels == c)[0]
        kept += idx[torchvision.ops.nms(boxes[idx], scores[idx], thr)].tolist()
    pos = {j: p for p, j in enumerate(D.rank(case.scores))}
    return sorted(kept, key=pos.__getitem__)


def _solov2_final(case: Case, kernel: str, sigma: float) -> np.ndarray:
    """Matrix NMS as written in the SOLOv2 / mmdet code (min over the whole column of the
    decay / compensate matrices), float64, from the definitions' IoUs."""
    n = len(case.scores)
    order = D.rank(case.scores)
    iou = np.zeros((n, n))
    same = np.zeros((n, n))
    for p in range(n):
        for q in range(p + 1, n):
            i, j = order[p], order[q]
            iou[p, q] = float(D.iou(case.row(i), case.row(j)))
            same[p, q] = case.label(i) == case.label(j)
    decay_iou = iou * same
    comp = decay_iou.max(axis=0, initial=0.0)[:, None]  # row p: cmax of box order[p]
    with np.errstate(all="ignore"):
        if kernel == "gaussian":
            m = np.exp(-(decay_iou**2) / sigma) / np.exp(-(comp**2) / sigma)
        else:
            m = (1 - decay_iou) / (1 - comp)
            m[~np.isfinite(m)] = np.inf  # a parent with cmax 1 constrains nothing
    decay = m.min(axis=0, initial=np.inf) if n else np.zeros(0)
    out = np.zeros(n)
    for q, j in enumerate(order):
        out[j] = float(case.scores[j]) * decay[q]
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=examples(60))
@given(data=st.data())
def test_definition_hard_matches_torchvision_library(dtype, data):
    case = data.draw(cases(dtype), label="case")
    thr = data.draw(THRESHOLDS, label="iou_threshold")
    assert D.hard_nms(case.boxes, case.scores, thr, case.labels) == _torchvision_labelwise(case, thr)


@pytest.mark.parametrize("kernel", ["gaussian", "linear"])
@settings(max_examples=examples(40))
@given(data=st.data())
def test_definition_matrix_matches_solov2_formula(kernel, data):
    case = data.draw(cases(torch.float32, max_n=25), label="case")
    sigma = data.draw(st.sampled_from([0.5, 2.0, 0.1]), label="sigma")
    ours = np.array(D.matrix_final_scores(case.boxes, case.scores, case.labels, kernel=kernel, sigma=sigma))
    np.testing.assert_allclose(ours, _solov2_final(case, kernel, sigma), rtol=1e-12, atol=1e-12)


@settings(max_examples=examples(40))
@given(data=st.data())
def test_definition_allpairs_within_hard(data):
    case = data.draw(cases(torch.float32), label="case")
    thr = data.draw(THRESHOLDS, label="iou_threshold")
    hard = D.hard_nms(case.boxes, case.scores, thr, case.labels)
    allp = D.allpairs_nms(case.boxes, case.scores, thr, case.labels)
    assert set(allp) <= set(hard)
    assert allp == [j for j in hard if j in set(allp)]  # both in rank order


# --------------------------------------------------------------------------- hard


def near_threshold(case: Case, thr: float, band: float = 1e-6) -> bool:
    """Whether some same-label pair has an IoU within ``band`` of the threshold."""
    b = case.boxes.astype(np.float64)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    w = np.clip(np.minimum(b[:, None, 2], b[None, :, 2]) - np.maximum(b[:, None, 0], b[None, :, 0]), 0, None)
    h = np.clip(np.minimum(b[:, None, 3], b[None, :, 3]) - np.maximum(b[:, None, 1], b[None, :, 1]), 0, None)
    inter = w * h
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.nan_to_num(inter / (area[:, None] + area[None, :] - inter))
    same = np.ones_like(iou, dtype=bool) if case.labels is None else case.labels[:, None] == case.labels[None, :]
    return bool((same & (np.abs(iou - thr) <= band)).any())


def check_hard(name: str, case: Case, thr: float, device: str = "cpu") -> None:
    result = run(name, case, thr, device)
    assert result.scores is None, f"{name}: hard NMS returns scores=None"
    keep = result.keep.tolist()
    if name == "torchvision" and device == "cuda" and near_threshold(case, thr):
        # torchvision's CUDA kernel is built with FMA contraction and compares the IoU with
        # the threshold rounded to float32, so an IoU within a few ulps of the threshold
        # can go either way there (measured on the H200). Everywhere else it is exact.
        assert_kept_do_not_overlap(keep, case, thr + 1e-6)
        return
    assert_rank_ordered(keep, case.scores)
    assert_kept_do_not_overlap(keep, case, thr)
    if IMPLS[name].exact:
        assert keep == D.hard_nms(case.boxes, case.scores, thr, case.labels)
        tv = torchvision_entry(case, thr)
        if tv is not None:
            assert keep == tv, f"{name} differs from the torchvision entry"


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", HARD)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(70))
@given(data=st.data())
def test_hard_family(name, dtype, device, data):
    require(name, dtype, device)
    check_hard(name, data.draw(cases(dtype), label="case"), data.draw(THRESHOLDS, label="iou_threshold"), device)


@pytest.mark.parametrize("name", HARD)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(8))
@given(data=st.data())
def test_hard_family_large(name, device, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    require(name, dtype, device)
    case = data.draw(cases(dtype, min_n=60, max_n=250), label="case")
    check_hard(name, case, data.draw(THRESHOLDS, label="iou_threshold"), device)


# --------------------------------------------------------------------------- allpairs


def check_allpairs(name: str, case: Case, thr: float, device: str = "cpu") -> None:
    result = run(name, case, thr, device)
    assert result.scores is None, f"{name}: all-pairs NMS returns scores=None"
    keep = result.keep.tolist()
    assert_rank_ordered(keep, case.scores)
    assert_kept_do_not_overlap(keep, case, thr)
    assert keep == D.allpairs_nms(case.boxes, case.scores, thr, case.labels)
    assert set(keep) <= set(D.hard_nms(case.boxes, case.scores, thr, case.labels))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ALLPAIRS)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(70))
@given(data=st.data())
def test_allpairs_family(name, dtype, device, data):
    require(name, dtype, device)
    check_allpairs(name, data.draw(cases(dtype), label="case"), data.draw(THRESHOLDS, label="iou_threshold"), device)


@pytest.mark.parametrize("name", ALLPAIRS)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(8))
@given(data=st.data())
def test_allpairs_family_large(name, device, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    require(name, dtype, device)
    case = data.draw(cases(dtype, min_n=60, max_n=250), label="case")
    check_allpairs(name, case, data.draw(THRESHOLDS, label="iou_threshold"), device)


# --------------------------------------------------------------------------- matrix

RTOL, ATOL = 1e-5, 1e-6
BORDER = 1e-5  # kept-set disagreements allowed only this close to score_threshold

SIGMAS = st.one_of(st.sampled_from([0.5, 2.0, 0.1, 1.0]), st.floats(0.05, 5.0))
SCORE_THRESHOLDS = st.one_of(st.sampled_from([0.05, 0.0, 0.1, 0.5]), st.floats(-0.1, 1.0))


def check_matrix(
    name: str, case: Case, thr: float, kernel: str, sigma: float, score_threshold: float, device: str = "cpu"
) -> None:
    params = dict(kernel=kernel, sigma=sigma, score_threshold=score_threshold)
    result = run(name, case, thr, device, **params)
    keep = result.keep.tolist()
    assert result.scores is not None, f"{name}: Matrix NMS returns the decayed scores"
    got = result.scores
    assert isinstance(got, torch.Tensor) and got.is_floating_point() and got.dim() == 1
    assert got.shape == result.keep.shape and got.device == result.keep.device
    got = got.double().tolist()

    final = D.matrix_final_scores(case.boxes, case.scores, case.labels, kernel=kernel, sigma=sigma)
    # decayed scores, aligned with keep
    np.testing.assert_allclose(
        got, [final[j] for j in keep], rtol=RTOL, atol=ATOL, err_msg=f"{name}: decayed scores of keep={keep}"
    )
    # kept set: final >= score_threshold, except right at the threshold
    border = {j for j, f in enumerate(final) if abs(f - score_threshold) <= BORDER}
    expected = {j for j, f in enumerate(final) if f >= score_threshold}
    assert set(keep) - border == expected - border, (
        f"{name}: kept {sorted(set(keep))}, definition keeps {sorted(expected)} (border {sorted(border)})"
    )
    # order: by descending final score (its own), ties by lower input index
    for k in range(len(keep) - 1):
        a, b = keep[k], keep[k + 1]
        assert got[k] > got[k + 1] or (got[k] == got[k + 1] and a < b), (
            f"{name}: keep not ordered by final score at {a} ({got[k]}) -> {b} ({got[k + 1]})"
        )
        tol = ATOL + RTOL * max(abs(final[a]), abs(final[b]))
        assert final[a] >= final[b] - 2 * tol, f"{name}: {a} before {b} but definition scores {final[a]} < {final[b]}"


@pytest.mark.parametrize("kernel", ["gaussian", "linear"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", MATRIX)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(35))
@given(data=st.data())
def test_matrix_family(name, dtype, kernel, device, data):
    require(name, dtype, device)
    check_matrix(
        name,
        data.draw(cases(dtype), label="case"),
        data.draw(THRESHOLDS, label="iou_threshold"),
        kernel,
        data.draw(SIGMAS, label="sigma"),
        data.draw(SCORE_THRESHOLDS, label="score_threshold"),
        device,
    )


@pytest.mark.parametrize("name", MATRIX)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(6))
@given(data=st.data())
def test_matrix_family_large(name, device, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    require(name, dtype, device)
    check_matrix(
        name,
        data.draw(cases(dtype, min_n=60, max_n=250), label="case"),
        0.5,
        data.draw(st.sampled_from(["gaussian", "linear"]), label="kernel"),
        data.draw(SIGMAS, label="sigma"),
        data.draw(SCORE_THRESHOLDS, label="score_threshold"),
        device,
    )


@pytest.mark.parametrize("name", MATRIX)
@pytest.mark.parametrize("device", DEVICES)
def test_matrix_defaults_and_iou_threshold_unused(name, device):
    require(name, torch.float32, device)
    case = Case(CHAIN.copy(), CHAIN_SCORES.copy(), None)
    a = run(name, case, 0.5, device)  # defaults: gaussian, sigma 0.5, score_threshold 0.05
    keep, final = D.matrix_nms(CHAIN, CHAIN_SCORES)
    assert a.keep.tolist() == keep == [0, 2, 1]
    np.testing.assert_allclose(a.scores.double().cpu().numpy(), final, rtol=RTOL, atol=ATOL)
    for thr in (0.0, 1.0):
        b = run(name, case, thr, device)
        assert torch.equal(a.keep, b.keep) and torch.equal(a.scores, b.scores)
    c = run(name, case, 0.5, device, kernel="linear", score_threshold=0.65)
    assert c.keep.tolist() == [0, 2]


# --------------------------------------------------------------------------- soft, diou, weighted

SOFT_SCORE_THRESHOLDS = st.one_of(st.sampled_from([0.001, 0.0, 0.1, 0.5]), st.floats(0.0, 1.0))


def check_soft(name: str, case: Case, thr: float, kernel: str, sigma: float, score_threshold: float,
               device: str = "cpu") -> None:
    result = run(name, case, thr, device, kernel=kernel, sigma=sigma, score_threshold=score_threshold)
    keep, got = result.keep.tolist(), result.scores
    assert got is not None and got.dtype == torch.from_numpy(case.scores).dtype and got.shape == result.keep.shape
    expected, final = D.soft_nms(case.boxes, case.scores, thr, case.labels, kernel=kernel, sigma=sigma,
                                 score_threshold=score_threshold)
    if IMPLS[name].exact:  # the same picks in the same order, the final scores rounded to the input dtype
        assert keep == expected, f"{name}: picks {keep}, the definition picks {expected}"
        want = torch.tensor(final, dtype=torch.float64).to(got.dtype)
        assert torch.equal(got.cpu(), want), f"{name}: final scores {got.tolist()}, the definition's {want.tolist()}"
    else:  # to rounding: the same picks and scores, except right at the score threshold
        mine, theirs = dict(zip(keep, got.double().tolist())), dict(zip(expected, final))
        border = {j for j, f in {**mine, **theirs}.items() if abs(f - score_threshold) <= BORDER}
        assert set(mine) - border == set(theirs) - border, f"{name}: picks {sorted(mine)}, the definition's {sorted(theirs)}"
        for j in set(mine) & set(theirs):
            assert mine[j] == pytest.approx(theirs[j], rel=RTOL, abs=ATOL), f"{name}: box {j} final score"
    values = got.double().tolist()  # (rounded to the input dtype, a final score may fall below the threshold)
    assert all(a >= b for a, b in zip(values, values[1:])), f"{name}: picks not in descending final score"


@pytest.mark.parametrize("kernel", ["gaussian", "linear"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", SOFT)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(35))
@given(data=st.data())
def test_soft_family(name, dtype, kernel, device, data):
    require(name, dtype, device)
    check_soft(name, data.draw(cases(dtype), label="case"), data.draw(THRESHOLDS, label="iou_threshold"), kernel,
               data.draw(SIGMAS, label="sigma"), data.draw(SOFT_SCORE_THRESHOLDS, label="score_threshold"), device)


@pytest.mark.parametrize("name", SOFT)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(6))
@given(data=st.data())
def test_soft_family_large(name, device, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    require(name, dtype, device)
    check_soft(name, data.draw(cases(dtype, min_n=60, max_n=250), label="case"), 0.5,
               data.draw(st.sampled_from(["gaussian", "linear"]), label="kernel"), 0.5, 0.001, device)


@pytest.mark.parametrize("name", SOFT)
def test_soft_refuses_a_negative_score_threshold(name):
    device = "cpu" if "cpu" in IMPLS[name].backends else "cuda"
    require(name, torch.float32, device)
    with pytest.raises(ValueError, match="score_threshold must be >= 0 for Soft-NMS"):
        nmsbench.run_nms(name, torch.zeros(1, 4, device=device), torch.ones(1, device=device), score_threshold=-0.1)


def check_diou(name: str, case: Case, thr: float, beta: float, device: str = "cpu") -> None:
    result = run(name, case, thr, device, beta=beta)
    assert result.scores is None and result.boxes is None
    keep = result.keep.tolist()
    assert_rank_ordered(keep, case.scores)
    assert keep == D.diou_nms(case.boxes, case.scores, thr, case.labels, beta=beta)
    for a, i in enumerate(keep):  # no kept box would have suppressed a later kept one
        for j in keep[a + 1:]:
            if case.label(i) == case.label(j):  # the definition's rule: IoU above 0 and DIoU above thr
                overlap = float(D.iou(case.row(i), case.row(j)))  # (a NaN DIoU, from lengths near the float64
                v = overlap - D.diou_penalty(case.row(i), case.row(j), beta)  # limit, suppresses nothing)
                assert not (overlap > 0 and v > thr), f"{name}: kept {i} and {j} with DIoU {v} > {thr}"


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", DIOU)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(50))
@given(data=st.data())
def test_diou_family(name, dtype, device, data):
    require(name, dtype, device)
    check_diou(name, data.draw(cases(dtype), label="case"), data.draw(THRESHOLDS, label="iou_threshold"),
               data.draw(st.one_of(st.sampled_from([1.0, 0.6, 2.0]), st.floats(0.1, 4.0)), label="beta"), device)


@pytest.mark.parametrize("name", DIOU)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(6))
@given(data=st.data())
def test_diou_family_large(name, device, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    require(name, dtype, device)
    check_diou(name, data.draw(cases(dtype, min_n=60, max_n=250), label="case"), 0.5, 1.0, device)


def check_weighted(name: str, case: Case, thr: float, device: str = "cpu") -> None:
    result = run(name, case, thr, device)
    keep = result.keep.tolist()
    expected, moved = D.weighted_nms(case.boxes, case.scores, thr, case.labels)
    assert keep == expected, f"{name}: keeps {keep}, greedy NMS keeps {expected}"
    assert result.scores is None and result.boxes is not None and result.boxes.dtype == result.boxes.dtype
    want = torch.tensor(moved, dtype=torch.float64).reshape(-1, 4).to(result.boxes.dtype)
    if IMPLS[name].exact:
        # bit for bit, a NaN where the definition's is (weights that overflow: scores near the float64 limit)
        torch.testing.assert_close(result.boxes.cpu(), want, rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{name}: moved boxes differ from the definition's: {m}")
    else:
        np.testing.assert_allclose(result.boxes.double().cpu().numpy(), want.double().numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", WEIGHTED)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(50))
@given(data=st.data())
def test_weighted_family(name, dtype, device, data):
    require(name, dtype, device)
    check_weighted(name, data.draw(cases(dtype), label="case"), data.draw(THRESHOLDS, label="iou_threshold"), device)


@pytest.mark.parametrize("name", WEIGHTED)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(6))
@given(data=st.data())
def test_weighted_family_large(name, device, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    require(name, dtype, device)
    check_weighted(name, data.draw(cases(dtype, min_n=60, max_n=250), label="case"), 0.5, device)


# --------------------------------------------------------------------------- every implementation: corner cases


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", ALL_IMPLS)
@pytest.mark.parametrize("device", DEVICES)
def test_single_box(name, dtype, device):
    require(name, dtype, device)
    npd = _npdtype(dtype)
    for box in ([0, 0, 1, 1], [2, 2, 2, 2]):  # and a zero-area one
        case = Case(np.array([box], dtype=npd), np.array([0.75], dtype=npd), None)
        result = run(name, case, 0.5, device)
        assert result.keep.tolist() == [0]
        if IMPLS[name].family in ("matrix", "soft"):
            assert result.scores.double().tolist() == [0.75]
        elif IMPLS[name].family in ("hard", "allpairs", "diou"):
            assert result.scores is None and result.boxes is None
        elif IMPLS[name].family == "weighted":  # its own box, weighted by itself alone
            assert result.boxes.tolist() == [box] and result.scores is None


@pytest.mark.parametrize("name", ALL_IMPLS)
@pytest.mark.parametrize("device", DEVICES)
def test_empty(name, device):
    require(name, torch.float32, device)
    for dtype in IMPLS[name].backend(device).dtypes:
        for labels in (None, torch.zeros(0, dtype=torch.int64, device=device)):
            empty_boxes = torch.zeros(0, 4, dtype=dtype, device=device)
            r = nmsbench.run_nms(name, empty_boxes, torch.zeros(0, dtype=dtype, device=device), iou_threshold=0.5, labels=labels)
            assert r.keep.dtype == torch.int64 and r.keep.shape == (0,) and r.keep.device == empty_boxes.device
            if IMPLS[name].family in ("matrix", "soft"):
                assert r.scores is not None and r.scores.shape == (0,)
            if IMPLS[name].family == "weighted":
                assert r.boxes is not None and r.boxes.shape == (0, 4)


@pytest.mark.parametrize("name", ALL_IMPLS)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(15))
@given(
    n=st.integers(2, 30),
    box=st.sampled_from([[0, 0, 2, 2], [1.5, 0.25, 3.0, 7.0], [4, 4, 4, 4], [0, 1, 5, 1]]),
    scores=st.sampled_from(["equal", "distinct"]),
    thr=st.sampled_from([0.0, 0.5, 0.999, 1.0]),
)
def test_all_duplicates(name, device, n, box, scores, thr):
    require(name, torch.float32, device)
    if scores == "equal":
        s = np.full(n, 0.5, dtype=F32)
    else:
        s = np.random.default_rng(n).permutation(np.linspace(0.1, 0.9, n)).astype(F32)
    case = Case(np.array([box] * n, dtype=F32), s, None)
    order = D.rank(s)
    positive_area = (box[2] - box[0]) * (box[3] - box[1]) > 0
    family = IMPLS[name].family
    if family in ("hard", "allpairs", "diou", "weighted"):  # DIoU: identical boxes have no distance penalty
        result = run(name, case, thr, device)
        # duplicates have IoU 1 (> any threshold < 1); zero-area duplicates have IoU 0
        expected = [order[0]] if positive_area and thr < 1.0 else order
        assert result.keep.tolist() == expected
        if family == "weighted":  # the kept box is the weighted mean of copies of itself
            assert np.allclose(result.boxes.double().cpu().numpy(), np.array([box] * len(expected)), rtol=1e-6)
    elif family == "soft":
        for kernel in ("gaussian", "linear"):
            check_soft(name, case, thr, kernel, 0.5, 0.001, device)
    elif family == "matrix":
        # score_threshold -0.5 keeps the fully decayed (final 0) duplicates too, so a
        # linear-kernel parent with cmax 1 must be skipped, not turned into 0/0
        for kernel in ("gaussian", "linear"):
            for score_threshold in (0.05, -0.5):
                check_matrix(name, case, thr, kernel, 0.5, score_threshold, device)


@pytest.mark.parametrize("name", ALL_IMPLS)
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=examples(10))
@given(data=st.data())
def test_strided_and_grad_inputs(name, device, data):
    """Non-contiguous views and tensors that require grad are valid input: same result."""
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    require(name, dtype, device)
    case = data.draw(cases(dtype, max_n=20), label="case")
    thr = data.draw(THRESHOLDS, label="iou_threshold")
    boxes, scores, labels = case.tensors(device)
    n = boxes.shape[0]
    ref = nmsbench.run_nms(name, boxes, scores, iou_threshold=thr, labels=labels)
    # boxes every other column of (N, 8), scores every other element of (2N,), labels too
    wide = torch.zeros(n, 8, dtype=dtype, device=device)
    wide[:, ::2] = boxes
    s2 = torch.zeros(2 * n, dtype=dtype, device=device)
    s2[::2] = scores
    l2 = None
    if labels is not None:
        l2 = torch.zeros(2 * n, dtype=labels.dtype, device=device)
        l2[::2] = labels
        l2 = l2[::2]
    for b, s, lab in (
        (wide[:, ::2], s2[::2], l2),
        (boxes.clone().requires_grad_(), scores.clone().requires_grad_(), labels),
    ):
        got = nmsbench.run_nms(name, b, s, iou_threshold=thr, labels=lab)
        assert torch.equal(got.keep, ref.keep)
        if ref.scores is not None:
            assert torch.equal(got.scores.detach(), ref.scores)


# --------------------------------------------------------------------------- the overlap graph (numba CPU backends)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=examples(60))
@given(data=st.data())
def test_the_overlap_graph_holds_every_overlapping_pair(dtype, data):
    from nmsbench.variants._cpu import overlap_graph

    case = data.draw(cases(dtype, max_n=60), label="case")
    n = len(case.scores)
    labels = np.zeros(n, dtype=np.int64) if case.labels is None else case.labels.astype(np.int64)
    indptr, indices, ious = overlap_graph(case.boxes, labels)
    for i in range(n):
        row = dict(zip(indices[indptr[i]:indptr[i + 1]].tolist(), ious[indptr[i]:indptr[i + 1]].tolist()))
        want = {j: float(D.iou(case.row(i), case.row(j))) for j in range(n)
                if j != i and labels[j] == labels[i] and float(D.iou(case.row(i), case.row(j))) > 0}
        assert row == want, f"row {i}"
    assert overlap_graph(case.boxes, labels, max_pairs=int(indptr[-1]) - 1) is None or indptr[-1] == 0


@contextlib.contextmanager
def dense_fraction_of(module, value):
    """A graph backend's DENSE_FRACTION set for the block (1: always the graph; 10**9: always
    the dense path); a plain swap, not monkeypatch, which hypothesis' examples cannot share."""
    before, module.DENSE_FRACTION = module.DENSE_FRACTION, value
    try:
        yield
    finally:
        module.DENSE_FRACTION = before


@pytest.mark.parametrize("dense_fraction", [1, 10**9], ids=["graph", "dense"])
@settings(max_examples=examples(40))
@given(data=st.data())
def test_soft_nms_takes_either_path_to_the_definition(dense_fraction, data):
    import nmsbench.variants.soft_nms as module

    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    case = data.draw(cases(dtype, max_n=60), label="case")
    with dense_fraction_of(module, dense_fraction):
        check_soft("soft_nms", case, data.draw(THRESHOLDS, label="iou_threshold"),
                   data.draw(st.sampled_from(["gaussian", "linear"]), label="kernel"), data.draw(SIGMAS, label="sigma"),
                   data.draw(SOFT_SCORE_THRESHOLDS, label="score_threshold"))


@pytest.mark.parametrize("dense_fraction", [1, 10**9], ids=["graph", "dense"])
@settings(max_examples=examples(40))
@given(data=st.data())
def test_hard_graph_takes_either_path_to_the_definition(dense_fraction, data):
    import nmsbench.variants.hard_graph as module

    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    case = data.draw(cases(dtype, max_n=60), label="case")
    with dense_fraction_of(module, dense_fraction):
        check_hard("hard_graph", case, data.draw(THRESHOLDS, label="iou_threshold"))


@pytest.mark.parametrize("seed", [0, 1])
def test_hard_graph_is_torchvision_on_a_large_image_at_constant_density(seed):
    """Boxes of 4-64 px on a canvas of side 64 sqrt(N) (the large-N workload: each box has
    as many neighbours at any N), labels and none."""
    n = 16384
    rng = np.random.default_rng(seed)
    side = 64.0 * math.sqrt(n)
    xy = rng.uniform(0, side, size=(n, 2))
    wh = rng.uniform(4, 64, size=(n, 2))
    boxes = torch.from_numpy(np.concatenate([xy, xy + wh], axis=1).astype(np.float32))
    scores = torch.from_numpy(rng.uniform(size=n).astype(np.float32))
    for labels in (None, torch.from_numpy(rng.integers(0, 3, size=n))):
        want = torchvision_entry(Case(boxes.numpy(), scores.numpy(), None if labels is None else labels.numpy()), 0.5)
        got = nmsbench.run_nms("hard_graph", boxes, scores, iou_threshold=0.5, labels=labels).keep.tolist()
        assert got == want
