"""GPU tests: every CUDA backend against its CPU backend and its family's definition.

Marked ``gpu`` and skipped without a CUDA device (CI has none); run them on a GPU
machine with ``pytest -m gpu``.
"""

from __future__ import annotations

import pytest
import torch

import nmsbench
from nmsbench import datasets
from nmsbench.runner import Grid, run_sweep

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA_IMPLS = sorted(name for name, impl in nmsbench.implementations().items() if "cuda" in impl.backends)
SIZES = [1, 2, 31, 32, 33, 63, 64, 65, 256, 512, 1000, 4096, 4097]


def _same_result(impl, cpu, gpu):
    if impl.family == "matrix":
        threshold = impl.resolve_params({})["score_threshold"]
        cpu_final = dict(zip(cpu.keep.tolist(), cpu.scores.float().tolist()))
        gpu_final = dict(zip(gpu.keep.tolist(), gpu.scores.float().tolist()))
        # the kept sets may differ only where a decayed score sits on the threshold
        for i in cpu_final.keys() ^ gpu_final.keys():
            assert abs(cpu_final.get(i, gpu_final.get(i)) - threshold) < 1e-5
        common = sorted(cpu_final.keys() & gpu_final.keys())
        torch.testing.assert_close(
            torch.tensor([gpu_final[i] for i in common]), torch.tensor([cpu_final[i] for i in common]), rtol=1e-4, atol=1e-5
        )
    else:
        assert torch.equal(gpu.keep.cpu(), cpu.keep)


@pytest.mark.parametrize("name", CUDA_IMPLS)
@pytest.mark.parametrize("scenario", datasets.SYNTHETIC)
@pytest.mark.parametrize("classes", [1, 3])
def test_cuda_backend_equals_cpu_backend(name, scenario, classes):
    impl = nmsbench.implementations()[name]
    for n in SIZES:
        box_set = datasets.generate(scenario, n, seed=n, classes=classes)
        cpu = nmsbench.run_nms(name, box_set.boxes, box_set.scores, 0.5, labels=box_set.labels)
        on_gpu = box_set.to("cuda")
        gpu = nmsbench.run_nms(name, on_gpu.boxes, on_gpu.scores, 0.5, labels=on_gpu.labels)
        assert gpu.keep.device.type == "cuda" and gpu.keep.dtype == torch.int64
        _same_result(impl, cpu, gpu)


@pytest.mark.parametrize("name", CUDA_IMPLS)
def test_cuda_backend_is_deterministic(name):
    box_set = datasets.generate("clustered", 4097, seed=1, classes=2).to("cuda")
    first = nmsbench.run_nms(name, box_set.boxes, box_set.scores, 0.5, labels=box_set.labels)
    for _ in range(20):
        again = nmsbench.run_nms(name, box_set.boxes, box_set.scores, 0.5, labels=box_set.labels)
        assert torch.equal(again.keep, first.keep)
        if first.scores is not None:
            assert torch.equal(again.scores, first.scores)


def test_mixed_devices_are_rejected():
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0]], device="cuda")
    with pytest.raises(ValueError, match="scores are on cpu but boxes are on cuda"):
        nmsbench.run_nms("torchvision", boxes, torch.tensor([1.0]))
    with pytest.raises(ValueError, match="labels are on cpu"):
        nmsbench.run_nms("torchvision", boxes, torch.tensor([1.0], device="cuda"), labels=torch.tensor([0]))


def test_cuda_sweep_writes_both_timers():
    rows = []
    grid = Grid(impls=CUDA_IMPLS, devices=["cuda"], dtypes=["float32"], scenarios=["clustered"], ns=[64, 1024],
                ious=[0.5], min_run_time=0.05)
    counts = run_sweep(grid, rows.append)
    assert counts["error"] == 0 and counts["ok"] == len(rows) == grid.count()
    assert {r["timer"] for r in rows} == {"wall", "device"}
    assert all(r["median_us"] > 0 and r["peak_mem_bytes"] != "" for r in rows)
