"""Greedy NMS on the suppression graph (family ``hard``): only pairs of boxes whose IoU
exceeds the threshold can suppress, so it builds that graph (``_cpu.overlap_graph``: grids
of cells by box size, O(N + E) memory, rows built by the threads) and resolves it in rank order:
a box is kept unless a kept higher-ranked neighbour removed it, and a kept box removes its
lower-ranked neighbours. Greedy NMS is the lexicographically first maximal independent set
of that graph in score order, so this is torchvision's result index for index.

``hard_graph`` (numba, CPU): for box sets where few pairs overlap (large images, constant
density), memory and work grow with N + E instead of N^2; a graph denser than
``_cpu.DENSE_FRACTION`` takes the dense resolve (``_cpu.greedy_kept``: each kept box tests the later boxes).

``hard_graph`` (CUDA): the overlap graph on the GPU (``overlap_graph.greedy_on_graph``) or
hard_fused's dense paths, as ``overlap_graph.dispatch`` decides by N and the pair tests the
grid's windows would make (estimated from a sample of the boxes); ``path="graph"`` or
``"dense"`` forces one.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

from nmsbench.boxes import NMSResult, score_order
from nmsbench.cuda import CUDA_DTYPES
from nmsbench.registry import register

from ._cpu import DENSE_FRACTION, GRAPH_MAX_PAIRS, JIT, greedy_kept, keep_from_sorted, overlap_graph, sorted_inputs
from .hard_fused.cuda import hard_fused_cuda
from .overlap_graph import GRAPH_MIN_N, dispatch, greedy_on_graph


@njit(**JIT)
def resolve_on_graph(order, indptr, indices):
    """Input indices kept, in rank order (``order``: input indices by rank)."""
    n = order.shape[0]
    rank = np.empty(n, dtype=np.int64)
    for r in range(n):
        rank[order[r]] = r
    removed = np.zeros(n, dtype=np.bool_)
    kept = np.empty(n, dtype=np.int64)
    count = 0
    for r in range(n):
        i = order[r]
        if removed[i]:
            continue
        kept[count] = i
        count += 1
        for t in range(indptr[i], indptr[i + 1]):
            j = indices[t]
            if rank[j] > r:
                removed[j] = True
    return kept[:count]


@register(
    name="hard_graph", family="hard", devices=("cpu",), exact=True, requires=("numba",),
    summary="numba: the suppression graph (IoU > threshold pairs, grids of cells by box size), resolved in rank order; O(N + E)",
    style=("#00CC00", "triangle-sw"),
)
def hard_graph_cpu(boxes, scores, *, iou_threshold, labels=None):
    n = boxes.shape[0]
    b = boxes.detach().contiguous().numpy()
    lab = np.zeros(n, dtype=np.int64) if labels is None else labels.detach().to(torch.int64).contiguous().numpy()
    graph = overlap_graph(b, lab, max_pairs=min(GRAPH_MAX_PAIRS, n * n // DENSE_FRACTION), above=float(iou_threshold))
    if graph is None:
        order, sorted_boxes, sorted_labels = sorted_inputs(boxes, scores, labels)
        return keep_from_sorted(order, greedy_kept(sorted_boxes, sorted_labels, float(iou_threshold)))
    return NMSResult(torch.from_numpy(resolve_on_graph(score_order(scores).numpy(), *graph[:2])))



@register(
    name="hard_graph", family="hard", devices=("cuda",), exact=True, requires=("cupy",), dtypes=CUDA_DTYPES,
    host_sync=True,
    summary="CUDA: the overlap graph (grid kernels, rows in one pass, rounds in one cooperative launch), O(N + E); "
            "hard_fused for small N or where the grid's windows would test a large share of all pairs",
)
def hard_graph_cuda(boxes, scores, *, iou_threshold, labels=None, path=None):
    """Greedy NMS on CUDA as ``overlap_graph.dispatch`` chooses; ``path`` forces "graph" or "dense"."""
    if path is None and boxes.shape[0] < GRAPH_MIN_N:  # the common case first: nothing but hard_fused's own call
        return hard_fused_cuda(boxes, scores, iou_threshold=iou_threshold, labels=labels)
    return dispatch(boxes.shape[0], path, "hard_graph",
                    lambda max_tests: greedy_on_graph(boxes, scores, iou_threshold, labels, max_tests=max_tests).result,
                    lambda: hard_fused_cuda(boxes, scores, iou_threshold=iou_threshold, labels=labels))
