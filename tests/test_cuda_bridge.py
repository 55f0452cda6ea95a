"""The CPU-side pieces of the CUDA backends: what runs without a GPU is tested here."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nmsbench
from nmsbench.variants import _cuda, allpairs, bitmask_classic, bitmask_two_phase, matrix_fused

MODULES = [allpairs.CUDA_MODULE, bitmask_classic.CUDA_MODULE, bitmask_two_phase.CUDA_MODULE, matrix_fused.CUDA_MODULE]


def test_kernel_sources_ship_beside_their_wrappers():
    assert (_cuda.HERE / "_common.cuh").is_file()
    for module in MODULES:
        source = (_cuda.HERE / module.cu_file).read_text()
        for expression in module.expressions:
            assert expression.split("<")[0] in source, f"{expression} not defined in {module.cu_file}"


def test_template_kernels_are_instantiated_for_every_input_dtype():
    assert bitmask_two_phase.CUDA_MODULE.expressions == [
        "ballot_mask_kernel<float>", "ballot_mask_kernel<double>", "ballot_mask_kernel<unsigned short>",
        "greedy_resolve_kernel",
    ]
    assert set(_cuda.CUDA_DTYPES) == {torch.float32, torch.float64, torch.float16}


def test_fmad_is_off_so_float32_ious_round_like_the_cpu():
    assert "--fmad=false" in _cuda.NVRTC_OPTIONS


def test_kernel_arguments():
    t = torch.zeros(3)
    assert _cuda._argument(t) == np.uint64(t.data_ptr()) and isinstance(_cuda._argument(t), np.uint64)
    assert _cuda._argument(None) == np.uint64(0)
    assert isinstance(_cuda._argument(True), np.int32) and _cuda._argument(True) == 1
    assert isinstance(_cuda._argument(7), np.int32) and _cuda._argument(7) == 7
    assert isinstance(_cuda._argument(np.float64(0.5)), np.float64)


def test_ranked_labels_and_blocks():
    order = torch.tensor([2, 0, 1])
    assert _cuda.ranked_labels(None, order) is None
    ranked = _cuda.ranked_labels(torch.tensor([5, 6, 7], dtype=torch.int32), order)
    assert ranked.dtype == torch.int64 and ranked.tolist() == [7, 5, 6] and ranked.is_contiguous()
    assert [_cuda.blocks(n, 16) for n in (0, 1, 16, 17)] == [1, 1, 1, 2]


def _key_to_float(key: np.uint64) -> float:
    """Inverse of matrix_fused._ordered_key (as matrix_fused.cu's key_value does it)."""
    k = int(key)
    bits = k & (2**63 - 1) if k >> 63 else ~k & (2**64 - 1)
    return float(np.uint64(bits).view(np.float64))


@pytest.mark.parametrize("seed", range(3))
def test_ordered_keys_sort_like_the_doubles_they_encode(seed):
    """matrix_fused's decay minimum is an atomicMin over these keys: their unsigned order
    must be the order of the doubles, negatives and both zeros included."""
    rng = np.random.default_rng(seed)
    values = np.concatenate([
        rng.normal(0, 1, 200), rng.uniform(-1e-300, 1e-300, 20), [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 5e-324, -5e-324],
    ])
    keys = np.array([int(matrix_fused._ordered_key(v)) for v in values], dtype=np.uint64)
    by_key = values[np.argsort(keys, kind="stable")]
    assert np.all(np.diff(by_key) >= 0)
    assert all(_key_to_float(matrix_fused._ordered_key(v)) == v for v in values)
    assert matrix_fused._ordered_key(0.0) == np.uint64(1 << 63)  # the gaussian start (exponent 0)


def test_cuda_backends_are_listed_with_a_reason_when_unavailable():
    rows = {(r["name"], r["device"]): r for r in nmsbench.registry.describe()}
    for name in ("allpairs", "bitmask_classic", "bitmask_two_phase", "matrix_fused"):
        row = rows[(name, "cuda")]
        assert row["requires"] == ["cupy"] and row["host_sync"]
        assert row["dtypes"] == ["float32", "float64", "float16"]
        if not torch.cuda.is_available():
            assert not row["available"] and row["reason"] in ("no CUDA device", "cupy not installed")
