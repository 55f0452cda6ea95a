"""The fused input check of ``nmsbench.run_nms`` on the GPU, for every CUDA backend: bad
rows at the first, a middle and the last index raise the reference ``ValueError`` (labels
and padded calls included), good input gives what the backend alone gives, with no more
host synchronizations than the backend alone, and a padded call is capturable in a CUDA
graph with its verdict in the result."""

from __future__ import annotations

import math

import pytest
import torch

import nmsbench
from nmsbench.inputs import validate_nms_inputs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

IMPLS = nmsbench.implementations()
CUDA_IMPLS = sorted(name for name, impl in IMPLS.items() if "cuda" in impl.backends)
GRAPH_SAFE = sorted(name for name in CUDA_IMPLS if IMPLS[name].backends["cuda"].graph_safe)
HOST_SYNC = sorted(name for name in CUDA_IMPLS if IMPLS[name].backends["cuda"].host_sync)
SIZES = (100, 500, 3000)  # one block of the check and several; the backends that check the values in their
# own first launch: one_block, cooperative and counting-rank paths (every path: test_every_path_checks_the_values)
# soft_torch, the plain per-pick loop, waits for the GPU at every pick (minutes a test beyond this N)
LOOP_MAX_N = {"soft_torch": 1000}


def sizes_for(name: str, sizes) -> list[int]:
    return [n for n in sizes if n <= LOOP_MAX_N.get(name, n)]


def boxes_for(n: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 400
    boxes = torch.cat([xy, xy + 5 + torch.rand(n, 2, generator=g) * 40], 1)
    scores = torch.rand(n, generator=g)
    labels = torch.randint(0, 3, (n,), generator=g)
    return boxes.to(dtype).cuda(), scores.to(dtype).cuda(), labels.cuda()


FAULTS = {
    "nan-box": lambda b, s, i: b.__setitem__((i, 1), math.nan),
    "inf-score": lambda b, s, i: s.__setitem__(i, math.inf),
    "x-reversed": lambda b, s, i: b.__setitem__((i, 2), b[i, 0] - 1),
    "area-overflow": lambda b, s, i: b.__setitem__(i, torch.tensor([-3e38, 0, 3e38, 3e38], dtype=b.dtype, device=b.device)),
}


def _runs(name: str, dtype=torch.float32) -> bool:
    backend = IMPLS[name].backends["cuda"]
    return backend.availability()[0] and dtype in backend.dtypes


@pytest.mark.parametrize("name", CUDA_IMPLS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("with_labels", [False, True], ids=["no-labels", "labels"])
def test_bad_row_anywhere_raises_the_reference_error(name, n, with_labels):
    if not _runs(name):
        pytest.skip(f"{name} does not run here")
    if not sizes_for(name, [n]):
        pytest.skip(f"{name} loops per pick: N = {n} takes minutes (the check is run_nms's, tested at the smaller N)")
    for fault, corrupt in FAULTS.items():
        for i in (0, n // 2, n - 1):
            boxes, scores, labels = boxes_for(n)
            corrupt(boxes, scores, i)
            with pytest.raises(ValueError) as caught:
                validate_nms_inputs(boxes, scores)
            with pytest.raises(ValueError) as raised:
                nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5, labels=labels if with_labels else None)
            assert str(raised.value) == str(caught.value), (fault, i)
            assert f" {i}" in str(raised.value), (fault, i)
    good = boxes_for(n, seed=1)
    direct = IMPLS[name].backends["cuda"].fn(good[0], good[1], iou_threshold=0.5, labels=None, **_defaults(name))
    assert torch.equal(nmsbench.run_nms(name, good[0], good[1], iou_threshold=0.5).keep, direct.keep)  # nothing left behind


def _defaults(name):
    return IMPLS[name].resolve_params({})


CHECKS_VALUES = sorted(name for name in CUDA_IMPLS if IMPLS[name].backends["cuda"].checks_values)


def _forced_paths():
    """(implementation, path, N the path takes, merge rank or not) for every path of the
    backends with paths; the others once at a counting and once at a merging rank's N."""
    from nmsbench.variants.hard_fused import cuda as hf
    from nmsbench.variants.matrix_recompute import cuda as mr

    cases = [("hard_fused", "one_block", 60), ("hard_fused", "cooperative", 700),
             ("hard_fused", "mask_then_staged_resolve", 700), ("hard_fused", "streamed", 3000),
             ("hard_fused", "mask_then_block_resolve", 3000), ("hard_fused", "mask_then_block_resolve", 9000),
             ("matrix_recompute", "one_block", 60), ("matrix_recompute", "cooperative", 700),
             ("matrix_recompute", "counting_passes", 700), ("matrix_recompute", "merge_sort_passes", 9000)]
    assert {path for name, path, _ in cases if name == "hard_fused"} == set(hf.PATHS)
    assert {path for name, path, _ in cases if name == "matrix_recompute"} == set(mr.PATHS)
    others = [(name, None, n) for name in CHECKS_VALUES if name not in ("hard_fused", "matrix_recompute")
              for n in (700, 9000) if name != "bitmask_two_phase" or n <= 8192]
    return cases + others


@pytest.mark.parametrize("name, path, n", _forced_paths())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=["f32", "f64", "f16"])
def test_every_path_checks_the_values_in_its_own_launch(name, path, n, dtype):
    """``check_values=True`` on every path (forced): a bad row first, in the middle or
    last raises the reference error; good input gives what the call without the check
    gives (labels included), and leaves no stale verdict behind."""
    backend = IMPLS[name].backends["cuda"]
    if not _runs(name, dtype):
        pytest.skip(f"{name} does not run {dtype} here")
    params = _defaults(name) | ({} if path is None else {"path": path})
    for fault in ("nan-box", "inf-score", "x-reversed") + (("area-overflow",) if dtype == torch.float32 else ()):
        for i in (0, n // 2, n - 1):
            boxes, scores, labels = boxes_for(n, dtype)
            FAULTS[fault](boxes, scores, i)
            with pytest.raises(ValueError) as caught:
                validate_nms_inputs(boxes, scores)
            with pytest.raises(ValueError) as raised:
                backend.fn(boxes, scores, iou_threshold=0.5, labels=labels, check_values=True, **params)
            assert str(raised.value) == str(caught.value), (fault, i)
    for labels in (None, boxes_for(n)[2]):
        boxes, scores, _ = boxes_for(n, dtype, seed=2)
        plain = backend.fn(boxes, scores, iou_threshold=0.5, labels=labels, **params)
        checked = backend.fn(boxes, scores, iou_threshold=0.5, labels=labels, check_values=True, **params)
        assert torch.equal(checked.keep, plain.keep)
        if plain.scores is not None:
            assert torch.equal(checked.scores, plain.scores)


@pytest.mark.parametrize("name", GRAPH_SAFE)
@pytest.mark.parametrize("n", SIZES)
def test_padded_call_reports_bad_rows_through_the_result(name, n):
    for corrupt in FAULTS.values():
        for i in (0, n // 2, n - 1):
            boxes, scores, labels = boxes_for(n)
            corrupt(boxes, scores, i)
            result = nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5, labels=labels, padded=True)  # does not raise
            with pytest.raises(ValueError, match=rf"invalid input row {i}:"):
                result.check()
            with pytest.raises(ValueError, match=rf"invalid input row {i}:"):
                result.trimmed()
    boxes, scores, labels = boxes_for(n)
    result = nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5, labels=labels, padded=True)
    assert int(result.input_check) == 0
    eager = nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5, labels=labels)
    assert torch.equal(result.trimmed().keep, eager.keep)


@pytest.mark.parametrize("name", CUDA_IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=["f32", "f64", "f16"])
def test_good_input_gives_what_the_backend_gives(name, dtype):
    if not _runs(name, dtype):
        pytest.skip(f"{name} does not run {dtype} here")
    backend = IMPLS[name].backends["cuda"]
    for n in sizes_for(name, (1, 64, 1000, 5000)):
        for labels in (None, boxes_for(n)[2]):
            boxes, scores, _ = boxes_for(n, dtype, seed=n)
            expected = backend.fn(boxes, scores, iou_threshold=0.5, labels=labels, **_defaults(name))
            for _ in range(3):  # repeated calls reuse the verdict's memory and scratch
                got = nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5, labels=labels)
                assert torch.equal(got.keep, expected.keep)
                assert (got.scores is None) == (expected.scores is None)
                if got.scores is not None:
                    assert torch.equal(got.scores, expected.scores)


SYNC_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
              "cuCtxSynchronize", "cuEventSynchronize", "cudaMemcpy"}


def _synchronizations(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
    return sum(1 for event in prof.events() if event.name in SYNC_CALLS)


@pytest.mark.parametrize("name", HOST_SYNC)
def test_run_nms_synchronizes_as_often_as_the_backend_alone(name):
    if not _runs(name):
        pytest.skip(f"{name} does not run here")
    boxes, scores, _ = boxes_for(sizes_for(name, [2000, 1000])[0])
    backend, params = IMPLS[name].backends["cuda"], _defaults(name)
    alone = _synchronizations(lambda: backend.fn(boxes, scores, iou_threshold=0.5, labels=None, **params))
    public = _synchronizations(lambda: nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5))
    reference = _synchronizations(lambda: (validate_nms_inputs(boxes, scores),
                                           backend.fn(boxes, scores, iou_threshold=0.5, labels=None, **params)))
    assert reference > alone  # the count sees synchronizations at all: the torch checks add several
    assert public == alone


@pytest.mark.parametrize("name", GRAPH_SAFE)
def test_padded_run_nms_is_capturable_in_a_cuda_graph(name):
    from nmsbench.timing import capture_graph

    boxes, scores, labels = boxes_for(1500)
    graph, result = capture_graph(lambda: nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5, labels=labels, padded=True))
    graph.replay()
    eager = nmsbench.run_nms(name, boxes, scores, iou_threshold=0.5, labels=labels)
    assert torch.equal(result.trimmed().keep, eager.keep)
    boxes[700, 0] = math.nan  # the captured check reads the static input again on every replay
    graph.replay()
    with pytest.raises(ValueError, match=r"invalid input row 700:"):
        result.trimmed()
