"""GPU tests of the padded, sync-free output and CUDA graph capture (graph_safe backends),
and of hard_fused at sizes beyond the common GPU tests. Marked ``gpu``."""

from __future__ import annotations

import pytest
import torch

import nmsbench
from nmsbench import datasets
from nmsbench.runner import Grid, run_sweep
from nmsbench.timing import capture_graph

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

IMPLS = nmsbench.implementations()
GRAPH_SAFE = sorted(name for name, impl in IMPLS.items() if "cuda" in impl.backends and impl.backends["cuda"].graph_safe)
SIZES = [1, 31, 256, 257, 1000, 1024, 1025, 4097, 8192]


def params_for(name):
    return {"score_threshold": 0.1} if IMPLS[name].family == "matrix" else {}


def call(name, data, padded, **params):
    return nmsbench.run_nms(name, data.boxes, data.scores, 0.5, labels=data.labels, padded=padded,
                            **params_for(name), **params)


def test_hard_fused_is_graph_safe():
    assert "hard_fused" in GRAPH_SAFE


@pytest.mark.parametrize("name", GRAPH_SAFE)
@pytest.mark.parametrize("n", [0] + SIZES)
@pytest.mark.parametrize("classes", [1, 3])
def test_padded_output_is_the_eager_output_padded(name, n, classes):
    data = datasets.generate("clustered", n, seed=n, classes=classes).to("cuda")
    eager = call(name, data, padded=False)  # validates the input (which synchronizes)
    backend = IMPLS[name].backend("cuda")
    params = IMPLS[name].resolve_params(params_for(name))
    backend.fn(data.boxes, data.scores, iou_threshold=0.5, labels=data.labels, padded=True, **params)  # compiled
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any synchronizing torch op inside the op raises
    try:
        padded = backend.fn(data.boxes, data.scores, iou_threshold=0.5, labels=data.labels, padded=True, **params)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    k = int(padded.count)
    assert padded.keep.shape == (n,) and padded.count.dim() == 0
    assert torch.equal(padded.keep[:k], eager.keep)
    assert bool((padded.keep[k:] == -1).all())
    if eager.scores is not None:
        assert torch.equal(padded.scores[:k], eager.scores)


@pytest.mark.parametrize("name", GRAPH_SAFE)
@pytest.mark.parametrize("n", [64, 256, 1000, 4097])
def test_graph_replay_equals_eager_also_after_new_inputs(name, n):
    """Capture once; replays give the eager output, also after new boxes are copied into
    the captured input tensors (how a detector's post-processing graph is used)."""
    first = datasets.generate("clustered", n, seed=1, classes=2).to("cuda")
    second = datasets.generate("uniform", n, seed=2, classes=2).to("cuda")
    static = datasets.generate("clustered", n, seed=1, classes=2).to("cuda")
    backend = IMPLS[name].backend("cuda")
    params = IMPLS[name].resolve_params(params_for(name))
    graph, padded = capture_graph(lambda: backend.fn(static.boxes, static.scores, iou_threshold=0.5,
                                                     labels=static.labels, padded=True, **params))
    for data in (first, second, first):
        static.boxes.copy_(data.boxes), static.scores.copy_(data.scores), static.labels.copy_(data.labels)
        graph.replay()
        eager = call(name, data, padded=False)
        got = padded.trimmed()
        assert torch.equal(got.keep, eager.keep)
        if eager.scores is not None:
            assert torch.equal(got.scores, eager.scores)


def test_sweep_graph_timer_rows():
    rows = []
    grid = Grid(impls=["hard_fused", "torchvision"], devices=["cuda"], dtypes=["float32"], scenarios=["clustered"],
                ns=[200, 2000], ious=[0.5], timers=["wall", "graph"], min_run_time=0.01)
    run_sweep(grid, rows.append)
    by = {(r["impl"], r["n"], r["timer"]): r for r in rows}
    for n in (200, 2000):
        assert by["hard_fused", n, "graph"]["status"] == "ok" and by["hard_fused", n, "graph"]["median_us"] > 0
        assert by["hard_fused", n, "wall"]["jaccard"] == 1.0
        assert by["torchvision", n, "graph"]["status"] == "skipped"
        assert "not graph-safe" in by["torchvision", n, "graph"]["error"]
        assert by["torchvision", n, "wall"]["status"] == "ok"


@pytest.mark.parametrize("scenario", ["clustered", "uniform", "ties"])
@pytest.mark.parametrize("n", [16384, 32768, 65536])
def test_hard_fused_equals_torchvision_at_large_n(scenario, n):
    if scenario == "ties":
        base = datasets.generate("clustered", n, seed=n, classes=4)
        data = nmsbench.BoxSet(base.boxes, (base.scores * 10).round() / 10, base.labels).to("cuda")
    else:
        data = datasets.generate(scenario, n, seed=n, classes=4).to("cuda")
    for labels in (None, data.labels):
        expected = nmsbench.run_nms("torchvision", data.boxes, data.scores, 0.5, labels=labels).keep
        got = nmsbench.run_nms("hard_fused", data.boxes, data.scores, 0.5, labels=labels).keep
        assert torch.equal(got, expected)
        again = nmsbench.run_nms("hard_fused", data.boxes, data.scores, 0.5, labels=labels).keep
        assert torch.equal(again, got)


def test_a_captured_graph_keeps_the_inputs_its_call_holds():
    """capture_graph keeps the captured call, so the tensors it holds live as long as the
    graph: the graph's replays read their memory, which must not go to another tensor."""
    import gc
    import weakref

    data = datasets.generate("clustered", 256, seed=3, classes=2).to("cuda")
    expected = call("hard_fused", data, padded=False).keep

    def captured_call():  # holds copies of the inputs that nothing else holds, as a benchmark's builder does
        boxes, scores, labels = data.boxes.clone(), data.scores.clone(), data.labels.clone()
        return weakref.ref(boxes), lambda: nmsbench.run_nms("hard_fused", boxes, scores, 0.5, labels=labels,
                                                            padded=True)

    alive, fn = captured_call()
    graph, padded = capture_graph(fn)
    del fn
    gc.collect()
    assert alive() is not None
    taken = [torch.rand_like(data.boxes) for _ in range(4)]  # what a freed input's block would go to
    graph.replay()
    assert torch.equal(padded.trimmed().keep, expected)
    del graph, taken
    gc.collect()
    assert alive() is None
