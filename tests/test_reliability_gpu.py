"""GPU reliability: a real CUDA out-of-memory error becomes an error row and the GPU keeps
working for the next case. Marked ``gpu``; skipped without a CUDA device."""

from __future__ import annotations

import pytest
import torch

import nmsbench.runner as runner
from nmsbench.runner import Grid, run_sweep

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

LIMIT = 2 * 2**30  # bytes the test lets this process have; matrix_naive's IoU matrix at N = 65536 is 16 GiB


def test_cuda_out_of_memory_becomes_an_error_row_and_the_next_case_runs(monkeypatch):
    # the box set's realized overlap is O(N^2) on the CPU at N = 65536, and not what is tested here
    monkeypatch.setattr(runner, "realized_overlap", lambda *args, **kwargs: {"mean_max_iou": 0.0})
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(min(LIMIT / total, 1.0))
    rows = []
    try:
        grid = Grid(impls=["matrix_naive"], devices=["cuda"], dtypes=["float32"], scenarios=["uniform"],
                    ns=[65536, 1024], ious=[0.5], overlaps=[0.5], timers=["wall"], min_run_time=0.05)
        counts = run_sweep(grid, rows.append)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert [(r["n"], r["status"]) for r in rows] == [(65536, "error"), (1024, "ok")], \
        [(r["n"], r["status"], r["error"]) for r in rows]
    assert rows[0]["error"].startswith("OutOfMemoryError:") and "out of memory" in rows[0]["error"].lower(), rows[0]["error"]
    assert rows[1]["median_us"] > 0 and rows[1]["peak_mem_bytes"] > 0
    assert counts == {"ok": 1, "error": 1, "skipped": 0, "noisy": counts["noisy"]}
    # and the GPU still serves an ordinary call afterwards
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11]], dtype=torch.float32, device="cuda")
    keep = runner.get("torchvision").backend("cuda").fn(boxes, torch.tensor([0.9, 0.8], device="cuda"),
                                                        iou_threshold=0.5).keep
    assert keep.tolist() == [0]
