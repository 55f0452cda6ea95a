"""DIoU-NMS (family ``diou``, nmsbench.families): greedy NMS whose overlap test subtracts
the distance between the boxes' centres (Zheng et al., AAAI 2020).

``diou_nms`` (numba, CPU): boxes in rank order; each kept box removes the later boxes its
test suppresses, in one pass over them (serial: a parallel loop per kept box cost more
in thread wake-ups than it saved).
``diou_nms`` (CUDA): hard_fused's paths, compiled with DIoU's suppression test in place of
the IoU's (``diou_module``: hard_fused.cu with ``DIOU_BETA`` defined, one compilation per
beta), so the mask, the resolve and their paths are hard_fused's; one block stops sooner
(``DIOU_ONE_BLOCK_MAX_N``), and float boxes have the penalty estimated in float first (the
double test decides only near the threshold: DESIGN.md).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from numba import njit

from nmsbench.cuda import CUDA_DTYPES, CudaModule, PathTable
from nmsbench.families import DIOU_PARAMS
from nmsbench.registry import register

from ._cpu import JIT, box_iou, keep_from_sorted, sorted_inputs
from .hard_fused import cuda as hard_fused_cuda


@njit(inline="always", **JIT)
def diou_penalty(b, i, j, beta):
    """(rho^2 / c^2)^beta of rows i and j in float64, every length divided by the enclosing
    box's larger side first (no square overflows); 0 where that side is 0."""
    ax1, ay1, ax2, ay2 = np.float64(b[i, 0]), np.float64(b[i, 1]), np.float64(b[i, 2]), np.float64(b[i, 3])
    bx1, by1, bx2, by2 = np.float64(b[j, 0]), np.float64(b[j, 1]), np.float64(b[j, 2]), np.float64(b[j, 3])
    cw = max(ax2, bx2) - min(ax1, bx1)
    ch = max(ay2, by2) - min(ay1, by1)
    s = max(cw, ch)
    if s == 0.0:
        return 0.0
    dx = ((ax1 / 2.0 + ax2 / 2.0) - (bx1 / 2.0 + bx2 / 2.0)) / s
    dy = ((ay1 / 2.0 + ay2 / 2.0) - (by1 / 2.0 + by2 / 2.0)) / s
    cw, ch = cw / s, ch / s
    return ((dx * dx + dy * dy) / (cw * cw + ch * ch)) ** beta


@njit(**JIT)
def diou_greedy(b, labels, iou_threshold, beta):
    """Rank positions kept (rows of ``b`` in rank order), ascending."""
    n = b.shape[0]
    removed = np.zeros(n, dtype=np.bool_)
    kept = np.empty(n, dtype=np.int64)
    count = 0
    for i in range(n):
        if removed[i]:
            continue
        kept[count] = i
        count += 1
        for j in range(i + 1, n):
            if not removed[j] and labels[j] == labels[i]:
                v = np.float64(box_iou(b, i, j))
                if v > 0 and v - diou_penalty(b, i, j, beta) > iou_threshold:  # the penalty is >= 0
                    removed[j] = True
    return kept[:count]


@register(
    name="diou_nms", family="diou", devices=("cpu",), exact=True, requires=("numba",), params=DIOU_PARAMS,
    summary="numba: in rank order, each kept box removes the later boxes over the DIoU threshold",
    style=("#999933", "diamond-tall"),
)
def diou_nms_cpu(boxes, scores, *, iou_threshold, labels=None, beta):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    return keep_from_sorted(order, diou_greedy(sorted_boxes, sorted_labels, float(iou_threshold), float(beta)))


@functools.lru_cache(maxsize=16)
def diou_module(beta: float) -> CudaModule:
    """hard_fused.cu compiled with DIoU-NMS's suppression test for ``beta`` (NVRTC -D
    DIOU_BETA, its shortest round-trip repr, so the kernel's constant is the same double)."""
    base = hard_fused_cuda.CUDA_MODULE
    templates = {name: base.codes[name] for name in base.templates}
    plain = {name: base.codes[name] for name in base.plain}
    defines = {**hard_fused_cuda.DEFINES, "DIOU_BETA": repr(float(beta))}
    return CudaModule(base.cu_file, templates=templates, plain=plain, defines=defines)


CUDA_MODULE = diou_module(DIOU_PARAMS[0].default)  # the default beta's, for the kernel tests' discovery
# hard_fused's paths, each of which the CUDA backend takes (``path=``), asked of diou_nms's kernels
PATHS = PathTable("diou_nms", hard_fused_cuda.PATHS.values(), module=CUDA_MODULE)


def choose_path(n: int, dtype=torch.float32, padded: bool = False, device=None, labels: bool = False) -> str:
    """hard_fused's chooser for diou_nms's kernels (the default beta's): its limits, except
    that one block stops at DIOU_ONE_BLOCK_MAX_N."""
    return PATHS.choose(n, dtype, padded, device, labels)


def check_path(path: str, n: int, dtype, padded: bool, device, labels: bool = False) -> None:
    """hard_fused's check_path for diou_nms's kernels (the default beta's)."""
    PATHS.check(path, n, dtype, padded, device, labels)


@register(
    name="diou_nms", family="diou", devices=("cuda",), exact=True, requires=("cupy",), params=DIOU_PARAMS,
    dtypes=CUDA_DTYPES, host_sync=True, graph_safe=True, checks_values=True,
    summary="CUDA: hard_fused's paths with the DIoU test in the mask (one compilation per beta)",
)
def diou_nms_cuda(boxes, scores, *, iou_threshold, labels=None, beta, padded=False, path=None, check_values=False):
    """``path``: one of hard_fused's ``PATHS`` (forced), else its ``choose_path``'s."""
    return hard_fused_cuda.run_paths(boxes, scores, iou_threshold, labels, padded, path, check_values,
                                     diou_module(float(beta)), "diou_nms")
