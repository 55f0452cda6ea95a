"""Realized overlap of a box set: how much each box overlaps the boxes ranked above it.

A numba kernel computes it without the n x n IoU matrix: boxes are grouped by width
octave and sorted by x1 within a group, so each box only visits the boxes of each group
whose x-range can reach its own. Where those windows would hold most boxes anyway (a
crowded canvas), a second kernel streams every box past the boxes asked for instead, in a
loop the compiler vectorizes (the same values, several times faster per pair). IoU
arithmetic is that of :func:`nmsbench.boxes.pairwise_iou`, in the boxes' dtype (float32,
or float64 for float64).

Where boxes crowd a fixed canvas, every box still reaches a share of all the others, so
the exact mean costs O(N^2) pair tests (minutes at N = 2^20). :func:`realized_overlap`
is therefore exact up to ``EXACT_MAX_N`` boxes and above that the mean over a fixed
random sample of ``SAMPLE_SIZE`` boxes, each box of the sample against all N boxes:
at most ``SAMPLE_SIZE`` x N pair tests, an unbiased estimate whose standard error is the
per-box spread over sqrt(SAMPLE_SIZE) (at most 0.5 / 32 = 0.016 for values in [0, 1]; about
0.005 on the synthetic scenarios).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from .boxes import score_order
from .inputs import validate_nms_inputs

EXACT_MAX_N = 32768  # realized_overlap is exact up to this many boxes, sampled above
SAMPLE_SIZE = 1024  # boxes in the sample above EXACT_MAX_N
SAMPLE_SEED = 0  # the sample depends on N alone: one box set always gives one estimate


@njit(parallel=True, nogil=True, cache=True, error_model="numpy")
def _max_iou_kernel(x1, y1, x2, y2, area, rank, labels, x1_64, starts, reach, zero, targets):  # pragma: no cover
    """For each position j in ``targets``, the max IoU of box j with boxes of lower rank
    and equal label (0 if none).

    Arrays are sorted by (width group, x1); group g is ``[starts[g], starts[g + 1])``
    and none of its boxes is wider than ``reach[g]``. ``zero`` is 0 in the boxes' dtype
    (a plain 0 would promote float32 arithmetic to float64).
    """
    out = np.zeros(targets.size, dtype=np.float32)
    for t in prange(targets.size):
        j = targets[t]
        jx1, jy1, jx2, jy2, jarea, jrank, jlabel = x1[j], y1[j], x2[j], y2[j], area[j], rank[j], labels[j]
        best = zero
        for g in range(starts.size - 1):
            s, e = starts[g], starts[g + 1]
            # box i can intersect box j only if x1_j - width_i < x1_i < x2_j; the relative
            # 1e-9 slack lets float64 rounding admit extra boxes, never drop one
            left = x1_64[j] - reach[g] - 1e-9 * (abs(x1_64[j]) + reach[g])
            lo = s + np.searchsorted(x1_64[s:e], left)
            hi = s + np.searchsorted(x1_64[s:e], np.float64(jx2))
            for i in range(lo, hi):
                # branch-free until the max: the rank/label test is unpredictable
                w = max(min(x2[i], jx2) - max(x1[i], jx1), zero)
                h = max(min(y2[i], jy2) - max(y1[i], jy1), zero)
                inter = w * h
                iou = inter / (area[i] + jarea - inter)  # NaN when the union is 0, never > best
                iou = iou if (rank[i] < jrank) & (labels[i] == jlabel) else zero
                if iou > best:
                    best = iou
        out[t] = best
    return out


@njit(parallel=True, nogil=True, cache=True, error_model="numpy")
def _streamed_max_iou_kernel(x1, y1, x2, y2, area, rank, labels, zero, targets, chunks):  # pragma: no cover
    """``_max_iou_kernel``'s values for the positions in ``targets``, by streaming every
    box past all targets at once (no windows: N x len(targets) pair tests in a loop over
    the targets that the compiler vectorizes, several times faster per pair than the
    windows' where the windows hold most boxes anyway). Threads take ``chunks`` runs of
    boxes, each with its own maxima."""
    s, n = targets.size, x1.size
    tx1, ty1, tx2, ty2 = x1[targets], y1[targets], x2[targets], y2[targets]
    tarea, trank, tlabel = area[targets], rank[targets], labels[targets]
    partial = np.zeros((chunks, s), dtype=x1.dtype)
    for c in prange(chunks):
        best = partial[c]
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            ix1, iy1, ix2, iy2, iarea, irank, ilabel = x1[i], y1[i], x2[i], y2[i], area[i], rank[i], labels[i]
            for t in range(s):
                w = max(min(ix2, tx2[t]) - max(ix1, tx1[t]), zero)
                h = max(min(iy2, ty2[t]) - max(iy1, ty1[t]), zero)
                inter = w * h
                iou = inter / (iarea + tarea[t] - inter)  # NaN when the union is 0, never > best
                iou = iou if (irank < trank[t]) & (ilabel == tlabel[t]) else zero
                best[t] = iou if iou > best[t] else best[t]
    out = np.zeros(s, dtype=np.float32)
    for t in range(s):
        top = zero
        for c in range(chunks):
            if partial[c, t] > top:
                top = partial[c, t]
        out[t] = top
    return out


# stream every box past the targets where their windows would hold this share of all pairs
# (dense sets; up to STREAM_MAX_TARGETS targets: each of STREAM_CHUNKS threads' maxima hold one value a target)
STREAM_ABOVE, STREAM_MAX_TARGETS, STREAM_CHUNKS = 0.25, 1 << 16, 64


def _window_tests(x1_64, x2, starts, reach, targets) -> int:
    """The pair tests ``_max_iou_kernel`` would make for ``targets``: the sizes of their windows."""
    jx1, jx2 = x1_64[targets], x2[targets].astype(np.float64)
    total = 0
    for g in range(starts.size - 1):
        column = x1_64[starts[g]:starts[g + 1]]
        left = jx1 - reach[g] - 1e-9 * (np.abs(jx1) + reach[g])
        total += int(np.maximum(np.searchsorted(column, jx2) - np.searchsorted(column, left), 0).sum())
    return total


def max_iou_with_higher_ranked(boxes: torch.Tensor, scores: torch.Tensor,
                               labels: torch.Tensor | None = None, at=None) -> torch.Tensor:
    """Float32 (n,) tensor: entry j is the max IoU of box j with any box ranked above it.

    Rank is descending score with ties by lower input index (``score_order``); with
    ``labels`` only same-label boxes count. The top box (and any box overlapping no
    higher-ranked box) gets 0. ``at``: input indices (a sequence, array or tensor) to
    compute only those entries, each against all boxes (the result has ``len(at)``
    entries, in that order). Runs on the CPU whatever the inputs' device.
    """
    validate_nms_inputs(boxes, scores, labels)
    n = int(boxes.shape[0])
    picked = None if at is None else _indices(at, n)
    if n == 0 or (picked is not None and picked.size == 0):
        return torch.zeros(0, dtype=torch.float32)
    dtype = torch.float64 if boxes.dtype == torch.float64 else torch.float32
    b = boxes.detach().to("cpu", dtype).numpy()
    x1, y1, x2, y2 = (b[:, k] for k in range(4))
    area = (x2 - x1) * (y2 - y1)  # elementwise in the boxes' dtype, like pairwise_iou
    rank = np.empty(n, dtype=np.int32)
    rank[score_order(scores.detach().cpu()).numpy()] = np.arange(n, dtype=np.int32)
    if labels is None:
        lab = np.zeros(n, dtype=np.int32)
    else:
        lab = np.unique(labels.detach().cpu().numpy(), return_inverse=True)[1].astype(np.int32)

    width = x2.astype(np.float64) - x1.astype(np.float64)
    group = np.floor(np.log2(np.maximum(width, 1e-300))).astype(np.int64)  # width octave
    order = np.lexsort((x1, group))
    x1, y1, x2, y2, area, rank, lab, width, group = (
        np.ascontiguousarray(a[order]) for a in (x1, y1, x2, y2, area, rank, lab, width, group))
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1], True]).astype(np.int64)
    reach = np.maximum.reduceat(width, starts[:-1]) * (1 + 1e-9)

    zero, x1_64 = x1.dtype.type(0), x1.astype(np.float64)
    if picked is None:  # every box, in sorted order: position j is input box order[j]
        targets = np.arange(n, dtype=np.int64)
    else:
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n, dtype=np.int64)
        targets = position[picked]
    if (targets.size <= STREAM_MAX_TARGETS
            and _window_tests(x1_64, x2, starts, reach, targets) > STREAM_ABOVE * n * targets.size):
        values = _streamed_max_iou_kernel(x1, y1, x2, y2, area, rank, lab, zero, targets, STREAM_CHUNKS)
    else:
        values = _max_iou_kernel(x1, y1, x2, y2, area, rank, lab, x1_64, starts, reach, zero, targets)
    if picked is not None:
        return torch.from_numpy(values)
    out = np.empty(n, dtype=np.float32)
    out[order] = values
    return torch.from_numpy(out)


def _indices(at, n: int) -> np.ndarray:
    """``at`` as an int64 array of input indices, or a ValueError."""
    picked = np.asarray(at.detach().cpu() if isinstance(at, torch.Tensor) else at)
    if picked.ndim != 1 or not (picked.size == 0 or np.issubdtype(picked.dtype, np.integer)):
        raise ValueError(f"at must be a 1-D sequence of box indices, got shape {picked.shape} of {picked.dtype}")
    picked = picked.astype(np.int64)
    if picked.size and (picked.min() < 0 or picked.max() >= n):
        raise ValueError(f"at holds indices outside [0, {n})")
    return picked


def overlap_sample(n: int, size: int = SAMPLE_SIZE) -> np.ndarray:
    """The input indices realized_overlap averages over for ``n`` boxes above
    EXACT_MAX_N: ``size`` distinct indices drawn uniformly with a fixed seed, ascending."""
    return np.sort(np.random.default_rng(SAMPLE_SEED).choice(n, size=min(size, n), replace=False))


def realized_overlap(boxes, scores, labels=None, *, exact_max_n: int = EXACT_MAX_N,
                     sample_size: int = SAMPLE_SIZE) -> dict:
    """Summary of realized overlap: ``{"mean_max_iou": float, "sampled": int}``.

    ``mean_max_iou``: the mean over boxes of :func:`max_iou_with_higher_ranked` (0.0 for
    an empty set), exact up to ``exact_max_n`` boxes; above, the mean over the
    ``sample_size`` boxes of :func:`overlap_sample`, each against all boxes (an
    estimate). ``sampled``: the boxes the mean is over when it is an estimate, else 0.
    """
    n = int(boxes.shape[0])
    at = overlap_sample(n, sample_size) if n > exact_max_n and sample_size < n else None
    per_box = max_iou_with_higher_ranked(boxes, scores, labels, at=at)
    mean = float(per_box.double().mean()) if per_box.numel() else 0.0
    return {"mean_max_iou": mean, "sampled": 0 if at is None else int(at.size)}
