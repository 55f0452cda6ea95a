"""Soft-NMS (family ``soft``, nmsbench.families): Bodla et al.'s Algorithm 1.

``soft_nms`` (numba, CPU): a pair of boxes with IoU 0 changes nothing (f(0) = 1 for both
kernels), so it builds the overlap graph first (``_cpu.overlap_graph``: grids of cells,
rows built by the threads) and then picks in a loop that touches only the pick's
neighbours, the next pick read from a tournament tree over the current scores (the
highest, ties by lower input index). Inputs whose graph would be dense (over N^2 /
``_cpu.DENSE_FRACTION`` pairs: clustered scenes of thousands of boxes) take the dense path
instead: per pick, one pass over the live boxes decays them and finds the next pick.
``soft_torch``: the plain PyTorch loop users write (argmax, an IoU row, the decay, per
step), on CPU and CUDA: the baseline a GPU Soft-NMS is measured against; exact to rounding
only (torch's exp is not the C library's).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

from nmsbench.boxes import NMSResult, pairwise_iou
from nmsbench.families import SOFT_PARAMS
from nmsbench.registry import register

from ._cpu import DENSE_FRACTION, GRAPH_MAX_PAIRS, JIT, box_iou, overlap_graph

# soft_torch pays launches and a host synchronization per pick: a sweep of every implementation
# leaves it out beyond these N, where a call takes a tenth of a second or more (on CUDA every pick
# waits for the GPU: results/h200-cuda.csv); naming it in --impl times it anyway
SOFT_TORCH_SWEEP_MAX_N = {"cpu": 1024, "cuda": 256}


@njit(inline="always", **JIT)
def _decay(v, linear, iou_threshold, sigma):
    """f(iou) of the family definition, in float64."""
    if linear:
        return 1.0 - v if v >= iou_threshold else 1.0
    return np.exp(-(v * v) / sigma)


@njit(inline="always", **JIT)
def _better(current, a, b):
    """Whether box a should be picked before box b (-1: no box)."""
    if b < 0:
        return a >= 0
    if a < 0:
        return False
    return current[a] > current[b] or (current[a] == current[b] and a < b)


@njit(inline="always", **JIT)
def _update(tree, leaves, current, k, value):
    """Set leaf k to ``value`` (a box or -1) and replay its matches up to the root."""
    node = leaves + k
    tree[node] = value
    node //= 2
    while node >= 1:
        a, b = tree[2 * node], tree[2 * node + 1]
        tree[node] = a if _better(current, a, b) else b
        node //= 2


@njit(**JIT)
def soft_nms_graph(scores, indptr, indices, ious, iou_threshold, linear, sigma, score_threshold):
    n = scores.shape[0]
    current = scores.astype(np.float64)
    leaves = 1
    while leaves < max(n, 1):
        leaves *= 2
    tree = np.full(2 * leaves, -1, dtype=np.int64)
    alive = np.zeros(n, dtype=np.bool_)
    count = 0
    for k in range(n):
        if current[k] >= score_threshold:
            alive[k] = True
            tree[leaves + k] = k
            count += 1
    for node in range(leaves - 1, 0, -1):
        a, b = tree[2 * node], tree[2 * node + 1]
        tree[node] = a if _better(current, a, b) else b
    keep = np.empty(count, dtype=np.int64)
    final = np.empty(count, dtype=np.float64)
    kept = 0
    while tree[1] >= 0:
        m = tree[1]
        keep[kept] = m
        final[kept] = current[m]
        kept += 1
        alive[m] = False
        _update(tree, leaves, current, m, -1)
        for t in range(indptr[m], indptr[m + 1]):
            j = indices[t]
            if alive[j]:
                current[j] *= _decay(ious[t], linear, iou_threshold, sigma)
                if current[j] < score_threshold:
                    alive[j] = False
                    _update(tree, leaves, current, j, -1)
                else:
                    _update(tree, leaves, current, j, j)
    return keep[:kept], final[:kept]


@njit(**JIT)
def soft_nms_dense(b, labels, scores, iou_threshold, linear, sigma, score_threshold):
    """The dense path: per pick, one pass over the live boxes (compacted as they die)."""
    n = b.shape[0]
    current = scores.astype(np.float64)
    alive = np.empty(n, dtype=np.int64)
    count = 0
    m = -1
    for k in range(n):
        if current[k] >= score_threshold:
            alive[count] = k
            count += 1
            if m < 0 or current[k] > current[m]:  # ties: the lower index came first
                m = k
    keep = np.empty(count, dtype=np.int64)
    final = np.empty(count, dtype=np.float64)
    kept = 0
    while m >= 0:
        keep[kept] = m
        final[kept] = current[m]
        kept += 1
        best, w = -1, 0
        for t in range(count):
            j = alive[t]
            if j == m:
                continue
            if labels[j] == labels[m]:
                v = np.float64(box_iou(b, m, j))
                if v > 0:  # f(0) = 1: non-overlapping boxes are left alone
                    current[j] *= _decay(v, linear, iou_threshold, sigma)
                    if current[j] < score_threshold:
                        continue
            alive[w] = j
            w += 1
            if best < 0 or current[j] > current[best] or (current[j] == current[best] and j < best):
                best = j
        count, m = w, best
    return keep[:kept], final[:kept]


@register(
    name="soft_nms", family="soft", devices=("cpu",), exact=True, requires=("numba",), params=SOFT_PARAMS,
    summary="numba: the overlap graph (grids of cells by box size, threads), then picks from a tournament tree touching neighbours only",
    style=("#332288", "triangle-right"),
)
def soft_nms_cpu(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold):
    n = boxes.shape[0]
    b = boxes.detach().contiguous().numpy()
    s = scores.detach().contiguous().numpy()
    lab = np.zeros(n, dtype=np.int64) if labels is None else labels.detach().to(torch.int64).contiguous().numpy()
    args = (float(iou_threshold), kernel == "linear", float(sigma), float(score_threshold))
    graph = overlap_graph(b, lab, max_pairs=min(GRAPH_MAX_PAIRS, n * n // DENSE_FRACTION))
    if graph is None:
        keep, final = soft_nms_dense(b, lab, s, *args)
    else:
        keep, final = soft_nms_graph(s, *graph, *args)
    return NMSResult(torch.from_numpy(keep), torch.from_numpy(final).to(scores.dtype))


@register(
    name="soft_torch", family="soft", devices=("cpu", "cuda"), exact=False, params=SOFT_PARAMS, host_sync=True,
    sweep_max_n=SOFT_TORCH_SWEEP_MAX_N,
    summary="plain PyTorch loop: argmax, an IoU row and the decay per pick (the baseline users write; sweeps of "
            "every implementation leave it out above N = 1024 on the CPU, 256 on CUDA)",
    style=("#BBBBBB", "circle-x"),
)
def soft_torch(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold):
    n = boxes.shape[0]
    current = scores.detach().to(torch.float64).clone()
    alive = current >= score_threshold
    index = torch.arange(n, device=boxes.device)
    keep, final = [], []
    while bool(alive.any()):  # one host sync a pick
        masked = torch.where(alive, current, torch.full_like(current, -torch.inf))
        top = masked.max()
        m = int(index[masked == top].min())  # the highest current score, ties by lower index
        keep.append(m)
        final.append(current[m].clone())
        alive[m] = False
        v = pairwise_iou(boxes.detach()[m:m + 1], boxes.detach())[0].to(torch.float64)
        if kernel == "linear":
            f = torch.where(v >= iou_threshold, 1.0 - v, torch.ones_like(v))
        else:
            f = torch.exp(-(v * v) / sigma)
        same = alive if labels is None else alive & (labels == labels[m])
        current = torch.where(same & (v > 0), current * f, current)
        alive &= current >= score_threshold
    if not keep:
        return NMSResult(torch.empty(0, dtype=torch.int64, device=boxes.device),
                         torch.empty(0, dtype=scores.dtype, device=boxes.device))
    return NMSResult(torch.tensor(keep, dtype=torch.int64, device=boxes.device),
                     torch.stack(final).to(scores.dtype))
