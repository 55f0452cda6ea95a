"""Host-side arithmetic of matrix_recompute's cooperative kernel, checked without a GPU:
the grid it launches (every warp as many boxes as the others) and the 64-bit rank key of
its first and last phases (Ranking<float> in matrix_recompute.cu), replayed in NumPy."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from nmsbench.variants import matrix_recompute as mr


@given(st.integers(1, 4096), st.integers(0, 1024))
def test_balanced_grid_fits_and_keeps_the_rounds(needed, resident):
    grid = mr.balanced_grid(needed, resident)
    if resident == 0:
        assert grid == 0
        return
    assert 1 <= grid <= min(needed, resident)
    rounds = -(-needed // resident)
    assert -(-needed // grid) == rounds  # no more rounds than the resident grid would take
    if needed <= resident:
        assert grid == needed


def test_balanced_grid_on_the_h200_at_8192():
    # 8192 boxes, 1024-thread blocks (32 warps): 256 blocks wanted, 132 resident on the H200.
    assert mr.balanced_grid(256, 132) == 128  # 4096 warps, 2 boxes each


def ranking_key(score_key: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Ranking<float>::key: the 32-bit score key above the complement of the index."""
    return (score_key.astype(np.uint64) << np.uint64(32)) | (np.uint64(0xFFFFFFFF) - index.astype(np.uint64))


def score_key(scores: np.ndarray) -> np.ndarray:
    """_common.cuh's score_key for float scores (NaN above all, -0.0 as +0.0)."""
    bits = (scores.astype(np.float32) + np.float32(0.0)).view(np.uint32)
    key = np.where(bits >> np.uint32(31) != 0, ~bits, bits | np.uint32(0x80000000)).astype(np.uint32)
    return np.where(np.isnan(scores), np.uint32(0xFFFFFFFF), key)


@given(st.lists(st.sampled_from([0.0, -0.0, 0.5, -0.5, 1.0, 1e-45, -1e-45, np.inf, -np.inf, np.nan, 0.25]),
                min_size=1, max_size=40))
def test_one_key_comparison_ranks_like_the_score_then_the_index(values):
    scores = np.array(values, dtype=np.float32)
    n = len(scores)
    index = np.arange(n)
    keys, combined = score_key(scores), ranking_key(score_key(scores), index)
    for i in range(n):
        for j in range(n):
            by_pair = keys[i] > keys[j] or (keys[i] == keys[j] and i < j)  # ranks_above
            assert (combined[i] > combined[j]) == by_pair
    # phase 4: a box with no final score has score key 0, and has_score tells them apart
    none = ranking_key(np.zeros(n, dtype=np.uint32), index)
    assert np.all((none >> np.uint64(32)) == 0) and np.all((combined >> np.uint64(32)) != 0)
    assert np.all(none[:, None] < combined[None, :])  # every kept box above every other
