"""The padded (graph-safe) output contract and the graph timer, on the CPU side."""

from __future__ import annotations

import pytest
import torch

import nmsbench
from nmsbench.api import check_padded_result
from nmsbench.boxes import PaddedNMSResult
from nmsbench.registry import register, unregister
from nmsbench.runner import Grid


def test_padded_is_refused_by_backends_that_are_not_graph_safe():
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match="no padded"):
        nmsbench.run_nms("torchvision", boxes, torch.tensor([0.5]), 0.5, padded=True)


def test_trimmed_gives_the_kept_prefix():
    padded = PaddedNMSResult(torch.tensor([4, 1, -1, -1]), torch.tensor(2), torch.tensor([0.9, 0.8, 0.0, 0.0]))
    result = padded.trimmed()
    assert result.keep.tolist() == [4, 1] and result.scores.tolist() == pytest.approx([0.9, 0.8])


def test_a_graph_safe_backend_is_called_with_padded_and_its_contract_checked():
    calls = []

    @register(name="_padded_probe", family="hard", devices=("cpu",), graph_safe=True)
    def probe(boxes, scores, *, iou_threshold, labels=None, padded=False):
        calls.append(padded)
        n = boxes.shape[0]
        keep = torch.full((n,), -1, dtype=torch.int64)
        keep[:n] = torch.sort(scores, descending=True, stable=True).indices
        return PaddedNMSResult(keep, torch.tensor(n)) if padded else nmsbench.NMSResult(keep)

    try:
        boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [5.0, 5.0, 6.0, 6.0]])
        result = nmsbench.run_nms("_padded_probe", boxes, torch.tensor([0.2, 0.7]), 0.5, padded=True)
        assert calls == [True] and result.trimmed().keep.tolist() == [1, 0]
    finally:
        unregister("_padded_probe")


@pytest.mark.parametrize("bad", [
    PaddedNMSResult(torch.zeros(3, dtype=torch.int64), torch.tensor(0)),  # wrong length
    PaddedNMSResult(torch.zeros(2, dtype=torch.int32), torch.tensor(0)),  # wrong dtype
    PaddedNMSResult(torch.zeros(2, dtype=torch.int64), torch.tensor([0])),  # count not 0-d
])
def test_broken_padded_output_fails_loudly(bad):
    with pytest.raises(RuntimeError, match="padded output contract"):
        check_padded_result("x", bad, torch.zeros(2, 4))


def test_graph_and_device_timers_give_cuda_rows_only():
    grid = Grid(impls=["hard_fused"], devices=["cpu", "cuda"], dtypes=["float32"], scenarios=["uniform"], ns=[10],
                ious=[0.5], timers=["wall", "device", "graph"])
    assert grid.timers_for("cpu") == ["wall"] and grid.timers_for("cuda") == ["wall", "device", "graph"]
    assert grid.count() == 4


def test_hard_fused_is_registered_graph_safe_on_cuda_only():
    impl = nmsbench.implementations()["hard_fused"]
    assert impl.family == "hard" and impl.exact
    assert impl.backends["cuda"].graph_safe and not impl.backends["cpu"].graph_safe


@pytest.mark.parametrize("broken, message", [
    (lambda keep: keep, "output contract"),  # a bare tensor, not an NMSResult
    (lambda keep: nmsbench.NMSResult(keep.to(torch.int32)), "output contract"),
    (lambda keep: nmsbench.NMSResult(keep[None]), "output contract"),
    (lambda keep: nmsbench.NMSResult(keep, torch.zeros(keep.shape[0] + 1)), "scores for"),
])
def test_a_broken_eager_result_fails_loudly_through_run_nms(broken, message):
    @register(name="_broken_probe", family="hard", devices=("cpu",))
    def probe(boxes, scores, *, iou_threshold, labels=None):
        return broken(torch.arange(boxes.shape[0]))

    try:
        with pytest.raises(RuntimeError, match=message):
            nmsbench.run_nms("_broken_probe", torch.tensor([[0.0, 0.0, 1.0, 1.0]]), torch.tensor([0.5]), 0.5)
    finally:
        unregister("_broken_probe")
