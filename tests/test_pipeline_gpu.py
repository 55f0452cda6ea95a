"""GPU tests of the post-processing pipelines: every CUDA path against the numpy reference.

Marked ``gpu`` and skipped without a CUDA device (CI has none); run them on a GPU
machine with ``pytest -m gpu``.
"""

from __future__ import annotations

import gc

import pytest
import torch

from nmsbench.datasets import real
from nmsbench.datasets.synthetic_raw import synthetic_raw
from nmsbench.pipeline import (CandidateOverflow, PipelineConfig, Rule, compare_detections, decode_torch, empty_buffer,
                               nms_torch, pipelines, run_pipeline)
from nmsbench.pipeline_bench import SOURCE_LAYOUTS, PipelineGrid, run_pipeline_bench

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA_PIPELINES = sorted(name for name, p in pipelines().items() if "cuda" in p.devices)
# class offsets added to the coordinates (ultralytics' max_wh, batched_nms' coordinate trick on CUDA below 20,000
# coordinates) round them: a detection whose IoU sits on the threshold may flip
OFFSETS = {"torch_batched_nms", "torchvision_batched_nms", "ultralytics_loop"}
ISSUE_CONTENDERS = ["numpy", "ultralytics_loop", "torchvision_batched_nms", "cupy_seed_kernels", "onnxruntime_nms",
                    "batched_op", "batched_op_graph"]


@pytest.fixture(scope="module")
def inputs():
    recorded, _, size = real.real_raw(8)
    return {"real": (recorded, size), "synthetic": (synthetic_raw(8, seed=1), 640),
            "synthetic_yolov8": (synthetic_raw(8, seed=1, layout="yolov8"), 640)}


_references: dict = {}


def references(source: str, conf: float, inputs) -> list:
    """The numpy reference of a source at a threshold, made once (at conf 0.001 it takes seconds)."""
    if (source, conf) not in _references:
        raw, size = inputs[source]
        _references[source, conf] = run_pipeline("numpy", raw, PipelineConfig(conf, 0.45, 300, 4096, (size, size),
                                                                              SOURCE_LAYOUTS[source]))
    return _references[source, conf]


@pytest.mark.parametrize("name", CUDA_PIPELINES)
@pytest.mark.parametrize("source", ["real", "synthetic", "synthetic_yolov8"])
@pytest.mark.parametrize("conf", [0.25, 0.001])
def test_cuda_pipeline_agrees_with_the_numpy_reference(inputs, name, source, conf):
    raw, size = inputs[source]
    config = PipelineConfig(conf, 0.45, 300, 4096, (size, size), SOURCE_LAYOUTS[source])
    if not pipelines()[name].reads(config.layout)[0]:
        pytest.skip(pipelines()[name].reads(config.layout)[1])
    reference = references(source, conf, inputs)
    detections = run_pipeline(name, torch.from_numpy(raw).cuda(), config, device="cuda")
    if name != "cupy_seed_kernels":  # which ends, by design, with one copy of its result to the host
        assert all(d.rows.device.type == "cuda" for d in detections)
    agreement = compare_detections(detections, reference)
    if name != "cupy_seed_kernels":  # which clips its boxes (see test_seed_kernels_equal_...)
        assert agreement["mismatched"] == 0  # the same decode, bit for bit
    if pipelines()[name].nms_family == "hard" and name not in OFFSETS:
        assert agreement["jaccard"] == 1.0
    elif name in OFFSETS:
        assert agreement["jaccard"] >= 0.99
    # all-pairs pipelines (the seed's rule) may suppress more: their difference is counted, not asserted


@pytest.mark.parametrize("source", ["synthetic", "synthetic_yolov8"])
def test_graph_replays_equal_the_eager_op(inputs, source):
    """Also after the allocator has handed out memory again: the graph keeps its input alive
    (a graph whose captured input was freed read whatever took its place next)."""
    raw, size = inputs[source]
    config = PipelineConfig(0.25, 0.45, 300, layout=SOURCE_LAYOUTS[source])
    eager = pipelines()["batched_op"].build(raw, config, "cuda").detections()
    graph = pipelines()["batched_op_graph"].build(raw, config, "cuda")
    gc.collect()
    other = torch.from_numpy(synthetic_raw(raw.shape[0], seed=2, layout=SOURCE_LAYOUTS[source]))
    reused = [other.cuda() for _ in range(4)]  # the sizes of the graph's input: a freed input's block goes to these
    for _ in range(5):
        replayed = graph.finish(graph.run())
        agreement = compare_detections(replayed, eager)
        assert agreement["jaccard"] == 1.0 and agreement["mismatched"] == 0 and agreement["kept"] > 0
        for a, b in zip(replayed, eager):
            assert a.rows.tolist() == b.rows.tolist()
    del reused


def test_cuda_overflow_is_reported(inputs):
    raw, size = inputs["synthetic"]
    with pytest.raises(CandidateOverflow, match="nothing was dropped"):
        run_pipeline("torch_batched_nms", torch.from_numpy(raw).cuda(), PipelineConfig(0.001, max_candidates=100),
                     device="cuda")


def test_cuda_run_of_every_contender_writes_ok_rows_with_wall_and_device_timers():
    rows = []
    grid = PipelineGrid(pipelines=ISSUE_CONTENDERS, devices=["cuda"], batches=[1, 8], confs=[0.25], min_run_time=0.05,
                        rounds=2)
    counts = run_pipeline_bench(grid, rows.append)
    assert counts["error"] == 0 and len(rows) == grid.count()
    skipped = {(r["scenario"], r["impl"]) for r in rows if r["status"] == "skipped"}
    assert skipped == {(s, n) for s in grid.sources for n in ("numpy", "onnxruntime_nms")} | {
        ("synthetic_yolov8", "cupy_seed_kernels")}
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["timer"] for r in ok} == {"wall", "device"} and {r["impl"] for r in ok} == set(ISSUE_CONTENDERS) - {
        "numpy", "onnxruntime_nms"}
    assert all(r["jaccard"] == 1.0 and r["mismatched"] == 0 for r in ok if r["impl"].startswith("batched_op"))
    assert {r["stage"] for r in ok if r["impl"].startswith("batched_op")} == {"total"}


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
    """Same decode (the seed's: strictly above the threshold, boxes clipped, best class before
    the product), same all-pairs rule (rank by score, then raw row): the same detections,
    although the seed's atomics put candidates in a different order every run."""
    from nmsbench.registry import implementations

    raw, size = inputs[source]
    config = PipelineConfig(conf, 0.45, 300, 4096, (size, size))
    seed = run_pipeline("cupy_seed_kernels", torch.from_numpy(raw).cuda(), config, device="cuda")
    impl = implementations()["allpairs"]
    allpairs, params = impl.backend("cuda").fn, impl.resolve_params({})
    buffer = decode_torch(torch.from_numpy(raw).cuda(), conf, (size, size), empty_buffer(len(raw), 4096, "cuda"),
                          rule=Rule(strict=True, clip=True, best_of_products=False))
    torch_allpairs = nms_torch(buffer, lambda c: allpairs(c.boxes, c.scores, iou_threshold=0.45, labels=c.labels, **params).keep,
                               300)
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
