"""GPU tests of the overlap graph (implementations/overlap_graph.py): its rows against the
CPU's grid rows, and greedy NMS on them against torchvision on the GPU and hard_graph on
the CPU, N = 1 ... 1048576, the five scenarios on both canvases, boxes much larger than
the cells, all boxes identical, labels, 20 identical repeats, two streams at once.

Marked ``gpu`` and skipped without a CUDA device (CI has none: tests/test_overlap_graph.py
checks the grid there).
"""

from __future__ import annotations

import pytest
import torch
import torchvision

import nmsbench
from nmsbench import datasets
from nmsbench.boxes import BoxSet
from test_overlap_graph import rows_on_device_grid

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SCENARIOS = list(datasets.SYNTHETIC)


def graph(boxes: BoxSet):
    from nmsbench.variants import overlap_graph

    return overlap_graph.greedy_on_graph(boxes.boxes, boxes.scores, 0.5, boxes.labels).result.keep


def torchvision_keep(boxes: BoxSet) -> torch.Tensor:
    if boxes.labels is None:
        return torchvision.ops.nms(boxes.boxes, boxes.scores, 0.5)
    return torchvision.ops.batched_nms(boxes.boxes, boxes.scores, boxes.labels, 0.5)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("canvas", ["fixed", "density"])
@pytest.mark.parametrize("n", [1, 2, 31, 1000, 4097, 65536])
@pytest.mark.parametrize("classes", [1, 3])
def test_greedy_on_the_graph_is_torchvision(scenario, canvas, n, classes):
    boxes = datasets.generate(scenario, n, seed=n, classes=classes, canvas=canvas).to("cuda")
    assert torch.equal(graph(boxes), torchvision_keep(boxes))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_other_dtypes_equal_the_cpu(dtype):
    boxes = datasets.generate("clustered", 3000, seed=4, classes=3, canvas="density").to("cuda", dtype)
    cpu = boxes.to("cpu", torch.float32 if dtype == torch.float16 else dtype)  # half boxes: float arithmetic
    expected = nmsbench.run_nms("hard_graph", cpu.boxes, cpu.scores, 0.5, labels=cpu.labels).keep
    assert torch.equal(graph(boxes).cpu(), expected)


def test_a_million_boxes_at_constant_density_equal_the_cpu_reference():
    for scenario in ("uniform", "clustered"):
        boxes = datasets.generate(scenario, 1 << 20, seed=0, canvas="density").to("cuda")
        cpu = boxes.to("cpu")
        expected = nmsbench.run_nms("hard_graph", cpu.boxes, cpu.scores, 0.5).keep
        assert torch.equal(graph(boxes).cpu(), expected), scenario
        assert torch.equal(nmsbench.run_nms("hard_graph", boxes.boxes, boxes.scores, 0.5).keep.cpu(), expected)


def test_big_boxes_identical_boxes_and_points():
    generator = torch.Generator().manual_seed(2)
    corner = torch.rand(5000, 2, generator=generator) * 20000
    small = torch.cat([corner, corner + 4 + torch.rand(5000, 2, generator=generator) * 30], 1)
    huge = torch.tensor([[0.0, 0.0, 20000.0, 20000.0], [100.0, 2000.0, 19900.0, 2400.0]])
    cases = [torch.cat([small, huge]), torch.tensor([[1.0, 2.0, 30.0, 40.0]]).repeat(3000, 1),
             torch.tensor([[5.0, 5.0, 5.0, 5.0]]).repeat(10, 1)]
    for case in cases:
        boxes = BoxSet(case, torch.rand(case.shape[0], generator=generator), None).to("cuda")
        assert torch.equal(graph(boxes), torchvision_keep(boxes))


def test_rows_equal_the_cpu_grid_rows_both_ways(monkeypatch):
    """graph_rows_kernel's rows (boxes in rank order, labels) are the CPU grid's, both ways,
    with one lane a box and groups of 2 to 16."""
    from nmsbench.variants import overlap_graph
    from nmsbench.cuda import on_torch_stream

    boxes = datasets.generate("clustered", 4000, seed=1, classes=2, canvas="density")
    cuda = boxes.to("cuda")
    grid = overlap_graph.device_grid(cuda.boxes, labels=cuda.labels.to(torch.int64))
    monkeypatch.setattr(overlap_graph, "ROW_LANE_TARGET", 1 << 40)
    for above in (0.0, 0.5):
        expected = rows_on_device_grid(boxes.boxes, boxes.labels, above)
        for lanes in (1, 2, 4, 8, 16):
            monkeypatch.setattr(overlap_graph, "MAX_ROW_LANES", lanes)
            monkeypatch.setattr(overlap_graph, "MIN_ROW_LANES", lanes)
            assert overlap_graph.row_lanes(len(expected)) == lanes
            for higher_only in (False, True):
                with on_torch_stream(cuda.boxes.device) as launch:
                    indptr, indices, _ = overlap_graph.graph_rows(launch, grid, len(expected), above, higher_only,
                                                                  cuda.boxes.device)
                indptr, indices = indptr.cpu().numpy(), indices.cpu().numpy()
                got = [set(indices[indptr[i]:indptr[i + 1]].tolist()) for i in range(len(expected))]
                want = [{j for j in row if j < i} if higher_only else row for i, row in enumerate(expected)]
                assert got == want, (above, lanes, higher_only)


def test_twenty_repeats_are_identical_and_two_streams_at_once_agree():
    boxes = datasets.generate("clustered", 50000, seed=3, canvas="density").to("cuda")
    first = graph(boxes)
    for _ in range(20):
        assert torch.equal(graph(boxes), first)
    other = datasets.generate("uniform", 50000, seed=4, canvas="density").to("cuda")
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    results = [None, None]
    for k, (stream, case) in enumerate(zip(streams, (boxes, other))):
        with torch.cuda.stream(stream):
            results[k] = graph(case)
    torch.cuda.synchronize()
    assert torch.equal(results[0], first)
    assert torch.equal(results[1], torchvision_keep(other))
    assert len(set(first.tolist())) == len(first)  # no index twice


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("kernel", ["gaussian", "linear"])
def test_matrix_on_the_graph_equals_matrix_graph_on_the_cpu(scenario, kernel):
    from nmsbench.variants import overlap_graph

    params = dict(kernel=kernel, sigma=0.5, score_threshold=0.05)
    for n, canvas, classes in ((1, "fixed", 1), (700, "fixed", 3), (20000, "density", 1)):
        boxes = datasets.generate(scenario, n, seed=n, classes=classes, canvas=canvas)
        cpu = nmsbench.run_nms("matrix_graph", boxes.boxes, boxes.scores, 0.5, labels=boxes.labels, **params)
        cuda = boxes.to("cuda")
        gpu = overlap_graph.matrix_on_graph(cuda.boxes, cuda.scores, cuda.labels, **params)
        if kernel == "linear":  # the linear ratios are the CPU's to the bit
            assert torch.equal(gpu.keep.cpu(), cpu.keep) and torch.equal(gpu.scores.cpu(), cpu.scores)
        else:  # CUDA's exp: final scores to rounding; a box kept by one side only sits on the threshold
            gpu_final = dict(zip(gpu.keep.tolist(), gpu.scores.double().tolist()))
            cpu_final = dict(zip(cpu.keep.tolist(), cpu.scores.double().tolist()))
            for i in gpu_final.keys() ^ cpu_final.keys():
                assert abs(gpu_final.get(i, cpu_final.get(i)) - 0.05) < 1e-6, (n, i)
            common = gpu_final.keys() & cpu_final.keys()
            assert all(abs(gpu_final[i] - cpu_final[i]) <= 1e-6 * abs(cpu_final[i]) for i in common)


@pytest.mark.parametrize("kernel", ["gaussian", "linear"])
@pytest.mark.parametrize("scenario", ["uniform", "clustered"])
def test_soft_rounds_on_the_graph_rows_equals_soft_nms(scenario, kernel):
    """soft_rounds' "graph_rounds" path (its rounds on the overlap graph's lists) picks what
    soft_nms picks on the CPU, in the same order, scores to rounding."""
    from nmsbench.variants import soft_rounds
    from test_gpu import assert_same_soft

    params = dict(iou_threshold=0.5, kernel=kernel, sigma=0.5, score_threshold=0.001)
    for n, canvas, classes in ((1, "fixed", 1), (700, "fixed", 3), (30000, "density", 1)):
        boxes = datasets.generate(scenario, n, seed=n, classes=classes, canvas=canvas)
        cpu = nmsbench.run_nms("soft_nms", boxes.boxes, boxes.scores, labels=boxes.labels, **params)
        cuda = boxes.to("cuda")
        gpu = soft_rounds.soft_rounds(cuda.boxes, cuda.scores, labels=cuda.labels, path="graph_rounds", **params)
        assert_same_soft("soft_rounds", cpu, gpu, torch.float32, kernel == "linear")


@pytest.mark.parametrize("scenario", ["uniform", "clustered", "crowd"])
@pytest.mark.parametrize("canvas", ["fixed", "density"])
def test_the_sampled_tests_kernel_counts_the_sampled_windows_tests(scenario, canvas):
    """sampled_tests_kernel's count equals window_tests (torch) of the sampled boxes, every
    box sampled and a sample of them."""
    from nmsbench.variants import overlap_graph

    boxes = datasets.generate(scenario, 5000, seed=6, canvas=canvas).boxes.to("cuda")
    boxes = torch.cat([boxes, torch.tensor([[0.0, 0.0, 1e5, 1e5]], device="cuda")])  # one box over everything
    grid = overlap_graph.device_grid(boxes)
    n = boxes.shape[0]
    for samples in (n, 300, 64):
        positions = overlap_graph.sample_positions(n, samples, "cuda")
        want = overlap_graph.window_tests(boxes[positions], grid)
        assert overlap_graph.grid_layout(boxes, samples)[1] == want, samples


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("path", [None, "graph", "dense"])
def test_hard_graph_on_cuda_takes_every_path_exactly(scenario, path):
    """hard_graph's CUDA dispatcher, each path forced and its own choice, against torchvision:
    below GRAPH_MIN_N, above it on both canvases (the fixed canvas's dense cases give way)."""
    from nmsbench.variants.overlap_graph import GRAPH_MIN_N

    backend = nmsbench.implementations()["hard_graph"].backend("cuda").fn  # path: the backend's, not run_nms's
    for n, canvas, classes in ((1, "fixed", 1), (300, "fixed", 2), (GRAPH_MIN_N, "density", 1),
                               (2 * GRAPH_MIN_N, "fixed", 3)):
        boxes = datasets.generate(scenario, n, seed=n, classes=classes, canvas=canvas).to("cuda")
        keep = backend(boxes.boxes, boxes.scores, iou_threshold=0.5, labels=boxes.labels, path=path).keep
        assert torch.equal(keep, torchvision_keep(boxes)), (n, canvas)


def test_the_dispatcher_gives_way_to_the_dense_path_where_everything_overlaps():
    from nmsbench.variants import overlap_graph

    n = overlap_graph.GRAPH_MIN_N
    boxes = datasets.generate("crowd", n, seed=1, canvas="fixed").to("cuda")
    limit = n * n // overlap_graph.DENSE_TESTS_DIVISOR  # what the dispatcher allows
    answer = overlap_graph.greedy_on_graph(boxes.boxes, boxes.scores, 0.5, max_tests=limit)
    assert (answer.result is None) == (answer.tests > limit)
    same = torch.tensor([[1.0, 2.0, 30.0, 40.0]], device="cuda").repeat(n, 1)
    answer = overlap_graph.greedy_on_graph(same, torch.rand(n, device="cuda"), 0.5, max_tests=limit)
    assert answer.result is None and answer.tests == n * n


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_the_grid_kernels_equal_the_torch_layout_cells_and_cell_order(scenario, dtype):
    """_cuda_layout (four kernels, order-preserving keys, the table computed on the GPU)
    gives _torch_layout's layout (CI's form, the host's formulas) to the bit, and the same
    sample estimate; the cells and the cell order of the kernels are torch's, boxes in
    rank order with labels."""
    from nmsbench.variants import overlap_graph

    case = datasets.generate(scenario, 20000, seed=7, canvas="density", classes=3).to("cuda", dtype)
    boxes = case.boxes.clone()
    boxes[:5] -= 1e4  # negative corners too
    layout, sampled = overlap_graph._cuda_layout(boxes, 500)
    want, want_sampled = overlap_graph._torch_layout(boxes, 500)
    assert layout[:-1] == want[:-1] and torch.equal(layout.table, want.table) and sampled == want_sampled
    order = torch.argsort(case.scores, descending=True, stable=True)
    cells = overlap_graph._cuda_cells(boxes, order, layout)
    assert torch.equal(cells, overlap_graph._torch_cells(boxes, order, layout))
    by_cell = torch.sort(cells, stable=True).indices
    labels = case.labels.to(torch.int64)
    for got, expected in zip(overlap_graph._cuda_cell_order(boxes, order, labels, by_cell),
                             overlap_graph._torch_cell_order(boxes, order, labels, by_cell)):
        assert torch.equal(got, expected)


@pytest.mark.parametrize("scenario", ["uniform", "clustered", "degenerate"])
@pytest.mark.parametrize("path", [None, "graph", "dense"])
def test_matrix_graph_on_cuda_takes_every_path_like_the_cpu(scenario, path):
    from nmsbench.variants.overlap_graph import GRAPH_MIN_N

    params = dict(kernel="linear", sigma=0.5, score_threshold=0.05)
    backend = nmsbench.implementations()["matrix_graph"].backend("cuda").fn
    for n, canvas, classes in ((1, "fixed", 1), (500, "fixed", 2), (GRAPH_MIN_N, "density", 1)):
        boxes = datasets.generate(scenario, n, seed=1, classes=classes, canvas=canvas)
        cpu = nmsbench.run_nms("matrix_graph", boxes.boxes, boxes.scores, 0.5, labels=boxes.labels, **params)
        cuda = boxes.to("cuda")
        gpu = backend(cuda.boxes, cuda.scores, iou_threshold=0.5, labels=cuda.labels, **params, path=path)
        if path == "graph":  # the graph's linear ratios are the CPU's to the bit
            assert torch.equal(gpu.keep.cpu(), cpu.keep) and torch.equal(gpu.scores.cpu(), cpu.scores), (n, canvas)
        else:  # the dense passes (matrix_recompute) round otherwise: the same boxes, scores to rounding
            assert set(gpu.keep.tolist()) == set(cpu.keep.tolist()), (n, canvas)
            final = dict(zip(cpu.keep.tolist(), cpu.scores.tolist()))
            want = torch.tensor([final[i] for i in gpu.keep.tolist()])
            assert torch.allclose(gpu.scores.cpu(), want, rtol=1e-5, atol=1e-6), (n, canvas)


def test_a_million_boxes_of_matrix_nms_on_the_graph_stay_under_a_gigabyte():
    boxes = datasets.generate("clustered", 1 << 20, seed=0, canvas="density").to("cuda")
    params = dict(kernel="gaussian", sigma=0.5, score_threshold=0.05)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = nmsbench.run_nms("matrix_graph", boxes.boxes, boxes.scores, 0.5, **params)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - before < 2**30
    assert 0 < len(result.keep) < boxes.boxes.shape[0]


def test_rows_that_outgrow_their_slots_take_the_two_pass_rows():
    """Identical boxes (every pair above the threshold): each row is longer than its slots,
    so the overflow word sends the call to graph_rows; the answer is still torchvision's."""
    from nmsbench.variants import overlap_graph

    same = torch.tensor([[1.0, 2.0, 30.0, 40.0]], device="cuda").repeat(200, 1)
    near = torch.cat([same, same[:50] + 0.5])
    for boxes in (same, near):
        scores = torch.rand(len(boxes), device="cuda")
        answer = overlap_graph.greedy_on_graph(boxes, scores, 0.5, slots=4)
        assert answer.two_pass
        assert torch.equal(answer.result.keep, torchvision.ops.nms(boxes, scores, 0.5))
        assert answer.pairs == sum(range(len(boxes)))  # every higher-ranked box, on the two-pass rows
