"""matrix_recompute on CUDA: every path (mr.PATHS, forced with path=) against the CPU
backend and matrix_naive, determinism, the padded (graph-safe) output, CUDA graph capture
and replay, and N = 131072.

Marked ``gpu`` and skipped without a CUDA device; run with
``pytest -q -m gpu tests/test_matrix_recompute_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

import nmsbench
from nmsbench.api import check_padded_result, check_result
from nmsbench.boxes import BoxSet, NMSResult, PaddedNMSResult
from nmsbench.timing import capture_graph
from nmsbench import datasets
from nmsbench.variants.matrix_recompute import cuda as mr  # the CUDA host side
from test_gpu import assert_same_result, box_set

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

NAME = "matrix_recompute"
SIZES = [1, 31, 64, 100, 1000, 1024, 1025, 4096, 4097, 8192]
SCENARIOS = list(datasets.SYNTHETIC) + ["ties"]
DEFAULTS = dict(kernel="gaussian", sigma=0.5, score_threshold=0.05)


def paths(n: int, dtype: torch.dtype, labels: bool = True) -> list[str]:
    """Every path that can take n boxes on this GPU (``mr.PATHS``, each asked whether it
    refuses the input: the one block only up to its capacity, the cooperative launch
    where its grid fits)."""
    device = torch.device("cuda")
    return [name for name, path in mr.PATHS.items() if path.refuses(n, dtype, False, device, labels) is None]


def cuda_run(bs: BoxSet, path=None, padded=False, **params):
    params = {**DEFAULTS, **params}
    result = mr.matrix_recompute_cuda(bs.boxes, bs.scores, iou_threshold=0.5, labels=bs.labels, kernel=params["kernel"],
                                      sigma=params["sigma"], score_threshold=params["score_threshold"], padded=padded,
                                      path=path)
    if padded:
        check_padded_result(NAME, result, bs.boxes)
    else:
        check_result(NAME, result, bs.boxes)
    return result


def cpu_run(bs: BoxSet, name=NAME, **params):
    return nmsbench.run_nms(name, bs.boxes, bs.scores, 0.5, labels=bs.labels, **{**DEFAULTS, **params})


def assert_close_to_naive(ours: NMSResult, naive: NMSResult, threshold=0.05):
    a = dict(zip(ours.keep.tolist(), ours.scores.double().tolist()))
    b = dict(zip(naive.keep.tolist(), naive.scores.double().tolist()))
    for i in a.keys() ^ b.keys():
        assert abs(a.get(i, b.get(i)) - threshold) < 1e-5, f"box {i} kept by one only"
    common = sorted(a.keys() & b.keys())
    torch.testing.assert_close(torch.tensor([a[i] for i in common]), torch.tensor([b[i] for i in common]),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("classes", [1, 3])
def test_every_path_equals_cpu_backend_and_naive(scenario, classes, dtype):
    for n in SIZES:
        bs = box_set(scenario, n, classes).to("cpu", dtype)
        reference_input = bs if dtype != torch.float16 else bs.to("cpu", torch.float32)  # float16 computes in float32
        cpu = cpu_run(reference_input)
        naive = cpu_run(bs.to("cuda"), "matrix_naive") if dtype != torch.float16 else None
        on_gpu = bs.to("cuda")
        for path in paths(n, dtype, bs.labels is not None):
            got = cuda_run(on_gpu, path)
            assert got.scores.dtype == dtype
            assert_same_result(NAME, cpu, got, dtype)
            if naive is not None:
                assert_close_to_naive(got, naive)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=str)
def test_sort_path_ranks_by_merging_above_8192_and_equals_the_cpu_backend(dtype):
    """Above 8192 boxes the sort path ranks with rank_by_score's merge (sorted chunks and
    groups of 256 / 4096 boxes): score ties broken by index across chunk and group edges,
    labels, eager and padded, against the CPU backend."""
    for n in (8193, 20000):
        for scenario in ("ties", "clustered"):
            bs = box_set(scenario, n, 3).to("cpu", dtype)
            cpu = cpu_run(bs if dtype != torch.float16 else bs.to("cpu", torch.float32))
            got = cuda_run(bs.to("cuda"), "merge_sort_passes")
            assert_same_result(NAME, cpu, got, dtype)
            padded = cuda_run(bs.to("cuda"), "merge_sort_passes", padded=True).trimmed()
            assert torch.equal(padded.keep, got.keep) and torch.equal(padded.scores, got.scores)


@pytest.mark.parametrize("params", [
    dict(kernel="linear"), dict(sigma=2.0), dict(sigma=0.1, score_threshold=0.3),
    dict(kernel="linear", score_threshold=0.0), dict(kernel="linear", score_threshold=-1.0),
])
def test_runtime_parameters_and_int32_labels(params):
    for n in (33, 300, 1000, 4097, 9000):
        for classes in (1, 3):
            bs = box_set("clustered", n, classes)
            cpu = cpu_run(bs, **params)
            for labels in ((None,) if bs.labels is None else (bs.labels, bs.labels.to(torch.int32))):
                on_gpu = BoxSet(bs.boxes, bs.scores, labels).to("cuda")
                for path in paths(n, torch.float32):
                    got = cuda_run(on_gpu, path, **params)
                    threshold = params.get("score_threshold", 0.05)
                    a = dict(zip(cpu.keep.tolist(), cpu.scores.tolist()))
                    b = dict(zip(got.keep.tolist(), got.scores.tolist()))
                    assert all(abs(a.get(i, b.get(i)) - threshold) < 1e-5 for i in a.keys() ^ b.keys()), path
                    assert max((abs(a[i] - b[i]) for i in a.keys() & b.keys()), default=0.0) < 1e-6, path
                    if a.keys() == b.keys():
                        assert got.keep.tolist() == cpu.keep.tolist(), path


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_deterministic_over_20_repeats(dtype):
    for n, scenario in ((100, "ties"), (1000, "clustered"), (4096, "crowd"), (4097, "clustered"), (8192, "ties"),
                        (9000, "crowd")):
        bs = box_set(scenario, n, 2).to("cuda", dtype)
        for path in paths(n, dtype):
            first = cuda_run(bs, path)
            for _ in range(20):
                again = cuda_run(bs, path)
                assert torch.equal(again.keep, first.keep) and torch.equal(again.scores, first.scores), (n, path)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=str)
def test_padded_output_equals_the_trimmed_eager_output(dtype):
    for n in (1, 31, 100, 1000, 1025, 4097, 9000):
        for classes in (1, 3):
            for params in ({}, dict(score_threshold=0.5), dict(score_threshold=-1.0), dict(score_threshold=2.0)):
                bs = box_set("clustered", n, classes).to("cuda", dtype)
                for path in paths(n, dtype):
                    eager = cuda_run(bs, path, **params)
                    padded = cuda_run(bs, path, padded=True, **params)
                    count = int(padded.count)
                    assert count == eager.keep.shape[0], (n, path, params)
                    assert torch.equal(padded.keep[:count], eager.keep), (n, path)
                    assert torch.equal(padded.scores[:count], eager.scores), (n, path)
                    assert bool((padded.keep[count:] == -1).all()) and bool((padded.scores[count:] == 0).all())
    # through the public API too
    bs = box_set("crowd", 500, 2).to("cuda")
    padded = nmsbench.run_nms(NAME, bs.boxes, bs.scores, 0.5, labels=bs.labels, padded=True)
    assert isinstance(padded, PaddedNMSResult)
    eager = nmsbench.run_nms(NAME, bs.boxes, bs.scores, 0.5, labels=bs.labels)
    trimmed = padded.trimmed()
    assert torch.equal(trimmed.keep, eager.keep) and torch.equal(trimmed.scores, eager.scores)


def test_empty_padded():
    boxes = torch.zeros(0, 4, device="cuda")
    padded = nmsbench.run_nms(NAME, boxes, torch.zeros(0, device="cuda"), 0.5, padded=True)
    assert padded.keep.shape == (0,) and int(padded.count) == 0


@pytest.mark.parametrize("n", [100, 1000, 4097, 9000])  # single block, counting, counting, sort
@pytest.mark.parametrize("classes", [1, 3])
def test_cuda_graph_capture_and_replay(n, classes):
    """Captured after a warm-up on a side stream (PyTorch's recipe); replaying gives the
    eager padded output, also after new boxes are copied into the captured inputs."""
    fn = nmsbench.implementations()[NAME].backend("cuda").fn
    first, second = box_set("clustered", n, classes).to("cuda"), box_set("crowd", n, classes).to("cuda")
    boxes, scores = first.boxes.clone(), first.scores.clone()
    labels = None if first.labels is None else first.labels.clone()

    def call():
        return fn(boxes, scores, iou_threshold=0.5, labels=labels, padded=True, **DEFAULTS)

    graph, captured = capture_graph(call)
    for data in (first, second, first):
        boxes.copy_(data.boxes)
        scores.copy_(data.scores)
        if labels is not None:
            labels.copy_(data.labels)
        graph.replay()
        torch.cuda.synchronize()
        expected = fn(data.boxes, data.scores, iou_threshold=0.5, labels=data.labels, padded=True, **DEFAULTS)
        assert torch.equal(captured.count, expected.count)
        assert torch.equal(captured.keep, expected.keep) and torch.equal(captured.scores, expected.scores)


def test_launches_on_torchs_current_stream_every_path():
    for n, path in ((4097, "counting_passes"), (4097, "merge_sort_passes"), (1000, "cooperative"), (4096, "cooperative")):
        bs = box_set("clustered", n, 3).to("cuda")
        expected = cuda_run(bs, path)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            got = [cuda_run(bs, path) for _ in range(2)]  # the grid barrier's counters are per stream
        torch.cuda.current_stream().wait_stream(stream)
        assert all(torch.equal(g.keep, expected.keep) and torch.equal(g.scores, expected.scores) for g in got), path


def test_eager_calls_take_the_cooperative_path_between_the_single_block_and_its_limit():
    """The path choice on this GPU: one cooperative launch for eager calls from the first
    size past the single block up to COOPERATIVE_MAX_N; padded (graph) calls never take it."""
    device = torch.device("cuda")
    first = min(mr.ONE_BLOCK_MAX_N, mr.one_block_capacity(torch.float32)) + 1
    for n in (first, 1000, mr.COOPERATIVE_MAX_N):
        assert mr.choose_path(n, torch.float32, False, device) == "cooperative"
        assert mr.choose_path(n, torch.float32, True, device) == "counting_passes"
    assert mr.choose_path(mr.COOPERATIVE_MAX_N + 1, torch.float32, False, device) != "cooperative"
    # its shared memory (every ranked box in every block) fits an H200 to 8192 float32 boxes
    # without labels, 4096 with labels or in float64 (the tests force it wherever it fits)
    for dtype in (torch.float32, torch.float16):
        assert mr.cooperative_grid(mr.COOPERATIVE_MAX_N, dtype, device) > 0
        assert mr.cooperative_grid(4096, dtype, device, labels=True) > 0
    assert mr.cooperative_grid(4096, torch.float64, device) > 0
    assert mr.choose_path(mr.COOPERATIVE_MAX_N, torch.float32, False, device, labels=True) == "counting_passes"


@pytest.mark.parametrize("n, classes", [(1500, 1), (3000, 3), (4096, 1)])
@pytest.mark.parametrize("scenario", ["clustered", "uniform", "ties"])
def test_cooperative_marks_kept_for_phase_3_or_not_give_the_same_output(n, classes, scenario):
    """Phase 3 reads phase 2's marks back from shared memory where the plan gives every
    warp its slots, and tests the pairs again past the slots it has: all the slots, one,
    or none give the same keep and scores, bit for bit, and those are the CPU backend's."""
    device = torch.device("cuda")
    bs = box_set(scenario, n, classes).to("cuda")
    labels = bs.labels is not None
    grid = mr.cooperative_grid(n, torch.float32, device, labels)
    full, _ = mr.cooperative_marks(n, torch.float32, device, labels, grid)
    assert full == mr.cooperative_mark_slots(n, grid, mr.cooperative_threads(n)) > 0  # they fit on this GPU
    plan = mr._OneLaunch("cooperative", n, torch.float32, labels, device, grid)
    results = []
    for slots in (full, 1, 0):
        plan.mark_slots = slots  # fewer than the shared memory holds: the kernel tests the rest again
        results.append(plan.run(bs.boxes, bs.scores, bs.labels, False, DEFAULTS["sigma"], DEFAULTS["score_threshold"],
                                False))
    for got in results[1:]:
        assert torch.equal(got.keep, results[0].keep) and torch.equal(got.scores, results[0].scores)
    assert_same_result(NAME, cpu_run(bs.to("cpu")), results[0])


def test_n_131072_runs_and_agrees_with_the_cpu_backend():
    """O(N) memory: the naive N x N matrix would be 68 GB; ours needs a few MB."""
    n = 131072
    bs = datasets.generate("uniform", n, seed=0)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    gpu = nmsbench.run_nms(NAME, bs.boxes.cuda(), bs.scores.cuda(), 0.5)
    assert torch.cuda.max_memory_allocated() - before < 64 * n * 8  # O(N), nothing N x N
    cpu = nmsbench.run_nms(NAME, bs.boxes, bs.scores, 0.5)
    assert_same_result(NAME, cpu, gpu)
