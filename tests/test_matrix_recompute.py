"""matrix_recompute on the CPU: against matrix_naive (both kernels, runtime sigma, labels,
ties, duplicates, N = 0 and 1), and the CUDA wrapper's host-side choices (no GPU needed).

The family property tests (test_properties.py) cover it through the registry as well.
"""

from __future__ import annotations

import pytest
import torch

import nmsbench
from nmsbench import datasets
from nmsbench.boxes import PaddedNMSResult
from nmsbench.variants.matrix_recompute import cuda as mr  # the CUDA host side
from nmsbench.variants.matrix_recompute import matrix_recompute_cpu
from nmsbench.cuda import MAX_SHARED_BYTES

BORDER = 1e-5


def run(name, boxes, scores, labels=None, **params):
    return nmsbench.run_nms(name, boxes, scores, 0.5, labels=labels, **params)


def assert_matches_naive(boxes, scores, labels=None, **params):
    """Same kept set (but within BORDER of score_threshold) and the same decayed scores to
    1e-5; the order by final score where the final scores are the same."""
    ours = run("matrix_recompute", boxes, scores, labels, **params)
    naive = run("matrix_naive", boxes, scores, labels, **params)
    threshold = params.get("score_threshold", 0.05)
    a = dict(zip(ours.keep.tolist(), ours.scores.double().tolist()))
    b = dict(zip(naive.keep.tolist(), naive.scores.double().tolist()))
    for i in a.keys() ^ b.keys():
        assert abs(a.get(i, b.get(i)) - threshold) < BORDER, f"box {i} kept by one only"
    common = sorted(a.keys() & b.keys())
    torch.testing.assert_close(torch.tensor([a[i] for i in common]), torch.tensor([b[i] for i in common]),
                               rtol=1e-5, atol=1e-5)
    # ordered by our own final scores, ties by lower index
    finals = ours.scores.double().tolist()
    keep = ours.keep.tolist()
    for k in range(len(keep) - 1):
        assert finals[k] > finals[k + 1] or (finals[k] == finals[k + 1] and keep[k] < keep[k + 1])
    # and exactly what matrix_fused's CPU backend (the same two passes) gives
    fused = run("matrix_fused", boxes, scores, labels, **params)
    assert torch.equal(fused.keep, ours.keep) and torch.equal(fused.scores, ours.scores)
    return ours


PARAMS = [
    {}, dict(kernel="linear"), dict(sigma=2.0), dict(sigma=0.1, score_threshold=0.3),
    dict(kernel="linear", score_threshold=0.0), dict(kernel="gaussian", sigma=1.7, score_threshold=-1.0),
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "defaults")
@pytest.mark.parametrize("scenario", datasets.SYNTHETIC)
@pytest.mark.parametrize("classes", [1, 3])
def test_equals_naive_on_scenarios(scenario, classes, params):
    for n in (1, 2, 31, 64, 257):
        bs = datasets.generate(scenario, n, seed=n, classes=classes)
        assert_matches_naive(bs.boxes, bs.scores, bs.labels, **params)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ties_duplicates_and_signed_zero(dtype):
    g = torch.Generator().manual_seed(3)
    n = 200
    base = torch.rand(8, 4, generator=g, dtype=torch.float64) * 10
    base[:, 2:] += base[:, :2]
    boxes = base[torch.randint(0, 8, (n,), generator=g)].to(dtype)  # many exact duplicates
    scores = (torch.randint(-2, 5, (n,), generator=g) / 4.0).to(dtype)  # many ties
    scores[scores == 0] = torch.where(torch.rand(int((scores == 0).sum()), generator=g) < 0.5, -0.0, 0.0).to(dtype)
    labels = torch.randint(0, 3, (n,), generator=g)
    for kernel in ("gaussian", "linear"):
        for score_threshold in (0.05, 0.0, -0.5):
            for lab in (None, labels, labels.to(torch.int32)):
                assert_matches_naive(boxes, scores, lab, kernel=kernel, score_threshold=score_threshold)


def test_empty_and_single():
    for dtype in (torch.float32, torch.float64):
        r = run("matrix_recompute", torch.zeros(0, 4, dtype=dtype), torch.zeros(0, dtype=dtype))
        assert r.keep.shape == (0,) and r.scores.shape == (0,) and r.scores.dtype == dtype
        r = run("matrix_recompute", torch.tensor([[0.0, 0, 1, 1]], dtype=dtype), torch.tensor([0.3], dtype=dtype))
        assert r.keep.tolist() == [0] and r.scores.tolist() == [pytest.approx(0.3)]
        r = run("matrix_recompute", torch.tensor([[0.0, 0, 1, 1]], dtype=dtype), torch.tensor([0.01], dtype=dtype))
        assert r.keep.tolist() == [] and r.scores.shape == (0,)


def test_cpu_padded_output_is_the_trimmed_result():
    bs = datasets.generate("clustered", 300, seed=1, classes=2)
    params = dict(kernel="gaussian", sigma=0.5, score_threshold=0.05)
    eager = matrix_recompute_cpu(bs.boxes, bs.scores, iou_threshold=0.5, labels=bs.labels, **params)
    padded = matrix_recompute_cpu(bs.boxes, bs.scores, iou_threshold=0.5, labels=bs.labels, padded=True, **params)
    assert isinstance(padded, PaddedNMSResult) and padded.keep.shape == (300,) and padded.count.dim() == 0
    count = int(padded.count)
    assert torch.equal(padded.keep[:count], eager.keep) and torch.equal(padded.scores[:count], eager.scores)
    assert (padded.keep[count:] == -1).all() and (padded.scores[count:] == 0).all()
    trimmed = padded.trimmed()
    assert torch.equal(trimmed.keep, eager.keep)


def test_registration():
    impl = nmsbench.implementations()["matrix_recompute"]
    assert impl.family == "matrix" and set(impl.devices) == {"cpu", "cuda"}
    cuda = impl.backend("cuda")
    assert cuda.graph_safe and cuda.dtypes == (torch.float32, torch.float64, torch.float16)
    assert impl.backend("cpu").dtypes == (torch.float32, torch.float64)
    assert {p.name for p in impl.params} == {"kernel", "sigma", "score_threshold"}


def test_single_block_fits_in_shared_memory_and_paths():
    for dtype in (torch.float32, torch.float16, torch.float64):
        cap = mr.one_block_capacity(dtype)
        assert cap % 32 == 0 and 256 <= cap <= 1024
        assert mr.one_block_shared_bytes(cap, dtype) <= MAX_SHARED_BYTES
        for padded, single_max in ((True, mr.PADDED_ONE_BLOCK_MAX_N), (False, mr.ONE_BLOCK_MAX_N)):
            # no device given: never the cooperative launch (tests/test_matrix_recompute_gpu.py checks it on a GPU)
            assert mr.choose_path(1, dtype, padded) == "one_block"
            assert mr.choose_path(min(cap, single_max), dtype, padded) == "one_block"
            assert mr.choose_path(min(cap, single_max) + 1, dtype, padded) == "counting_passes"
            assert mr.choose_path(mr.COUNTING_MAX_N, dtype, padded) == "counting_passes"
            assert mr.choose_path(mr.COUNTING_MAX_N + 1, dtype, padded) == "merge_sort_passes"
    assert mr.one_block_capacity(torch.float32) == 1024


class ReportedCount:
    """A HostCount whose kernel reported ``count`` kept boxes."""

    def __init__(self, count):
        self.count = count

    def wait(self, device):
        return self.count


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("n", [0, 1, 3, 5, 64])
def test_outputs_layout_matches_the_addresses_the_kernels_get(n, dtype):
    """The multi-launch paths' one allocation, built on the CPU: keep, then the scores, then
    the count, each view where its kernel address points."""
    out = mr._Outputs(n, dtype, torch.device("cpu"))
    base = out.memory.data_ptr()
    keep, scores = torch.arange(n), torch.linspace(0, 1, n, dtype=dtype)
    padded = out.result(None, torch.device("cpu"), True)
    padded.keep.copy_(keep)
    padded.scores.copy_(scores)
    padded.count.fill_(n)
    assert padded.keep.shape == (n,) and padded.scores.shape == (n,) and padded.scores.dtype == dtype
    if n > 0:  # an empty view has no address
        assert padded.keep.data_ptr() == int(out.keep) == base and padded.scores.data_ptr() == int(out.scores)
    assert padded.count.data_ptr() == int(out.count) and padded.count.dim() == 0
    assert int(out.count) + 8 == base + out.memory.numel() * 8  # the count is the last word
    assert int(out.scores) + n * dtype.itemsize <= int(out.count)  # the scores end before the count
    kept = out.result(ReportedCount(n // 2), torch.device("cpu"), False)
    assert torch.equal(kept.keep, keep[: n // 2]) and torch.equal(kept.scores, scores[: n // 2])
    assert int(padded.count) == n


def _live_segments(chunk, n, segment):  # decay_kernel's, in Python
    last_child = min(n, (chunk + 1) * mr.CHILDREN) - 1
    return max(1, -(-last_child // segment))


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 127, 128, 129, 1000, 1025, 4097, 8192, 8193, 131072])
def test_pass_kernel_grid_covers_every_parent_once(n):
    """The pass kernels' (segment, chunk) grid: every pair (i < j) lies in exactly one live
    block, every chunk has a live block, and no live block lies past the grid."""
    segment = mr.segment_length(n)
    assert segment % mr.PTILE == 0
    chunks = -(-n // mr.CHILDREN)
    segments = max(1, -(-(n - 1) // segment))
    assert chunks <= 65535
    for chunk in range(chunks):
        live = _live_segments(chunk, n, segment)
        assert 1 <= live <= segments
        last_child = min(n, (chunk + 1) * mr.CHILDREN) - 1
        covered = sum(max(0, min(s * segment + segment, last_child) - s * segment) for s in range(live))
        assert covered == last_child  # parents 0 .. last_child - 1, each once
