"""Fused Matrix NMS (the fast-matrix-nms seed's design, seeds/fused-matrix-nms-cuda.txt).

Two passes and no N x N tensor: pass 1 computes each box's IoU with its parents and
keeps only the row max (cmax); pass 2 recomputes the IoUs, turns each into the candidate
decay f(iou_ij) / f(cmax_i) and keeps the running minimum, so neither the IoU matrix nor
the decay matrix is ever stored. Same family semantics as ``matrix_naive``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from nmsbench.boxes import result_by_final_score
from nmsbench.families import MATRIX_PARAMS
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
