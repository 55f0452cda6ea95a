"""GPU tests of the post-processing pipelines: every CUDA path against the numpy reference.

Marked ``gpu`` and skipped without a CUDA device (CI has none); run them on a GPU
machine with ``pytest -m gpu``.
"""

from __future__ import annotations

import pytest
import torch

from nmsbench.datasets import real
from nmsbench.datasets.synthetic_raw import synthetic_raw
from nmsbench.pipeline import CandidateOverflow, PipelineConfig, compare_detections, pipelines, run_pipeline
from nmsbench.pipeline_bench import PipelineGrid, run_pipeline_bench

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA_PIPELINES = sorted(name for name, p in pipelines().items() if "cuda" in p.devices)


@pytest.fixture(scope="module")
def inputs():
    recorded, _, size = real.real_raw(8)
    return {"real": (recorded, size), "synthetic": (synthetic_raw(8, seed=1), 640)}


@pytest.mark.parametrize("name", CUDA_PIPELINES)
@pytest.mark.parametrize("source", ["real", "synthetic"])
@pytest.mark.parametrize("conf", [0.25, 0.001])
def test_cuda_pipeline_agrees_with_the_numpy_reference(inputs, name, source, conf):
    raw, size = inputs[source]
    config = PipelineConfig(conf, 0.45, 300, 4096, (size, size))
    reference = run_pipeline("numpy", raw, config)
    detections = run_pipeline(name, torch.from_numpy(raw).cuda(), config, device="cuda")
    if name != "cupy_seed_kernels":  # which ends, by design, with one copy of its result to the host
        assert all(d.rows.device.type == "cuda" for d in detections)
    agreement = compare_detections(detections, reference)
    assert agreement["mismatched"] == 0  # the same decode, bit for bit
    if pipelines()[name].nms_family == "hard" and name != "torch_batched_nms":
        assert agreement["jaccard"] == 1.0
    elif name == "torch_batched_nms":
        # batched_nms offsets boxes by label x (max coordinate + 1) below 100,000 elements on CUDA,
        # which rounds coordinates: a detection whose IoU sits on the threshold may flip
        assert agreement["jaccard"] >= 0.99
    # all-pairs pipelines (the seed's rule) may suppress more: their difference is counted, not asserted


def test_cuda_overflow_is_reported(inputs):
    raw, size = inputs["synthetic"]
    with pytest.raises(CandidateOverflow, match="nothing was dropped"):
        run_pipeline("torch_batched_nms", torch.from_numpy(raw).cuda(), PipelineConfig(0.001, max_candidates=100),
                     device="cuda")


def test_cuda_pipeline_benchmark_rows():
    rows = []
    grid = PipelineGrid(pipelines=["numpy", "torch_batched_nms"], devices=["cpu", "cuda"], sources=["synthetic"],
                        batches=[1, 8], confs=[0.25], min_run_time=0.05)
    counts = run_pipeline_bench(grid, rows.append)
    assert counts["error"] == 0 and len(rows) == grid.count()
    cuda = [r for r in rows if r["device"] == "cuda" and r["status"] == "ok"]
    assert {r["timer"] for r in cuda} == {"wall", "device"} and all(r["peak_mem_bytes"] != "" for r in cuda)
    assert all(r["jaccard"] >= 0.99 for r in cuda)


@pytest.mark.parametrize("source", ["real", "synthetic"])
@pytest.mark.parametrize("conf", [0.25, 0.001])
def test_seed_kernels_equal_the_torch_front_end_with_allpairs(inputs, source, conf):
    """Same decode, same all-pairs rule (rank by score, then raw row): the same detections,
    although the seed's atomics put candidates in a different order every run."""
    raw, size = inputs[source]
    config = PipelineConfig(conf, 0.45, 300, 4096, (size, size))
    seed = run_pipeline("cupy_seed_kernels", torch.from_numpy(raw).cuda(), config, device="cuda")
    torch_allpairs = run_pipeline("torch+allpairs", torch.from_numpy(raw).cuda(), config, device="cuda")
    agreement = compare_detections(seed, torch_allpairs)
    assert agreement["jaccard"] == 1.0 and agreement["mismatched"] == 0
    for a, b in zip(seed, torch_allpairs):
        assert a.rows.tolist() == b.numpy().rows.tolist()  # the same order too
    for _ in range(20):
        again = run_pipeline("cupy_seed_kernels", torch.from_numpy(raw).cuda(), config, device="cuda")
        assert all(x.rows.tolist() == y.rows.tolist() for x, y in zip(again, seed))


def test_seed_kernels_report_overflow(inputs):
    raw, size = inputs["synthetic"]
    with pytest.raises(CandidateOverflow, match="nothing was dropped"):
        run_pipeline("cupy_seed_kernels", torch.from_numpy(raw).cuda(), PipelineConfig(0.001, max_candidates=100),
                     device="cuda")


@pytest.mark.parametrize("name", CUDA_PIPELINES)
def test_cuda_stages_can_be_timed_alone_and_repeated(inputs, name):
    """The H200 benchmark once timed cupy_seed_kernels' nms stage with survivor counts that
    grew on every call; each stage must now repeat exactly."""
    from test_pipeline import assert_stages_repeat

    assert_stages_repeat(name, inputs["real"][0], "cuda")
