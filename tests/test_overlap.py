"""Realized-overlap metrics (nmsbench.overlap) against a brute-force IoU matrix."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmsbench.boxes import pairwise_iou, score_order
from nmsbench.datasets import SYNTHETIC, generate
import nmsbench.overlap as overlap
from nmsbench.overlap import max_iou_with_higher_ranked, overlap_sample, realized_overlap


def brute_force(boxes, scores, labels=None):
    """Full IoU matrix, masked to higher-ranked (and same-label) boxes, max per column."""
    n = boxes.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.float32)
    rank = torch.empty(n, dtype=torch.int64)
    rank[score_order(scores)] = torch.arange(n)
    above = rank[:, None] < rank[None, :]  # row i ranked above column j
    if labels is not None:
        above &= labels[:, None] == labels[None, :]
    iou = torch.where(above, pairwise_iou(boxes, boxes), torch.zeros((), dtype=boxes.dtype))
    return iou.amax(dim=0).float()


def random_set(seed, n, *, levels=5, grid=None, offset=0.0, scale=100.0, classes=3, dtype=torch.float32):
    """Boxes with score ties, exact duplicates, zero-area boxes and widely varying widths."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, scale, size=(n, 2))
    wh = scale * np.exp(rng.uniform(-6, 0, size=(n, 2)))  # widths over several octaves
    wh[rng.random(n) < 0.1, 0] = 0  # zero width
    wh[rng.random(n) < 0.1, 1] = 0  # zero height
    boxes = np.concatenate([xy, xy + wh], axis=1) + offset
    if grid:
        boxes = np.round(boxes / grid) * grid  # shared edges, touching boxes
    dup = rng.random(n) < 0.15
    boxes[dup] = boxes[rng.integers(n, size=int(dup.sum()))]
    scores = rng.integers(levels, size=n) / levels
    labels = torch.from_numpy(rng.integers(classes, size=n))
    return torch.tensor(boxes, dtype=dtype), torch.tensor(scores, dtype=dtype), labels


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_brute_force_with_ties_duplicates_and_labels(seed, dtype):
    boxes, scores, labels = random_set(seed, 400, grid=0.5 if seed % 2 else None, dtype=dtype)
    for lab in (None, labels):
        got = max_iou_with_higher_ranked(boxes, scores, lab)
        assert got.dtype == torch.float32 and got.shape == (400,)
        assert torch.equal(got, brute_force(boxes, scores, lab))


@pytest.mark.parametrize(("offset", "scale"), [(-1e4, 50.0), (3e5, 2e4), (0.0, 1e-3)])
def test_matches_brute_force_at_other_coordinate_scales(offset, scale):
    boxes, scores, labels = random_set(7, 300, offset=offset, scale=scale)
    assert torch.equal(max_iou_with_higher_ranked(boxes, scores, labels), brute_force(boxes, scores, labels))


@pytest.mark.parametrize("name", SYNTHETIC)
def test_matches_brute_force_on_every_scenario(name):
    bs = generate(name, 600, seed=1, classes=2)
    for lab in (None, bs.labels):
        assert torch.equal(max_iou_with_higher_ranked(bs.boxes, bs.scores, lab),
                           brute_force(bs.boxes, bs.scores, lab))


@settings(max_examples=60)
@given(st.data())
def test_matches_brute_force_on_small_integer_sets(data):
    n = data.draw(st.integers(0, 24))
    coords = data.draw(st.lists(st.tuples(*[st.integers(0, 12)] * 4), min_size=n, max_size=n))
    boxes = torch.tensor([[min(a, c), min(b, d), max(a, c), max(b, d)] for a, b, c, d in coords],
                         dtype=torch.float32).reshape(n, 4)
    scores = torch.tensor(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=torch.float32)
    labels = torch.tensor(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)), dtype=torch.int64)
    for lab in (None, labels):
        assert torch.equal(max_iou_with_higher_ranked(boxes, scores, lab), brute_force(boxes, scores, lab))


def test_rank_ties_break_by_lower_index_and_labels_separate():
    boxes = torch.tensor([[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 5], [0, 0, 10, 10]], dtype=torch.float32)
    scores = torch.tensor([0.5, 0.5, 0.9, 0.1])
    # rank: 2 (0.9), 0, 1 (tie, lower index first), 3
    assert max_iou_with_higher_ranked(boxes, scores).tolist() == [0.5, 1.0, 0.0, 1.0]
    labels = torch.tensor([0, 1, 0, 2])
    assert max_iou_with_higher_ranked(boxes, scores, labels).tolist() == [0.5, 0.0, 0.0, 0.0]


def test_wide_box_far_left_still_reaches_narrow_boxes_on_the_right():
    narrow = torch.tensor([[990.0 + k, 0, 991.0 + k, 10] for k in range(50)])
    boxes = torch.cat([torch.tensor([[0.0, 0, 1000, 10]]), narrow])
    scores = torch.cat([torch.ones(1), torch.linspace(0.9, 0.1, 50)])
    got = max_iou_with_higher_ranked(boxes, scores)
    assert torch.equal(got, brute_force(boxes, scores))
    assert got[1:11].gt(0).all() and got[11:].eq(0).all()


def test_zero_area_boxes_have_zero_iou_even_when_identical():
    boxes = torch.tensor([[5.0, 5, 5, 9], [5.0, 5, 5, 9], [1.0, 1, 1, 1], [1.0, 1, 1, 1]])
    assert max_iou_with_higher_ranked(boxes, torch.ones(4)).tolist() == [0.0] * 4


def test_small_and_empty_inputs():
    assert max_iou_with_higher_ranked(torch.zeros(0, 4), torch.zeros(0)).shape == (0,)
    assert max_iou_with_higher_ranked(torch.tensor([[0.0, 0, 1, 1]]), torch.ones(1)).tolist() == [0.0]
    assert realized_overlap(torch.zeros(0, 4), torch.zeros(0)) == {"mean_max_iou": 0.0, "sampled": 0}


def test_realized_overlap_is_the_mean():
    boxes, scores, labels = random_set(3, 200)
    expected = brute_force(boxes, scores, labels).double().mean().item()
    result = realized_overlap(boxes, scores, labels)
    assert set(result) == {"mean_max_iou", "sampled"} and isinstance(result["mean_max_iou"], float)
    assert result["sampled"] == 0  # exact up to EXACT_MAX_N boxes
    assert result["mean_max_iou"] == pytest.approx(expected, rel=1e-12)


def test_large_sets_run_without_an_n_by_n_matrix():
    bs = generate("chain", 65536, seed=0)  # a 65536^2 float32 matrix would need 16 GiB
    got = max_iou_with_higher_ranked(bs.boxes, bs.scores)
    assert got.shape == (65536,)
    # every chain box but the first overlaps its left neighbour at IoU 0.6
    assert int((got - 0.6).abs().lt(1e-3).sum()) == 65536 - 65536 // 6 - 1


# --------------------------------------------------------------------------- some boxes, and the sampled mean


def crowded_set(seed, n, classes=2, dtype=torch.float32):
    """Boxes as wide as a third of the canvas: every box's window holds most boxes."""
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 100, (n, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(20, 40, (n, 2))], 1)
    scores = rng.integers(6, size=n) / 6  # ties
    return (torch.tensor(boxes, dtype=dtype), torch.tensor(scores, dtype=dtype),
            torch.from_numpy(rng.integers(classes, size=n)))


@pytest.mark.parametrize("stream_above", [0.0, float("inf")], ids=["streamed", "windows"])
@pytest.mark.parametrize("make", [lambda: crowded_set(1, 3000), lambda: crowded_set(2, 2000, dtype=torch.float64),
                                  lambda: random_set(5, 3000, grid=0.5),
                                  lambda: random_set(6, 2500, dtype=torch.float64)],
                         ids=["crowded", "crowded-float64", "sparse", "sparse-float64"])
def test_some_boxes_get_exactly_their_values_by_either_kernel(monkeypatch, make, stream_above):
    """``at``: the chosen boxes' entries, each against all boxes, equal to the full
    computation's; the windows and the streamed kernel agree bit for bit."""
    boxes, scores, labels = make()
    monkeypatch.setattr(overlap, "STREAM_ABOVE", stream_above)
    at = torch.tensor([0, 7, 7, len(boxes) - 1, 3, *range(100, 2000, 37)])  # any order, repeats
    for lab in (None, labels):
        full = brute_force(boxes, scores, lab)
        assert torch.equal(max_iou_with_higher_ranked(boxes, scores, lab, at=at), full[at])
        assert torch.equal(max_iou_with_higher_ranked(boxes, scores, lab), full)
    assert max_iou_with_higher_ranked(boxes, scores, at=[]).shape == (0,)


@pytest.mark.parametrize(("at", "message"), [([5], "outside [0, 5)"), ([-1], "outside [0, 5)"),
                                             ([[0, 1]], "1-D sequence"), ([0.5], "1-D sequence")])
def test_bad_indices_raise_value_error(at, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        max_iou_with_higher_ranked(torch.zeros(5, 4), torch.zeros(5), at=at)


def test_the_sample_is_fixed_distinct_and_uniform():
    first = overlap_sample(1 << 20)
    assert first.size == overlap.SAMPLE_SIZE == np.unique(first).size
    assert np.array_equal(first, overlap_sample(1 << 20)) and np.array_equal(first, np.sort(first))
    assert 0 <= first.min() and first.max() < 1 << 20
    assert abs(first.mean() / (1 << 20) - 0.5) < 0.05  # spread over all boxes, not their start
    assert overlap_sample(10, size=50).tolist() == list(range(10))


@pytest.mark.parametrize("name", ["uniform", "clustered", "crowd", "chain", "degenerate"])
def test_the_sampled_mean_estimates_the_exact_one(name):
    """Above ``exact_max_n`` the mean is over a fixed sample: within four of its standard
    errors of the exact mean (the sample is fixed, so this holds or fails for good)."""
    n, size = 12000, 600
    bs = generate(name, n, seed=2, classes=2)
    exact = max_iou_with_higher_ranked(bs.boxes, bs.scores, bs.labels).double()
    below = realized_overlap(bs.boxes, bs.scores, bs.labels, exact_max_n=n, sample_size=size)
    assert below == {"mean_max_iou": pytest.approx(exact.mean().item(), rel=1e-12), "sampled": 0}
    estimate = realized_overlap(bs.boxes, bs.scores, bs.labels, exact_max_n=n - 1, sample_size=size)
    assert estimate["sampled"] == size
    assert estimate["mean_max_iou"] == pytest.approx(exact[overlap_sample(n, size)].mean().item(), rel=1e-12)
    error = exact.std().item() * ((1 - size / n) / size) ** 0.5
    assert abs(estimate["mean_max_iou"] - exact.mean().item()) <= 4 * error + 1e-9


def test_large_sets_compute_only_the_sample(monkeypatch):
    """At N > EXACT_MAX_N the kernels get SAMPLE_SIZE boxes to compute, never N: streamed
    past all boxes on a crowded canvas, through the windows on a sparse one."""
    asked = []

    def recording(name: str, targets_at: int):
        kernel = getattr(overlap, name)

        def call(*args):
            asked.append((name, len(args[targets_at])))
            return kernel(*args)

        monkeypatch.setattr(overlap, name, call)

    recording("_max_iou_kernel", -1)
    recording("_streamed_max_iou_kernel", -2)
    for canvas in ("fixed", "density"):
        bs = generate("uniform", overlap.EXACT_MAX_N + 1, overlap=0.5 if canvas == "fixed" else None, seed=0,
                      canvas=canvas)
        result = realized_overlap(bs.boxes, bs.scores)
        assert result["sampled"] == overlap.SAMPLE_SIZE and 0 < result["mean_max_iou"] < 1
    assert asked == [("_streamed_max_iou_kernel", overlap.SAMPLE_SIZE), ("_max_iou_kernel", overlap.SAMPLE_SIZE)]


@pytest.mark.parametrize(
    ("boxes", "scores", "labels", "message"),
    [
        (torch.zeros(3, 4), torch.zeros(2), None, "scores must have shape (3,)"),
        (torch.zeros(3, 3), torch.zeros(3), None, "boxes must have shape (N, 4)"),
        (torch.tensor([[0.0, 0, float("nan"), 1]]), torch.ones(1), None, "NaN"),
        (torch.tensor([[2.0, 0, 1, 1]]), torch.ones(1), None, "x2 >= x1"),
        (torch.zeros(2, 4), torch.zeros(2), torch.zeros(3, dtype=torch.int64), "labels must have shape (2,)"),
        (torch.zeros(2, 4), torch.zeros(2), torch.zeros(2), "labels must be an integer tensor"),
    ],
)
def test_bad_inputs_raise_value_error(boxes, scores, labels, message):
    with pytest.raises(ValueError) as info:
        max_iou_with_higher_ranked(boxes, scores, labels)
    assert message in str(info.value)


def test_boxes_of_every_size_class_meet_each_other():
    """A few huge boxes over many tiny ones (each size class on its grid of its own): the
    graph holds exactly the overlapping pairs, both directions, as the brute force finds."""
    import numpy as np

    from nmsbench.variants._cpu import overlap_graph

    rng = np.random.default_rng(5)
    n = 1500
    corner = rng.uniform(0, 2000, (n, 2))
    side = np.where(rng.uniform(size=n) < 0.01, rng.uniform(300, 900, n), rng.uniform(1, 12, n))
    side[::97] = 0.0  # zero-size boxes overlap nothing
    boxes = np.concatenate([corner, corner + side[:, None] * rng.uniform(0.5, 1, (n, 2))], 1).astype(np.float32)
    labels = np.zeros(n, dtype=np.int64)
    indptr, indices, ious = overlap_graph(boxes, labels, max_pairs=1 << 30)
    found = {(i, int(j)) for i in range(n) for j in indices[indptr[i]:indptr[i + 1]]}
    x1, y1, x2, y2 = (boxes[:, k][:, None] for k in range(4))
    w = np.minimum(x2, x2.T) - np.maximum(x1, x1.T)
    h = np.minimum(y2, y2.T) - np.maximum(y1, y1.T)
    overlapping = (w > 0) & (h > 0)
    np.fill_diagonal(overlapping, False)
    assert found == {(int(i), int(j)) for i, j in zip(*np.nonzero(overlapping))}
    assert any(side[i] > 300 and indptr[i + 1] - indptr[i] > 10 for i in range(n))  # the huge boxes reach the tiny


def test_coordinates_near_the_float64_limit_lose_no_pair():
    """Where the grid's arithmetic overflows (a span beyond float64, cells of infinite
    side), the windows widen to the whole grid instead of losing pairs."""
    import numpy as np

    from nmsbench.variants._cpu import overlap_graph

    big = 1.7e308
    boxes = np.array([[-big, 0, -big + 1e300, 1], [-big + 5e299, 0, -big + 2e300, 1], [big - 1e300, 0, big, 1],
                      [big - 5e299, 0.5, big, 2], [0.0, 0.0, 1.0, 1.0]])
    indptr, indices, _ = overlap_graph(boxes, np.zeros(5, dtype=np.int64))
    assert [sorted(indices[indptr[i]:indptr[i + 1]].tolist()) for i in range(5)] == [[1], [0], [3], [2], []]
