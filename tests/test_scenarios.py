"""Scenario generators (nmsbench.datasets) and the boxes-file loader."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import torch
import torchvision
from hypothesis import given, settings
from hypothesis import strategies as st

from nmsbench.boxes import pairwise_iou, score_order
from nmsbench.inputs import validate_nms_inputs
from nmsbench.datasets import CANVAS, SCENARIOS, SYNTHETIC, generate, load_boxes_file
from nmsbench.overlap import realized_overlap


def same(a, b) -> bool:
    if a.labels is None or b.labels is None:
        labels_equal = a.labels is None and b.labels is None
    else:
        labels_equal = torch.equal(a.labels, b.labels)
    return torch.equal(a.boxes, b.boxes) and torch.equal(a.scores, b.scores) and labels_equal


def allpairs_keep_count(boxes, scores, threshold) -> int:
    """All-pairs NMS: a box survives iff no higher-ranked box (kept or not) exceeds the threshold."""
    order = score_order(scores)
    iou = pairwise_iou(boxes[order], boxes[order])
    return int((torch.triu(iou, diagonal=1) > threshold).sum(dim=0).eq(0).sum())


def components(boxes) -> list[list[int]]:
    """Groups of boxes connected by positive IoU."""
    touching = pairwise_iou(boxes, boxes) > 0
    seen, groups = set(), []
    for start in range(len(boxes)):
        if start in seen:
            continue
        stack, group = [start], []
        seen.add(start)
        while stack:
            i = stack.pop()
            group.append(i)
            for j in touching[i].nonzero().flatten().tolist():
                if j not in seen:
                    seen.add(j)
                    stack.append(j)
        groups.append(sorted(group))
    return groups


# ---------------------------------------------------------------- the registry

def test_registry_lists_every_scenario_with_a_valid_default():
    assert set(SCENARIOS) == {"uniform", "clustered", "crowd", "chain", "degenerate", "file", "real"}
    assert SYNTHETIC == ("uniform", "clustered", "crowd", "chain", "degenerate")
    for name, scenario in SCENARIOS.items():
        lo, hi = scenario.knob_range
        assert scenario.name == name and scenario.knob and scenario.description
        assert lo < hi and lo <= scenario.default_overlap <= hi


# ---------------------------------------------------------------- shapes, dtypes, validity

@pytest.mark.parametrize("name", SYNTHETIC)
@pytest.mark.parametrize("n", [0, 1, 2, 17, 256])
@pytest.mark.parametrize("classes", [1, 3])
def test_generated_sets_are_valid(name, n, classes):
    bs = generate(name, n, seed=5, classes=classes)
    validate_nms_inputs(bs.boxes, bs.scores, bs.labels)
    assert bs.boxes.shape == (n, 4) and bs.boxes.dtype == torch.float32 and bs.boxes.device.type == "cpu"
    assert bs.scores.shape == (n,) and bs.scores.dtype == torch.float32
    if classes == 1:
        assert bs.labels is None
    else:
        assert bs.labels.shape == (n,) and bs.labels.dtype == torch.int64
        assert bool(((bs.labels >= 0) & (bs.labels < classes)).all())
    assert bool(((bs.boxes >= 0) & (bs.boxes <= CANVAS)).all())
    assert bs.meta == {"scenario": name, "overlap": SCENARIOS[name].default_overlap, "seed": 5, "classes": classes,
                       "canvas": "fixed", "extent": 1024.0}


@pytest.mark.parametrize("name", SYNTHETIC)
@pytest.mark.parametrize("which", [0, 1])
def test_knob_range_ends_are_valid(name, which):
    t = SCENARIOS[name].knob_range[which]
    bs = generate(name, 300, overlap=t, seed=1, classes=2)
    validate_nms_inputs(bs.boxes, bs.scores, bs.labels)
    assert bs.meta["overlap"] == t


# ---------------------------------------------------------------- determinism

@pytest.mark.parametrize("name", SYNTHETIC)
def test_same_seed_is_bit_identical_and_other_seeds_differ(name):
    a = generate(name, 200, seed=11, classes=4)
    assert same(a, generate(name, 200, seed=11, classes=4))
    b = generate(name, 200, seed=12, classes=4)
    assert not torch.equal(a.boxes, b.boxes)
    assert not torch.equal(a.scores, b.scores)


@pytest.mark.parametrize("name", SYNTHETIC)
def test_classes_only_add_labels(name):
    plain, labelled = generate(name, 150, seed=2), generate(name, 150, seed=2, classes=5)
    assert torch.equal(plain.boxes, labelled.boxes) and torch.equal(plain.scores, labelled.scores)
    assert labelled.labels.unique().numel() > 1


@pytest.mark.parametrize(("name", "knob", "same_object_iou"), [("clustered", 1.0, 0.9), ("crowd", 0.0, 0.5)])
def test_candidates_of_one_object_share_a_label(name, knob, same_object_iou):
    # at these knobs an IoU this high only happens between candidates of one object
    bs = generate(name, 400, overlap=knob, seed=3, classes=7)
    iou = pairwise_iou(bs.boxes, bs.boxes)
    i, j = torch.nonzero(torch.triu(iou, diagonal=1) > same_object_iou, as_tuple=True)
    assert i.numel() > 100
    assert torch.equal(bs.labels[i], bs.labels[j])


# ---------------------------------------------------------------- the knob

@pytest.mark.parametrize("name", SYNTHETIC)
def test_knob_raises_realized_overlap(name):
    scenario = SCENARIOS[name]
    lo, hi = scenario.knob_range
    means = []
    for t in (lo, scenario.default_overlap, hi):
        values = []
        for seed in range(3):
            bs = generate(name, 512, overlap=t, seed=seed)
            values.append(realized_overlap(bs.boxes, bs.scores)["mean_max_iou"])
        means.append(sum(values) / len(values))
    assert means[0] < means[1] < means[2], means


def test_uniform_knob_is_the_box_side():
    for t in (0.02, 0.1):
        bs = generate("uniform", 2000, overlap=t, seed=0)
        inside = (bs.boxes[:, 0] > 0) & (bs.boxes[:, 2] < CANVAS)  # not clipped
        width = (bs.boxes[inside, 2] - bs.boxes[inside, 0]).mean().item()
        assert width == pytest.approx(t * CANVAS, rel=0.05)


def test_clustered_best_aligned_candidate_scores_highest():
    bs = generate("clustered", 16, overlap=0.0, seed=4)  # one object, 16 jittered candidates
    iou_with_mean = pairwise_iou(bs.boxes, bs.boxes.mean(dim=0, keepdim=True)).flatten()
    rho = np.corrcoef(iou_with_mean.numpy(), bs.scores.numpy())[0, 1]
    assert rho > 0.5


# ---------------------------------------------------------------- chain

@pytest.mark.parametrize("n", [120, 125])
def test_chain_greedy_keeps_every_other_box_allpairs_one_per_chain(n):
    t = SCENARIOS["chain"].default_overlap
    bs = generate("chain", n, seed=8)
    chains = components(bs.boxes)
    assert len(chains) == math.ceil(n / 6) and max(map(len, chains)) == 6
    iou = pairwise_iou(bs.boxes, bs.boxes)
    for chain in chains:
        chain = sorted(chain, key=lambda i: bs.boxes[i, 0].item())  # left to right
        neighbours = [iou[a, b].item() for a, b in zip(chain, chain[1:])]
        assert neighbours == pytest.approx([t] * len(neighbours), abs=1e-3)
        scores = bs.scores[chain]
        assert bool((scores[1:] < scores[:-1]).all())  # strictly decreasing along the chain

    keep = torchvision.ops.nms(bs.boxes, bs.scores, 0.5)
    assert len(keep) == sum(math.ceil(len(c) / 2) for c in chains)
    assert allpairs_keep_count(bs.boxes, bs.scores, 0.5) == len(chains)


def test_chain_knob_is_the_neighbour_iou():
    bs = generate("chain", 6, overlap=0.3, seed=0)
    order = torch.argsort(bs.boxes[:, 0])
    iou = pairwise_iou(bs.boxes[order], bs.boxes[order])
    assert torch.diagonal(iou, 1).tolist() == pytest.approx([0.3] * 5, abs=1e-4)


# ---------------------------------------------------------------- degenerate

def test_degenerate_has_ties_duplicates_zero_area_and_tiny_boxes():
    bs = generate("degenerate", 256, seed=6)
    b = bs.boxes
    assert bs.scores.unique().numel() <= 4
    unique_rows = torch.unique(b, dim=0).shape[0]
    assert unique_rows <= 256 - 40  # about a sixth are exact copies
    width, height = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    assert int((width == 0).sum()) >= 10 and int((height == 0).sum()) >= 10
    assert int(((width > 0) & (width <= 1) & (height > 0) & (height <= 1)).sum()) >= 10
    # exact duplicates that also tie in score: the tie-break order decides between them
    pairs = [(i, j) for i in range(256) for j in range(i) if torch.equal(b[i], b[j]) and width[i] > 0]
    assert any(bs.scores[i] == bs.scores[j] for i, j in pairs)


def test_degenerate_always_has_ties_and_knob_counts_degenerate_boxes():
    for n in (2, 3, 4):
        scores = generate("degenerate", n, seed=0).scores
        assert scores.unique().numel() < n
    clean = generate("degenerate", 300, overlap=0.0, seed=1)
    width, height = clean.boxes[:, 2] - clean.boxes[:, 0], clean.boxes[:, 3] - clean.boxes[:, 1]
    assert bool(((width > 1) & (height > 1)).all())
    assert torch.unique(clean.boxes, dim=0).shape[0] == 300
    assert clean.scores.unique().numel() <= 4


# ---------------------------------------------------------------- bad arguments

@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(name="gaussian", n=10), "unknown scenario 'gaussian'; known: uniform, clustered"),
        (dict(name="uniform", n=-1), "n must be >= 0"),
        (dict(name="uniform", n=2.5), "n must be an integer"),
        (dict(name="uniform", n=10.0), "n must be an integer"),
        (dict(name="uniform", n="10"), "n must be an integer"),
        (dict(name="uniform", n=True), "n must be an integer"),
        (dict(name="uniform", n=10, classes=0), "classes must be >= 1"),
        (dict(name="uniform", n=10, classes=1.5), "classes must be an integer"),
        (dict(name="uniform", n=10, seed=-3), "seed must be >= 0"),
        (dict(name="uniform", n=10, overlap=0.0), "must be in [0.001, 1.0]"),
        (dict(name="uniform", n=10, overlap=1.5), "must be in"),
        (dict(name="clustered", n=10, overlap=-0.1), "must be in [0.0, 1.0]"),
        (dict(name="chain", n=10, overlap=1.0), "must be in"),
        (dict(name="crowd", n=10, overlap=float("nan")), "must be in"),
        (dict(name="degenerate", n=10, overlap="0.5"), "overlap must be a number"),
        (dict(name="file", n=10), "needs path="),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError) as info:
        generate(**kwargs)
    assert message in str(info.value)


def test_numpy_integers_are_accepted():
    assert same(generate("crowd", np.int64(40), seed=np.int32(3), classes=np.int64(2)),
                generate("crowd", 40, seed=3, classes=2))


# ---------------------------------------------------------------- the boxes file

@pytest.fixture
def recorded():
    rng = np.random.default_rng(0)
    xy = rng.uniform(-50, 500, size=(30, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0, 80, size=(30, 2))], axis=1).astype(np.float32)
    return boxes, rng.uniform(size=30).astype(np.float32), rng.integers(0, 4, size=30)


def write(path, boxes, scores, labels=None):
    suffix = path.suffix
    if suffix == ".npz":
        np.savez(path, boxes=boxes, scores=scores, **({} if labels is None else {"labels": labels}))
    elif suffix == ".pt":
        data = {"boxes": torch.as_tensor(boxes), "scores": torch.as_tensor(scores)}
        if labels is not None:
            data["labels"] = torch.as_tensor(labels)
        torch.save(data, path)
    else:
        df = pd.DataFrame(np.asarray(boxes, dtype=np.float64), columns=["x1", "y1", "x2", "y2"])
        df["score"] = scores
        if labels is not None:
            df["label"] = labels
        df.to_csv(path, index=False, float_format="%.9g")
    return path


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".csv"])
@pytest.mark.parametrize("with_labels", [False, True])
def test_file_round_trip(tmp_path, recorded, suffix, with_labels):
    boxes, scores, labels = recorded
    path = write(tmp_path / f"boxes{suffix}", boxes, scores, labels if with_labels else None)
    bs = load_boxes_file(path)
    assert torch.equal(bs.boxes, torch.from_numpy(boxes)) and torch.equal(bs.scores, torch.from_numpy(scores))
    assert bs.boxes.dtype == bs.scores.dtype == torch.float32
    if with_labels:
        assert bs.labels.dtype == torch.int64 and bs.labels.tolist() == labels.tolist()
    else:
        assert bs.labels is None
    assert bs.meta["source"] == str(path)


def test_file_scenario_takes_the_first_n_and_scales_about_centres(tmp_path, recorded):
    boxes, scores, labels = recorded
    path = write(tmp_path / "boxes.npz", boxes, scores, labels)
    as_recorded = generate("file", 20, path=path, classes=9, seed=4)
    assert torch.equal(as_recorded.boxes, torch.from_numpy(boxes[:20]))
    assert as_recorded.labels.tolist() == labels[:20].tolist()
    assert as_recorded.meta["source"] == str(path) and as_recorded.meta["scenario"] == "file"

    doubled = generate("file", 20, overlap=2.0, path=str(path))
    b, d = torch.from_numpy(boxes[:20]).double(), doubled.boxes.double()
    assert torch.allclose(d[:, :2] + d[:, 2:], b[:, :2] + b[:, 2:], atol=1e-3)
    assert torch.allclose(d[:, 2:] - d[:, :2], 2 * (b[:, 2:] - b[:, :2]), atol=1e-3)
    assert torch.equal(doubled.scores, as_recorded.scores)
    assert generate("file", 0, path=path).boxes.shape == (0, 4)
    bigger = realized_overlap(doubled.boxes, doubled.scores)["mean_max_iou"]
    assert bigger > realized_overlap(as_recorded.boxes, as_recorded.scores)["mean_max_iou"]


def test_file_scenario_rejects_more_boxes_than_the_file_has(tmp_path, recorded):
    path = write(tmp_path / "boxes.pt", *recorded)
    with pytest.raises(ValueError, match="has only 30"):
        generate("file", 31, path=path)
    with pytest.raises(ValueError, match=r"must be in \[0.01, 10.0\]"):
        generate("file", 5, overlap=11.0, path=path)


def check_rejected(path, *words):
    with pytest.raises(ValueError) as info:
        load_boxes_file(path)
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message, message


def test_loader_rejects_missing_and_foreign_files(tmp_path, recorded):
    check_rejected(tmp_path / "nope.npz", "no such file")
    check_rejected(tmp_path, "is not a file")
    (tmp_path / "boxes.json").write_text("{}")
    check_rejected(tmp_path / "boxes.json", "unknown file type '.json'")
    (tmp_path / "text.npz").write_text("x1,y1\n1,2\n")
    check_rejected(tmp_path / "text.npz", "cannot read as .npz")
    np.save(tmp_path / "single.npy", recorded[0])
    (tmp_path / "single.npy").rename(tmp_path / "single.npz")
    check_rejected(tmp_path / "single.npz", "not an .npz archive")
    torch.save(Fraction(1, 3), tmp_path / "object.pt")
    check_rejected(tmp_path / "object.pt", "cannot read as .pt")
    torch.save([torch.zeros(2, 4)], tmp_path / "list.pt")
    check_rejected(tmp_path / "list.pt", "expected a dict", "got list")
    (tmp_path / "binary.csv").write_bytes(bytes(range(256)) * 4)
    check_rejected(tmp_path / "binary.csv")
    (tmp_path / "empty.csv").write_text("")
    check_rejected(tmp_path / "empty.csv", "cannot read as .csv")


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".csv"])
def test_loader_rejects_truncated_and_corrupt_files(tmp_path, recorded, suffix):
    data = write(tmp_path / f"boxes{suffix}", *recorded).read_bytes()
    truncated = tmp_path / f"truncated{suffix}"
    truncated.write_bytes(data[: len(data) * 2 // 3])
    check_rejected(truncated)
    corrupt = tmp_path / f"corrupt{suffix}"
    corrupt.write_bytes(b"\xff" * 64 + data[64:])  # a garbled header
    check_rejected(corrupt)


def test_loader_checks_npz_checksums(tmp_path, recorded):
    data = bytearray(write(tmp_path / "boxes.npz", *recorded).read_bytes())
    data[len(data) // 3: len(data) // 3 + 16] = bytes(16)  # inside the boxes array
    (tmp_path / "flipped_bits.npz").write_bytes(bytes(data))
    check_rejected(tmp_path / "flipped_bits.npz", "Bad CRC-32")


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".csv"])
def test_loader_rejects_bad_content(tmp_path, recorded, suffix):
    boxes, scores, labels = recorded
    nan = boxes.copy()
    nan[4, 1] = np.nan
    check_rejected(write(tmp_path / f"nan{suffix}", nan, scores), "NaN", "row 4")
    flipped = boxes.copy()
    flipped[7, [0, 2]] = flipped[7, [2, 0]]
    check_rejected(write(tmp_path / f"flipped{suffix}", flipped, scores), "x2 >= x1", "row 7")
    if suffix != ".csv":  # a CSV row holds its own score, so lengths cannot disagree
        check_rejected(write(tmp_path / f"short{suffix}", boxes, scores[:-1]), "length mismatch", "30 boxes", "29")
        check_rejected(write(tmp_path / f"labels{suffix}", boxes, scores, labels[:5]), "length mismatch")
        check_rejected(write(tmp_path / f"shape{suffix}", boxes[:, :3], scores), "shape (N, 4)")


def test_loader_rejects_missing_keys_and_non_numeric_data(tmp_path, recorded):
    boxes, scores, _ = recorded
    np.savez(tmp_path / "nokey.npz", boxes=boxes, confidences=scores)
    check_rejected(tmp_path / "nokey.npz", "missing 'scores'", "confidences")
    torch.save({"scores": torch.from_numpy(scores)}, tmp_path / "nokey.pt")
    check_rejected(tmp_path / "nokey.pt", "missing 'boxes'")
    (tmp_path / "nocol.csv").write_text("x1,y1,x2,score\n1,1,2,0.5\n")
    check_rejected(tmp_path / "nocol.csv", "missing column(s) y2")
    np.savez(tmp_path / "text.npz", boxes=np.array([["a", "b", "c", "d"]]), scores=np.array([1.0]))
    check_rejected(tmp_path / "text.npz", "boxes must be numeric")
    (tmp_path / "word.csv").write_text("x1,y1,x2,y2,score\n1,1,2,2,0.5\n1,1,2,two,0.5\n")
    check_rejected(tmp_path / "word.csv", "column 'y2' is not numeric", "row 1", "'two'")
    (tmp_path / "label.csv").write_text("x1,y1,x2,y2,score,label\n1,1,2,2,0.5,1.5\n")
    check_rejected(tmp_path / "label.csv", "labels must be integers within int64 (row 0: 1.5)")


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".csv"])
@pytest.mark.parametrize("label, row", [(1e20, 0), (3e20, 1), (2.0**63, 7), (-1e19, 29), (float("inf"), 3), (2.5, 2)])
def test_float_labels_must_be_integers_within_int64(tmp_path, recorded, suffix, label, row):
    # 1e20 and 3e20 were both cast to -2**63 (one class where the file has two), with a warning only
    boxes, scores, _ = recorded
    labels = np.full(30, 4.0)
    labels[row] = label
    check_rejected(write(tmp_path / f"labels{suffix}", boxes, scores, labels), "labels must be integers within int64",
                   f"row {row}")


def test_unsigned_labels_beyond_int64_are_refused(tmp_path, recorded):
    boxes, scores, _ = recorded
    labels = np.arange(30, dtype=np.uint64)
    np.savez(tmp_path / "ok.npz", boxes=boxes, scores=scores, labels=labels)
    assert load_boxes_file(tmp_path / "ok.npz").labels.tolist() == list(range(30))
    labels[3] = 2**63
    np.savez(tmp_path / "wrap.npz", boxes=boxes, scores=scores, labels=labels)
    check_rejected(tmp_path / "wrap.npz", "labels must be integers within int64", "row 3")


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64) |
                st.integers(-(2**63), 2**63 - 1).map(float), min_size=1, max_size=8))
@settings(max_examples=60, deadline=None)
def test_float_labels_load_exactly_or_are_refused_naming_the_first_bad_row(labels):
    import tempfile
    from pathlib import Path

    labels = np.array(labels, dtype=np.float64)
    n = len(labels)
    boxes = np.tile(np.array([[0, 0, 10, 10]], dtype=np.float32), (n, 1))
    good = [math.isfinite(v) and v == int(v) and -(2**63) <= int(v) < 2**63 for v in labels.tolist()]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "labels.npz"
        np.savez(path, boxes=boxes, scores=np.ones(n, dtype=np.float32), labels=labels)
        if all(good):
            assert load_boxes_file(path).labels.tolist() == [int(v) for v in labels.tolist()]
        else:
            check_rejected(path, "labels must be integers within int64", f"row {good.index(False)}:")


@pytest.mark.parametrize("with_labels", [False, True])
def test_a_pt_file_of_numpy_arrays_loads(tmp_path, recorded, with_labels):
    boxes, scores, labels = recorded
    data = {"boxes": boxes, "scores": scores.astype(np.float64)} | ({"labels": labels} if with_labels else {})
    torch.save(data, tmp_path / "arrays.pt")
    bs = load_boxes_file(tmp_path / "arrays.pt")
    assert torch.equal(bs.boxes, torch.from_numpy(boxes)) and torch.equal(bs.scores, torch.from_numpy(scores))
    assert (bs.labels is None) if not with_labels else bs.labels.tolist() == labels.tolist()


class _Touch:
    """Unpickled by a trusting loader, it creates a file: proof that code ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        from pathlib import Path

        return Path.touch, (Path(self.marker),)


def test_a_pickle_that_runs_code_never_runs(tmp_path, recorded):
    boxes, scores, _ = recorded
    marker = tmp_path / "code-ran"
    payloads = {"alone.pt": _Touch(marker),
                "beside_arrays.pt": {"boxes": boxes, "scores": scores, "labels": _Touch(marker)},
                "in_an_array.pt": {"boxes": boxes, "scores": np.array([_Touch(marker)] * 30, dtype=object)}}
    for name, payload in payloads.items():
        torch.save(payload, tmp_path / name)
        check_rejected(tmp_path / name, "cannot read as .pt")
        assert not marker.exists(), name


def test_a_csv_is_read_only_as_far_as_the_rows_asked_for(tmp_path, recorded):
    # a huge file's first rows: what follows them is neither parsed nor checked (here: junk)
    boxes, scores, labels = recorded
    path = write(tmp_path / "long.csv", boxes, scores, labels)
    with path.open("a") as f:
        f.write("not,a,row\n" + "\x00\xff junk " * 1000 + "\n")
    check_rejected(path)
    assert torch.equal(load_boxes_file(path, rows=30).boxes, torch.from_numpy(boxes))
    assert generate("file", 12, path=path).labels.tolist() == labels[:12].tolist()


def test_a_file_sweeps_with_the_number_of_its_labels_as_classes(tmp_path, recorded):
    from click.testing import CliRunner

    from nmsbench.cli import main

    boxes, scores, _ = recorded
    labels = np.arange(30) % 5
    path = write(tmp_path / "boxes.csv", boxes, scores, labels)
    with path.open("a") as f:  # past the rows the sweep asks for: neither parsed nor checked
        f.write("junk\n" * 100)
    assert generate("file", 30, path=path).meta["row"] == {"classes": 5}
    assert generate("file", 3, path=path).meta["row"] == {"classes": 3}  # the labels the first 3 boxes hold
    out = tmp_path / "run.csv"
    args = ["sweep", "--scenario", "file", "--n", "3,30", "--impl", "torchvision", "--device", "cpu",
            "--min-run-time", "0.01"]
    result = CliRunner().invoke(main, [*args, "--file", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert dict(zip(frame.n, frame.classes)) == {3: 3, 30: 5}

    huge = write(tmp_path / "huge.npz", boxes, scores, np.where(np.arange(30) == 4, 3e20, 1e20))
    result = CliRunner().invoke(main, [*args, "--file", str(huge), "--out", str(tmp_path / "no.csv")])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "huge.npz: labels must be integers within int64 (row 0: 1e+20)" in text, text
