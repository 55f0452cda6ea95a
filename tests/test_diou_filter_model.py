"""diou_nms's float estimate of the DIoU penalty (implementations/hard_fused/hard_fused.cu,
``diou_float_decision``) held to its error bound on the CPU: a numpy model of the kernel's
float arithmetic (every operation IEEE single, as NVRTC compiles it with --fmad=false)
must stay within the margin 2^-19 (M/s + 2) of the family definition's double penalty,
wherever the kernel uses the estimate, so a pair the estimate decides is decided as the
double test decides it. The kernels are checked against the CPU on the GPU, pairs on the
threshold included (tests/test_gpu.py).
"""

from __future__ import annotations

import definitions as D
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import examples

f32 = np.float32


def estimate_and_margin(a, b):
    """The kernel's (estimate, margin), or None where it takes the double test at once."""
    ax1, ay1, ax2, ay2 = (f32(v) for v in a)
    bx1, by1, bx2, by2 = (f32(v) for v in b)
    with np.errstate(all="ignore"):
        cw, ch = max(ax2, bx2) - min(ax1, bx1), max(ay2, by2) - min(ay1, by1)
        s = max(cw, ch)
        m = max(abs(ax1), abs(ay1), abs(ax2), abs(ay2), abs(bx1), abs(by1), abs(bx2), abs(by2))
        if not (s >= f32(2.0 ** -60) and m <= f32(2.0 ** 60)):
            return None
        half = f32(0.5)
        dx = (ax1 * half + ax2 * half) - (bx1 * half + bx2 * half)
        dy = (ay1 * half + ay2 * half) - (by1 * half + by2 * half)
        estimate = (dx * dx + dy * dy) / (cw * cw + ch * ch)
        margin = (m / s + f32(2.0)) * f32(2.0 ** -19)
    return float(estimate), float(margin)


def overlapping_pair(draw):
    """Two float32 boxes that overlap, at any scale and distance from the origin."""
    scale = 2.0 ** draw(st.integers(-40, 40))
    origin = draw(st.floats(-1e6, 1e6)) * scale * draw(st.sampled_from([0.0, 1.0, 1e3]))
    x, y = (origin + draw(st.floats(0, 1000)) * scale for _ in range(2))
    w, h = (draw(st.floats(1, 200)) * scale for _ in range(2))
    a = [f32(x), f32(y), f32(x + w), f32(y + h)]
    jitter = [draw(st.floats(-0.45, 0.45)) for _ in range(4)]
    b = [f32(a[0] + jitter[0] * w), f32(a[1] + jitter[1] * h), f32(a[2] + jitter[2] * w), f32(a[3] + jitter[3] * h)]
    return a, b


@st.composite
def pairs(draw):
    return overlapping_pair(draw)


@settings(max_examples=examples(400), deadline=None)
@given(pairs())
def test_the_float_estimate_stays_inside_its_margin(pair):
    a, b = pair
    if float(D.iou(a, b)) <= 0:  # the kernel tests the IoU first: such a pair never reaches the penalty
        return
    found = estimate_and_margin(a, b)
    if found is None:
        return
    estimate, margin = found
    exact = D.diou_penalty([float(v) for v in a], [float(v) for v in b], 1.0)
    assert abs(estimate - exact) <= margin / 4, (estimate, exact, margin)  # four times the room the proof needs


def test_ordinary_boxes_are_decided_by_the_estimate():
    """The point of it: on a detector's canvas the margin is a few millionths, so almost no
    pair is left to the double test."""
    rng = np.random.default_rng(0)
    corner = rng.random((2000, 2)) * 1000
    size = 10 + rng.random((2000, 2)) * 100
    a = np.concatenate([corner, corner + size], 1)
    b = a + (rng.random((2000, 4)) - 0.5) * np.tile(size, 2) * 0.3
    margins = [estimate_and_margin(x, y)[1] for x, y in zip(a, b)]
    assert max(margins) < 1e-3 and np.median(margins) < 1e-4
