"""Soft-NMS (family ``soft``, nmsbench.families): Bodla et al.'s Algorithm 1.

``soft_nms`` (numba, CPU): one pass over the live boxes per pick decays them by their
overlap with the pick, drops those that fall below the score threshold, and finds the
next pick (the highest current score, ties by lower input index) in the same pass; the
live boxes are split into chunks taken by the threads when there are many, and compacted
once half of them have died. ``soft_torch``: the plain PyTorch loop users write (argmax,
an IoU row, the decay, per step), on CPU and CUDA: the baseline a GPU Soft-NMS is
measured against; exact to rounding only (torch's exp is not the C library's).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import get_num_threads, njit, prange

from nmsbench.boxes import NMSResult
from nmsbench.families import SOFT_PARAMS
from nmsbench.registry import register

from ._cpu import JIT, box_iou

PARALLEL_MIN = 4096  # live boxes from which a pick's pass is split over the threads
CHUNK_MIN = 1024  # live boxes a thread takes at least


@njit(inline="always", **JIT)
def _decay(v, linear, iou_threshold, sigma):
    """f(iou) of the family definition, in float64."""
    if linear:
        return 1.0 - v if v >= iou_threshold else 1.0
    return np.exp(-(v * v) / sigma)


@njit(**JIT)
def _decay_chunk(b, labels, current, dead, alive, lo, hi, m, linear, iou_threshold, sigma, score_threshold):
    """Decay the live boxes alive[lo:hi] by their overlap with pick ``m``; (the best live
    one left, or -1; how many died)."""
    best, died = -1, 0
    for t in range(lo, hi):
        j = alive[t]
        if dead[j]:
            continue
        if labels[j] == labels[m]:
            v = np.float64(box_iou(b, m, j))
            if v > 0:  # f(0) = 1 for both kernels: non-overlapping boxes are left alone
                current[j] *= _decay(v, linear, iou_threshold, sigma)
                if current[j] < score_threshold:
                    dead[j] = True
                    died += 1
                    continue
        if best < 0 or current[j] > current[best] or (current[j] == current[best] and j < best):
            best = j
    return best, died


@njit(parallel=True, **JIT)
def soft_nms_kernel(b, labels, scores, iou_threshold, linear, sigma, score_threshold, threads):
    n = b.shape[0]
    current = scores.astype(np.float64)
    dead = np.zeros(n, dtype=np.bool_)
    alive = np.empty(n, dtype=np.int64)
    count = 0
    m = -1
    for k in range(n):
        if current[k] >= score_threshold:
            alive[count] = k
            count += 1
            if m < 0 or current[k] > current[m]:  # ties: the lower index came first
                m = k
        else:
            dead[k] = True
    keep = np.empty(count, dtype=np.int64)
    final = np.empty(count, dtype=np.float64)
    kept = 0
    live = count  # boxes of alive[:count] not dead
    bests = np.empty(threads, dtype=np.int64)
    deaths = np.empty(threads, dtype=np.int64)
    while m >= 0:
        keep[kept] = m
        final[kept] = current[m]
        kept += 1
        dead[m] = True
        live -= 1
        chunks = min(threads, max(1, live // CHUNK_MIN)) if live >= PARALLEL_MIN else 1
        if chunks == 1:
            m, died = _decay_chunk(b, labels, current, dead, alive, 0, count, m, linear, iou_threshold, sigma,
                                   score_threshold)
            live -= died
        else:
            size = (count + chunks - 1) // chunks
            pick = m
            for c in prange(chunks):
                bests[c], deaths[c] = _decay_chunk(b, labels, current, dead, alive, c * size, min(count, (c + 1) * size),
                                                   pick, linear, iou_threshold, sigma, score_threshold)
            m = -1
            for c in range(chunks):
                live -= deaths[c]
                j = bests[c]
                if j >= 0 and (m < 0 or current[j] > current[m] or (current[j] == current[m] and j < m)):
                    m = j
        if live * 2 < count:  # compact: the passes then skip fewer dead boxes
            w = 0
            for t in range(count):
                if not dead[alive[t]]:
                    alive[w] = alive[t]
                    w += 1
            count = w
    return keep[:kept], final[:kept]


@register(
    name="soft_nms", family="soft", devices=("cpu",), exact=True, requires=("numba",), params=SOFT_PARAMS,
    summary="numba: per pick, one pass over the live boxes decays them and finds the next pick (threads over chunks)",
)
def soft_nms_cpu(boxes, scores, *, iou_threshold, labels=None, kernel, sigma, score_threshold):
    n = boxes.shape[0]
    b = boxes.detach().contiguous().numpy()
    s = scores.detach().contiguous().numpy()
    lab = np.zeros(n, dtype=np.int64) if labels is None else labels.detach().to(torch.int64).contiguous().numpy()
    keep, final = soft_nms_kernel(b, lab, s, float(iou_threshold), kernel == "linear", float(sigma),
                                  float(score_threshold), get_num_threads())
    return NMSResult(torch.from_numpy(keep), torch.from_numpy(final).to(scores.dtype))


def _iou_row(boxes: torch.Tensor, m: int) -> torch.Tensor:
    """IoU of box ``m`` with every box, with torchvision's arithmetic in the boxes' dtype (0 where the union is 0)."""
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    w = (torch.minimum(boxes[m, 2], boxes[:, 2]) - torch.maximum(boxes[m, 0], boxes[:, 0])).clamp(min=0)
    h = (torch.minimum(boxes[m, 3], boxes[:, 3]) - torch.maximum(boxes[m, 1], boxes[:, 1])).clamp(min=0)
    inter = w * h
    union = area[m] + area - inter
    return torch.where(union > 0, inter / union, torch.zeros_like(inter))


@register(
    name="soft_torch", family="soft", devices=("cpu", "cuda"), exact=False, params=SOFT_PARAMS, host_sync=True,
    summary="plain PyTorch loop: argmax, an IoU row and the decay per pick (the baseline users write)",
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
        v = _iou_row(boxes.detach(), m).to(torch.float64)
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
