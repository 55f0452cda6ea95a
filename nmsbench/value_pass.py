"""The CPU value check of ``nmsbench.run_nms`` in numba (imported on the first CPU call:
the dashboard and CUDA-only users never load numba for it), and the rule itself for
numba backends that check the values in their own pass (``row_ok``).

The rules are :func:`nmsbench.boxes.check_input_values`'s: a row is bad where a
coordinate or its score is NaN or Inf, where x2 < x1 or y2 < y1, or where its area
overflows (the arithmetic in the boxes' dtype). The pass is branch-free over the rows (so
it vectorizes) and looks for the first bad row only once it knows there is one.

Contiguous float32 and float64 tensors go through a C entry point (``cfunc``) called on
their data pointers with ctypes, which costs a fraction of a numba dispatch with array
arguments; other layouts take the same loop through ``njit`` on NumPy views.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
from numba import carray, cfunc, njit, types

JIT = dict(cache=True, error_model="numpy")


@njit(inline="always", **JIT)
def row_ok(x1, y1, x2, y2, score):
    """Whether one row keeps every value rule (branch-free, so a loop of it vectorizes)."""
    return (np.isfinite(x1) & np.isfinite(y1) & np.isfinite(x2) & np.isfinite(y2) & np.isfinite(score)
            & (x2 >= x1) & (y2 >= y1) & np.isfinite((x2 - x1) * (y2 - y1)))


@njit(inline="always", **JIT)
def _first_bad(b, s):
    n = b.shape[0]
    ok = True
    for i in range(n):  # no early exit: vectorized
        ok &= row_ok(b[i, 0], b[i, 1], b[i, 2], b[i, 3], s[i])
    if ok:
        return -1
    for i in range(n):
        if not row_ok(b[i, 0], b[i, 1], b[i, 2], b[i, 3], s[i]):
            return i
    return -1


@njit(**JIT)
def first_bad_row(b, s):
    """The first row of ``b`` (N, 4) and ``s`` (N,) breaking a value rule, or -1."""
    return _first_bad(b, s)


def _first_bad_row_at(boxes, scores, n):
    return _first_bad(carray(boxes, (n, 4)), carray(scores, (n,)))


@functools.cache
def at_address(dtype_name: str):
    """``first_bad_row_at(boxes address, scores address, n)`` for contiguous data of
    ``dtype_name`` ("float32" or "float64"), compiled on first use."""
    dtype = {"float32": types.float32, "float64": types.float64}[dtype_name]
    compiled = cfunc(types.int64(types.CPointer(dtype), types.CPointer(dtype), types.int64), **JIT)(_first_bad_row_at)
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(compiled.address)
