"""Inputs a hostile caller builds: tensors on PyTorch's ``meta`` device, sparse, nested or
MKL-DNN tensors, tensors on different devices, exotic dtypes, non-contiguous and
zero-stride views, and labels at the ends of int64 (and uint64).

The contract, for every registered implementation: a structurally bad call raises the
documented ``ValueError`` before any backend runs (never another exception, never a crash:
the meta cases also run once in a child process, so a segfault fails a test instead of
killing pytest); an implementation without a backend for the tensors' device raises
``BackendUnavailable``; a valid call answers as its family's definition does
(tests/definitions.py), and labels are identities: any distinct int64 values give exactly
the answer of the same labels renumbered 0..K-1 (no backend truncates or rounds them).
Helpers and the per-family checks come from test_fuzz.py and test_properties.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

import nmsbench
from nmsbench import BackendUnavailable
from test_fuzz import CPU_IMPLS, FUZZ, check_family, compiled  # noqa: F401 (compiled: a module fixture)
from test_properties import THRESHOLDS, Case, cases, examples

# torch's own notes on building these tensors (prototype, beta, deprecated) are not the subject
pytestmark = pytest.mark.filterwarnings("ignore:.*(nested tensors|Sparse CSR|quantize_per_tensor).*:UserWarning")

ALL_IMPLS = sorted(nmsbench.implementations())
NO_CPU = sorted(name for name, impl in nmsbench.implementations().items() if "cpu" not in impl.backends)
# label values whose low 32 bits, or whose float32 / float64 roundings, coincide
EXTREME_LABELS = [0, 1, -1, 2**31, -2**31, 2**31 - 1, 2**32, 2**32 + 1, -2**63, 2**63 - 1, 2**62, 2**53, 2**53 + 1]
HOSTILE = settings(FUZZ, max_examples=examples(60), deadline=None)  # first calls compile numba signatures
TWO_BOXES = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0]])
TWO_SCORES = torch.tensor([0.9, 0.8])


def params_for(name: str, kernel: str = "gaussian") -> dict:
    return {"kernel": kernel} if nmsbench.implementations()[name].family in ("matrix", "soft") else {}


def call_nms(name, boxes, scores, labels=None, threshold=0.5, **params):
    return nmsbench.run_nms(name, boxes, scores, threshold, labels=labels, **params)


def widest(name: str) -> torch.dtype:
    return torch.float64 if torch.float64 in nmsbench.implementations()[name].backend("cpu").dtypes else torch.float32


# --------------------------------------------------------------------------- bad structure

def _meta(t):
    return t.to("meta")


def _nested(t):
    return torch.nested.nested_tensor(list(t)) if t.shape[0] else torch.nested.nested_tensor([t.new_zeros(4)])


FAKE = FakeTensorMode()


def _quantized(t):
    return torch.quantize_per_tensor(t.float(), 1.0, 0, torch.qint8)


# (tensor the change applies to, change); each leaves the other inputs valid
BREAKS = {
    "boxes on meta": ("boxes", _meta),
    "scores on meta (boxes on the CPU)": ("scores", _meta),
    "labels on meta": ("labels", _meta),
    "everything on meta": ("all", _meta),
    "sparse boxes": ("boxes", lambda t: t.to_sparse()),
    "sparse CSR boxes": ("boxes", lambda t: t.to_sparse_csr()),
    "sparse scores": ("scores", lambda t: t.to_sparse()),
    "sparse labels": ("labels", lambda t: t.to_sparse()),
    "MKL-DNN boxes": ("boxes", lambda t: t.float().contiguous().to_mkldnn()),
    "nested boxes": ("boxes", _nested),
    "float8 boxes and scores": ("floats", lambda t: t.to(torch.float8_e4m3fn)),
    "bfloat16 scores, float32 boxes": ("scores", lambda t: t.to(torch.bfloat16)),
    "quantized labels": ("labels", _quantized),
    "bool labels": ("labels", lambda t: t.bool()),
    "float labels": ("labels", lambda t: t.double()),
    "complex scores": ("scores", lambda t: t.to(torch.complex64)),
    "FakeTensor scores (torch.compile's tracing)": ("scores", lambda t: FAKE.from_tensor(t)),
}
if torch.cuda.is_available():  # CPU tensors with one CUDA tensor among them
    BREAKS.update({f"{what} on cuda": (what, lambda t: t.cuda()) for what in ("boxes", "scores", "labels")})


@st.composite
def broken_inputs(draw):
    """(boxes, scores, labels, what was broken): a valid case, then one break applied,
    on contiguous or strided views, with extreme labels."""
    n = draw(st.integers(0, 6))
    corner = torch.tensor(draw(st.lists(st.floats(-50, 50, width=32), min_size=2 * n, max_size=2 * n))).reshape(n, 2)
    boxes = torch.cat([corner, corner + 5], 1)
    scores = torch.tensor(draw(st.lists(st.floats(0, 1, width=32), min_size=n, max_size=n)), dtype=torch.float32)
    labels = torch.tensor(draw(st.lists(st.sampled_from(EXTREME_LABELS), min_size=n, max_size=n)), dtype=torch.int64)
    if draw(st.booleans()):  # strided views of the same values
        boxes = torch.cat([boxes, boxes], 1)[:, :4]
        scores = torch.stack([scores, scores], 1)[:, 0]
    if draw(st.booleans()):
        boxes, scores = boxes.double(), scores.double()
    what = draw(st.sampled_from(sorted(BREAKS)))
    target, change = BREAKS[what]
    if target in ("boxes", "all", "floats"):
        boxes = change(boxes)
    if target in ("scores", "all", "floats"):
        scores = change(scores)
    if target in ("labels", "all"):
        labels = change(labels)
    elif target != "labels" and draw(st.booleans()):
        labels = None
    return boxes, scores, labels, what


META_SCRIPT = r"""
import json, sys, warnings, torch, nmsbench
from torch._subclasses.fake_tensor import FakeTensorMode
warnings.simplefilter("ignore")
b = torch.tensor([[0., 0, 10, 10], [1, 1, 11, 11]]); s = torch.tensor([.9, .8]); lab = torch.tensor([0, 1])
fake = FakeTensorMode()
calls = {"scores": (b, s.to("meta"), None), "boxes": (b.to("meta"), s, None), "labels": (b, s, lab.to("meta")),
         "all": (b.to("meta"), s.to("meta"), lab.to("meta")), "fake scores": (b, fake.from_tensor(s), None)}
out = {}
for name in sorted(nmsbench.implementations()):
    for where, (boxes, scores, labels) in calls.items():
        try:
            result = nmsbench.run_nms(name, boxes, scores, 0.5, labels=labels)
            out[f"{name} {where}"] = f"returned {result.keep.tolist()}"
        except Exception as e:
            out[f"{name} {where}"] = type(e).__name__
    print(name, file=sys.stderr, flush=True)  # how far it got, should it crash
print(json.dumps(out))
"""


CRASHED: list[str] = []  # the child's crash, which the in-process fuzz below then does not repeat


def test_meta_tensors_in_a_child_process_raise_value_errors_and_never_crash():
    """The issue's reproducer (scores on meta, boxes on the CPU: numba read address 0), and
    a FakeTensor (data on meta too), for every registered implementation, in a child
    process: a segfault is a failure here, not a dead test run."""
    child = subprocess.run([sys.executable, "-X", "faulthandler", "-c", META_SCRIPT], capture_output=True, text=True,
                           timeout=600)
    if child.returncode != 0:
        CRASHED.append(f"exit {child.returncode}")
    assert child.returncode == 0, f"exit {child.returncode} after {child.stderr.split()[-1:]}:\n{child.stderr[-3000:]}"
    answers = json.loads(child.stdout.strip().splitlines()[-1])
    assert len(answers) == 5 * len(ALL_IMPLS)
    wrong = {call: answer for call, answer in answers.items() if answer != "ValueError"}
    assert not wrong, wrong


@pytest.mark.parametrize("name", ALL_IMPLS)
@HOSTILE
@given(data=broken_inputs(), threshold=st.sampled_from([0.0, 0.5, 1.0]))
def test_bad_structure_is_a_value_error_before_any_backend(name, data, threshold):
    if CRASHED:
        pytest.skip(f"the child process crashed ({CRASHED[0]}): the same calls here would end the test run")
    boxes, scores, labels, what = data
    with pytest.raises(ValueError) as raised:
        call_nms(name, boxes, scores, labels, threshold, **params_for(name))
    assert type(raised.value) is ValueError and str(raised.value).strip(), what
    with pytest.raises(ValueError):  # the public validator says the same
        nmsbench.validate_nms_inputs(boxes, scores, labels)


def test_every_break_names_its_problem():
    b, s, lab = TWO_BOXES, TWO_SCORES, torch.tensor([0, 2**32])
    expected = {"meta": "on the meta device, which holds no data", "sparse": "must be a dense (strided) tensor",
                "MKL-DNN": "layout _mkldnn", "nested": "nested tensor", "float8": "float8_e4m3fn",
                "bfloat16 scores": "differs from boxes dtype", "quantized": "labels must be an integer tensor",
                "bool": "labels must be an integer tensor", "float labels": "labels must be an integer tensor",
                "complex": "scores must be a floating-point tensor", "cuda": "are on",
                "FakeTensor": "scores hold no data of their own (a FakeTensor on cpu)"}
    for what, (target, change) in BREAKS.items():
        boxes = change(b) if target in ("boxes", "all", "floats") else b
        scores = change(s) if target in ("scores", "all", "floats") else s
        labels = change(lab) if target in ("labels", "all") else lab
        with pytest.raises(ValueError) as raised:
            call_nms("torchvision", boxes, scores, labels)
        words = [text for key, text in expected.items() if key in what]
        assert words and all(w in str(raised.value) for w in words), (what, str(raised.value))


@pytest.mark.parametrize("name", NO_CPU)
def test_no_backend_for_the_device_is_backend_unavailable(name):
    with pytest.raises(BackendUnavailable, match=rf"{name} has no cpu backend \(devices: "):
        nmsbench.run_nms(name, TWO_BOXES, TWO_SCORES, 0.5, **params_for(name))
    with pytest.raises(ValueError, match="meta"):  # bad structure first: it is the caller's to fix either way
        nmsbench.run_nms(name, TWO_BOXES, TWO_SCORES.to("meta"), 0.5, **params_for(name))


def test_soft_rounds_on_cpu_tensors_is_backend_unavailable():
    assert "soft_rounds" in NO_CPU
    with pytest.raises(BackendUnavailable, match="soft_rounds has no cpu backend"):
        nmsbench.run_nms("soft_rounds", TWO_BOXES, TWO_SCORES, 0.5)


# --------------------------------------------------------------------------- labels are identities

PAIRS = [(0, 2**32), (1, 2**32 + 1), (2**31, -2**31), (-2**63, 0), (2**63 - 1, -1), (2**53, 2**53 + 1),
         (2**62, 2**62 + 1)]


@pytest.mark.parametrize("name", CPU_IMPLS)
def test_labels_differing_only_above_32_bits_or_below_float_precision_stay_apart(name):
    """Two overlapping boxes of different labels are both kept, whatever the two labels:
    no backend truncates labels to int32 or rounds them through a float."""
    for a, b in PAIRS:
        for dtype in (torch.int64, torch.uint64):
            labels = torch.tensor([a, b], dtype=torch.int64).view(dtype)
            keep = call_nms(name, TWO_BOXES, TWO_SCORES, labels, **params_for(name)).keep.tolist()
            assert keep == [0, 1], f"{name}: labels {labels.tolist()} kept {keep}"


@pytest.mark.parametrize("name", CPU_IMPLS)
def test_labels_separate_boxes_at_negative_and_huge_coordinates(name):
    """A class-offset trick (box + label * (max coordinate + 1)) lets classes meet where
    coordinates are negative and rounds where they are large: labels must separate them."""
    for corner, side in ((-10.0, 10.0), (-1e6, 5.0), (3e15, 2.0)):
        boxes = torch.tensor([[corner, corner, corner + side, corner + side]] * 2, dtype=widest(name))
        scores = torch.tensor([0.9, 0.8], dtype=widest(name))
        keep = call_nms(name, boxes, scores, torch.tensor([0, 1]), **params_for(name)).keep.tolist()
        assert keep == [0, 1], f"{name}: boxes at {corner} of labels 0 and 1 kept {keep}"


def _dense(labels: np.ndarray) -> np.ndarray:
    """The same labels renumbered 0..K-1 in the order of their values."""
    return np.unique(labels, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _same_answer(a, b) -> bool:
    return all((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
               for x, y in zip(a, b))


@pytest.mark.parametrize("name", CPU_IMPLS)
@settings(HOSTILE, max_examples=examples(40))
@given(data=st.data())
def test_extreme_labels_answer_as_the_definition_and_as_dense_labels(name, data):
    """Labels drawn from the ends of int64 (as int64 or reinterpreted as uint64), on
    contiguous, strided or zero-stride inputs: the family's definition holds (the oracle
    compares labels as Python ints), and the answer equals the one for the labels
    renumbered 0..K-1 (every implementation, libraries' entries included)."""
    dtypes = nmsbench.implementations()[name].backend("cpu").dtypes
    dtype = data.draw(st.sampled_from([d for d in (torch.float32, torch.float64) if d in dtypes]), label="dtype")
    base = data.draw(cases(dtype, max_n=12, with_labels=False), label="case")
    n = len(base.scores)
    palette = data.draw(st.one_of(st.sampled_from(PAIRS).map(list),  # two labels that a cast would merge
                                  st.lists(st.sampled_from(EXTREME_LABELS), min_size=1, max_size=4, unique=True)),
                        label="palette")
    values = np.array(data.draw(st.lists(st.sampled_from(palette), min_size=n, max_size=n), label="labels"),
                      dtype=np.int64)
    threshold = data.draw(THRESHOLDS, label="iou_threshold")
    kernel = data.draw(st.sampled_from(["gaussian", "linear"]), label="kernel")
    as_uint64 = data.draw(st.booleans(), label="uint64")
    labels = values.view(np.uint64) if as_uint64 else values
    check_family(name, Case(base.boxes, base.scores, labels), threshold, kernel)

    layout = data.draw(st.sampled_from(["contiguous", "strided", "zero-stride"]), label="layout")
    boxes, scores = torch.from_numpy(base.boxes.copy()), torch.from_numpy(base.scores.copy())
    extreme = torch.from_numpy(labels.copy())
    if layout == "strided":
        boxes = torch.cat([boxes, boxes], 1)[:, :4]
        scores = torch.stack([scores, scores], 1)[:, 0]
        extreme = torch.stack([extreme, extreme], 1)[:, 0]
    elif layout == "zero-stride" and n:
        boxes = boxes[:1].expand(n, 4)  # n identical boxes sharing one row
    params = params_for(name, kernel)
    got = call_nms(name, boxes, scores, extreme, threshold, **params)
    dense = call_nms(name, boxes.contiguous(), scores.contiguous(), torch.from_numpy(_dense(values)), threshold,
                      **params)
    assert _same_answer(got, dense), f"{name}: labels {values.tolist()} -> {got}, renumbered -> {dense}"


# --------------------------------------------------------------------------- outputs

@pytest.mark.parametrize("name", CPU_IMPLS)
def test_outputs_carry_no_autograd_graph(name):
    """Inputs that require grad give outputs detached from them, as every Matrix and Soft
    entry returns its scores (matrix_naive once returned scores with a grad_fn)."""
    boxes, scores = TWO_BOXES.clone().requires_grad_(), TWO_SCORES.clone().requires_grad_()
    result = nmsbench.run_nms(name, boxes, scores, 0.5, **params_for(name))
    for what, t in zip(("keep", "scores", "boxes"), result):
        assert t is None or (not t.requires_grad and t.grad_fn is None), f"{name} returned {what} attached to autograd"
