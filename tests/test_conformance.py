"""`nmsbench conformance`: the oracle against the reference definitions, every named rule on a
hand-made case that shows it, deliberately wrong implementations caught with the right rule
and shrunk to at most 4 boxes, unexplained differences failing the command, its formats and
the dashboard's Conformance view. Reduced case families and example counts keep it cheap."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import definitions as D
from nmsbench import conformance, conformance_report
from nmsbench.boxes import NMSResult, pairwise_iou
from nmsbench.cli import main
from nmsbench.conformance_cases import CASE_FAMILIES, generate
from nmsbench.conformance_oracle import Case, Output, Refusal, definition, iou_matrix
from nmsbench.conformance_rules import RULES, explain, reproduces
from nmsbench.registry import register, unregister


def case(boxes, scores, dtype="float32", labels=None, t=0.5, **kw) -> Case:
    return Case(np.array(boxes, dtype=dtype), np.array(scores, dtype=dtype),
                None if labels is None else np.array(labels, dtype=np.int64), t, **kw)


# ------------------------------------------------------------------ the oracle

@st.composite
def scenes(draw):
    n = draw(st.integers(0, 8))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    corner = st.integers(0, 20)
    xy = np.array([[draw(corner), draw(corner)] for _ in range(n)], dtype=float).reshape(n, 2)
    wh = np.array([[draw(st.integers(0, 10)), draw(st.integers(0, 10))] for _ in range(n)], dtype=float).reshape(n, 2)
    scale = draw(st.sampled_from([1.0, 0.5, 0.3]))
    boxes = (np.concatenate([xy, xy + wh], 1) * scale).astype(dtype)
    scores = np.array([draw(st.sampled_from([0.2, 0.5, 0.7, 0.9])) for _ in range(n)], dtype=dtype)
    labels = np.array([draw(st.integers(0, 2)) for _ in range(n)], dtype=np.int64) if draw(st.booleans()) else None
    t = draw(st.sampled_from([0.0, 0.3, 0.5, 0.7, 1.0]))
    kernel = draw(st.sampled_from(["gaussian", "linear"]))
    return Case(boxes, scores, labels, t, params={"kernel": kernel})


@settings(max_examples=60)
@given(scenes())
def test_the_oracle_is_the_reference_definitions(c):
    b, s, t, lab, kernel = c.boxes, c.scores, c.iou_threshold, c.labels, c.params["kernel"]
    assert list(definition("hard", c).keep) == D.hard_nms(b, s, t, lab)
    assert list(definition("allpairs", c).keep) == D.allpairs_nms(b, s, t, lab)
    assert list(definition("diou", c).keep) == D.diou_nms(b, s, t, lab)
    keep, moved = D.weighted_nms(b, s, t, lab)
    out = definition("weighted", c)
    assert list(out.keep) == keep and np.allclose(np.reshape(out.boxes, (-1, 4)), np.reshape(moved, (-1, 4)))
    for family, (keep, final) in (("matrix", D.matrix_nms(b, s, lab, kernel=kernel)),
                                  ("soft", D.soft_nms(b, s, t, lab, kernel=kernel))):
        out = definition(family, c)
        assert list(out.keep) == keep and np.allclose(out.scores, final, rtol=1e-12), family


def test_the_oracle_refuses_what_the_input_check_refuses():
    out = definition("hard", case([[0, 0, np.nan, 1]], [0.5]))
    assert isinstance(out, Refusal) and "NaN" in out.message


# ------------------------------------------------------------------ every rule, on a case that shows it

# A float32 pair with IoU v (float32), 0.40984815..., whose float64 IoU is below it.
PAIR = [[17.5042648, -2.79092097, 30.8277245, 16.2922211], [11.5175714, 2.87237477, 33.792778, 19.0698223]]
V = float(iou_matrix(np.array(PAIR, dtype=np.float32), "float32")[0, 1])
OPENCV_PAIR = [[15.35, 28.51, 24.67, 61.97], [13.84, 27.9, 27.29, 61.24]]  # OpenCV's 1 - float32(distance) rounds down here

HAND_MADE = {  # rule -> (family, [(case, what the implementation returned)])
    "ge": ("hard", [(case([[0, 0, 4, 4], [0, 0, 4, 2]], [.9, .8]), (0,))]),  # IoU 0.5 = threshold
    "ties_higher": ("hard", [(case([[0, 0, 1, 1], [5, 5, 6, 6]], [.5, .5]), (1, 0))]),
    "ties_any": ("hard", [(case([[0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10]], [.5, .5, .5]), (1, 0, 2))]),
    "threshold_f32": ("hard", [(case(PAIR, [.9, .8], t=float(np.nextafter(V, -1.0))), (0, 1))]),
    "opencv_overlap": ("hard", [(case(OPENCV_PAIR, [.9, .8], t=0.67009170850118), (0,))]),
    "normalise": ("hard", [(case([[21.18, 1.56, 46.58, 17.61], [21.9, 2.92, 47.93, 17.79], [70.5, 3.25, 90.75, 9.5]],
                                 [.9, .8, .7], t=0.8388713598251344), (0, 2))]),  # IoU at t, above it once normalised
    "drop_zero_area": ("hard", [(case([[3, 3, 3, 3], [0, 0, 2, 2]], [.9, .8]), (1,))]),
    "tiny_full_overlap": ("hard", [(case([[3, 3, 3, 3], [10, 10, 10, 10]], [.9, .8]), (0,))]),
    "int32_ids": ("hard", [(case([[0, 0, 4, 4], [0, 0, 4, 4]], [.9, .8], labels=[0, 2**32]), (0,))]),
    "offsets_f16": ("hard", [(case([[900, 900, 1000, 1000], [910, 910, 1000, 1000]], [.9, .8], "float16", labels=[80, 80]),
                              (0, 1))]),
    "offsets": ("hard", [(case([[0, 0, 2**24, 1], [1, 0, 2, 1], [1.5, 0, 2.5, 1]], [.9, .8, .7], labels=[0, 1, 1], t=0.3),
                          (0, 1, 2))]),
    "offsets_f64": ("hard", [(case([[-10, -10, -5, -5], [-11, -11, -6, -6]], [.9, .8], "float64", labels=[0, 1]), (0,))]),
    "score_gt": ("hard", [(case([[0, 0, 1, 1]], [.5], score_threshold=0.5), ())]),
    "cap_before": ("hard", [(case([[0, 0, 4, 4], [0, 0, 4, 3], [9, 9, 10, 10]], [.9, .8, .7], max_per_class=2), (0,))]),
    "cap_global": ("hard", [(case([[0, 0, 4, 4], [9, 9, 10, 10]], [.9, .8], labels=[0, 1], max_per_class=1), (0,))]),
    "scores_f32": ("hard", [(case([[0, 0, 4, 4], [0, 0, 4, 4]], [.5, .5 + 1e-12], "float64"), (0,))]),
    "soft_gt": ("soft", [(case([[0, 0, 4, 4], [0, 0, 4, 2]], [.9, .8], params={"kernel": "linear"}), ((0, 1), (.9, .8)))]),
    "rounded": ("matrix", [(case([[0, 0, 4, 4], [0, 0, 4, 3], [9, 9, 10, 10]], [.9, .8, .7]), "scores x (1 + 1e-4)")]),
    "iou_f64": ("hard", [
        (case([[29.18, 8.03, 41.96, 25.71], [27.54, 9.24, 45.57, 22.94]], [.9, .8], t=0.5877827045448705), (0, 1)),
        (case([[1.97, 24.88, 35.85, 30.3], [4.28, 26.7, 39.12, 28.46]], [.9, .8], t=0.29338756203651434), (0,))]),
    "near": ("hard", [(case(PAIR, [.9, .8], t=float(np.nextafter(np.float32(V), np.float32(-1)))), (0, 1))]),
    "no_check": ("hard", [(case([[0, 0, np.nan, 1]], [.5]), (0,))]),
}


def _observed(family, c, given):
    if isinstance(given, str):  # final scores a little off: rounding, not another answer
        out = definition(family, c)
        return Output(out.keep, tuple(v * (1 + 1e-4) for v in out.scores))
    return Output(*given) if given and isinstance(given[0], tuple) else Output(tuple(given))


def test_every_rule_has_a_hand_made_case():
    assert set(HAND_MADE) == {rule.key for rule in RULES}


@pytest.mark.parametrize("key", sorted(HAND_MADE))
def test_each_rule_explains_its_hand_made_case(key):
    family, examples = HAND_MADE[key]
    shown = []
    for c, params in examples:
        observed = _observed(family, c, params)
        expected = definition(family, c)
        assert isinstance(expected, Refusal) or expected != observed, "the case must show a difference"
        assert reproduces((key,), family, c, observed)
        shown.append((c, observed))
    assert explain(family, shown) == (key,)  # and no rule before it in the table explains it


def test_a_difference_no_rule_explains_is_unexplained():
    c = case([[0, 0, 1, 1], [5, 5, 6, 6]], [.9, .8])  # nothing overlaps: every rule keeps both
    assert explain("hard", [(c, Output((1,)))]) is None


def test_a_rule_must_also_fit_the_cases_that_agreed():
    at = case([[0, 0, 4, 4], [0, 0, 4, 2]], [.9, .8])  # IoU = threshold: >= would suppress box 1
    also_at = case([[0, 0, 8, 2], [0, 0, 4, 2]], [.9, .8])  # here too, but the implementation kept both
    assert explain("hard", [(at, Output((0,)))]) == ("ge",)
    # >= would have changed the case it agreed on: only "within rounding of the threshold" fits both
    assert explain("hard", [(at, Output((0,)))], consistent=[(also_at, Output((0, 1)))]) == ("near",)


# ------------------------------------------------------------------ wrong implementations are caught

def _greedy(boxes, scores, iou_threshold, labels, ge: bool, higher: bool) -> NMSResult:
    n = boxes.shape[0]
    order = sorted(range(n), key=lambda k: (-float(scores[k]), -k if higher else k))
    iou = pairwise_iou(boxes, boxes).double()
    lab = torch.zeros(n, dtype=torch.int64) if labels is None else labels
    kept: list[int] = []
    for j in order:
        if all(lab[i] != lab[j] or not (iou[i, j] >= iou_threshold if ge else iou[i, j] > iou_threshold) for i in kept):
            kept.append(j)
    return NMSResult(torch.tensor(kept, dtype=torch.int64))


@pytest.fixture
def wrong_implementations():
    """Registered only here: greedy NMS with >= at the threshold, with ties broken by the
    higher index, and one that forgets the last box it keeps (no rule explains that)."""
    register(name="wrong_ge", family="hard", devices=("cpu",))(
        lambda boxes, scores, *, iou_threshold, labels=None: _greedy(boxes, scores, iou_threshold, labels, True, False))
    register(name="wrong_ties", family="hard", devices=("cpu",))(
        lambda boxes, scores, *, iou_threshold, labels=None: _greedy(boxes, scores, iou_threshold, labels, False, True))
    register(name="wrong_forgets", family="hard", devices=("cpu",))(
        lambda boxes, scores, *, iou_threshold, labels=None:
        NMSResult(_greedy(boxes, scores, iou_threshold, labels, False, False).keep[:-1]))
    yield
    for name in ("wrong_ge", "wrong_ties", "wrong_forgets"):
        unregister(name)


def test_wrong_implementations_differ_with_the_right_rule_on_small_examples(wrong_implementations):
    report = conformance.run(["cpu"], ["wrong_ge", "wrong_ties", "torchvision"], ["iou_at_threshold", "tied_scores"],
                             examples=8)
    cells = {(c.impl, c.case_family): c for c in report.cells}
    assert cells["wrong_ge", "iou_at_threshold"].verdict == "differs"
    assert cells["wrong_ge", "iou_at_threshold"].rules == ("ge",)
    assert cells["wrong_ties", "tied_scores"].verdict == "differs"
    assert cells["wrong_ties", "tied_scores"].rules == ("ties_higher",)
    for key in (("wrong_ge", "iou_at_threshold"), ("wrong_ties", "tied_scores")):
        example = cells[key].example
        assert 1 <= len(example["boxes"]) <= 4, example  # shrunk from up to 8 boxes
        c = Case.from_json(example)
        assert tuple(example["observed"]["keep"]) != tuple(example["expected"]["keep"])
        assert tuple(example["expected"]["keep"]) == definition("hard", c).keep
        assert cells[key].vs_torchvision.startswith("differs")
    assert cells["wrong_ge", "tied_scores"].verdict == "agrees"  # random pairs never sit at the threshold there
    assert cells["wrong_ties", "iou_at_threshold"].verdict == "agrees"  # no tied scores there
    assert all(cells["torchvision", k].verdict == "agrees" for k in ("iou_at_threshold", "tied_scores"))
    assert cells["torchvision", "iou_at_threshold"].vs_torchvision == "agrees"


def test_the_shrinker_keeps_the_pair_at_the_threshold():
    big = case([[0, 0, 4, 4], [0, 0, 4, 2], *[[20 + 6 * k, 0, 24 + 6 * k, 4] for k in range(10)]],
               [.9, .8, *np.linspace(.1, .7, 10)])
    calls = []

    def still_differs(small: Case) -> bool:  # a >= implementation against the definition
        calls.append(small.n)
        rows = {tuple(r) for r in small.boxes.tolist()}
        return (0.0, 0.0, 4.0, 4.0) in rows and (0.0, 0.0, 4.0, 2.0) in rows

    small = conformance.shrink(big, still_differs)
    assert small.n == 2 and sorted(small.boxes.tolist()) == [[0, 0, 4, 2], [0, 0, 4, 4]]
    assert len(calls) < 40


def test_generated_families_are_deterministic_and_many():
    assert len(CASE_FAMILIES) >= 12
    for key in CASE_FAMILIES:
        if key == "large_n":
            continue
        a, b = generate(key, 3, seed=5), generate(key, 3, seed=5)
        assert len(a) == 3 and all(np.array_equal(x.boxes, y.boxes, equal_nan=True) for x, y in zip(a, b)), key


# ------------------------------------------------------------------ the command

def invoke(*args):
    return CliRunner().invoke(main, ["conformance", *args], catch_exceptions=False)


def test_unexplained_differences_fail_the_command(wrong_implementations, tmp_path):
    out = tmp_path / "mine-conformance.csv"
    result = invoke("--device", "cpu", "--impl", "wrong_forgets", "--family", "random", "--examples", "4",
                    "--format", "csv", "--out", str(out))
    assert result.exit_code == 1, result.output
    assert "unexplained" in result.output
    frame = conformance_report.read_conformance(out)
    assert list(frame["verdict"]) == ["unexplained"] and frame["example"].iloc[0]


def test_the_three_formats(tmp_path):
    common = ["--device", "cpu", "--impl", "torchvision,batched_nms[float32]", "--family", "zero_area,class_id_extremes",
              "--examples", "4"]
    table = invoke(*common)
    assert table.exit_code == 0, table.output
    assert "torchvision @ cpu" in table.output and "ids" in table.output and "3 agree, 1 differ" in table.output
    assert "R12: class offsets round coordinates" in table.output  # batched_nms's trick on class ids 2^32 apart
    csv_path = tmp_path / "cpu-conformance.csv"
    written = invoke(*common, "--format", "csv", "--out", str(csv_path))
    assert written.exit_code == 0 and f"wrote {csv_path}" in written.output
    frame = conformance_report.read_conformance(csv_path)
    verdicts = {(r.impl, r.case_family): (r.verdict, r.rules) for r in frame.itertuples()}
    assert verdicts == {("torchvision", "zero_area"): ("agrees", ""), ("torchvision", "class_id_extremes"): ("agrees", ""),
                        ("batched_nms[float32]", "zero_area"): ("agrees", ""),
                        ("batched_nms[float32]", "class_id_extremes"): ("differs", "offsets")}
    assert set(conformance_report.COLUMNS) <= set(frame.columns)
    assert frame["command"].iloc[0].startswith("nmsbench conformance --device cpu --impl")
    assert "batched_nms[float32]" in frame["command"].iloc[0] and frame["created"].iloc[0]
    again = invoke(*common, "--format", "csv", "--out", str(csv_path))
    assert again.exit_code == 2 and "--force" in again.output
    markdown = invoke(*common, "--format", "markdown")
    assert markdown.exit_code == 0
    assert "| implementation | zero | ids |" in markdown.output and "| torchvision @ cpu | agrees | agrees |" in markdown.output
    assert "| batched_nms[float32] @ cpu | agrees | differs (R12) |" in markdown.output


def test_a_differing_cell_in_every_format(wrong_implementations, tmp_path):
    common = ["--device", "cpu", "--impl", "wrong_ge", "--family", "duplicates", "--examples", "3"]
    markdown = invoke(*common, "--format", "markdown")
    assert markdown.exit_code == 0, markdown.output
    assert "differs (R1)" in markdown.output and "| R1 | threshold compared with ≥ |" in markdown.output
    assert "Smallest differing examples" in markdown.output and "the definition keeps" in markdown.output
    table = invoke(*common)
    assert "≠ R1" in table.output and "R1: threshold compared with ≥" in table.output


def test_bad_options_are_named():
    assert invoke("--family", "nonsense").exit_code == 2
    result = invoke("--device", "cpu", "--impl", "nonsense")
    assert result.exit_code == 2 and "unknown implementation" in result.output
    listed = invoke("--list")
    assert listed.exit_code == 0 and "iou_at_threshold" in listed.output and "R1" in listed.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_cuda_without_a_device_is_refused_as_by_every_command():
    result = invoke("--device", "cuda", "--family", "empty_one", "--examples", "1")
    assert result.exit_code == 2 and "--device cuda was asked for, but no CUDA device is available here" in result.output


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_cells_run():
    report = conformance.run(["cuda"], ["torchvision", "hard_fused"], ["tied_scores", "float16"], examples=3)
    assert {c.device for c in report.cells} == {"cuda"} and not report.unexplained


# ------------------------------------------------------------------ the dashboard page

def test_the_conformance_view_draws_a_differing_example(wrong_implementations, tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from dash_support import CPU_CSV, REPO

    folder = tmp_path / "results"
    (folder / "runs").mkdir(parents=True)
    (folder / "cpu.csv").write_bytes(CPU_CSV.read_bytes())
    result = invoke("--device", "cpu", "--impl", "wrong_ge,torchvision", "--family", "duplicates,nan_inf",
                    "--examples", "3", "--format", "csv", "--out", str(folder / "runs" / "cpu-conformance.csv"))
    assert result.exit_code == 0, result.output
    monkeypatch.setenv("NMSBENCH_RESULTS_DIR", str(folder))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=90)
    at.run()
    assert not at.exception and not at.sidebar.error  # the results loader leaves the conformance CSV alone
    at.session_state["view"] = "Conformance"
    at.run()
    assert not at.exception, at.exception
    figures = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    example = [f for f in figures if (f["layout"].get("meta") or {}).get("figure") == "conformance_example"]
    assert example and example[0]["layout"]["meta"]["impl"] == "wrong_ge"
    names = " ".join(t.get("name", "") for t in example[0]["data"])
    assert "kept only by wrong_ge @ cpu" in names and "kept only by the definition" in names
    assert any("threshold compared with ≥" in m.value for m in at.markdown)


def test_the_conformance_view_without_a_report_says_how_to_make_one(tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from dash_support import REPO

    monkeypatch.setenv("NMSBENCH_RESULTS_DIR", str(tmp_path))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=90)
    at.run()
    at.session_state["view"] = "Conformance"
    at.run()
    assert not at.exception and any("nmsbench conformance" in i.value for i in at.info)
