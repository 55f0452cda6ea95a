"""The decisive IoU test of hard_fused's CUDA kernels (_common.cuh: IouThreshold, iou_above),
replayed in NumPy float32 (IEEE round-to-nearest, as the kernels compile with --fmad=false):
its shortcuts must give the exact test's answer, double(float(inter / union)) > threshold,
for every pair, including those a few ulps from the threshold and at extreme scales."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

F32 = np.float32


def widened(threshold: float) -> tuple[np.float32, np.float32]:
    """IouThreshold's lo and hi: threshold * (1 -/+ 2^-20) rounded down / up to float."""
    if not 1e-6 < threshold < 1.0:
        return F32(0.0), F32(np.inf)
    lo_d, hi_d = threshold * (1.0 - 2.0**-20), threshold * (1.0 + 2.0**-20)
    lo, hi = F32(lo_d), F32(hi_d)
    if float(lo) > lo_d:
        lo = np.nextafter(lo, F32(-np.inf))
    if float(hi) < hi_d:
        hi = np.nextafter(hi, F32(np.inf))
    return lo, hi


def exact(inter, union, threshold: float):
    with np.errstate(all="ignore"):
        return (inter / union).astype(F32).astype(np.float64) > threshold


def decisive(inter, union, threshold: float):
    """iou_above, elementwise on float32 arrays."""
    lo, hi = widened(threshold)
    with np.errstate(all="ignore"):
        in_range = (union >= F32(1e-30)) & (union <= F32(1e30))
        above = in_range & (inter > (union * hi).astype(F32))
        below = in_range & (inter < (union * lo).astype(F32))
    return np.where(above, True, np.where(below, False, exact(inter, union, threshold)))


def near_threshold(threshold: float, union: np.ndarray, ulps: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Every (inter, union) with inter within `ulps` floats of threshold * union."""
    with np.errstate(all="ignore"):
        center = (F32(threshold) * union).astype(F32)
    inters, unions = [center], [union]
    up, down = center, center
    for _ in range(ulps):
        up, down = np.nextafter(up, F32(np.inf)), np.nextafter(down, F32(-np.inf))
        inters += [up, down]
        unions += [union, union]
    inter, union = np.concatenate(inters), np.concatenate(unions)
    keep = np.isfinite(inter) & (inter > 0) & (inter <= union)
    return inter[keep], union[keep]


THRESHOLDS = [0.0, 1e-7, 2e-6, 0.1, 0.3, 0.5, 0.55, 0.7, 0.75, 0.9, 1 - 1e-7, 1.0, 1.5]


def test_pairs_a_few_ulps_from_the_threshold_get_the_exact_answer():
    rng = np.random.default_rng(0)
    # unions over every scale, and with every mantissa (where the quotient's rounding varies)
    union = (rng.uniform(1, 2, 200_000) * 2.0 ** rng.integers(-140, 128, 200_000)).astype(F32)
    union = union[np.isfinite(union) & (union > 0)]
    thresholds = THRESHOLDS + list(rng.uniform(0, 1, 20))
    for threshold in thresholds:
        inter, u = near_threshold(threshold, union)
        mismatch = decisive(inter, u, threshold) != exact(inter, u, threshold)
        assert not mismatch.any(), (threshold, inter[mismatch][:3], u[mismatch][:3])


thresholds = st.one_of(st.sampled_from([0.0, 1e-7, 1e-6, 0.1, 0.3, 0.5, 0.7, 0.9, 1 - 1e-7, 1.0, 1.5]),
                       st.floats(min_value=0.0, max_value=1.0))


@settings(max_examples=3000, deadline=None)
@given(threshold=thresholds, inter=st.floats(min_value=float(F32(1e-45)), max_value=float(F32(3e38)), width=32),
       union=st.floats(min_value=float(F32(1e-45)), max_value=float(F32(3e38)), width=32))
def test_any_pair_gets_the_exact_answer(threshold, inter, union):
    inter, union = np.array([inter], dtype=F32), np.array([union], dtype=F32)
    assume(inter[0] <= union[0])
    assert decisive(inter, union, threshold) == exact(inter, union, threshold)


def test_the_shortcuts_decide_most_pairs_and_are_off_outside_the_open_unit_interval():
    rng = np.random.default_rng(0)
    union = rng.uniform(1, 1e4, 10000).astype(F32)
    inter = (union * rng.uniform(0, 1, 10000)).astype(F32)
    lo, hi = widened(0.5)
    with np.errstate(all="ignore"):
        shortcut = (inter > union * hi) | (inter < union * lo)
    assert shortcut.mean() > 0.99
    assert (decisive(inter, union, 0.5) == exact(inter, union, 0.5)).all()
    for off in (0.0, 1e-7, 1.0, 2.0):
        assert widened(off) == (F32(0.0), F32(np.inf))
