"""Matrix NMS on the overlap graph (family ``matrix``): SOLOv2's decay from the pairs that
overlap only, O(N + E) memory.

decay_j is the minimum over j's higher-ranked same-label boxes i of f(iou_ij) / f(cmax_i),
and 1 where j has none. A pair with IoU 0 gives f(0) / f(cmax_i) >= 1, and every box below
the top box of its label has that top box among its parents, with cmax 0 and so a ratio of
at most 1: the minimum is at most 1, and a ratio above 1 never sets it. So decay_j =
min(1, the ratios of j's overlapping parents), and cmax_i is the largest IoU of i's
overlapping parents: both come from the overlap graph (``_cpu.overlap_graph``, the pairs
with IoU > 0, on grids of cells by box size), each ratio computed as ``matrix_fused``'s CPU backend
computes it. A graph denser than ``_cpu.DENSE_FRACTION`` takes matrix_fused's two dense passes.

``matrix_graph`` (numba, CPU): for large, sparse box sets (large images at constant
density), where ``matrix_naive`` would hold several N x N tensors. ``matrix_graph`` (CUDA):
the same decay from the GPU overlap graph (``overlap_graph.matrix_on_graph``) or
matrix_recompute's dense passes, as ``overlap_graph.dispatch`` decides by N and the pair
tests the grid's windows would make (estimated from a sample of the boxes); ``path="graph"``
or ``"dense"`` forces one.

Final scores are formed in float64 (the kept set is
``final >= score_threshold`` there, as the definition has it), then rounded to the input
dtype, by which the kept boxes are ordered.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import prange

from nmsbench.boxes import result_by_final_score
from nmsbench.cuda import CUDA_DTYPES
from nmsbench.families import MATRIX_PARAMS
from nmsbench.registry import register

from ._cpu import DENSE_FRACTION, GRAPH_MAX_PAIRS, overlap_graph, serial_and_parallel, sorted_inputs
from .matrix_fused import decay_factors, decay_ratio, max_iou_with_parents
from .matrix_recompute.cuda import matrix_recompute_cuda
from .overlap_graph import GRAPH_MIN_N, dispatch, matrix_on_graph


def graph_decays(indptr, indices, ious, linear, sigma):
    """Each rank position's decay from its overlapping parents (lower rank positions): rows
    of ``overlap_graph`` built on the boxes in rank order."""
    n = indptr.shape[0] - 1
    cmax = np.zeros(n, dtype=np.float64)
    for j in prange(n):  # rows are independent; cmax of j needs only j's own row
        best = 0.0
        for t in range(indptr[j], indptr[j + 1]):
            if indices[t] < j and ious[t] > best:
                best = ious[t]
        cmax[j] = best
    decay = np.ones(n, dtype=np.float64)
    for j in prange(n):
        d = 1.0
        for t in range(indptr[j], indptr[j + 1]):
            i = indices[t]
            if i >= j:
                continue
            ratio = decay_ratio(ious[t], cmax[i], linear, sigma)
            if ratio < d:
                d = ratio
        decay[j] = d
    return decay


GRAPH_DECAYS = serial_and_parallel(graph_decays)
PARALLEL_MIN = 4096  # boxes from which the decays are split over the threads


@register(
    name="matrix_graph", family="matrix", devices=("cpu",), requires=("numba",), params=MATRIX_PARAMS,
    summary="numba: the overlap graph (IoU > 0 pairs, grids of cells by box size), cmax and the min decay from it; O(N + E)",
    style=("#555566", "diamond-x"),
)
def matrix_graph_cpu(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold):
    n = boxes.shape[0]
    order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
    linear = kernel == "linear"
    graph = overlap_graph(sorted_boxes, sorted_labels, max_pairs=min(GRAPH_MAX_PAIRS, n * n // DENSE_FRACTION))
    if graph is None:
        cmax = max_iou_with_parents(sorted_boxes, sorted_labels)
        decay = decay_factors(sorted_boxes, sorted_labels, cmax, linear, float(sigma))
    else:
        decay = GRAPH_DECAYS[int(n >= PARALLEL_MIN)](*graph, linear, float(sigma))
    final = scores.detach()[order].to(torch.float64) * torch.from_numpy(decay)
    kept = (final >= score_threshold).nonzero().squeeze(1)  # in float64, as the definition decides
    # ordered by the scores returned (rounded to the input dtype), ties by lower input index
    return result_by_final_score(order[kept], final[kept].to(scores.dtype))


@register(
    name="matrix_graph", family="matrix", devices=("cuda",), requires=("cupy",), params=MATRIX_PARAMS,
    dtypes=CUDA_DTYPES, host_sync=True,
    summary="CUDA: the overlap graph (IoU > 0 rows), cmax and the min decay from it, O(N + E); matrix_recompute "
            "for small N or where the grid's windows would test a large share of all pairs",
)
def matrix_graph_cuda(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold, path=None):
    """Matrix NMS on CUDA as ``overlap_graph.dispatch`` chooses; ``path`` forces "graph" or "dense"."""
    params = dict(kernel=kernel, sigma=sigma, score_threshold=score_threshold)
    if path is None and boxes.shape[0] < GRAPH_MIN_N:  # the common case first: nothing but matrix_recompute's call
        return matrix_recompute_cuda(boxes, scores, iou_threshold=iou_threshold, labels=labels, **params)
    return dispatch(boxes.shape[0], path, "matrix_graph",
                    lambda max_tests: matrix_on_graph(boxes, scores, labels, **params, max_tests=max_tests),
                    lambda: matrix_recompute_cuda(boxes, scores, iou_threshold=iou_threshold, labels=labels, **params))
