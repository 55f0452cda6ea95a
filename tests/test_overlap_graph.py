"""The GPU overlap graph's host side (implementations/overlap_graph.py) in CI: the grid that
``device_grid`` builds with torch (on the CPU here, on the boxes' GPU there) must let
``_cpu._neighbour_rows``, whose arithmetic ``graph_rows_kernel`` repeats, find every
overlapping pair: the same rows as a brute-force pair test, on box sets of every shape
(constant density, mixed sizes, boxes far larger than the cells, everything identical,
zero-area boxes, labels). The kernels themselves are checked on the GPU (tests/test_gpu.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmsbench import datasets
from nmsbench.boxes import pairwise_iou
from nmsbench.variants import _cpu, overlap_graph
from test_properties import examples


def brute_force_rows(boxes: torch.Tensor, labels: torch.Tensor | None, above: float) -> list[set[int]]:
    iou = pairwise_iou(boxes, boxes).double()
    iou.fill_diagonal_(0)
    pairs = iou > above
    if labels is not None:
        pairs &= labels[:, None] == labels[None, :]
    return [set(np.flatnonzero(row).tolist()) for row in pairs.numpy()]


def rows_on_device_grid(boxes: torch.Tensor, labels: torch.Tensor | None, above: float) -> list[set[int]]:
    grid = overlap_graph.device_grid(boxes)
    n = boxes.shape[0]
    if grid is None:
        return [set() for _ in range(n)]
    b = boxes.numpy()
    lab = np.zeros(n, dtype=np.int64) if labels is None else labels.numpy().astype(np.int64)
    rows = _cpu._NEIGHBOUR_ROWS[0]
    counts = rows(b, lab, overlap_graph.grid_tuple(grid), float(above), np.zeros(0, dtype=np.int64))[0]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    _, indices, _ = rows(b, lab, overlap_graph.grid_tuple(grid), float(above), indptr)
    return [set(indices[indptr[i]:indptr[i + 1]].tolist()) for i in range(n)]


def assert_same_rows(boxes, labels=None):
    for above in (0.0, 0.5):
        assert rows_on_device_grid(boxes, labels, above) == brute_force_rows(boxes, labels, above)


@pytest.mark.parametrize("scenario", list(datasets.SYNTHETIC))
@pytest.mark.parametrize("canvas", ["fixed", "density"])
def test_the_grid_finds_every_pair_of_the_scenarios(scenario, canvas):
    case = datasets.generate(scenario, 700, seed=5, canvas=canvas, classes=3)
    assert_same_rows(case.boxes, None)
    assert_same_rows(case.boxes, case.labels)


def test_boxes_far_larger_than_the_cells_identical_and_zero_area_boxes():
    generator = torch.Generator().manual_seed(2)
    corner = torch.rand(500, 2, generator=generator) * 5000
    small = torch.cat([corner, corner + 4 + torch.rand(500, 2, generator=generator) * 8], 1)
    huge = torch.tensor([[0.0, 0.0, 5000.0, 5000.0], [100.0, 2000.0, 4900.0, 2100.0], [2500.0, 0.0, 2510.0, 5000.0]])
    assert_same_rows(torch.cat([small, huge]))
    assert_same_rows(torch.tensor([[1.0, 2.0, 30.0, 40.0]]).repeat(300, 1))
    flat = small.clone()
    flat[::3, 2] = flat[::3, 0]  # a third of zero width
    assert_same_rows(flat)
    assert overlap_graph.device_grid(torch.tensor([[5.0, 5.0, 5.0, 5.0], [1.0, 1.0, 1.0, 1.0]])) is None  # points only


@st.composite
def box_sets(draw):
    n = draw(st.integers(1, 80))
    scale = 2.0 ** draw(st.integers(-10, 20))
    origin = draw(st.floats(-1e4, 1e4)) * scale
    rows = []
    for _ in range(n):
        x, y = (origin + draw(st.floats(0, 500)) * scale for _ in range(2))
        w, h = (draw(st.sampled_from([0.0, 1.0, 3.0, 30.0, 300.0])) * draw(st.floats(0.5, 1.5)) * scale for _ in range(2))
        rows.append([x, y, x + w, y + h])
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    return torch.tensor(rows, dtype=torch.float64).to(dtype)


@settings(max_examples=examples(80), deadline=None)
@given(box_sets())
def test_the_grid_finds_every_pair_at_any_scale(boxes):
    assert_same_rows(boxes)


def test_window_tests_counts_the_pairs_the_windows_visit():
    """The dispatcher's estimate: every box's window cells summed over the classes, the same
    count as walking the windows the kernel walks (its arithmetic, in Python)."""
    import math

    for scenario, canvas in (("clustered", "density"), ("uniform", "fixed"), ("crowd", "fixed")):
        boxes = datasets.generate(scenario, 500, seed=1, canvas=canvas).boxes
        boxes = torch.cat([boxes, torch.tensor([[0.0, 0.0, 3000.0, 3000.0]])])  # one box over everything
        grid = overlap_graph.device_grid(boxes)
        starts = grid.starts.numpy()
        walked = 0
        for x1, y1, x2, y2 in boxes.double().tolist():
            layout = grid.layout
            for side, gx, gy, first in zip(layout.sides, layout.gxs, layout.gys, layout.cell0):
                if gx == 0:
                    continue
                clamp = lambda v, count: min(max(math.floor(v / side), 0), count - 1)  # noqa: E731
                xl, xh = clamp(x1 - side - layout.x0, gx), clamp(x2 - layout.x0, gx)
                yl, yh = clamp(y1 - side - layout.y0, gy), clamp(y2 - layout.y0, gy)
                for yy in range(yl, yh + 1):
                    walked += int(starts[first + yy * gx + xh + 1] - starts[first + yy * gx + xl])
        assert overlap_graph.window_tests(boxes, grid) == walked
        assert walked >= sum(len(row) for row in brute_force_rows(boxes, None, 0.0)) + len(boxes)  # pairs, and itself


def test_the_sampled_estimate_counts_the_sampled_boxes_window_tests():
    """The dispatcher's density estimate (grid_layout's samples): exactly what the sampled
    boxes' windows test, every box sampled where n is small, scaled to all n boxes."""
    for scenario, canvas in (("clustered", "density"), ("uniform", "fixed"), ("crowd", "fixed")):
        boxes = datasets.generate(scenario, 900, seed=2, canvas=canvas).boxes
        boxes = torch.cat([boxes, torch.tensor([[0.0, 0.0, 3000.0, 3000.0]])])  # one box over everything
        n, grid = boxes.shape[0], overlap_graph.device_grid(boxes)
        assert overlap_graph.sample_count(n) == n  # few boxes: the estimate is exact
        assert overlap_graph.grid_layout(boxes, n)[1] == overlap_graph.window_tests(boxes, grid)
        for samples in (1, 64, 100):
            positions = overlap_graph.sample_positions(n, samples, "cpu")
            assert len(set(positions.tolist())) == samples and int(positions.max()) < n
            sampled = overlap_graph.grid_layout(boxes, samples)[1]
            assert sampled == overlap_graph.window_tests(boxes[positions], grid)
            assert overlap_graph.estimated_tests(n, samples, sampled) == sampled * n // samples
    assert overlap_graph.grid_layout(boxes, 0)[1] == 0 and overlap_graph.estimated_tests(n, 0, 0) == 0
    big = overlap_graph.sample_count(1 << 17)
    assert overlap_graph.MIN_SAMPLES < big and big * (1 << 17) <= overlap_graph.SAMPLED_PAIRS  # a bounded cost
    assert overlap_graph.sample_count(1 << 24) == overlap_graph.MIN_SAMPLES


def test_the_rows_kernel_takes_more_lanes_a_box_where_boxes_are_few():
    """row_lanes: the fewest lanes, a power of two from MIN_ROW_LANES to MAX_ROW_LANES, that
    give about ROW_LANE_TARGET threads, else one; never fewer lanes for fewer boxes."""
    target, least, most = overlap_graph.ROW_LANE_TARGET, overlap_graph.MIN_ROW_LANES, overlap_graph.MAX_ROW_LANES
    previous = most
    for n in (1, 1000, target // most, target // 4, target // 3, target // 2, target, 4 * target):
        lanes = overlap_graph.row_lanes(n)
        assert lanes == 1 or (least <= lanes <= most and lanes & (lanes - 1) == 0)
        assert lanes <= previous
        if lanes > 1:
            assert n * lanes >= target or lanes == most
            assert lanes == least or n * (lanes // 2) < target  # no more than needed
        else:
            assert n * (least // 2) >= target  # a group would have been smaller than MIN_ROW_LANES
        previous = lanes
    assert [overlap_graph.row_lanes(n) for n in (target // 8, target // 4, target // 2, target)] == [8, 4, 1, 1]


def test_a_grid_in_rank_order_lists_each_cells_boxes_by_rank():
    """device_grid with an order: position q of the cell order holds rank cell_rank[q], which
    is box order[rank], with its label; ranks ascend within a cell (the rows kernel stops a
    cell's scan at the first box ranked after its own); the rows found on that grid are the
    brute-force rows of the boxes in rank order."""
    case = datasets.generate("clustered", 800, seed=3, canvas="density", classes=3)
    order = torch.argsort(case.scores, descending=True, stable=True)
    labels = case.labels.to(torch.int64)
    grid = overlap_graph.device_grid(case.boxes, order, labels)
    source = order[grid.cell_rank.long()]
    assert torch.equal(grid.cell_boxes, case.boxes[source]) and torch.equal(grid.cell_labels, labels[source])
    assert sorted(grid.cell_rank.tolist()) == list(range(800))
    starts = grid.starts.tolist()
    for first, end in zip(starts[:-1], starts[1:]):
        ranks = grid.cell_rank[first:end]
        assert torch.equal(ranks, ranks.sort().values)
    ranked, ranked_labels = case.boxes[order], labels[order]
    rows = _cpu._NEIGHBOUR_ROWS[0]
    counts = rows(ranked.numpy(), ranked_labels.numpy(), overlap_graph.grid_tuple(grid), 0.5,
                  np.zeros(0, dtype=np.int64))[0]
    assert counts.tolist() == [len(row) for row in brute_force_rows(ranked, ranked_labels, 0.5)]


def test_the_dispatcher_takes_the_dense_path_below_its_size_or_where_the_grid_finds_too_many_tests():
    """overlap_graph.dispatch (what hard_graph's and matrix_graph's CUDA backends call), with
    stand-ins for the two paths: what it calls, and the test budget it gives the graph."""
    n_min, divisor = overlap_graph.GRAPH_MIN_N, overlap_graph.DENSE_TESTS_DIVISOR
    calls = []

    def on_graph(answer):
        def call(max_tests):
            calls.append(("graph", max_tests))
            return answer
        return call

    def dense():
        calls.append(("dense",))
        return "dense result"

    assert overlap_graph.dispatch(n_min - 1, None, "op", on_graph("graph result"), dense) == "dense result"
    assert calls == [("dense",)]
    calls.clear()
    assert overlap_graph.dispatch(n_min, None, "op", on_graph("graph result"), dense) == "graph result"
    assert calls == [("graph", n_min * n_min // divisor)]
    calls.clear()
    assert overlap_graph.dispatch(n_min, None, "op", on_graph(None), dense) == "dense result"  # gave way
    assert calls == [("graph", n_min * n_min // divisor), ("dense",)]
    calls.clear()
    assert overlap_graph.dispatch(10, "graph", "op", on_graph("graph result"), dense) == "graph result"
    assert calls == [("graph", None)]  # forced: no budget
    calls.clear()
    assert overlap_graph.dispatch(10 * n_min, "dense", "op", on_graph("graph result"), dense) == "dense result"
    assert calls == [("dense",)]
    with pytest.raises(ValueError, match="op: no path 'sparse'; the paths are dense, graph"):
        overlap_graph.dispatch(10, "sparse", "op", on_graph("graph result"), dense)
