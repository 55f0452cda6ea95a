"""Bad input through nmsbench.run_nms: a ValueError that names the problem, for every
registered implementation (validation lives once in nmsbench, before any backend runs)."""

from __future__ import annotations

import math

import pytest
import torch

import nmsbench

IMPLS = nmsbench.implementations()
ALL = sorted(name for name, impl in IMPLS.items() if "cpu" in impl.backends)  # on CPU tensors (CUDA-only: test_validation_gpu.py)
MATRIX = sorted(n for n, impl in IMPLS.items() if impl.family == "matrix")
NO_SIGMA = sorted(n for n, impl in IMPLS.items() if "sigma" not in {p.name for p in impl.params})


def good(n: int = 3, dtype=torch.float32):
    boxes = torch.tensor([[0, 0, 10, 10], [5, 0, 15, 10], [10, 0, 20, 10]], dtype=dtype)[:n]
    scores = torch.tensor([0.9, 0.8, 0.7], dtype=dtype)[:n]
    labels = torch.tensor([0, 1, 0], dtype=torch.int64)[:n]
    return boxes, scores, labels


def _set(t, index, value):
    t = t.clone()
    t[index] = value
    return t


B, S, L = good()

# (id, boxes, scores, labels, regex the message must match)
BAD_INPUTS = [
    ("nan-box", _set(B, (1, 2), math.nan), S, None, r"boxes contain NaN or Inf.*row 1"),
    ("inf-box", _set(B, (0, 0), -math.inf), S, None, r"boxes contain NaN or Inf.*row 0"),
    ("nan-score", B, _set(S, 2, math.nan), None, r"scores contain NaN or Inf.*index 2"),
    ("inf-score", B, _set(S, 0, math.inf), None, r"scores contain NaN or Inf.*index 0"),
    ("x2<x1", _set(B, (2, 2), 9.0), S, None, r"x2 >= x1.*row 2"),
    ("y2<y1", _set(B, (1, 3), -1.0), S, None, r"y2 >= y1.*row 1"),
    ("scores-too-long", B, torch.rand(4), None, r"scores must have shape \(3,\)"),
    ("scores-too-short", B, S[:2], None, r"scores must have shape \(3,\)"),
    ("scores-2d", B, S[:, None], None, r"scores must have shape \(3,\)"),
    ("boxes-N-5", torch.cat([B, B[:, :1]], 1), S, None, r"boxes must have shape \(N, 4\).*\(3, 5\)"),
    ("boxes-1d", B[0], S[:1], None, r"boxes must have shape \(N, 4\).*\(4,\)"),
    ("boxes-3d", B[None], S, None, r"boxes must have shape \(N, 4\)"),
    ("boxes-empty-1d", torch.zeros(0), torch.zeros(0), None, r"boxes must have shape \(N, 4\)"),
    ("boxes-int", B.long(), S, None, r"boxes must be a floating-point tensor.*int64"),
    ("scores-int", B, torch.tensor([3, 2, 1]), None, r"scores must be a floating-point tensor"),
    ("scores-f64-boxes-f32", B, S.double(), None, r"scores dtype torch.float64 differs from boxes dtype torch.float32"),
    ("scores-f32-boxes-f64", B.double(), S, None, r"dtype"),
    ("labels-too-short", B, S, L[:2], r"labels must have shape \(3,\)"),
    ("labels-2d", B, S, L[:, None], r"labels must have shape \(3,\)"),
    ("labels-float", B, S, L.float(), r"labels must be an integer tensor"),
    ("labels-bool", B, S, L.bool(), r"labels must be an integer tensor"),
    ("labels-list", B, S, [0, 1, 0], r"labels must be a torch.Tensor"),
    ("boxes-list", B.tolist(), S, None, r"boxes must be a torch.Tensor"),
    ("boxes-numpy", B.numpy(), S, None, r"boxes must be a torch.Tensor"),
    ("scores-list", B, S.tolist(), None, r"scores must be a torch.Tensor"),
    ("scores-meta", B, S.to("meta"), None, r"scores are on the meta device"),  # get_device() is -1 there as on the CPU
    ("labels-meta", B, S, L.to("meta"), r"labels are on the meta device"),
    ("boxes-sparse", B.to_sparse(), S, None, r"boxes must be a dense \(strided\) tensor, got layout sparse_coo"),
    ("labels-sparse", B, S, L.to_sparse(), r"labels must be a dense"),
    ("boxes-float8", B.to(torch.float8_e4m3fn), S.to(torch.float8_e4m3fn), None, r"float8_e4m3fn"),
]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("boxes,scores,labels,match", [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS])
def test_bad_input(name, boxes, scores, labels, match):
    with pytest.raises(ValueError, match=match):
        nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5, labels=labels)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("value", [math.nan, -0.1, 1.5, math.inf, -math.inf, "high", None, [0.5]], ids=repr)
def test_bad_iou_threshold(name, value):
    with pytest.raises(ValueError, match=r"iou_threshold"):
        nmsbench.run_nms(name, B, S, iou_threshold=value)


def test_numeric_string_iou_threshold_rejected():
    # a string is not a threshold, even one float() would parse
    with pytest.raises(ValueError, match=r"iou_threshold"):
        nmsbench.run_nms(ALL[0], B, S, iou_threshold="0.5")


def test_unknown_implementation():
    with pytest.raises(ValueError, match=r"unknown implementation 'no_such_nms'"):
        nmsbench.run_nms("no_such_nms", B, S, iou_threshold=0.5)


@pytest.mark.parametrize("name", ALL)
def test_unknown_parameter(name):
    with pytest.raises(ValueError, match=r"does not take parameter\(s\) bogus"):
        nmsbench.run_nms(name, B, S, iou_threshold=0.5, bogus=1)


@pytest.mark.parametrize("name", NO_SIGMA)
def test_sigma_is_refused_where_it_is_not_a_parameter(name):
    with pytest.raises(ValueError, match=r"does not take parameter\(s\) sigma"):
        nmsbench.run_nms(name, B, S, iou_threshold=0.5, sigma=0.5)


BAD_MATRIX_PARAMS = [
    ({"kernel": "box"}, r"kernel must be 'gaussian' or 'linear'.*'box'"),
    ({"kernel": None}, r"kernel must be"),
    ({"kernel": "Gaussian"}, r"kernel must be"),
    ({"sigma": 0}, r"sigma must be a positive number"),
    ({"sigma": -1}, r"sigma must be a positive number"),
    ({"sigma": math.nan}, r"sigma must be a positive number"),
    ({"sigma": math.inf}, r"sigma must be a positive number"),
    ({"sigma": "wide"}, r"sigma must be a positive number"),
    ({"score_threshold": math.nan}, r"score_threshold must be a finite number"),
    ({"score_threshold": math.inf}, r"score_threshold must be a finite number"),
    ({"score_threshold": "low"}, r"score_threshold must be a finite number"),
]


@pytest.mark.parametrize("name", MATRIX)
@pytest.mark.parametrize("params,match", BAD_MATRIX_PARAMS, ids=[repr(p) for p, _ in BAD_MATRIX_PARAMS])
def test_bad_matrix_parameters(name, params, match):
    with pytest.raises(ValueError, match=match):
        nmsbench.run_nms(name, B, S, iou_threshold=0.5, **params)


@pytest.mark.parametrize("name", ALL)
def test_unsupported_dtype_names_it(name):
    if "cpu" not in IMPLS[name].devices:
        pytest.skip(f"{name} has no cpu backend")
    backend = IMPLS[name].backend("cpu")
    if torch.float16 in backend.dtypes or not backend.availability()[0]:
        pytest.skip(f"{name} on cpu takes float16 or is unavailable")
    with pytest.raises(ValueError, match=r"float16"):
        nmsbench.run_nms(name, B.half(), S.half(), iou_threshold=0.5)


def _cpu_ready(name, dtype):
    impl = IMPLS[name]
    if "cpu" not in impl.devices:
        return False
    backend = impl.backend("cpu")
    return backend.availability()[0] and dtype in backend.dtypes


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_empty_input_gives_empty_result(name, dtype):
    if not _cpu_ready(name, dtype):
        pytest.skip(f"{name} cannot run {dtype} on cpu here")
    for labels in (None, torch.zeros(0, dtype=torch.int64)):
        result = nmsbench.run_nms(name, torch.zeros(0, 4, dtype=dtype), torch.zeros(0, dtype=dtype), iou_threshold=0.5, labels=labels)
        assert isinstance(result, nmsbench.NMSResult)
        assert result.keep.dtype == torch.int64 and result.keep.shape == (0,)
        assert result.keep.device.type == "cpu"
        if IMPLS[name].family in ("matrix", "soft"):
            assert result.scores is not None and result.scores.shape == (0,)
        else:
            assert result.scores is None
        if IMPLS[name].family == "weighted":
            assert result.boxes is not None and result.boxes.shape == (0, 4) and result.boxes.dtype == dtype


VALID_EDGES = [
    ("zero-area", torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 5.0]]), torch.tensor([0.5, 0.4]), None),
    ("negative-coords", torch.tensor([[-5.0, -5.0, -1.0, -1.0], [-4.0, -4.0, 0.0, 0.0]]), torch.tensor([0.5, 0.4]), None),
    ("negative-scores", B[:2], torch.tensor([-1.0, -2.0]), None),
    ("int32-labels", B, S, L.int()),
    ("uint8-labels", B, S, L.to(torch.uint8)),
    ("threshold-ends", B, S, None),
]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("boxes,scores,labels", [c[1:] for c in VALID_EDGES], ids=[c[0] for c in VALID_EDGES])
def test_valid_edge_inputs_accepted(name, boxes, scores, labels):
    if not _cpu_ready(name, boxes.dtype):
        pytest.skip(f"{name} cannot run on cpu here")
    for thr in (0.0, 1.0):
        result = nmsbench.run_nms(name, boxes, scores, iou_threshold=thr, labels=labels)
        assert result.keep.dtype == torch.int64


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ALL)
def test_mixed_devices(name):
    cb, cs, cl = B.cuda(), S.cuda(), L.cuda()
    with pytest.raises(ValueError, match=r"scores are on cpu but boxes are on cuda"):
        nmsbench.run_nms(name, cb, S, iou_threshold=0.5)
    with pytest.raises(ValueError, match=r"scores are on cuda:0 but boxes are on cpu"):
        nmsbench.run_nms(name, B, cs, iou_threshold=0.5)
    with pytest.raises(ValueError, match=r"labels are on cpu but boxes are on cuda"):
        nmsbench.run_nms(name, cb, cs, iou_threshold=0.5, labels=L)
    with pytest.raises(ValueError, match=r"labels are on cuda:0 but boxes are on cpu"):
        nmsbench.run_nms(name, B, S, iou_threshold=0.5, labels=cl)


# --- the fused value check (nmsbench.inputs) against the reference checks ---------

from hypothesis import given, settings, strategies as st  # noqa: E402

from nmsbench.inputs import check_input_values, start_value_check  # noqa: E402

CORRUPTIONS = {
    "nan-coordinate": lambda b, s, i, c: b.__setitem__((i, c), math.nan),
    "inf-coordinate": lambda b, s, i, c: b.__setitem__((i, c), -math.inf if c % 2 else math.inf),
    "nan-score": lambda b, s, i, c: s.__setitem__(i, math.nan),
    "inf-score": lambda b, s, i, c: s.__setitem__(i, math.inf),
    "x-reversed": lambda b, s, i, c: b.__setitem__((i, 2), b[i, 0] - 1),
    "y-reversed": lambda b, s, i, c: b.__setitem__((i, 3), b[i, 1] - 0.5),
    "area-overflow": lambda b, s, i, c: b.__setitem__(i, torch.tensor([-3e38, -3e38, 3e38, 3e38], dtype=b.dtype)),
}


def _message(fn, *args):
    try:
        fn(*args)
    except ValueError as e:
        return str(e)
    return None


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), dtype=st.sampled_from([torch.float32, torch.float64, torch.float16]),
       faults=st.lists(st.tuples(st.sampled_from(sorted(CORRUPTIONS)), st.floats(0, 1), st.integers(0, 3)), max_size=3),
       seed=st.integers(0, 2**16), strided=st.booleans())
def test_fused_cpu_check_raises_exactly_what_the_reference_raises(n, dtype, faults, seed, strided):
    """Random boxes with up to three faults at random rows (first, middle, last included by
    the index draw), contiguous or strided views (the two ways the pass reads them): the
    fused pass raises iff the reference does, with the same message."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 100
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 20], 1).to(dtype)
    scores = torch.rand(n, generator=g).to(dtype)
    for name, where, coordinate in faults:
        if dtype == torch.float16 and name == "area-overflow":
            continue  # float16 has no 3e38; its area is computed in float32 and cannot overflow from finite halves
        CORRUPTIONS[name](boxes, scores, min(n - 1, int(where * n)), coordinate)
    if strided:  # rows 5 apart and every other score: views, not copies
        boxes = torch.cat([boxes, torch.zeros(n, 1, dtype=dtype)], 1)[:, :4]
        scores = torch.stack([scores, torch.zeros(n, dtype=dtype)], 1)[:, 0]
        assert n == 1 or not (boxes.is_contiguous() or scores.is_contiguous())
    assert _message(start_value_check, boxes, scores) == _message(check_input_values, boxes, scores)


@pytest.mark.parametrize("row", ["first", "middle", "last"])
@pytest.mark.parametrize("fault", sorted(CORRUPTIONS))
def test_fused_cpu_check_finds_a_fault_at_any_row(row, fault):
    n = 257
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0]]).repeat(n, 1) + torch.arange(n)[:, None] * 3.0
    scores = torch.linspace(1, 0, n)
    i = {"first": 0, "middle": n // 2, "last": n - 1}[row]
    CORRUPTIONS[fault](boxes, scores, i, 1)
    with pytest.raises(ValueError, match=rf"(row|index) {i}\b"):
        nmsbench.run_nms("torchvision", boxes, scores, iou_threshold=0.5)


def test_validate_false_skips_only_the_value_checks():
    boxes = B.clone()
    boxes[0, 0] = math.nan
    nmsbench.run_nms("torchvision", boxes, S, iou_threshold=0.5, validate=False)  # the caller's promise: no check
    with pytest.raises(ValueError, match=r"scores must have shape"):
        nmsbench.run_nms("torchvision", B, S[:2], iou_threshold=0.5, validate=False)


def test_padded_result_check_decodes_the_verdict():
    keep, count = torch.full((3,), -1, dtype=torch.int64), torch.tensor(0)
    clean = nmsbench.PaddedNMSResult(keep, count, None, torch.tensor(0))
    assert clean.check() is clean and clean.trimmed().keep.shape == (0,)
    bad = nmsbench.PaddedNMSResult(keep, count, None, torch.tensor((1 + 2) * 8 + 3))  # row 2, x2 < x1
    with pytest.raises(ValueError, match=r"invalid input row 2: x2 < x1"):
        bad.trimmed()
    with pytest.raises(ValueError, match=r"row 2"):
        bad.check()
    assert nmsbench.PaddedNMSResult(keep, count).check().input_check is None  # a backend called directly


def test_inputs_that_require_grad_are_checked_too():
    boxes, scores = B.clone().requires_grad_(), S.clone().requires_grad_()
    assert nmsbench.run_nms("torchvision", boxes, scores, iou_threshold=0.5).keep.tolist() == \
        nmsbench.run_nms("torchvision", B, S, iou_threshold=0.5).keep.tolist()
    bad = B.clone()
    bad[1, 0] = math.nan
    with pytest.raises(ValueError, match=r"row 1"):
        nmsbench.run_nms("torchvision", bad.requires_grad_(), scores, iou_threshold=0.5)


IN_OP = sorted((name, device) for name, impl in nmsbench.implementations().items()
               for device, backend in impl.backends.items() if backend.checks_values and device == "cpu")


def test_some_backend_checks_values_in_its_own_pass():
    assert ("hard_fused", "cpu") in IN_OP


@pytest.mark.parametrize("name, device", IN_OP)
@pytest.mark.parametrize("row", ["first", "middle", "last"])
@pytest.mark.parametrize("fault", sorted(CORRUPTIONS))
def test_a_backend_checking_values_itself_raises_the_reference_error(name, device, row, fault, monkeypatch):
    n = 300
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0]]).repeat(n, 1) + torch.arange(n)[:, None] * 3.0
    scores = torch.linspace(1, 0, n)
    CORRUPTIONS[fault](boxes, scores, {"first": 0, "middle": n // 2, "last": n - 1}[row], 1)
    expected = _message(check_input_values, boxes, scores)
    monkeypatch.setattr(nmsbench.api, "start_value_check", lambda *a, **k: pytest.fail("run_nms ran its own pass"))
    assert expected and _message(lambda: nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5)) == expected


@pytest.mark.parametrize("name, device", IN_OP)
@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 600), seed=st.integers(0, 2**16), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_a_backend_checking_values_itself_keeps_what_it_keeps_unchecked(name, device, n, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 100
    boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 30], 1).to(dtype)
    scores = torch.rand(n, generator=g).to(dtype)
    checked = nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5)
    unchecked = nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5, validate=False)
    assert torch.equal(checked.keep, unchecked.keep)


def test_bad_input_is_the_error_also_where_a_backend_checking_itself_fails_on_it():
    from nmsbench import register
    from nmsbench.registry import unregister

    @register(name="_fails_on_any", family="hard", devices=("cpu",), checks_values=True)
    def fails(boxes, scores, *, iou_threshold, labels=None, check_values=False):
        raise RuntimeError("the op broke")

    try:
        bad = B.clone()
        bad[1, 0] = math.nan
        with pytest.raises(ValueError, match=r"row 1"):
            nmsbench.run_nms("_fails_on_any", bad, S, iou_threshold=0.5)
        with pytest.raises(RuntimeError, match="the op broke"):  # good input: the op's own error
            nmsbench.run_nms("_fails_on_any", B, S, iou_threshold=0.5)
    finally:
        unregister("_fails_on_any")
