"""Host-side arithmetic of matrix_recompute's cooperative kernel, checked without a GPU:
the grid it launches (every warp as many boxes as the others) and the 64-bit rank key of
its first and last phases (Ranking<float> in matrix_recompute.cu) and the split of its
passes into tasks (for_task_children), replayed in NumPy / Python."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from nmsbench.variants.matrix_recompute import cuda as mr  # the CUDA host side


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


def task_children(u: int, n: int) -> list[tuple[int, int, int]]:
    """for_task_children in matrix_recompute.cu, in Python: (child, begin, end) per call."""
    t = u >> 1
    a, b = t, n - 1 - t
    listed = a + b if a < b else a
    cut = (listed + 1) // 2
    lo, hi = (cut, listed) if u & 1 else (0, cut)
    out = []
    if lo < min(hi, a):
        out.append((a, lo, min(hi, a)))
    if a < b and max(lo, a) < hi:
        out.append((b, max(lo, a) - a, hi - a))
    return out


@given(st.integers(1, 600))
def test_cooperative_tasks_cover_every_parent_of_every_child_once_in_even_halves(n):
    """The passes' n tasks (2 ceil(n / 2)): every pair (parent i < child r) falls in exactly
    one task, and no task has more than ceil((n - 1) / 2) parents, so the busiest warp has
    half a pair's work (one task a pair gave it all of it)."""
    seen = np.zeros((n, n), dtype=np.int64)
    largest = 0
    for u in range(2 * ((n + 1) // 2)):
        parents = 0
        for child, begin, end in task_children(u, n):
            assert 0 <= begin < end <= child
            seen[child, begin:end] += 1
            parents += end - begin
        largest = max(largest, parents)
    assert np.array_equal(seen, np.tril(np.ones((n, n), dtype=np.int64), k=-1))
    assert largest <= -(-(n - 1) // 2)


def slots_used(n: int, grid: int, threads: int) -> int:
    """The most mark slots any warp of the cooperative kernel uses in phase 2: tasks dealt
    block after block (task u to warp u // grid of block u % grid, then every
    grid * warps-a-block tasks again), a slot per MARK_PARENTS parents of each child's
    share (visit_parents)."""
    warps_a_block = threads // 32
    warps = grid * warps_a_block
    used = {}
    for u in range(2 * ((n + 1) // 2)):
        warp = (u % warps) // grid + warps_a_block * ((u % warps) % grid)  # (warp in block, block)
        used[warp] = used.get(warp, 0) + sum(-(-(end - begin) // mr.MARK_PARENTS)
                                             for _, begin, end in task_children(u, n))
    return max(used.values(), default=0)


@given(st.integers(2, 9000), st.sampled_from([256, 512, 1024]), st.integers(1, 140))
def test_mark_slots_cover_the_busiest_warp(n, threads, grid):
    """cooperative_mark_slots gives every warp a slot for each group of parents its tasks
    visit in phase 2, on any grid, so phase 3 tests no pair again where the slots fit in
    shared memory (the kernel still tests the pairs of a slot past mark_slots)."""
    grid = min(grid, -(-n // (threads // 32)))
    assert slots_used(n, grid, threads) <= mr.cooperative_mark_slots(n, grid, threads)


def test_mark_slots_on_the_h200():
    # 4096 boxes: 128 blocks of 1024 threads, one task a warp, three slots (12 KiB a block)
    assert mr.cooperative_mark_slots(4096, 128, 1024) == 3
    assert mr.cooperative_shared_bytes(4096, mr.torch.float32, False) + 4 * 32 * 3 * 32 <= 227 * 1024
