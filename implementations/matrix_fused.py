"""Fused Matrix NMS (the fast-matrix-nms seed's design, seeds/fused-matrix-nms-cuda.txt).

Two passes and no N x N tensor: pass 1 computes each box's IoU with its parents and
keeps only the row max (cmax); pass 2 recomputes the IoUs, turns each into the candidate
decay f(iou_ij) / f(cmax_i) and keeps the running minimum, so neither the IoU matrix nor
the decay matrix is ever stored. Same family semantics as ``matrix_naive``.

The CUDA backend (matrix_fused.cu) follows the seed's stages: a tiled IoU kernel that
stores the lower-triangular tiles (packed: half the seed's N x N buffer) and their row
maxima, an in-place multi-level max reduction, and a kernel that walks each row tile's
stored IoUs for the candidate decays. The family's output (kept boxes ordered by final
score, with those scores) needs each box's minimum decay, not only the drop flags the
seed computes, so that kernel keeps the minimum and writes the final score; a last
kernel selects and orders the kept boxes on the device, so the host waits once, for
their count.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from nmsbench.boxes import NMSResult, result_by_final_score
from nmsbench.cuda import (COUNT_BOXES, COUNT_WARPS, CUDA_DTYPES, CudaModule, Scratch, blocks, input_verdict,
                           on_torch_stream, rank_by_score)
from nmsbench.families import MATRIX_PARAMS
from nmsbench.inputs import raise_if_bad_input
from nmsbench.registry import register

from ._cpu import JIT, balanced_row, box_iou, sorted_inputs


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


@njit(inline="always", **JIT)
def decay_ratio(iou, cmax_parent, linear, sigma):
    """f(iou) / f(cmax) of the family definition, in float64; inf for a linear parent whose
    1 - cmax is 0 (a parent duplicating a box above it constrains nothing)."""
    if linear:
        room = 1.0 - cmax_parent
        return (1.0 - iou) / room if room != 0.0 else np.inf
    return math.exp((cmax_parent * cmax_parent - iou * iou) / sigma)


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
            ratio = decay_ratio(np.float64(box_iou(b, i, j)), cmax[i], linear, sigma)
            if ratio < d:
                d = ratio
        decay[j] = d
    return decay


@register(
    name="matrix_fused", family="matrix", devices=("cpu",), requires=("numba",), params=MATRIX_PARAMS,
    summary="numba: pass 1 IoU + row max, pass 2 running min of the decay; no N x N buffer",
    style=("#882255", "star"),
)
def matrix_fused_cpu(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold):
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    cmax = max_iou_with_parents(sorted_boxes, sorted_labels)
    decay = decay_factors(sorted_boxes, sorted_labels, cmax, kernel == "linear", sigma)
    final = scores.detach()[order] * torch.from_numpy(decay).to(scores.dtype)
    kept = (final >= score_threshold).nonzero().squeeze(1)
    return result_by_final_score(order[kept], final[kept])


# Boxes per IoU tile side, tiles per block of the IoU kernel, column tiles per decay split (NVRTC -D).
DEFINES = {"TILE": 16, "TILES_PER_BLOCK": 8, "TILES_PER_SPLIT": 16}
TILE, TILES_PER_BLOCK, TILES_PER_SPLIT = DEFINES["TILE"], DEFINES["TILES_PER_BLOCK"], DEFINES["TILES_PER_SPLIT"]
CUDA_MODULE = CudaModule(
    "matrix_fused.cu",
    templates={"iou_tile_kernel": "QQiqQQ", "max_reduce_kernel": "QiQQ", "decay_kernel": "QQQQiiidQQQ",
               "select_kernel": "QidQQ"},
    defines=DEFINES,
)
MAX_DECAY_SPLITS = 32


@register(
    name="matrix_fused", family="matrix", devices=("cuda",), requires=("cupy",), params=MATRIX_PARAMS,
    dtypes=CUDA_DTYPES, host_sync=True, checks_values=True,
    summary="CUDA: 16x16 IoU tiles + row max, in-place max levels, per-row-tile decay min; packed lower triangle",
)
def matrix_fused_cuda(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold,
                      check_values=False):
    """``check_values``: run_nms's value rules, checked in the rank's launch."""
    n, device, dtype = boxes.shape[0], boxes.device, boxes.dtype
    store = torch.float64 if dtype == torch.float64 else torch.float32
    kept = torch.empty(n + 1, dtype=torch.int64, device=device)  # kept[n]: how many
    kept_scores = torch.empty(n, dtype=store, device=device)
    if n == 0:
        return NMSResult(kept[:0], kept_scores.to(dtype))
    tiles = blocks(n, TILE)
    packed_tiles = tiles * (tiles + 1) // 2
    # Long row tiles split their decay over several blocks, so that the longest rows (the
    # last to finish) are not walked by one block alone.
    splits = min(MAX_DECAY_SPLITS, blocks(tiles, TILES_PER_SPLIT))
    scratch = Scratch(
        device, tile_iou=(packed_tiles * TILE * TILE, store), partial=(tiles * n, store),
        split_min=(splits * n, torch.float64), splits_done=(tiles, torch.int32), final_by_input=(n, store),
    )
    verdict = input_verdict(device) if check_values else None
    with on_torch_stream(device) as launch:
        order, ranked = rank_by_score(launch, boxes, scores, labels, with_scores=True, verdict=verdict)
        launch(
            CUDA_MODULE.get("iou_tile_kernel", dtype, device), (blocks(packed_tiles, TILES_PER_BLOCK),), (TILE, TILE),
            (ranked.sorted_boxes, ranked.sorted_labels, n, np.int64(packed_tiles), scratch.tile_iou, scratch.partial),
        )
        launch(
            CUDA_MODULE.get("max_reduce_kernel", dtype, device), (tiles,), (TILE, TILE),
            (scratch.partial, n, scratch.splits_done, kept),
        )
        launch(
            CUDA_MODULE.get("decay_kernel", dtype, device), (splits, tiles), (TILE, TILE),
            (scratch.tile_iou, scratch.partial, ranked.sorted_scores, order, n, tiles, kernel == "linear",
             np.float64(sigma), scratch.split_min, scratch.splits_done, scratch.final_by_input),
        )
        launch(
            CUDA_MODULE.get("select_kernel", dtype, device), (blocks(n, COUNT_BOXES),), (32 * COUNT_WARPS,),
            (scratch.final_by_input, n, np.float64(score_threshold), kept, kept_scores),
        )
    count = int(kept[n])  # the one host sync
    raise_if_bad_input(verdict, boxes, scores, "matrix_fused")
    return NMSResult(kept[:count], kept_scores[:count].to(dtype))
