"""Fused Matrix NMS (the fast-matrix-nms seed's design, seeds/fused-matrix-nms-cuda.txt).

Two passes and no N x N tensor: pass 1 computes each box's IoU with its parents and
keeps only the row max (cmax); pass 2 recomputes the IoUs, turns each into the candidate
decay f(iou_ij) / f(cmax_i) and keeps the running minimum, so neither the IoU matrix nor
the decay matrix is ever stored. Same family semantics as ``matrix_naive``.

The CUDA backend (matrix_fused.cu) follows the seed's stages: a tiled IoU kernel that
stores the lower-triangular tiles (packed: half the seed's N x N buffer) and their row
maxima, an in-place multi-pass max reduction, and one kernel that folds each tile's
candidate decays into a per-box minimum. The family's output (kept boxes ordered by
final score, with those scores) needs the minimum, not only the drop flags the seed
computes, so the last kernel reduces in-tile and across tiles with ``atomicMin`` over
order-preserving keys: order-independent, hence deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from nmsbench.boxes import NMSResult, result_by_final_score
from nmsbench.families import MATRIX_PARAMS
from nmsbench.registry import register

from ._cpu import JIT, balanced_row, box_iou, sorted_inputs
from ._cuda import CUDA_DTYPES, CudaModule, blocks, on_torch_stream, ranked_labels


@njit(parallel=True, **JIT)
def max_iou_with_parents(b, labels):
    n = b.shape[0]
    cmax = np.zeros(n, dtype=np.float64)
    for k in prange(n):
        j = balanced_row(k, n)
        best = 0.0
        for i in range(j):
            if labels[i] == labels[j]:
                iou = box_iou(b, i, j)
                if iou > best:
                    best = iou
        cmax[j] = best
    return cmax


@njit(parallel=True, **JIT)
def decay_factors(b, labels, cmax, linear, sigma):
    n = b.shape[0]
    decay = np.ones(n, dtype=np.float64)
    for k in prange(n):
        j = balanced_row(k, n)
        d = 1.0
        for i in range(j):
            if labels[i] != labels[j]:
                continue
            iou = np.float64(box_iou(b, i, j))
            if linear:
                room = 1.0 - cmax[i]
                if room == 0.0:
                    continue  # a parent duplicating a box above it constrains nothing
                ratio = (1.0 - iou) / room
            else:
                ratio = math.exp((cmax[i] * cmax[i] - iou * iou) / sigma)
            if ratio < d:
                d = ratio
        decay[j] = d
    return decay


@register(
    name="matrix_fused", family="matrix", devices=("cpu",), requires=("numba",), params=MATRIX_PARAMS,
    summary="numba: pass 1 IoU + row max, pass 2 running min of the decay; no N x N buffer",
)
def matrix_fused_cpu(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    cmax = max_iou_with_parents(sorted_boxes, sorted_labels)
    decay = decay_factors(sorted_boxes, sorted_labels, cmax, kernel == "linear", sigma)
    final = scores.detach()[order] * torch.from_numpy(decay).to(scores.dtype)
    kept = (final >= score_threshold).nonzero().squeeze(1)
    return result_by_final_score(order[kept], final[kept])


CUDA_MODULE = CudaModule(
    "matrix_fused.cu", templates=("iou_tile_kernel", "max_reduce_pass", "decay_kernel", "final_score_kernel")
)
TILE = 16


def _ordered_key(value: float) -> np.uint64:
    """The unsigned key matrix_fused.cu's ``ordered_key`` gives ``value`` (a double)."""
    bits = int(np.float64(value).view(np.uint64))
    return np.uint64(~bits & (2**64 - 1) if bits >> 63 else bits | 1 << 63)


@register(
    name="matrix_fused", family="matrix", devices=("cuda",), requires=("cupy",), params=MATRIX_PARAMS,
    dtypes=CUDA_DTYPES, host_sync=True,
    summary="CUDA: 16x16 IoU tiles + row max, in-place max passes, tile decay min; packed lower-triangle storage",
)
def matrix_fused_cuda(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold):
    n = boxes.shape[0]
    sorted_scores, order = torch.sort(scores, descending=True, stable=True)
    if n == 0:
        return NMSResult(order, sorted_scores)
    device, dtype = boxes.device, boxes.dtype
    store = torch.float64 if dtype == torch.float64 else torch.float32
    linear = kernel == "linear"
    tiles = blocks(n, TILE)
    sorted_boxes = boxes.index_select(0, order).contiguous()
    tile_iou = torch.empty(tiles * (tiles + 1) // 2 * TILE * TILE, dtype=store, device=device)
    partial = torch.empty((n, tiles), dtype=store, device=device)
    decay_key = torch.empty(n, dtype=torch.int64, device=device)
    initial_key = _ordered_key(1.0 if linear else 0.0)
    final_by_input = torch.empty(n, dtype=store, device=device)
    with on_torch_stream(device) as launch:
        launch(
            CUDA_MODULE.get("iou_tile_kernel", dtype, device), (tiles, tiles), (TILE, TILE),
            (sorted_boxes, ranked_labels(labels, order), n, tiles, initial_key, tile_iou, partial, decay_key),
        )
        level, length = 0, tiles
        while length > 1:
            launch(CUDA_MODULE.get("max_reduce_pass", dtype, device), (tiles,), (TILE, TILE), (partial, n, tiles, level))
            level, length = level + 1, blocks(length, TILE)
        launch(
            CUDA_MODULE.get("decay_kernel", dtype, device), (tiles, tiles), (TILE, TILE),
            (tile_iou, partial, n, tiles, linear, decay_key),
        )
        launch(
            CUDA_MODULE.get("final_score_kernel", dtype, device), (blocks(n, 256),), (256,),
            (sorted_scores, order, decay_key, n, linear, np.float64(sigma), final_by_input),
        )
    # Stable sort over input order: ties in final score go to the lower input index.
    final, index = torch.sort(final_by_input, descending=True, stable=True)
    kept = int((final >= score_threshold).sum())
    return NMSResult(index[:kept], final[:kept].to(dtype))
